"""Worker and invocation counters, and the HTTP endpoint that serves them.

Monitoring (mackerel-plugin-sqsjkr) curls /stats/metrics over TCP or a unix socket.
"""

from __future__ import annotations

import contextlib
import enum
import http.server
import json
import logging
import os
import socket
import socketserver
import stat
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from . import __version__
from .errors import SqsjkrError

__all__ = ["Outcome", "Stats", "StatsServer", "StatsServerError", "StatsSnapshot"]

_log = logging.getLogger("sqsjkr.stats")

# A client that connects and then sends nothing would otherwise hold a handler thread forever.
_CLIENT_TIMEOUT_SECONDS = 5.0
# How long serve_forever may take to notice shutdown(); bounds how long close() waits.
_POLL_INTERVAL_SECONDS = 0.05
# Probing a socket path that a wedged process listens on must not hang start().
_PROBE_TIMEOUT_SECONDS = 1.0


class StatsServerError(SqsjkrError):
    """The stats endpoint cannot listen; the message names the address and the reason."""


class Outcome(enum.Enum):
    """How one received job ended; the value is its key under "invocations" in v2."""

    SUCCEEDED = "succeeded"  # command exited 0
    ERRORED = "errored"  # command ran and failed
    FAILED = "failed"  # job could not run: life_time exceeded, lock aborted, invalid message
    DUPLICATE = "duplicates"  # message already seen (dedupe), skipped


@dataclass(frozen=True)
class StatsSnapshot:
    """The counters at one instant, taken under one lock so they agree with each other."""

    busy: int
    idle: int
    succeeded: int
    failed: int
    errored: int
    duplicates: int

    def v1(self) -> dict[str, int]:
        """The body of GET /stats/metrics, the shape mackerel-plugin-sqsjkr reads."""
        return {"idle_worker": self.idle, "busy_worker": self.busy}

    def v2(self) -> dict[str, dict[str, int]]:
        """The body of GET /stats/metrics/v2."""
        return {
            "workers": {"busy": self.busy, "idle": self.idle},
            "invocations": {
                "succeeded": self.succeeded,
                "failed": self.failed,
                "errored": self.errored,
                "duplicates": self.duplicates,
            },
        }


class Stats:
    """Thread-safe counters; busy + idle == workers always."""

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self._lock = threading.Lock()
        self._busy = 0
        self._counts = dict.fromkeys(Outcome, 0)

    @property
    def workers(self) -> int:
        return self._workers

    def job_started(self) -> None:
        """Mark one worker busy; more jobs than workers means the dispatcher is broken."""
        with self._lock:
            if self._busy >= self._workers:
                raise RuntimeError(f"job_started with all {self._workers} workers already busy")
            self._busy += 1

    def job_finished(self) -> None:
        """Mark one worker idle again; finishing more jobs than started is a bug too."""
        with self._lock:
            if self._busy <= 0:
                raise RuntimeError("job_finished without a matching job_started")
            self._busy -= 1

    def count(self, outcome: Outcome) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                busy=self._busy,
                idle=self._workers - self._busy,
                succeeded=self._counts[Outcome.SUCCEEDED],
                failed=self._counts[Outcome.FAILED],
                errored=self._counts[Outcome.ERRORED],
                duplicates=self._counts[Outcome.DUPLICATE],
            )


class _Handler(http.server.BaseHTTPRequestHandler):
    """Answers the two metrics paths with JSON; every other response is a JSON error."""

    server: _ConnectionOwner
    # HTTP/1.0: one request per connection, so no client can park a keep-alive connection on us.
    protocol_version = "HTTP/1.0"
    server_version = f"sqsjkr/{__version__}"
    timeout = _CLIENT_TIMEOUT_SECONDS

    _ROUTES: dict[str, Callable[[StatsSnapshot], dict[str, Any]]] = {
        "/stats/metrics": StatsSnapshot.v1,
        "/stats/metrics/v2": StatsSnapshot.v2,
    }

    def do_GET(self) -> None:
        route = self._ROUTES.get(urlsplit(self.path).path)
        if route is None:
            self._send_json(404, {"error": "not found"})
            return
        self._send_json(200, route(self.server.stats.snapshot()))

    do_HEAD = do_GET

    def __getattr__(self, name: str) -> Any:
        # BaseHTTPRequestHandler answers 501 to any method lacking a do_<METHOD>; every method
        # but GET and HEAD is understood here and simply not allowed on these resources.
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self) -> None:
        self._send_json(405, {"error": "method not allowed"}, {"Allow": "GET, HEAD"})

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # The stdlib's own errors (400 bad request line, 414, 431) would otherwise be HTML.
        try:
            phrase = HTTPStatus(code).phrase.lower()
        except ValueError:
            phrase = "error"
        self.close_connection = True
        self._send_json(code, {"error": message or phrase})

    def _send_json(
        self, code: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = (json.dumps(body, separators=(",", ":")) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def version_string(self) -> str:
        # The stdlib appends the Python version, which is nobody's business.
        return self.server_version

    def address_string(self) -> str:
        # AF_UNIX peers are usually unnamed: client_address is "" (or a path), not (host, port).
        if isinstance(self.client_address, tuple) and self.client_address:
            return str(self.client_address[0])
        return "unix"

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib writes every request to stderr; a scrape each minute is not worth that.
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("%s %s", self.address_string(), format % args)


class _ConnectionOwner(socketserver.BaseServer):
    """One thread per connection, like ThreadingMixIn(daemon_threads=True), but owned here.

    ThreadingMixIn does not join daemon threads on older Pythons and cannot interrupt a handler
    blocked reading from an idle client; abort_connections() and join_connections() do both.
    """

    stats: Stats

    def init_owner(self, stats: Stats) -> None:
        self.stats = stats
        self._conn_lock = threading.Lock()
        self._conns: dict[threading.Thread, socket.socket] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name="sqsjkr-stats-conn",
            daemon=True,
        )
        with self._conn_lock:
            # Finished threads are left for this pruning so that only the owner ever forgets one.
            for done in [t for t in self._conns if not t.is_alive()]:
                del self._conns[done]
            self._conns[thread] = request
        thread.start()

    def _serve_connection(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # BaseServer prints tracebacks to stderr. A client hanging up mid-response (or close()
        # aborting it) is routine; anything else is a bug in the handler worth a warning.
        level = logging.DEBUG if isinstance(sys.exc_info()[1], OSError) else logging.WARNING
        _log.log(level, "stats connection from %r failed", client_address, exc_info=True)

    def abort_connections(self) -> None:
        """Wake handlers blocked on their clients: reads see EOF, writes fail."""
        with self._conn_lock:
            conns = list(self._conns.values())
        for conn in conns:
            # OSError: its handler closed it already.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def join_connections(self) -> None:
        with self._conn_lock:
            threads = list(self._conns)
            self._conns.clear()
        for thread in threads:
            thread.join()


class _TcpServer(_ConnectionOwner, socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(self, family: socket.AddressFamily, sockaddr: tuple[Any, ...], stats: Stats):
        # TCPServer creates its socket from this attribute, so IPv6 hosts need it set first.
        self.address_family = family
        self.init_owner(stats)
        socketserver.TCPServer.__init__(self, sockaddr, _Handler, bind_and_activate=False)


class _UnixServer(_ConnectionOwner, socketserver.UnixStreamServer):
    def __init__(self, path: str, stats: Stats):
        self.init_owner(stats)
        socketserver.UnixStreamServer.__init__(self, path, _Handler, bind_and_activate=False)


class StatsServer:
    """Serves GET /stats/metrics (v1) and /stats/metrics/v2 as JSON over TCP or a unix socket."""

    def __init__(
        self,
        stats: Stats,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        socket_path: str | None = None,
    ) -> None:
        if (port is None) == (socket_path is None):
            raise ValueError("StatsServer needs exactly one of port and socket_path")
        if port is not None and not 0 <= port <= 65535:
            raise ValueError(f"stats port must be 0-65535, got {port}")
        self._stats = stats
        self._host = host
        self._port = port
        self._socket_path = os.fspath(socket_path) if socket_path is not None else None
        self._lock = threading.Lock()
        self._server: _ConnectionOwner | None = None
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
        if isinstance(self._server, _TcpServer):
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
            server = self._bind_unix() if self._socket_path is not None else self._bind_tcp()
            self._server = server
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": _POLL_INTERVAL_SECONDS},
                name="sqsjkr-stats",
                daemon=True,
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
            # Order matters: no new connections once serve_forever has returned, so every live
            # one is registered by the time abort_connections() runs.
            server.shutdown()
            thread.join()
            server.abort_connections()
            server.join_connections()
            server.server_close()
            self._remove_socket_file()

    def __enter__(self) -> StatsServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _bind_tcp(self) -> _TcpServer:
        try:
            infos = socket.getaddrinfo(
                self._host, self._port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
        except OSError as exc:
            raise StatsServerError(
                f"cannot serve stats on {self.address}: cannot resolve host {self._host!r}: {exc}"
            ) from exc
        family, _, _, _, sockaddr = infos[0]
        try:
            server = _TcpServer(family, sockaddr, self._stats)
        except OSError as exc:
            raise StatsServerError(f"cannot serve stats on {self.address}: {_reason(exc)}") from exc
        try:
            server.server_bind()
            server.server_activate()
        except OSError as exc:
            server.server_close()
            raise StatsServerError(f"cannot serve stats on {self.address}: {_reason(exc)}") from exc
        return server

    def _bind_unix(self) -> _UnixServer:
        path = self._socket_path
        assert path is not None
        self._remove_stale_socket(path)
        try:
            server = _UnixServer(path, self._stats)
        except OSError as exc:
            raise StatsServerError(f"cannot serve stats on {self.address}: {_reason(exc)}") from exc
        try:
            server.server_bind()
            st = os.stat(path)
            server.server_activate()
        except OSError as exc:
            server.server_close()
            reason = _reason(exc)
            if isinstance(exc, FileNotFoundError):
                directory = os.path.dirname(os.path.abspath(path))
                reason = f"directory {directory} does not exist"
            raise StatsServerError(f"cannot serve stats on {self.address}: {reason}") from exc
        self._socket_id = (st.st_dev, st.st_ino)
        return server

    def _remove_stale_socket(self, path: str) -> None:
        """Remove a socket file left by a crashed daemon, but never a live one or a non-socket."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise StatsServerError(f"cannot serve stats on {self.address}: {_reason(exc)}") from exc
        if not stat.S_ISSOCK(st.st_mode):
            raise StatsServerError(
                f"cannot serve stats on {self.address}: {path} exists and is not a socket"
            )
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(_PROBE_TIMEOUT_SECONDS)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            pass  # nobody listens: stale
        except FileNotFoundError:
            return  # removed meanwhile
        except OSError as exc:
            # Timeouts included: a listener too busy to accept is still a listener.
            raise StatsServerError(
                f"cannot serve stats on {self.address}: cannot probe existing socket: "
                f"{_reason(exc)}"
            ) from exc
        else:
            raise StatsServerError(
                f"cannot serve stats on {self.address}: another process is listening there"
            )
        finally:
            probe.close()
        _log.info("removing stale stats socket %s", path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StatsServerError(
                f"cannot serve stats on {self.address}: cannot remove stale socket: {_reason(exc)}"
            ) from exc

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
