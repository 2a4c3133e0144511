"""An HTTP job: the call a message asks for instead of a command, and the URLs it may go to.

Only URLs under the allowed prefixes are called: a message could otherwise reach any service the
host can, so the default is the host itself (loopback).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from sqsjkr.contract.duration import Duration
from sqsjkr.contract.fields import duration_field, field_error, json_type, reject_nul, text
from sqsjkr.contract.limits import MAX_SHOWN
from sqsjkr.errors import quote

#: The HTTP methods a job may use.
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD")
#: The default of [http] allow: the host itself, on any port.
LOOPBACK = ("http://127.0.0.1/", "http://localhost/", "http://[::1]/")


@dataclass(frozen=True)
class HttpCall:
    """The call an HTTP job makes; it succeeds on a 2xx answer, or on one of success_status."""

    url: str
    method: str = "POST"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str | None = None
    timeout: Duration | None = None  # None: the job's timeout, else [kicker] job_timeout
    success_status: tuple[int, ...] | None = None

    @property
    def origin(self) -> str:
        return origin(self.url)

    def succeeded(self, status: int) -> bool:
        if self.success_status is not None:
            return status in self.success_status
        return 200 <= status < 300


def parse_http(value: object, allow: Sequence[str] | None) -> HttpCall:
    """The job's "http" field; with allow, a URL under none of its prefixes is refused."""
    if not isinstance(value, dict):
        raise field_error("http", f"must be an object, got {json_type(value)}")
    url = text("http.url", value.get("url", ""))
    # Errors name the URL by its origin at most: its path or query may hold a token.
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        got = quote(parts.scheme, MAX_SHOWN) if parts.scheme else "no scheme"
        raise field_error("http.url", f"must be an http:// or https:// URL, got {got}")
    if not parts.hostname:
        raise field_error("http.url", "must be an http:// or https:// URL with a host")
    if allow is not None and not allowed(url, allow):
        raise field_error(
            "http.url",
            f"a URL of {quote(origin(url), MAX_SHOWN)} (path not shown) is under no [http] "
            f"allow prefix of this daemon ({', '.join(allow)})",
        )
    method = text("http.method", value.get("method", "POST")).upper()
    if method not in METHODS:
        raise field_error(
            "http.method", f"must be one of {', '.join(METHODS)}, got {quote(method, MAX_SHOWN)}"
        )
    body = value.get("body")
    if body is not None:
        body = text("http.body", body)
    return HttpCall(
        url=url,
        method=method,
        headers=_headers(value.get("headers")),
        body=body,
        timeout=duration_field(value, "timeout", path="http.timeout"),
        success_status=_statuses(value.get("success_status")),
    )


def origin(url: str) -> str:
    """scheme://host[:port] of url, without any user info: how an HTTP job is named wherever it
    leaves the daemon (logs, run records, reports), since its path or query may hold a token."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def allowed(url: str, allow: Sequence[str]) -> bool:
    """Whether url is under one of the prefixes: the same scheme and host, the same port (any
    port when the prefix names none), and a path that starts with the prefix's path."""
    parts = urlsplit(url)
    for prefix in allow:
        want = urlsplit(prefix)
        if (parts.scheme, parts.hostname) != (want.scheme, want.hostname):
            continue
        if want.port is not None and parts.port != want.port:
            continue
        if (parts.path or "/").startswith(want.path or "/"):
            return True
    return False


def _headers(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise field_error("http.headers", f"must be an object, got {json_type(value)}")
    headers = {}
    for name, item in value.items():
        path = f"http.headers.{name}"
        item = text(path, item)
        # A line break would end the header and start another: a header the message did not name.
        for part in (name, item):
            reject_nul(path, part)
            if "\r" in part or "\n" in part:
                raise field_error(path, "must not contain a line break")
        if not name:
            raise field_error(path, "header name must not be empty")
        headers[name] = item
    return headers


def _statuses(value: object) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise field_error("http.success_status", "must be a non-empty array of status codes")
    for status in value:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            got = status if type(status) is int else json_type(status)  # not a huge string
            raise field_error("http.success_status", f"must hold codes 100-599, got {got}")
    return tuple(value)
