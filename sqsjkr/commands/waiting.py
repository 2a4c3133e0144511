"""The --wait-timeout of the commands that wait for a run (`send --wait`, `trigger --wait`, `kill
--wait`, `history --follow`, `pipeline --wait`): the option, its value, and the exit code past it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, quote

#: The one name of the wait limit on every waiting command (`send`'s --timeout is its job's own).
WAIT_OPTION = "--wait-timeout"
#: The exit code of a command whose --wait-timeout passed (timeout(1)'s), apart from 0 and 1 (the
#: run's verdict), 2 (a bad command line), 3 (status --check UNKNOWN) and 130 (Ctrl-C).
WAIT_TIMEOUT_EXIT = 124


class _FirstNameOnly(click.Option):
    """An option whose help shows its first name only: the others are kept for old scripts."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        names, self.opts = self.opts, self.opts[:1]
        try:
            return super().get_help_record(ctx)
        finally:
            self.opts = names


def timeout_option(default: str, waits_for: str) -> Callable[[Any], Any]:
    """--wait-timeout DURATION of a command that waits for waits_for, default as given; the
    --timeout it had before still works, unlisted."""
    return click.option(
        WAIT_OPTION,
        "--timeout",
        "timeout",
        cls=_FirstNameOnly,
        default=default,
        show_default=True,
        metavar="DURATION",
        help=f"Give up waiting for {waits_for} after this long (90s, 10m, 2h; 0: never), and "
        f"exit {WAIT_TIMEOUT_EXIT}.",
    )


def timeout_of(text: str) -> float | None:
    """The seconds of a --wait-timeout value (None: no limit); a UsageFailure when it is not a
    duration."""
    return duration_seconds(WAIT_OPTION, text) or None


def duration_seconds(option: str, text: str) -> float:
    """The seconds of a duration option (90s, 10m, 2h, 1d); a UsageFailure when it is not one."""
    try:
        seconds = parse_duration(text.strip(), days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"{option} {quote(text)}: {exc}") from exc
    if seconds < 0:
        raise UsageFailure(f"{option} {quote(text)}: a duration of 0 or more")
    return seconds
