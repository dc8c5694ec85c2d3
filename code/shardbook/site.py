"""Serve the built site on 127.0.0.1 and find Debian's Chromium: shared by
the browser tests and `make bench`. Standard library only."""

import contextlib
import functools
import http.server
import shutil
import socketserver
import threading

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
