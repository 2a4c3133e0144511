"""The --timeout of the commands that wait for a run (`trigger --wait`, `kill --wait`, `history
--follow`): the option, its value, and the exit code when it passes (sqsjkr.fleet.waiting waits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, quote

#: The exit code of a command whose --timeout passed (timeout(1)'s), apart from 0 and 1 (the
#: run's verdict), 2 (a bad command line), 3 (status --check UNKNOWN) and 130 (Ctrl-C).
WAIT_TIMEOUT_EXIT = 124


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
    return duration_seconds("--timeout", text) or None


def duration_seconds(option: str, text: str) -> float:
    """The seconds of a duration option (90s, 10m, 2h, 1d); a UsageFailure when it is not one."""
    try:
        seconds = parse_duration(text.strip(), days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"{option} {quote(text)}: {exc}") from exc
    if seconds < 0:
        raise UsageFailure(f"{option} {quote(text)}: a duration of 0 or more")
    return seconds
