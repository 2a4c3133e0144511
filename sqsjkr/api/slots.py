"""The long polls' slots (…/wait): each holds one of the listener's threads, so a token holds at
most a few, the listener at most a few more in all, and a wait past either is 429 with Retry-After.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

#: Long polls served at once on one listener: each holds one of its threads (web/server.py's 8),
#: and the dashboard's pages and the other routes keep the rest.
MAX_WAITS = 4
#: Long polls one token holds at once: no token, however many loops it runs, takes every slot.
WAITS_PER_TOKEN = 2
#: Seconds a refused wait is told to wait before its next call: a wait ends within its timeout,
#: and a refusal costs the listener nothing, so a client retries soon.
RETRY_AFTER = 1


class WaitRefused(Exception):
    """No slot for this wait: its token holds its share, or the listener holds MAX_WAITS."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


@dataclass
class WaitSlots:
    """The slots held, by token name; safe from the listener's threads."""

    total: int = MAX_WAITS
    per_token: int = WAITS_PER_TOKEN
    _held: Counter[str] = field(default_factory=Counter)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def take(self, token: str) -> Slot:
        """A slot for token's wait, given back by Slot.release(); WaitRefused when none is free
        to it. Neither bound waits: a long poll queued behind others would hold a thread too."""
        with self._mutex:
            if self._held[token] >= self.per_token:
                raise WaitRefused(
                    f"token {token!r} holds {self._held[token]} waits, as many as one token may: "
                    "retry once one has answered"
                )
            if sum(self._held.values()) >= self.total:
                raise WaitRefused(f"the listener serves {self.total} waits at once: retry soon")
            self._held[token] += 1
        return Slot(self, token)

    def held(self, token: str) -> int:
        with self._mutex:
            return self._held[token]

    def _give_back(self, token: str) -> None:
        with self._mutex:
            self._held[token] -= 1
            if not self._held[token]:
                del self._held[token]


@dataclass
class Slot:
    """One wait's slot, until it is released (once)."""

    slots: WaitSlots
    token: str
    _released: bool = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.slots._give_back(self.token)
