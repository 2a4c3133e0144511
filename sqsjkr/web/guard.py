"""Who may ask the dashboard what: the Host header checked against its own names (DNS rebinding),
users from a trusted proxy's identity header or basic auth with bcrypt hashes, and its headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqsjkr.errors import ConfigError, quote

#: A Content Security Policy with no inline script: htmx, the chart and app.js come from 'self'.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; "
    "frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
#: The longest user name taken from an identity header or basic auth.
MAX_USER = 200


class Refused(Exception):
    """A request the dashboard will not serve: its status, a one-line reason, extra headers."""

    def __init__(self, status: int, reason: str, headers: Mapping[str, str] | None = None):
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers = dict(headers or {})


@dataclass
class Guard:
    """The dashboard's listen address and the options that say who may use it."""

    host: str
    port: int
    allowed_hosts: Sequence[str] = ()
    trusted_proxies: Sequence[str] = ()
    auth_header: str | None = None
    users: Mapping[str, bytes] | None = None  # user -> bcrypt hash, from --basic-auth-file
    _checked: set[tuple[str, str]] = field(default_factory=set)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._proxies = [ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies]

    @property
    def loopback(self) -> bool:
        """Whether the listener takes connections from this host only."""
        host = self.host.strip("[]")
        if host == "localhost":
            return True
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return False

    def own_hosts(self) -> set[str]:
        """The Host header values taken: the listen address, loopback names on a loopback
        listener, and each --allowed-host (with or without a port)."""
        names = {h.lower() for h in self.allowed_hosts}
        wildcard = self.host in ("0.0.0.0", "::", "")
        if not wildcard:
            names.add(_with_port(self.host, self.port))
        if self.loopback:
            names.update(_with_port(name, self.port) for name in LOOPBACK_NAMES)
        return names

    def check_host(self, host: str | None) -> None:
        """Refuse a Host the dashboard was not told is its own: a page that a rebinding DNS name
        loads from this address must not read it."""
        given = (host or "").strip().lower()
        names = self.own_hosts()
        bare = given.rsplit(":", 1)[0] if not given.endswith("]") else given
        if given not in names and bare not in names:
            raise Refused(
                421 if given else 400,
                f"Host {quote(given)} is not this dashboard's (pass --allowed-host "
                f"{quote(bare)} if it is)",
            )

    def user(self, remote: str | None, header: Callable[[str], str | None]) -> str | None:
        """The request's user: a trusted proxy's identity header, else basic auth (when a file
        of users is given), else nobody. Refused when a required user is missing or wrong."""
        if self.auth_header and self._trusted(remote):
            name = (header(self.auth_header) or "").strip()
            if not name:
                raise Refused(401, f"no {self.auth_header} header from the proxy")
            return name[:MAX_USER]
        if self.users is not None:
            return self._basic(header("Authorization") or "")
        if self.auth_header:
            raise Refused(
                403, f"{quote(remote or '?')} is not a --trusted-proxy: come through the proxy"
            )
        return None

    def _trusted(self, remote: str | None) -> bool:
        try:
            address = ipaddress.ip_address(remote or "")
        except ValueError:
            return False
        return any(address in network for network in self._proxies)

    def _basic(self, authorization: str) -> str:
        challenge = {"WWW-Authenticate": 'Basic realm="sqsjkr", charset="UTF-8"'}
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "basic":
            raise Refused(401, "sign in", challenge)
        try:
            user, _, password = base64.b64decode(token, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise Refused(401, "malformed basic authorization", challenge) from exc
        if not self._password_ok(user, password):
            raise Refused(401, "wrong user or password", challenge)
        return user[:MAX_USER]

    def _password_ok(self, user: str, password: str) -> bool:
        import bcrypt

        assert self.users is not None
        hashed = self.users.get(user)
        # A digest of the password, not the password, marks it checked: bcrypt is slow by
        # design, and a page refreshes every few seconds.
        seen = (user, hashlib.sha256(password.encode()).hexdigest())
        with self._mutex:
            if seen in self._checked:
                return True
        if hashed is None or not bcrypt.checkpw(password.encode(), hashed):
            return False
        with self._mutex:
            self._checked.add(seen)
        return True


def _with_port(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host.lower()}:{port}"


def load_users(path: str) -> dict[str, bytes]:
    """The `basic_auth_users:` of a Prometheus exporter-toolkit web config file (YAML): user
    names and their bcrypt hashes. ConfigError names the file and what is wrong."""
    import yaml

    try:
        data: Any = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"--basic-auth-file {quote(path)}: {exc}") from exc
    if not isinstance(data, dict) or not isinstance(data.get("basic_auth_users"), dict):
        raise ConfigError(
            f"--basic-auth-file {quote(path)}: expected a mapping 'basic_auth_users:' of user "
            "names to bcrypt hashes (the Prometheus web config format)"
        )
    unknown = sorted(set(data) - {"basic_auth_users"})
    if unknown:
        raise ConfigError(
            f"--basic-auth-file {quote(path)}: {', '.join(map(quote, unknown))} not supported "
            "(TLS and HTTP settings belong to the proxy in front of the dashboard)"
        )
    users: dict[str, bytes] = {}
    for user, hashed in data["basic_auth_users"].items():
        if not isinstance(hashed, str) or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ConfigError(
                f"--basic-auth-file {quote(path)}: user {quote(str(user))} has no bcrypt hash "
                "(make one with htpasswd -nBC 10 USER)"
            )
        users[str(user)] = hashed.encode()
    if not users:
        raise ConfigError(f"--basic-auth-file {quote(path)}: basic_auth_users names no user")
    return users
