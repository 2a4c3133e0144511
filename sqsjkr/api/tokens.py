"""Who may call the HTTP API: a request's bearer token checked against the tokens file's digests
in constant time, the file read again once it changes, and failed checks bounded.
"""

from __future__ import annotations

import hmac
import logging
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqsjkr.api.problems import ApiProblem
from sqsjkr.contract.tokens import Token, read_tokens, token_digest
from sqsjkr.errors import ConfigError, quote

log = logging.getLogger(__name__)
#: What tells a tokens file changed: its inode (an editor's rename), size, and times.
Signature = tuple[int, int, int, int]

#: Failed checks answered 401 in FAILURE_WINDOW seconds; past them, a wrong token is answered 429
#: until the window has moved on. A right token is always served: a flood of guesses must not
#: lock the callers that hold tokens out (it would, were every check refused), and it buys a
#: guesser nothing against a 256-bit token (`sqsjkr token new`'s).
FAILURES_ALLOWED = 20
FAILURE_WINDOW = 10.0
#: The longest Authorization header hashed: longer ones are refused unread (a token is 43).
MAX_AUTHORIZATION = 512


class Unauthorized(Exception):
    """A request without a valid bearer token (401), or past the bound on failures (429)."""

    def __init__(self, status: int, detail: str, headers: Mapping[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})


@dataclass
class Tokens:
    """The tokens of one listener, by the digest of each, and the failed checks of late. With a
    path, the tokens file's: read again on the first check after it changes, so that a token
    removed from it is refused from then on, with no restart."""

    by_digest: Mapping[str, Token]
    clock: Callable[[], float] = time.monotonic
    path: str | None = None
    _seen: Signature | None = None
    _unreadable: str | None = None
    _failures: deque[float] = field(default_factory=deque)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def check(self, authorization: str | None) -> Token:
        """The token an Authorization header carries; Unauthorized when it carries none (401),
        or an unknown one (401, or 429 past FAILURES_ALLOWED in the window); ApiProblem 503
        while the tokens file, changed, cannot be used (no token is served meanwhile)."""
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized(401, "send the token as 'Authorization: Bearer TOKEN'", _CHALLENGE)
        by_digest = self._current()
        found = None
        if len(given) <= MAX_AUTHORIZATION:
            digest = token_digest(given.strip())
            # Every digest is compared, in constant time, so that the time taken says nothing.
            for known, token in by_digest.items():
                if hmac.compare_digest(known, digest):
                    found = token
        if found is not None:
            return found
        with self._mutex:
            self._forget_failures()
            bounded = len(self._failures) >= FAILURES_ALLOWED
            if not bounded:
                self._failures.append(self.clock())
        if bounded:
            raise Unauthorized(429, "too many failed token checks: try again", _RETRY)
        raise Unauthorized(401, "unknown token", _CHALLENGE)

    def _current(self) -> Mapping[str, Token]:
        """The tokens as the file holds them now: one stat per check, a read when it changed."""
        if self.path is None:
            return self.by_digest
        with self._mutex:
            try:
                now: Signature | None = _signature(self.path)
            except OSError:
                now = None
            if now != self._seen:
                self._seen = now
                try:
                    self.by_digest = read_file(self.path)
                    self._unreadable = None
                    log.warning(
                        "--api-tokens %s changed: %d tokens now", self.path, len(self.by_digest)
                    )
                except ConfigError as exc:
                    self._unreadable = str(exc)
                    log.error("%s; no token is served until it is fixed", exc)
            if self._unreadable is not None:
                # Fail closed: the change may have been a token's removal. Why is the log's to
                # say: the caller may hold no token, and the file's path and text are not theirs.
                detail = (
                    "the tokens file changed and cannot be used: "
                    "no token is served until it is fixed"
                )
                raise ApiProblem(503, "tokens-unreadable", detail, _RETRY_SOON)
            return self.by_digest

    def _forget_failures(self) -> None:
        horizon = self.clock() - FAILURE_WINDOW
        while self._failures and self._failures[0] < horizon:
            self._failures.popleft()


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjkr"'}
_RETRY = {"Retry-After": str(int(FAILURE_WINDOW))}
#: A tokens file caught mid-edit is whole again within a second or so.
_RETRY_SOON = {"Retry-After": "1"}


def load_tokens(path: str) -> Tokens:
    """The tokens of the file at path, read again whenever it changes (ConfigError naming the
    file and the field, or its mode when group or others may write it)."""
    seen = _signature(path) if os.path.exists(path) else None
    return Tokens(read_file(path), path=path, _seen=seen)


def read_file(path: str) -> dict[str, Token]:
    """The tokens of the file at path; ConfigError when group or others may write it: whoever
    writes it grants themselves a token."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(f"--api-tokens {quote(path)}: {exc.strerror}") from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"--api-tokens {quote(path)}: mode {stat.S_IMODE(mode):04o} lets group or others "
            f"write it, and whoever writes it grants tokens: chmod go-w {quote(path)}"
        )
    return read_tokens(path)


def _signature(path: str) -> Signature:
    found = os.stat(path)
    return (found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)
