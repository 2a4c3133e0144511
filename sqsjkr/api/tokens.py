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
    """The tokens of one listener, by the digest of each, and the failed checks of late."""

    by_digest: Mapping[str, Token]
    clock: Callable[[], float] = time.monotonic
    _failures: deque[float] = field(default_factory=deque)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def check(self, authorization: str | None) -> Token:
        """The token an Authorization header carries; Unauthorized when it carries none (401),
        or an unknown one (401, or 429 past FAILURES_ALLOWED in the window)."""
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            raise Unauthorized(401, "send the token as 'Authorization: Bearer TOKEN'", _CHALLENGE)
        found = None
        if len(given) <= MAX_AUTHORIZATION:
            digest = token_digest(given.strip())
            # Every digest is compared, in constant time, so that the time taken says nothing.
            for known, token in self.by_digest.items():
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

    def _forget_failures(self) -> None:
        horizon = self.clock() - FAILURE_WINDOW
        while self._failures and self._failures[0] < horizon:
            self._failures.popleft()


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="sqsjkr"'}
_RETRY = {"Retry-After": str(int(FAILURE_WINDOW))}


def load_tokens(path: str) -> Tokens:
    """The tokens of the file at path (ConfigError naming the file and the field)."""
    return Tokens(read_tokens(path))
