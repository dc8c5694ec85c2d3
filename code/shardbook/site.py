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

# No background traffic: the machine's only network is the loopback. Every
# service that would call home is off (updates, sync, Safe Browsing, metrics,
# pings, translation, hints); tests also route everything that is not the
# loopback through sentinel_proxy(), which refuses and records it.
# Services that a flag cannot switch off (the component updater's endpoint,
# Google sign-in) are pointed at a closed port on the loopback.
_NOWHERE = "http://127.0.0.1:9"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--safebrowsing-disable-auto-update",
                  "--disable-client-side-phishing-detection", "--disable-domain-reliability", "--no-pings",
                  "--disable-default-apps", "--metrics-recording-only", "--disable-breakpad", "--disable-extensions",
                  "--disable-component-extensions-with-background-pages",
                  "--disable-features=OptimizationHints,OptimizationHintsFetching,OptimizationGuideModelDownloading,"
                  "MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,"
                  "InterestFeedContentSuggestions,NetworkTimeServiceQuerying",
                  f"--component-updater=url-source={_NOWHERE}", f"--gaia-url={_NOWHERE}"]
# Playwright proxies the loopback too unless told; the site stays direct.
PROXY_BYPASS = "127.0.0.1,localhost"


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


class _Refuse(socketserver.StreamRequestHandler):
    def handle(self):
        first = self.rfile.readline(4096).decode("latin-1").strip()
        if first:  # a socket opened ahead of time and never used names no destination
            self.server.seen.append(first)
        self.wfile.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@contextlib.contextmanager
def sentinel_proxy():
    """An HTTP proxy on 127.0.0.1 that refuses every request and records its
    first line (CONNECT host:443 ..., GET http://...). Give it to Chromium as
    its proxy: the loopback bypasses proxies, so anything the proxy sees is a
    connection that tried to leave the machine. Yields (proxy URL, seen)."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Refuse)
    server.daemon_threads = True
    server.seen = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen
    finally:
        server.shutdown()
        server.server_close()


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
