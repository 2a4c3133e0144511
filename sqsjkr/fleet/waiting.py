"""How long a wait for the fleet waits: a Deadline that sleeps between polls and, once it has
passed, raises WaitTimedOut naming what was waited for and what goes on all the same.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from sqsjkr.errors import RequestError, WaitTimedOut


@dataclass
class Deadline:
    """When a wait gives up; seconds None waits for ever (RequestError for a negative or nan
    one). named: the limit's name in the WaitTimedOut, the commands' --wait-timeout by default.
    clock and sleep are for tests."""

    seconds: float | None
    named: str = "--wait-timeout"
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        if self.seconds is not None and not self.seconds >= 0:  # nan compares false
            raise RequestError(
                f"a wait's timeout must be 0 or more seconds, or None for no limit, not {self.seconds!r}"
            )
        self._ends = None if self.seconds is None else self.clock() + self.seconds

    def pause(self, seconds: float, what: str, still: str) -> None:
        """Sleep seconds, but not past the deadline; WaitTimedOut once it has passed, naming what
        was waited for and what goes on all the same (still)."""
        if self._ends is None:
            self.sleep(seconds)
            return
        left = self._ends - self.clock()
        if left <= 0:
            assert self.seconds is not None
            raise WaitTimedOut(
                f"gave up waiting for {what} after {self.seconds:g}s ({self.named}): {still}"
            )
        self.sleep(min(seconds, left))
