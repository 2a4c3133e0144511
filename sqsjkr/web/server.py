"""The dashboard served by waitress on a listener bounding what one client may hold: on its own
thread for `sqsjkr local`, or in the foreground for `sqsjkr web`.
"""

from __future__ import annotations

import ipaddress
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import TcpWSGIServer
from waitress.task import ErrorTask

from sqsjkr.contract.config import Config
from sqsjkr.contract.limits import MAX_MESSAGE_BYTES
from sqsjkr.web.app import create_app
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.guard import Guard, load_users

#: Requests served at once: pages wait on AWS, so a few more than the cores.
THREADS = 8
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: What a body the listener refuses unread is told: the HTTP API's own 413 says the same.
TOO_LARGE = f"the body is larger than {MAX_MESSAGE_BYTES // (1024 * 1024)} MiB"
#: How long a client refused for holding too many connections is told to wait.
RETRY_AFTER = 5


@dataclass(frozen=True)
class Limits:
    """What one client may hold of the listener, and for how long: a client that trickles its
    headers (a slowloris) or holds many connections must not take the listener from the others.
    docs/api.md's "The listener in production" says what a reverse proxy adds in front."""

    #: Connections held at once, in all; past them new ones wait in the kernel's backlog.
    connections: int = 200
    #: Connections held at once from one address (a --trusted-proxy's excepted): one more is
    #: answered 503 with Retry-After and closed. A browser opens 6 to a host, and the listener
    #: serves THREADS requests at once: a proxy in front, one address, has room beyond them.
    per_client: int = 32
    #: Seconds from a request's first byte (a connection's opening, for its first request) to
    #: the end of its headers; past them the connection is closed.
    header_timeout: float = 10.0
    #: Seconds from a request's first byte to the end of its body.
    request_timeout: float = 30.0
    #: Seconds a kept-alive connection may wait idle between requests (waitress's
    #: channel_timeout).
    idle_timeout: int = 30
    #: The largest request line and headers (431 beyond).
    max_header: int = 64 * 1024
    #: The largest body read, refused by its Content-Length before a byte of it is read, or cut
    #: there when chunked (413): the API's 1 MiB, and room for a chunked body's framing.
    max_body: int = MAX_MESSAGE_BYTES + 64 * 1024


@dataclass(frozen=True)
class WebOptions:
    """What `sqsjkr web` was told: where to listen and who may do what."""

    host: str = "127.0.0.1"
    port: int = 8070
    enable_actions: bool = False
    allowed_hosts: tuple[str, ...] = ()
    trusted_proxies: tuple[str, ...] = ()
    auth_header: str | None = None
    basic_auth_file: str | None = None


@dataclass
class Dashboard:
    """A listening dashboard: its URL, and the server to run and to close."""

    server: Any
    guard: Guard
    _thread: threading.Thread | None = field(default=None)
    _closing: bool = False

    @property
    def url(self) -> str:
        host = self.guard.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.guard.port}/"

    def run(self) -> None:
        """Serve in this thread until close()."""
        try:
            self.server.run()
        except OSError:
            # close() from another thread takes the sockets from under the loop's select().
            if not self._closing:
                raise

    def start(self) -> None:
        """Serve on a thread of its own."""
        self._thread = threading.Thread(target=self.run, name="sqsjkr-web", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closing = True
        # The requests in hand end first: a task ending after close() would find its
        # server's trigger gone.
        self.server.task_dispatcher.shutdown()
        self.server.close()
        if self._thread is not None:
            self._thread.join(5)


def dashboard(
    config: Config,
    options: WebOptions,
    fleet: Fleet | None = None,
    mounts: Mapping[str, WSGIApp] | None = None,
    limits: Limits | None = None,
) -> Dashboard:
    """The dashboard of config's fleet (read through fleet when given), listening (port 0: any
    free port) but not serving yet; mounts: other applications on the listener, by the path
    prefix they serve (the HTTP API under /api/v1), which the dashboard's guard never sees.
    OSError when it cannot listen there (a taken port)."""
    users = None if options.basic_auth_file is None else load_users(options.basic_auth_file)
    guard = Guard(
        options.host,
        options.port,
        options.allowed_hosts,
        options.trusted_proxies,
        options.auth_header,
        users,
    )
    app = create_app(fleet or Fleet(config), guard, enable_actions=options.enable_actions)
    limits = limits or Limits()
    adjustments = Adjustments(
        host=options.host,
        port=options.port,
        threads=THREADS,
        ident="sqsjkr",
        connection_limit=limits.connections,
        channel_timeout=limits.idle_timeout,
        # The deadlines are looked at this often (waitress's default is every 30 seconds).
        cleanup_interval=1,
        max_request_header_size=limits.max_header,
        max_request_body_size=limits.max_body,
        # select() fails past 1024 descriptors; poll() has no such bound.
        asyncore_use_poll=True,
    )
    trusted = tuple(ipaddress.ip_network(p, strict=False) for p in options.trusted_proxies)
    server = Listener(mounted(app, mounts or {}), limits, trusted, adjustments)
    guard.port = int(server.effective_port)
    # Browsers keep cookies by host, not port: each listener's session cookie has a name of its
    # own, so that a second dashboard on this host does not replace the first one's.
    app.config["SESSION_COOKIE_NAME"] = f"sqsjkr-{guard.port}"
    return Dashboard(server, guard)


def mounted(app: WSGIApp, mounts: Mapping[str, WSGIApp]) -> WSGIApp:
    """app, with each of mounts serving the paths under its prefix, the paths left whole."""
    if not mounts:
        return app

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        for prefix, other in mounts.items():
            if path == prefix or path.startswith(prefix + "/"):
                return other(environ, start_response)
        return app(environ, start_response)

    return serve


class _Request(HTTPRequestParser):
    """A request being read, and when its first byte came."""

    def __init__(self, adj: Adjustments) -> None:
        super().__init__(adj)
        self.began = time.monotonic()


class _Refusal(ErrorTask):
    """waitress's own refusals (a body or headers too large, a request it cannot parse), as
    RFC 9457 problems like every other error of the listener."""

    def execute(self) -> None:
        error = self.request.error
        detail = str(error.body)
        if error.code == 413:
            detail = TOO_LARGE
        elif error.code == 431:
            kib = self.channel.adj.max_request_header_size // 1024
            detail = f"the request line and headers are larger than {kib} KiB"
        body = problem_body(error.code, detail)
        self.status = f"{error.code} {error.reason}"
        self.response_headers.append(("Content-Type", "application/problem+json"))
        self.set_close_on_finish()
        self.content_length = len(body)
        self.write(body)


class _Channel(HTTPChannel):
    """One client's connection: refused when its address holds too many, and overdue when its
    request does not come in time."""

    parser_class = _Request
    error_task_class = _Refusal

    def __init__(self, server: Listener, sock: Any, addr: Any, adj: Adjustments, map: Any = None):
        super().__init__(server, sock, addr, adj, map)
        self.opened = time.monotonic()
        self.heard = False
        if server.crowded(addr[0]):
            self._refuse(server.limits.per_client)

    def received(self, data: bytes) -> bool:
        self.heard = self.heard or bool(data)
        return bool(super().received(data))

    def overdue(self, now: float, limits: Limits) -> bool:
        """Whether the request being read has taken longer than limits allow."""
        partial = self.request
        if partial is None:
            # Idle: between requests waitress's channel_timeout bounds it; before the first,
            # the header deadline does, from the connection's opening.
            return not self.heard and now - self.opened > limits.header_timeout
        if partial.completed:
            return False
        if not partial.headers_finished:
            return now - partial.began > limits.header_timeout
        return now - partial.began > limits.request_timeout

    def _refuse(self, cap: int) -> None:
        detail = f"more than {cap} connections at once from one address"
        body = problem_body(503, detail, "too-many-connections")
        head = (
            "HTTP/1.1 503 Service Unavailable\r\n"
            "Content-Type: application/problem+json\r\n"
            f"Content-Length: {len(body)}\r\n"
            f"Retry-After: {RETRY_AFTER}\r\n"
            "Connection: close\r\n\r\n"
        )
        answer = head.encode() + body
        # Nothing of the request is read: the answer goes out and the connection closes.
        with self.outbuf_lock:
            self.outbufs[-1].append(answer)
            self.total_outbufs_len += len(answer)
        self.close_when_flushed = True


class Listener(TcpWSGIServer):
    """waitress's server, with Limits kept: past per_client connections from one address a
    connection is refused at once, and the maintenance waitress runs every second closes a
    connection whose request's headers or body are overdue.

    It extends waitress through the class attributes its server and channel are built from
    (channel_class, parser_class, error_task_class) and the maintenance() hook its own
    channel_timeout uses; tests/test_api_listener.py holds them to it."""

    channel_class = _Channel

    def __init__(
        self,
        app: WSGIApp,
        limits: Limits,
        trusted: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...],
        adjustments: Adjustments,
    ) -> None:
        self.limits = limits
        self.trusted = trusted
        # The first of the addresses the host names: the dashboard's URL is one address.
        super().__init__(app, adj=adjustments, sockinfo=adjustments.listen[0])

    def crowded(self, host: str) -> bool:
        """Whether host holds more connections than a client may (a trusted proxy never does:
        its clients are many, and it bounds them itself)."""
        try:
            if any(ipaddress.ip_address(host) in network for network in self.trusted):
                return False
        except ValueError:
            return False
        held = sum(1 for c in list(self.active_channels.values()) if c.addr[0] == host)
        return held > self.limits.per_client

    def maintenance(self, now: float) -> None:
        super().maintenance(now)
        clock = time.monotonic()
        for channel in list(self.active_channels.values()):
            if not channel.requests and channel.overdue(clock, self.limits):
                channel.will_close = True


def problem_body(status: int, detail: str, code: str | None = None) -> bytes:
    """An RFC 9457 problem of the listener itself, in the HTTP API's shape (api/problems.py)."""
    code = code or f"http-{status}"
    return json.dumps(
        {
            "type": f"urn:sqsjkr:problem:{code}",
            "title": HTTPStatus(status).phrase,
            "status": status,
            "detail": detail,
            "code": code,
        }
    ).encode()
