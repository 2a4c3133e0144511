"""Who may ask the dashboard what: the Host header checked against its own names (DNS rebinding),
users from a trusted proxy's identity header or basic auth with bcrypt hashes, and its headers.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import ipaddress
import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

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
    # Not no-referrer: under it a browser sends "Origin: null" with the dashboard's own forms,
    # which check_origin refuses. Other sites get neither a Referer nor an Origin of ours.
    "Referrer-Policy": "same-origin",
}
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
#: The longest user name taken from an identity header or basic auth.
MAX_USER = 200
#: Password checks run at once: bcrypt is slow by design, and guesses must not take the CPU
#: from signed-in users (whose checks are remembered).
PASSWORD_CHECKS = 2
#: How long a password check waits for its turn before the request is refused (429).
PASSWORD_WAIT_SECONDS = 0.25


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
    _checks: threading.BoundedSemaphore = field(
        default_factory=lambda: threading.BoundedSemaphore(PASSWORD_CHECKS)
    )

    def __post_init__(self) -> None:
        self._proxies = [ipaddress.ip_network(p, strict=False) for p in self.trusted_proxies]
        self._dummy = _dummy_hash(self.users) if self.users else b""

    def may_act(self, user: str | None) -> bool:
        """Whether a request of user may act: a signed-in user, or anyone on a loopback listener
        that no --allowed-host puts behind a proxy (whose users would all come from loopback)."""
        return user is not None or (self.loopback and not self.allowed_hosts)

    def who_may_act(self) -> str:
        """Who may act, for the start-up line."""
        if self.auth_header or self.users is not None:
            return "actions on, for signed-in users"
        if self.may_act(None):
            return "actions on, for anyone on this host (as the user who runs sqsjkr web)"
        why = "an --allowed-host" if self.loopback else "a non-loopback listener"
        return f"actions refused: no sign-in (--auth-header or --basic-auth-file) behind {why}"

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
        if not self.owns(given):
            bare = _bare(given)
            raise Refused(
                421 if given else 400,
                f"Host {quote(given)} is not this dashboard's (pass --allowed-host "
                f"{quote(bare)} if it is)",
            )

    def check_origin(self, origin: str | None) -> None:
        """Refuse a POST whose Origin (when the browser sends one) is not one of the Host names
        taken: a page elsewhere must not act here, whatever it knows of a token."""
        if origin is None:
            return
        parts = urlsplit(origin.strip())
        if parts.scheme not in ("http", "https") or not self.owns(parts.netloc.lower()):
            raise Refused(403, f"Origin {quote(origin, 200)} is not this dashboard's")

    def owns(self, given: str) -> bool:
        """Whether given (a Host header's value, or a URL's host[:port]) is one of its names."""
        names = self.own_hosts()
        return given in names or _bare(given) in names

    def user(self, remote: str | None, header: Callable[[str], str | None]) -> str | None:
        """The request's user: a trusted proxy's identity header, else basic auth (when a file
        of users is given), else nobody. Refused when a required user is missing or wrong."""
        if self.auth_header and self._trusted(remote):
            return self._named(header(self.auth_header))
        if self.users is not None:
            return self._basic(header("Authorization") or "")
        if self.auth_header:
            raise Refused(
                403, f"{quote(remote or '?')} is not a --trusted-proxy: come through the proxy"
            )
        return None

    def _named(self, value: str | None) -> str:
        """The user a trusted proxy names: its header's bytes read as UTF-8 (the WSGI server
        hands them over as Latin-1); refused when missing or ambiguous (two headers, or one
        folded, arrive joined by a comma)."""
        name = (value or "").strip()
        if not name:
            raise Refused(401, f"no {self.auth_header} header from the proxy")
        try:
            name = name.encode("latin-1").decode("utf-8")
        except UnicodeError as exc:
            raise Refused(400, f"{self.auth_header} from the proxy is not UTF-8") from exc
        if "," in name or any(not c.isprintable() for c in name):
            raise Refused(
                400,
                f"{self.auth_header} from the proxy is ambiguous (sent twice, folded or with "
                "control characters): the proxy must set it once, replacing the client's",
            )
        return name[:MAX_USER]

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
        if not self._checks.acquire(timeout=PASSWORD_WAIT_SECONDS):
            raise Refused(429, "too many sign-ins at once: try again", {"Retry-After": "1"})
        try:
            # An unknown name costs a check too, so that the time of a refusal does not say
            # which names exist. bcrypt reads 72 bytes at most (htpasswd cuts there too).
            ok = bcrypt.checkpw(password.encode()[:72], hashed or self._dummy)
        finally:
            self._checks.release()
        if hashed is None or not ok:
            return False
        with self._mutex:
            self._checked.add(seen)
        return True


def _dummy_hash(users: Mapping[str, bytes]) -> bytes:
    """A hash of a random password at the cost of the users' first hash: what an unknown name's
    password is checked against."""
    import bcrypt

    first = next(iter(users.values()))
    cost = int(first.split(b"$")[2])
    return bcrypt.hashpw(secrets.token_bytes(16), bcrypt.gensalt(rounds=cost))


def _bare(host: str) -> str:
    """host without its port ("[::1]" stays whole)."""
    return host.rsplit(":", 1)[0] if not host.endswith("]") else host


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
