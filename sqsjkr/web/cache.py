"""One short cache of the dashboard's reads, shared by every request and every open tab.

A value is read once per key while it is fresh; concurrent requests for it wait for that one read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")

#: How long a read serves every page: pages refresh themselves every few seconds.
FRESH_SECONDS = 5.0


class Cache:
    """Values by key, each fresh for its own number of seconds after it was read."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._mutex = threading.Lock()
        self._values: dict[Hashable, tuple[float, Any]] = {}
        self._reading: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, read: Callable[[], T], fresh: float = FRESH_SECONDS) -> T:
        """key's value: read() when none is fresh, once however many ask at the same time."""
        with self._mutex:
            lock = self._reading.setdefault(key, threading.Lock())
        with lock:
            with self._mutex:
                held = self._values.get(key)
            if held is not None and self._clock() < held[0]:
                return held[1]  # type: ignore[no-any-return]
            value = read()
            with self._mutex:
                self._values[key] = (self._clock() + fresh, value)
                self._trim()
            return value

    def peek(self, key: Hashable) -> Any:
        """key's value while fresh, else None; never reads."""
        with self._mutex:
            held = self._values.get(key)
        return held[1] if held is not None and self._clock() < held[0] else None

    def forget(self) -> None:
        """Drop every value: an action changed the fleet, and the next page shows it."""
        with self._mutex:
            self._values.clear()

    def _trim(self) -> None:
        # Run pages and event pages are keyed by what they show: drop what went stale.
        if len(self._values) > 2000:
            now = self._clock()
            for key in [k for k, (until, _) in self._values.items() if until <= now]:
                del self._values[key]
                self._reading.pop(key, None)
