"""The stats listener: JSON counters (/stats/metrics, v2), Prometheus metrics, health, over
TCP or a unix socket, on a thread of its own that sleeps until a client comes.
"""

from __future__ import annotations

import contextlib
import errno
import http.server
import json
import logging
import os
import selectors
import socket
import socketserver
import stat
import sys
import threading
import time
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sqsjkr import __version__
from sqsjkr.errors import StatsServerError
from sqsjkr.observability.health import Health, Verdict
from sqsjkr.observability.stats import Stats

if TYPE_CHECKING:
    from sqsjkr.observability.metrics import Metrics

__all__ = ["StatsServer", "StatsServerError"]

#: What Prometheus expects of a /metrics answer (prometheus_client's text format 0.0.4).
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_log = logging.getLogger("sqsjkr.stats")

# Probing a socket path that a wedged process listens on must not hang start().
_PROBE_TIMEOUT_SECONDS = 1.0
#: Connections served at once, so that a flood of clients holding connections open cannot take
#: the file descriptors that jobs need; a scrape takes milliseconds, so monitoring never needs
#: more. A connection beyond them takes the place of the oldest one still waiting for its
#: request, and is closed at once only when every one is being answered: held connections must
#: not lock a monitoring agent out.
MAX_CONNECTIONS = 16
#: A connection whose request line and headers have not all come within this long is cut,
#: however slowly its client keeps sending (a header line every 2 s is never idle for the
#: handler's read timeout).
REQUEST_SECONDS = 5.0
#: A connection is cut after this long in all.
MAX_CONNECTION_SECONDS = 10.0
#: Connections the kernel keeps waiting for accept(); beyond it, it refuses them itself.
LISTEN_BACKLOG = 64


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers the stats, metrics and health paths; every error response is JSON too."""

    server: _Server
    # One request per connection, so no client can park an idle keep-alive connection on us.
    protocol_version = "HTTP/1.0"
    server_version = f"sqsjkr/{__version__}"
    # A client that connects and then sends nothing must not hold a handler thread for long.
    timeout = 5

    def parse_request(self) -> bool:
        # The stdlib reads the headers here: once they are in (or found bad, and answered so),
        # the connection is no longer held to REQUEST_SECONDS.
        parsed = super().parse_request()
        self.server.answering(self.request)
        return parsed

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        server = self.server
        if path == "/stats/metrics":
            self._send_json(200, server.stats.snapshot().v1())
        elif path == "/stats/metrics/v2":
            self._send_json(200, server.stats.v2())
        elif path == "/metrics" and server.metrics is not None:
            self._send(200, server.metrics.exposition(), PROMETHEUS_CONTENT_TYPE)
        elif path == "/healthz" and server.health is not None:
            self._send_verdict(server.health.live())
        elif path == "/readyz" and server.health is not None:
            self._send_verdict(server.health.ready())
        else:
            self._send_json(404, {"error": "not found"})

    def _send_verdict(self, verdict: Verdict) -> None:
        self._send_json(200 if verdict.ok else 503, verdict.body())

    do_HEAD = do_GET

    def _method_not_allowed(self) -> None:
        self._send_json(405, {"error": "method not allowed"}, Allow="GET, HEAD")

    # Methods not listed here are unknown to us, and the stdlib answers them 501.
    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _method_not_allowed

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (400 bad request line, 408, 414, 431, 501) would be HTML.
        self._send_json(code, {"error": message or HTTPStatus(code).phrase.lower()})

    def _send_json(self, code: int, body: dict[str, Any], **headers: str) -> None:
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        self._send(code, data, "application/json", **headers)

    def _send(self, code: int, data: bytes, content_type: str, **headers: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def version_string(self) -> str:
        # The stdlib appends the Python version, which is nobody's business.
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib writes every request to stderr; a scrape each minute is not worth that.
        # Unix-socket peers are usually unnamed: client_address is "", not (host, port).
        peer = self.client_address[0] if isinstance(self.client_address, tuple) else "unix"
        _log.debug("%s " + format, peer, *args)


@dataclass
class _Client:
    """One open stats connection: when it was accepted, and how far it has come."""

    accepted: float
    answering: bool = False  # its request has come
    cut: bool = False  # shut down; its handler is ending

    def due(self) -> float:
        """When it is cut, unless it has ended by then."""
        return self.accepted + (MAX_CONNECTION_SECONDS if self.answering else REQUEST_SECONDS)


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A thread per connection over TCP or a unix socket; server_close() joins them all.

    Not http.server.ThreadingHTTPServer: its server_bind() does a reverse DNS lookup of the
    host, and it cannot bind a unix socket. ThreadingMixIn joins only non-daemon threads, so
    daemon_threads keeps its default of False.
    """

    request_queue_size = LISTEN_BACKLOG
    #: handle_request() is called only once the socket is readable: it must never block.
    timeout = 0

    def __init__(
        self,
        family: socket.AddressFamily,
        address: Any,
        stats: Stats,
        metrics: Metrics | None,
        health: Health | None,
    ) -> None:
        # TCPServer creates and binds its socket from these, so they must be set first.
        self.address_family = family
        self.allow_reuse_address = family != socket.AF_UNIX  # restart despite TIME_WAIT
        self.stats = stats
        self.metrics = metrics
        self.health = health
        self._clients: dict[Any, _Client] = {}
        self._clients_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._clients_lock:
            admitted = self._admit(request)
        if not admitted:
            _log.debug("stats connection refused: %d being answered", MAX_CONNECTIONS)
            self.close_request(request)
            return
        super().process_request(request, client_address)

    def _admit(self, request: Any) -> bool:
        """Take request in, in place of the oldest connection still waiting for its request if
        MAX_CONNECTIONS are open; False if every one is being answered. Under _clients_lock."""
        live = {conn: client for conn, client in self._clients.items() if not client.cut}
        if len(live) >= MAX_CONNECTIONS:
            waiting = [conn for conn, client in live.items() if not client.answering]
            if not waiting:
                return False
            self._cut(min(waiting, key=lambda conn: live[conn].accepted))
            _log.debug("stats connection cut: its request had not come when another did")
        self._clients[request] = _Client(time.monotonic())
        return True

    def answering(self, request: Any) -> None:
        """request's request has come: it is cut only after MAX_CONNECTION_SECONDS in all."""
        with self._clients_lock:
            client = self._clients.get(request)
            if client is not None:
                client.answering = True

    def shutdown_request(self, request: Any) -> None:
        # Forgotten under the lock before it is closed, so _cut() never touches a closed
        # socket (whose descriptor number may already belong to another).
        with self._clients_lock:
            self._clients.pop(request, None)
        super().shutdown_request(request)

    def cut_old(self) -> float | None:
        """Cut connections past their time; seconds until the next one is due, None if none."""
        now = time.monotonic()
        with self._clients_lock:
            for conn, client in self._clients.items():
                if not client.cut and client.due() <= now:
                    self._cut(conn)
            due = [client.due() for client in self._clients.values() if not client.cut]
        return None if not due else max(0.0, min(due) - now)

    def abort_clients(self) -> None:
        """Wake handlers blocked on idle clients, so server_close() need not wait out timeout."""
        with self._clients_lock:
            for conn in self._clients:
                self._cut(conn)

    def _cut(self, conn: Any) -> None:
        """Wake conn's handler with an end of file. Under _clients_lock."""
        self._clients[conn].cut = True
        with contextlib.suppress(OSError):  # the client hung up already
            conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # BaseServer prints tracebacks to stderr. A client hanging up mid-response (or close()
        # aborting it) is routine; anything else is a bug in the handler worth a warning.
        level = logging.DEBUG if isinstance(sys.exc_info()[1], OSError) else logging.WARNING
        _log.log(level, "stats connection from %r failed", client_address, exc_info=True)


class StatsServer:
    """Serves GET /stats/metrics (v1) and /stats/metrics/v2 as JSON over TCP or a unix socket."""

    def __init__(
        self,
        stats: Stats,
        *,
        metrics: Metrics | None = None,
        health: Health | None = None,
        host: str = "127.0.0.1",
        port: int | None = None,
        socket_path: str | None = None,
    ) -> None:
        """metrics and health add /metrics, /healthz and /readyz to the two JSON paths."""
        if (port is None) == (socket_path is None):
            raise ValueError("StatsServer needs exactly one of port and socket_path")
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"stats port must be 0-65535, got {port}")
        self._stats = stats
        self._metrics = metrics
        self._health = health
        self._host = host
        self._port = port
        self._socket_path = os.fspath(socket_path) if socket_path is not None else None
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # (st_dev, st_ino) of the socket file we bound, so close() never removes a successor's.
        self._socket_id: tuple[int, int] | None = None
        self._closed = False

    @property
    def address(self) -> str:
        """Where the server listens: "127.0.0.1:8061", "[::1]:8061" or "unix:/path/to.sock".

        Before start() this is the requested address (with port 0 if a free port was asked for).
        """
        if self._socket_path is not None:
            return f"unix:{self._socket_path}"
        host, port = self._host, self._port
        if self._server is not None:
            bound_host, port = self._server.server_address[:2]
            host = str(bound_host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self) -> None:
        """Bind and serve on a thread owned by this object; StatsServerError if binding fails."""
        with self._lock:
            if self._closed:
                raise RuntimeError("StatsServer.start() after close()")
            if self._server is not None:
                raise RuntimeError("StatsServer.start() called twice")
            path = self._socket_path
            self._server = self._bind_unix(path) if path is not None else self._bind_tcp()
            self._wake_r, self._wake_w = os.pipe()
            self._thread = threading.Thread(
                target=self._serve, args=(self._server,), name="sqsjkr-stats", daemon=True
            )
            self._thread.start()
        _log.info("serving stats on %s", self.address)

    def close(self) -> None:
        """Stop serving, wait for every connection thread, remove our socket file; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            server, thread = self._server, self._thread
            if server is None or thread is None:
                return
            # Once the serving thread has ended no connection is accepted any more, so
            # abort_clients() sees every one that server_close() will then wait for.
            os.write(self._wake_w, b"x")
            thread.join()
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            server.abort_clients()
            server.server_close()
            self._remove_socket_file()

    def _serve(self, server: _Server) -> None:
        """Accept connections until close() writes to the wake pipe. No polling: an idle
        listener sleeps in select() until a client, close(), or a connection due to be cut."""
        with selectors.DefaultSelector() as selector:
            selector.register(server.socket, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            timeout = None
            while True:
                for key, _ in selector.select(timeout):
                    if key.fileobj == self._wake_r:
                        return
                    server.handle_request()
                timeout = server.cut_old()

    def __enter__(self) -> StatsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _error(self, reason: str) -> StatsServerError:
        return StatsServerError(f"cannot serve stats on {self.address}: {reason}")

    def _bind_tcp(self) -> _Server:
        try:
            # The first address getaddrinfo gives decides the family, so "::1" binds IPv6.
            family, _, _, _, sockaddr = socket.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )[0]
        except OSError as exc:
            raise self._error(f"cannot resolve host {self._host!r}: {exc}") from exc
        try:
            return _Server(family, sockaddr, self._stats, self._metrics, self._health)
        except OSError as exc:
            hint = ""
            if exc.errno == errno.EADDRINUSE:
                hint = " (choose another with [kicker] stats_port or --stats-port; 0 takes any free port)"
            raise self._error(_reason(exc) + hint) from exc

    def _bind_unix(self, path: str) -> _Server:
        self._remove_stale_socket(path)
        try:
            server = _Server(socket.AF_UNIX, path, self._stats, self._metrics, self._health)
        except FileNotFoundError as exc:
            directory = os.path.dirname(os.path.abspath(path))
            raise self._error(f"directory {directory} does not exist") from exc
        except OSError as exc:
            raise self._error(_reason(exc)) from exc
        try:
            st = os.stat(path)
        except OSError as exc:  # someone removed it the instant after we bound it
            server.server_close()
            raise self._error(_reason(exc)) from exc
        self._socket_id = (st.st_dev, st.st_ino)
        return server

    def _remove_stale_socket(self, path: str) -> None:
        """Remove a socket file left by a crashed daemon, but never a live one or a non-socket."""
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            return
        except OSError as exc:
            raise self._error(_reason(exc)) from exc
        if not stat.S_ISSOCK(mode):
            raise self._error(f"{path} exists and is not a socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(_PROBE_TIMEOUT_SECONDS)
            try:
                probe.connect(path)
            except ConnectionRefusedError:
                pass  # nobody listens: stale
            except FileNotFoundError:
                return  # removed meanwhile
            except OSError as exc:
                # Timeouts included: a listener too busy to accept is still a listener.
                raise self._error(f"cannot probe existing socket: {_reason(exc)}") from exc
            else:
                raise self._error("another process is listening there")
        _log.info("removing stale stats socket %s", path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise self._error(f"cannot remove stale socket: {_reason(exc)}") from exc

    def _remove_socket_file(self) -> None:
        path, ident = self._socket_path, self._socket_id
        if path is None or ident is None:
            return
        try:
            st = os.lstat(path)
            if (st.st_dev, st.st_ino) == ident:
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            _log.warning("cannot remove stats socket %s: %s", path, exc)


def _reason(exc: OSError) -> str:
    """Return the bare reason: 'Address already in use', not '[Errno 98] Address ...'."""
    return exc.strerror or str(exc)
