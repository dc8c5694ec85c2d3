"""Serve the built site on 127.0.0.1 and find Debian's Chromium: shared by
the browser tests and `make bench`. Standard library only."""

import argparse
import collections
import contextlib
import email.utils
import errno
import gzip
import http.server
import io
import mimetypes
import os
import shutil
import socketserver
import sys
import threading
from pathlib import Path

from .event_server import EventServer

# the types' table read once, at import: read lazily, a request that found no descriptor left
# failed on /etc/mime.types (the fourth audit's `ulimit -n 256` run filled the log with it)
mimetypes.init()

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


# A connection that has not sent a whole request this long after it opened
# (or after its last answer) is closed: an idle keep-alive connection or a
# slowloris that trickles its headers. Until then it holds a descriptor but
# no thread (book.event_server); browsers reopen a closed keep-alive
# connection as a matter of course.
IDLE_TIMEOUT_S = 20
# Connections the kernel queues before the server accepts them (socketserver's
# default of 5 made a burst of 50 wait a second each, for SYN retransmits).
LISTEN_BACKLOG = 128


# Compressed copies kept in memory: Pyodide's WebAssembly alone is 9.6 MB raw, about 3 gzipped.
# Beyond this the least recently used go (a cache keyed by modification time grew with every
# rebuild of a page before).
COMPRESSED_CACHE_BYTES = 64 * 2**20


class _CompressedCache:
    """gzip bytes by (path, mtime_ns), at most COMPRESSED_CACHE_BYTES, the
    least recently used dropped first; a path's older versions go when a new
    one comes in. Each file is compressed once however many requests ask
    for it at the same time (20 first requests for Pyodide's 9.6 MB each
    compressed it before)."""

    def __init__(self, limit_bytes=COMPRESSED_CACHE_BYTES):
        self.limit_bytes = limit_bytes
        self._entries = collections.OrderedDict()  # key -> bytes, least recent first
        self._lock = threading.Lock()
        self._pending = {}  # key -> Lock held while one thread compresses it
        self.compressions = 0  # how many times a file was compressed (the tests count)

    def get(self, path, mtime_ns):
        key = (path, mtime_ns)
        while True:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key]
                pending = self._pending.get(key)
                if pending is None:
                    pending = self._pending[key] = threading.Lock()
                    pending.acquire()
                    break
            with pending:  # another thread is compressing it: wait, then read the cache
                pass
        try:
            with open(path, "rb") as f:
                body = gzip.compress(f.read(), compresslevel=6, mtime=0)
            with self._lock:
                self.compressions += 1
                for old in [k for k in self._entries if k[0] == path]:
                    del self._entries[old]
                self._entries[key] = body
                while sum(map(len, self._entries.values())) > self.limit_bytes and len(self._entries) > 1:
                    self._entries.popitem(last=False)
            return body
        finally:
            with self._lock:
                del self._pending[key]
            pending.release()


class StaticHandler(http.server.SimpleHTTPRequestHandler):
    """A quiet static file handler with gzip and Cache-Control, keeping
    connections open (HTTP/1.1) as a real host does; no directory listings
    (a folder without index.html is a 404, as on a static host); only
    regular files whose real path lies under the site's folder (a symlink
    out of it is a 404); a malformed request gets its 400 or 414 and the
    connection closes. With a `guard` (make serve), every request first
    asks it whether the build is still whole: a 503 while it is not."""

    protocol_version = "HTTP/1.1"
    # a request line the server cannot read (no version, too long) is
    # answered with a status line and headers, not as HTTP/0.9 (a bare body)
    default_request_version = "HTTP/1.0"
    timeout = IDLE_TIMEOUT_S
    guard = None  # None, or a callable: None when the build may be served, else why not

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".mjs": "text/javascript",
        ".wasm": "application/wasm",
        ".woff2": "font/woff2",
    }
    _compressed = _CompressedCache()  # shared by the server's threads

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

    def _inside_site(self, path):
        """True when `path` resolves (symlinks followed) to a regular file or
        a folder under the site's folder."""
        root = os.path.realpath(self.directory)
        real = os.path.realpath(path)
        if real != root and not real.startswith(root + os.sep):
            return False
        return os.path.isfile(real) or os.path.isdir(real)

    def send_head(self):
        if self.guard is not None:
            why = self.guard()
            if why:
                self.close_connection = True
                self.send_error(503, "The site is being rebuilt", why)
                return None
        path = self.translate_path(self.path)
        if "\0" in path:  # %00 in the URL: no file has that name (open() would raise)
            self.send_error(400, "Bad request: a NUL byte in the path")
            return None
        if os.path.isdir(path) and self.path.split("?")[0].endswith("/"):
            path = os.path.join(path, "index.html")
        if os.path.lexists(path) and not self._inside_site(path):
            self.send_error(404, "File not found")  # a symlink out of the site, a FIFO, a device
            return None
        accepts = "gzip" in self.headers.get("Accept-Encoding", "")
        if not accepts or not os.path.isfile(path) or os.path.splitext(path)[1] not in COMPRESSED_SUFFIXES:
            return super().send_head()
        stat = os.stat(path)
        if self._not_modified_since(stat.st_mtime):
            self.send_response(304)
            self.end_headers()
            return None
        body = self._compressed.get(path, stat.st_mtime_ns)
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


class _Server(EventServer):
    """The site's server (book.event_server): no thread for a client that has
    not sent a whole request; a listen backlog of LISTEN_BACKLOG."""

    request_queue_size = LISTEN_BACKLOG


def _handler(directory, requests=None, guard=None):
    """A StaticHandler class for `directory`; `requests`, if given, is a list
    that receives each request's path (the tests count what reached the
    server); `guard`, if given, is asked before each request whether the
    build may be served (StaticHandler.guard)."""

    class Handler(StaticHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(directory), **kwargs)

        def send_head(self):
            if requests is not None:
                requests.append(self.path)
            return super().send_head()

    Handler.guard = staticmethod(guard) if guard is not None else None
    return Handler


# how often a server thread looks for shutdown(): socketserver's default, 0.5 s, made every
# `with serve(...)` wait up to half a second on exit (a second of each test that serves twice)
SHUTDOWN_POLL_S = 0.02


@contextlib.contextmanager
def serve(directory, requests=None, guard=None):
    """Serve `directory` on a free port of 127.0.0.1, compressed and cacheable
    as a static host serves it; yields the base URL and stops the server on
    exit. `requests`, if a list, receives the path of every request served;
    `guard` (a BuildGuard, say) is asked before each one."""
    httpd = _Server(("127.0.0.1", 0), _handler(directory, requests, guard))
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": SHUTDOWN_POLL_S}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class BuildGuard:
    """Asked before every request `make serve` answers: None while the build
    in `build` is whole and current, else why not (the server answers 503).
    A stat of the build's fingerprint per request; the full check
    (expected.check_build: the fingerprint against the sources, every
    chapter built, no orphaned page) again whenever that file changes. A
    build that starts removes the fingerprint, so a server left running
    stops serving a half-rebuilt site at once, and serves the new one when
    the build finishes."""

    def __init__(self, build, root="."):
        self.build, self.root = Path(build), root
        self._seen = self._why = None
        self._lock = threading.Lock()

    def __call__(self):
        from . import expected

        try:
            st = os.stat(self.build / expected.FINGERPRINT_FILE)
        except OSError:
            return "no finished build: a build is running, or the last one failed; run `make book`, then reload"
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if key != self._seen:
                try:
                    expected.check_build(self.build / "jupyter_execute", self.root)
                    self._why = None
                except (OSError, ValueError) as exc:
                    self._why = f"the build cannot be served: {exc}"
                self._seen = key
            return self._why


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
    guard = None if args.stale_ok else BuildGuard(args.build)
    try:
        httpd = _Server(("127.0.0.1", args.port), _handler(html, guard=guard))
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
