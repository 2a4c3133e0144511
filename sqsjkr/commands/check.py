"""`sqsjkr check`: a preflight for deploy pipelines: the config, credentials, queue, table and permissions.

The checks are the fleet layer's (sqsjkr/fleet/preflight*.py); the command prints one line per result and a summary.
"""

from __future__ import annotations

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.store import Where, store_options
from sqsjkr.fleet.preflight import config_warnings, run_checks
from sqsjkr.fleet.preflight_results import Level, Result, fail, ok, warn


def result_line(result: Result) -> str:
    """One result as its line: the level, padded to a column, the subject and the text."""
    return f"{result.level.value:<4} {result.subject}: {result.text}"


def summary(results: list[Result]) -> str:
    counts = {level: sum(r.level is level for r in results) for level in Level}
    return ", ".join(f"{counts[level]} {level.value}" for level in Level)


@click.command()
@store_options
def check(where: Where) -> int:
    """Preflight for a deploy: config, credentials, queue, table and the daemon's permissions.

    One line per check, OK, WARN or FAIL; exit 0 with no FAIL, 1 with any, 2 for a bad config.
    """
    results: list[Result] = []

    def show(result: Result) -> None:
        results.append(result)
        click.echo(result_line(result))

    with config_warnings() as warnings:
        try:
            config = where.config()
        except UsageFailure as exc:
            show(fail("config", exc.format_message()))
            click.echo(summary(results))
            return 2
    show(ok("config", where.conf))
    for message in warnings:
        show(warn("config", message))
    for result in run_checks(config):
        show(result)
    click.echo(summary(results))
    return 1 if any(r.level is Level.FAIL for r in results) else 0
