"""Serve the built site on 127.0.0.1 and find Debian's Chromium: shared by
the browser tests and `make bench`. Standard library only."""

import argparse
import contextlib
import errno
import functools
import http.server
import shutil
import socketserver
import sys
import threading
from pathlib import Path

# No background traffic: the machine's only network is the loopback.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory):
    """Serve `directory` on a free port of 127.0.0.1; yields the base URL and
    stops the server on exit."""
    httpd = socketserver.ThreadingTCPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(directory)))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def chromium():
    """Path of the chromium binary, or None when it is not installed."""
    return shutil.which("chromium")


def main(argv=None):
    """`make serve`: serve _build/html on 127.0.0.1:PORT, refusing pages that
    an unfinished or stale build left behind, and naming a taken port."""
    parser = argparse.ArgumentParser(prog="python -m shardbook.site", description="Serve the built book on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
    parser.add_argument("--build", default="_build", help="the build folder (default _build)")
    parser.add_argument("--stale-ok", action="store_true", help="serve even if the last build did not finish")
    args = parser.parse_args(argv)
    html = Path(args.build) / "html"
    if not (html / "index.html").exists():
        print("serve: no site yet: run `make book` first", file=sys.stderr)
        return 2
    from . import ledger

    try:
        ledger.check_build(Path(args.build) / "jupyter_execute")
    except ValueError as exc:
        if not args.stale_ok:
            print(f"serve: these pages are not from a finished build of the current sources ({exc}); "
                  "run `make book`, or `make serve STALE=1` to serve them anyway", file=sys.stderr)
            return 2
    if not 0 < args.port < 65536:
        print(f"serve: PORT must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        httpd = socketserver.ThreadingTCPServer(("127.0.0.1", args.port), functools.partial(_Quiet, directory=str(html)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            print(f"serve: port {args.port} on 127.0.0.1 is taken; choose another with `make serve PORT=8001`",
                  file=sys.stderr)
            return 2
        raise
    print(f"==> serving {html} on http://127.0.0.1:{args.port} (Ctrl-C to stop)")
    with httpd:
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
