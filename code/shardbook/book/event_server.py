"""An HTTP server that holds no thread for a client that has not sent a
whole request: one thread reads every connection's request head with a
selector (non-blocking), and only a complete head goes to a worker thread
of a fixed pool, which answers that one request and hands the connection
back. A client that trickles its head, or sends nothing, costs a
descriptor and a few bytes until its deadline, never a thread (a
threaded server gave each of 400 slowloris clients a thread for as long as
they trickled). Connections are capped below the process's descriptor
limit, the oldest idle one closed to make room; when accept() fails for
want of descriptors the listener rests briefly instead of being polled in
a busy loop (300 idle connections under `ulimit -n 256` burned a core).

The handler is a `http.server.BaseHTTPRequestHandler` subclass; its
`timeout` is the deadline for a whole request head (from the connection's
accept or its previous answer) and for each write of the answer.

Standard library only.
"""

import collections
import contextlib
import errno
import io
import queue
import resource
import selectors
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

# A request head (request line and headers) longer than this goes to the handler as it is,
# which answers 414 or 431 (http.server reads lines of at most 64 KiB and 100 headers)
MAX_HEAD_BYTES = 256 * 1024
WORKERS = 32  # threads answering whole requests
# Descriptors left for what a worker opens (the files it serves, the lock, the selector)
RESERVED_DESCRIPTORS = 64
ACCEPT_REST_S = 0.1  # how long the listener rests when accept() finds no descriptor


def connection_cap():
    """How many client connections the server keeps open at most: the
    descriptor limit less RESERVED_DESCRIPTORS, at least 8."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(8, min(soft, 65536) - RESERVED_DESCRIPTORS)


class _Connection:
    __slots__ = ("sock", "address", "buffer", "deadline")

    def __init__(self, sock, address, buffer, deadline):
        self.sock, self.address, self.buffer, self.deadline = sock, address, buffer, deadline


def _head_end(buffer):
    """The index just past the request head in `buffer`, or -1."""
    ends = [i + n for i, n in ((buffer.find(b"\r\n\r\n"), 4), (buffer.find(b"\n\n"), 2)) if i >= 0]
    return min(ends) if ends else -1


class EventServer:
    """Serve `handler_class` on `address` (see the module's docstring): the
    interface of socketserver's servers that the site uses (server_address,
    serve_forever, shutdown, server_close, a context manager)."""

    request_queue_size = 128

    def __init__(self, address, handler_class):
        self.RequestHandlerClass = handler_class
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.socket.bind(address)
            self.socket.listen(self.request_queue_size)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.cap = connection_cap()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._returned = queue.SimpleQueue()  # connections a worker hands back
        self._idle = collections.OrderedDict()  # sock -> _Connection, the oldest first
        self._busy = 0
        self._pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="serve")
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._resting_until = None

    # --- the selector thread --------------------------------------------------------------

    def serve_forever(self, poll_interval=0.5):
        self._stopped.clear()
        self._selector.register(self.socket, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                wait = poll_interval
                if self._idle:
                    wait = min(wait, max(0.0, min(c.deadline for c in self._idle.values()) - now))
                if self._resting_until is not None:
                    wait = min(wait, max(0.0, self._resting_until - now))
                for key, _ in self._selector.select(wait):
                    if key.data == "listen":
                        self._accept()
                    elif key.data == "wake":
                        self._take_back()
                    else:
                        self._read(key.data)
                self._expire()
        finally:
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self.socket)
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(self._wake_r)
            self._stopped.set()

    def _accept(self):
        while True:
            if len(self._idle) + self._busy >= self.cap:
                if not self._close_oldest_idle():
                    self._rest()
                    return
            try:
                sock, address = self.socket.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # no descriptor: free the oldest idle connection's, or rest (never spin)
                    if not self._close_oldest_idle():
                        self._rest()
                        return
                    continue
                return  # the client went away before its connection was accepted
            sock.setblocking(False)
            self._watch(_Connection(sock, address, b"", time.monotonic() + self._timeout()))

    def _rest(self):
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(self.socket)
        self._resting_until = time.monotonic() + ACCEPT_REST_S

    def _timeout(self):
        return self.RequestHandlerClass.timeout or 20.0

    def _watch(self, conn):
        self._idle[conn.sock] = conn
        self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        if _head_end(conn.buffer) >= 0:  # a pipelined request already here
            self._dispatch(conn)

    def _forget(self, conn):
        self._idle.pop(conn.sock, None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)

    def _close(self, conn):
        self._forget(conn)
        with contextlib.suppress(OSError):
            conn.sock.close()

    def _close_oldest_idle(self):
        if not self._idle:
            return False
        self._close(next(iter(self._idle.values())))
        return True

    def _read(self, conn):
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return
        conn.buffer += data
        first_line_too_long = b"\n" not in conn.buffer[:65537] and len(conn.buffer) > 65536
        if _head_end(conn.buffer) >= 0 or len(conn.buffer) > MAX_HEAD_BYTES or first_line_too_long:
            self._dispatch(conn)

    def _dispatch(self, conn):
        self._forget(conn)
        self._busy += 1
        try:
            self._pool.submit(self._answer, conn)
        except RuntimeError:  # the pool is shut down: the server is stopping
            self._busy -= 1
            self._close(conn)

    def _take_back(self):
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while self._wake_r.recv(4096):
                pass
        while True:
            try:
                conn = self._returned.get_nowait()
            except queue.Empty:
                break
            self._busy -= 1
            if conn is not None:
                conn.deadline = time.monotonic() + self._timeout()
                self._watch(conn)

    def _expire(self):
        now = time.monotonic()
        for conn in [c for c in self._idle.values() if c.deadline <= now]:
            self._close(conn)  # a head not whole by its deadline: closed, no answer (as idle keep-alive)
        if self._resting_until is not None and now >= self._resting_until:
            self._resting_until = None
            with contextlib.suppress(KeyError, ValueError):
                self._selector.register(self.socket, selectors.EVENT_READ, "listen")

    # --- a worker thread ------------------------------------------------------------------

    def _answer(self, conn):
        """Answer the one whole request at the head of conn.buffer; hand the
        connection back (with any bytes after that request) unless it is to
        close."""
        end = _head_end(conn.buffer)
        head, rest = (conn.buffer[:end], conn.buffer[end:]) if end >= 0 else (conn.buffer, b"")
        keep = False
        try:
            conn.sock.setblocking(True)
            handler = _one_request(self.RequestHandlerClass)
            handled = handler(conn.sock, conn.address, self, head)
            keep = not handled.close_connection
        except Exception:
            self.handle_error(conn.sock, conn.address)
        if keep and not self._stop.is_set():
            with contextlib.suppress(OSError):
                conn.sock.setblocking(False)
                conn.buffer = rest
                self._returned.put(conn)
                self._wake()
                return
        with contextlib.suppress(OSError):
            conn.sock.close()
        self._returned.put(None)
        self._wake()

    def _wake(self):
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def handle_error(self, request, client_address):
        """One line, not a traceback, for a request that failed in the
        handler (the client has gone, say); the server goes on."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the client went away or stopped reading: nothing to report
        print(f"serve: a request from {client_address[0]} failed: {type(exc).__name__}: {exc}", file=sys.stderr)

    # --- stopping ---------------------------------------------------------------------------

    def shutdown(self):
        self._stop.set()
        self._wake()
        self._stopped.wait()

    def server_close(self):
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for conn in list(self._idle.values()):
            self._close(conn)
        for sock in (self.socket, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                sock.close()
        self._selector.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server_close()


_ONE_REQUEST = {}


def _one_request(handler_class):
    """`handler_class` made to answer exactly one request whose head it is
    given (read from memory, not the socket), then return."""
    found = _ONE_REQUEST.get(handler_class)
    if found is None:

        class OneRequest(handler_class):
            def __init__(self, request, client_address, server, head):
                self._head = head
                super().__init__(request, client_address, server)

            def setup(self):
                super().setup()
                self.rfile = io.BytesIO(self._head)

            def handle(self):
                self.close_connection = True
                self.handle_one_request()

        found = _ONE_REQUEST[handler_class] = OneRequest
    return found
