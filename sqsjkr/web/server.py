"""The dashboard served by waitress: built from a config and the command's options, on its own
thread for `sqsjkr local`, or in the foreground for `sqsjkr web`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.contract.config import Config
from sqsjkr.web.app import create_app
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.guard import Guard, load_users

#: Requests served at once: pages wait on AWS, so a few more than the cores.
THREADS = 8
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


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
) -> Dashboard:
    """The dashboard of config's fleet (read through fleet when given), listening (port 0: any
    free port) but not serving yet; mounts: other applications on the listener, by the path
    prefix they serve (the HTTP API under /api/v1), which the dashboard's guard never sees."""
    import waitress

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
    server = waitress.create_server(
        mounted(app, mounts or {}),
        host=options.host,
        port=options.port,
        threads=THREADS,
        ident="sqsjkr",
    )
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
