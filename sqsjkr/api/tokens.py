"""Who may call the HTTP API: a request's bearer token checked against the tokens file's digests
in constant time, and failed checks bounded.
"""

from __future__ import annotations

import hmac
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqsjkr.contract.tokens import Token, read_tokens, token_digest

#: Failed checks taken in FAILURE_WINDOW seconds before every further one is refused at once
#: (429): a guess costs a SHA-256, and guesses must not crowd out the callers with tokens.
FAILURES_ALLOWED = 20
FAILURE_WINDOW = 10.0


class Unauthorized(Exception):
    """A request without a valid bearer token (401), or past the bound on failures (429)."""

    def __init__(self, status: int, detail: str, headers: Mapping[str, str] | None = None):
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})


@dataclass
class Tokens:
    """The tokens of one listener, by the digest of each, and the failed checks of late."""

    by_digest: Mapping[str, Token]
    clock: Callable[[], float] = time.monotonic
    _failures: deque[float] = field(default_factory=deque)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def check(self, authorization: str | None) -> Token:
        """The token an Authorization header carries; Unauthorized when it carries none, or
        one that is not known."""
        with self._mutex:
            self._forget_failures()
            if len(self._failures) >= FAILURES_ALLOWED:
                raise Unauthorized(429, "too many failed token checks: try again", _RETRY)
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized(401, "send the token as 'Authorization: Bearer TOKEN'", _CHALLENGE)
        digest = token_digest(given.strip())
        found = None
        # Every digest is compared, in constant time, so that the time taken says nothing.
        for known, token in self.by_digest.items():
            if hmac.compare_digest(known, digest):
                found = token
        if found is None:
            with self._mutex:
                self._failures.append(self.clock())
            raise Unauthorized(401, "unknown token", _CHALLENGE)
        return found

    def _forget_failures(self) -> None:
        horizon = self.clock() - FAILURE_WINDOW
        while self._failures and self._failures[0] < horizon:
            self._failures.popleft()


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjkr"'}
_RETRY = {"Retry-After": str(int(FAILURE_WINDOW))}


def load_tokens(path: str) -> Tokens:
    """The tokens of the file at path (ConfigError naming the file and the field)."""
    return Tokens(read_tokens(path))
