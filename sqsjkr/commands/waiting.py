"""How long the commands that wait for a run wait: `trigger --wait`, `kill --wait` and `history
--follow` take --timeout, and give up with their own exit code when it passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, quote

#: The exit code of a command whose --timeout passed (timeout(1)'s), apart from 0 and 1 (the
#: run's verdict), 2 (a bad command line), 3 (status --check UNKNOWN) and 130 (Ctrl-C).
WAIT_TIMEOUT_EXIT = 124


class WaitTimedOut(click.ClickException):
    """The --timeout of a wait passed before what it waited for: nothing was stopped."""

    exit_code = WAIT_TIMEOUT_EXIT


@dataclass
class Deadline:
    """When a wait gives up; seconds None waits for ever (--timeout 0)."""

    seconds: float | None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
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
                f"gave up waiting for {what} after {self.seconds:g}s (--timeout): {still}"
            )
        self.sleep(min(seconds, left))


def timeout_option(default: str, waits_for: str) -> Callable[[Any], Any]:
    """--timeout DURATION of a command that waits for waits_for, default as given."""
    return click.option(
        "--timeout",
        "timeout",
        default=default,
        show_default=True,
        metavar="DURATION",
        help=f"Give up waiting for {waits_for} after this long (90s, 10m, 2h; 0: never), and "
        f"exit {WAIT_TIMEOUT_EXIT}.",
    )


def timeout_of(text: str) -> float | None:
    """The seconds of a --timeout value (None: no limit); a UsageFailure when it is not a
    duration."""
    try:
        seconds = parse_duration(text.strip(), days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"--timeout {quote(text)}: {exc}") from exc
    if seconds < 0:
        raise UsageFailure(f"--timeout {quote(text)}: a duration of 0 or more")
    return seconds or None
