"""Serve the built site on 127.0.0.1 and find Debian's Chromium: shared by
the browser tests and `make bench`. Standard library only."""

import argparse
import contextlib
import email.utils
import errno
import gzip
import http.server
import io
import os
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
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--safebrowsing-disable-auto-update",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--no-pings",
    "--disable-default-apps",
    "--metrics-recording-only",
    "--disable-breakpad",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-features=OptimizationHints,OptimizationHintsFetching,OptimizationGuideModelDownloading,"
    "MediaRouter,Translate,AutofillServerCommunication,CertificateTransparencyComponentUpdater,"
    "InterestFeedContentSuggestions,NetworkTimeServiceQuerying",
    f"--component-updater=url-source={_NOWHERE}",
    f"--gaia-url={_NOWHERE}",
]
# Playwright proxies the loopback too unless told; the site stays direct.
PROXY_BYPASS = "127.0.0.1,localhost"


# As a static host serves a site (GitHub Pages among them): text, scripts and
# WebAssembly gzip-compressed when the browser accepts it, and a ten-minute
# freshness so that a second page reuses what the first one loaded.
COMPRESSED_SUFFIXES = frozenset(
    {".html", ".css", ".js", ".mjs", ".json", ".svg", ".txt", ".py", ".wasm", ".map", ".xml"}
)
CACHE_CONTROL = "max-age=600"
# Pages themselves are revalidated on every visit (a 304 when unchanged), so
# that `make serve` shows a rebuilt page at once; their assets (Pyodide, the
# theme, figures) stay fresh for ten minutes.
PAGE_CACHE_CONTROL = "no-cache"


# A connection that sends nothing for this long is closed (a slow or idle
# client would otherwise hold a thread and a descriptor for ever); browsers
# reopen a closed keep-alive connection as a matter of course.
IDLE_TIMEOUT_S = 20
# Connections the kernel queues before the server accepts them (socketserver's
# default of 5 made a burst of 50 wait a second each, for SYN retransmits).
LISTEN_BACKLOG = 128


class StaticHandler(http.server.SimpleHTTPRequestHandler):
    """A quiet static file handler with gzip and Cache-Control, keeping
    connections open (HTTP/1.1) as a real host does; no directory listings
    (a folder without index.html is a 404, as on a static host); a malformed
    request gets its 400 or 414 and the connection closes."""

    protocol_version = "HTTP/1.1"
    # a request line the server cannot read (no version, too long) is
    # answered with a status line and headers, not as HTTP/0.9 (a bare body)
    default_request_version = "HTTP/1.0"
    timeout = IDLE_TIMEOUT_S

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".woff2": "font/woff2",
    }
    _compressed = {}  # (path, mtime_ns) -> gzip bytes, shared by the server's threads

    def log_message(self, *args):
        pass

    def end_headers(self):
        # an error sent before the request line was read (400, 414) has no path
        page = getattr(self, "path", "").split("?")[0].endswith((".html", "/"))
        self.send_header("Cache-Control", PAGE_CACHE_CONTROL if page else CACHE_CONTROL)
        super().end_headers()

    def list_directory(self, path):
        self.send_error(404, "File not found")
        return None

    def send_head(self):
        path = self.translate_path(self.path)
        if "\0" in path:  # %00 in the URL: no file has that name (open() would raise)
            self.send_error(400, "Bad request: a NUL byte in the path")
            return None
        if os.path.isdir(path) and self.path.split("?")[0].endswith("/"):
            path = os.path.join(path, "index.html")
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not accepts or not os.path.isfile(path) or os.path.splitext(path)[1] not in COMPRESSED_SUFFIXES:
            return super().send_head()
        stat = os.stat(path)
        if self._not_modified_since(stat.st_mtime):
            self.send_response(304)
            self.end_headers()
            return None
        key = (path, stat.st_mtime_ns)
        body = self._compressed.get(key)
        if body is None:
            with open(path, "rb") as f:
                body = gzip.compress(f.read(), compresslevel=6, mtime=0)
            self._compressed[key] = body
        self.send_response(200)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Last-Modified", email.utils.formatdate(stat.st_mtime, usegmt=True))
        self.send_header("Vary", "Accept-Encoding")
        self.end_headers()
        return io.BytesIO(body)

    def _not_modified_since(self, mtime):
        """True when the request's If-Modified-Since covers the file's mtime."""
        header = self.headers.get("If-Modified-Since")
        if not header or self.headers.get("If-None-Match"):
            return False
        try:
            since = email.utils.parsedate_to_datetime(header).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return False
        return int(mtime) <= since


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG

    def handle_error(self, request, client_address):
        """One line, not a traceback, for a request that failed in the
        handler (the client has gone, say); the server goes on."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away or stopped reading: nothing to report
        print(f"serve: a request from {client_address[0]} failed: {type(exc).__name__}: {exc}", file=sys.stderr)


def _handler(directory, requests=None):
    """A StaticHandler class for `directory`; `requests`, if given, is a list
    that receives each request's path (the tests count what reached the server)."""

    class Handler(StaticHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(directory), **kwargs)

        def send_head(self):
            if requests is not None:
                requests.append(self.path)
            return super().send_head()

    return Handler


# how often a server thread looks for shutdown(): socketserver's default, 0.5 s, made every
# `with serve(...)` wait up to half a second on exit (a second of each test that serves twice)
SHUTDOWN_POLL_S = 0.02


@contextlib.contextmanager
def serve(directory, requests=None):
    """Serve `directory` on a free port of 127.0.0.1, compressed and cacheable
    as a static host serves it; yields the base URL and stops the server on
    exit. `requests`, if a list, receives the path of every request served."""
    httpd = _Server(("127.0.0.1", 0), _handler(directory, requests))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True).start()
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
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen
    finally:
        server.shutdown()
        server.server_close()


# Sum of the layout shifts a page has had so far (CLS as Lighthouse counts a
# page load: shifts not caused by the reader's input).
# What moved, for a report when the total is too large: each shift's score, time and the
# elements it moved with their boxes before and after.
LAYOUT_SHIFT_SOURCES_JS = """() => new Promise(resolve => {
  const out = [];
  const observer = new PerformanceObserver(list => {
    for (const e of list.getEntries()) {
      if (e.hadRecentInput) continue;
      const moved = (e.sources || []).map(s => {
        const n = s.node, r = b => b ? `${Math.round(b.y)}+${Math.round(b.height)}` : '?';
        const name = n ? (n.nodeName + (n.id ? '#' + n.id : '') + (n.className && n.className.baseVal === undefined
          ? '.' + String(n.className).trim().split(/\\s+/).slice(0, 2).join('.') : '')) : '?';
        return `${name} y ${r(s.previousRect)} -> ${r(s.currentRect)}`;
      });
      out.push(`${e.value.toFixed(3)} at ${Math.round(e.startTime)} ms: ${moved.join('; ')}`);
    }
  });
  observer.observe({type: 'layout-shift', buffered: true});
  setTimeout(() => { observer.disconnect(); resolve(out); }, 200);
})"""

LAYOUT_SHIFT_JS = """() => new Promise(resolve => {
  let total = 0;
  const observer = new PerformanceObserver(list => {
    for (const entry of list.getEntries()) { if (!entry.hadRecentInput) total += entry.value; }
  });
  observer.observe({type: 'layout-shift', buffered: true});
  setTimeout(() => { observer.disconnect(); resolve(total); }, 200);
})"""


def loaded_bytes(tab, html_root):
    """(raw bytes, bytes sent) of everything a loaded page fetched from the
    site: the document and every resource in its resource timing (HTML, CSS,
    scripts, fonts, images, cached or not); raw from the files themselves."""
    from urllib.parse import unquote, urlparse

    urls = tab.evaluate("[location.href, ...performance.getEntriesByType('resource').map(e => e.name)]")
    sent = tab.evaluate(
        "performance.getEntriesByType('navigation')[0].encodedBodySize"
        " + performance.getEntriesByType('resource').reduce((s, e) => s + e.encodedBodySize, 0)"
    )
    raw = 0
    for url in set(urls):
        if urlparse(url).hostname != "127.0.0.1":
            continue
        target = Path(html_root) / unquote(urlparse(url).path).lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if target.is_file():
            raw += target.stat().st_size
    return raw, sent


def chromium():
    """Path of the chromium binary, or None when it is not installed."""
    return shutil.which("chromium")


def main(argv=None):
    """`make serve`: serve _build/html on 127.0.0.1:PORT, refusing pages that
    an unfinished or stale build left behind, and naming a taken port."""
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.book.site", description="Serve the built book on 127.0.0.1."
    )
    parser.add_argument("--port", type=int, default=8000, help="port on 127.0.0.1 (default 8000)")
    parser.add_argument("--build", default="_build", help="the build folder (default _build)")
    parser.add_argument("--stale-ok", action="store_true", help="serve even if the last build did not finish")
    args = parser.parse_args(argv)
    html = Path(args.build) / "html"
    if not (html / "index.html").exists():
        print("serve: no site yet: run `make book` first", file=sys.stderr)
        return 2
    from . import expected

    try:
        expected.check_build(Path(args.build) / "jupyter_execute")
    except ValueError as exc:
        if not args.stale_ok:
            print(
                f"serve: these pages are not from a finished build of the current sources ({exc}); "
                "run `make book`, or `make serve STALE=1` to serve them anyway",
                file=sys.stderr,
            )
            return 2
    if not 0 < args.port < 65536:
        print(f"serve: PORT must be between 1 and 65535, got {args.port}", file=sys.stderr)
        return 2
    try:
        httpd = _Server(("127.0.0.1", args.port), _handler(html))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            why = f"port {args.port} on 127.0.0.1 is taken"
        elif exc.errno == errno.EACCES:
            why = f"port {args.port} needs root (ports below 1024 are privileged)"
        else:
            why = f"cannot listen on 127.0.0.1:{args.port} ({exc.strerror or exc})"
        print(f"serve: {why}; choose another with `make serve PORT=8001`", file=sys.stderr)
        return 2
    print(
        f"==> serving {html} on http://127.0.0.1:{args.port}, gzip-compressed as a static host would (Ctrl-C to stop)"
    )
    with httpd:
        try:
            httpd.serve_forever()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
