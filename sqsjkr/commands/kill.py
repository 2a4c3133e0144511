"""`sqsjkr kill`: stop a run in progress, on whichever host it runs, by a mark on its claim.

The daemon that holds the claim acts on it at its next heartbeat (docs/semantics.md, "Killing a run").
"""

from __future__ import annotations

import click

from sqsjkr.commands.options import reason_option
from sqsjkr.commands.store import Where, auditor, store_options
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.commands.waiting import timeout_of, timeout_option
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.contract.text import escape
from sqsjkr.errors import quote
from sqsjkr.fleet.audit import os_user
from sqsjkr.fleet.kill import (
    KillAnswer,
    Target,
    answer_line,
    heartbeat_seconds,
    kill_runs,
    need_claims,
    wait_ended,
)
from sqsjkr.fleet.waiting import Deadline


@click.command()
@store_options
@click.argument("target", metavar="EVENT_ID|MESSAGE_ID")
@reason_option
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until the run has ended, print its record, and exit 0 only if the kill ended it.",
)
@timeout_option("10m", "the run's end (--wait)")
def kill(
    where: Where,
    target: str,
    reason: str,
    wait: bool,
    timeout: str,
) -> int:
    """Stop the run of EVENT_ID in progress (every one of them, if several run), or the run of
    MESSAGE_ID, on whichever host runs it.

    The kill is a mark on the run's claim: the daemon that holds it sees it at its next
    heartbeat (within a third of [lock] lease), stops the job's process group (SIGTERM, then
    SIGKILL after kill_grace) or abandons its HTTP call, and records the outcome `killed`: final,
    never retried. A job still waiting for its lock or group slot ends killed without running.
    Exit 1, changing nothing, when nothing of TARGET is in progress.
    """
    limit = timeout_of(timeout)
    store = where.store()
    need_claims(store, where.conf)
    results = kill_runs(store, auditor(store), os_user(), target, reason, _warn)
    beat = heartbeat_seconds(store.config)
    for run, result in results:
        if result.answer is KillAnswer.ENDED:
            click.echo(f"sqsjkr: {answer_line(run, result, beat)}", err=True)
        else:
            click.echo(answer_line(run, result, beat))
    asked = [run for run, result in results if result.answer is not KillAnswer.ENDED]
    if not asked:
        raise click.ClickException(f"no run of {quote(target)} is in progress: nothing changed")
    if not wait:
        return 0
    click.echo("sqsjkr: waiting for it to end (Ctrl-C stops the wait, not the kill)", err=True)
    deadline = Deadline(limit)
    with store.reading():
        killed = [_show_end(run, wait_ended(store, run, deadline)) for run in asked]
    return 0 if all(killed) else 1


def _warn(line: str) -> None:
    click.echo(f"sqsjkr: {line}", err=True)


def _show_end(run: Target, record: RunRecord | None) -> bool:
    """Say how run ended (record, or None when no note named it): True if the kill ended it."""
    if record is None:
        click.echo(f"{run.text()} has ended: its record is under its event in `sqsjkr history`")
        return True
    echo_lines(history_lines([record], output=False, events=True))
    if record.outcome is RunOutcome.KILLED:
        click.echo(escape(record.error or "killed"))
        return True
    after = ""
    if not record.final:
        after = "; its next run will not start: it ends killed when its message comes back"
    click.echo(f"ended on its own ({record.outcome.value}) before the kill reached it{after}")
    return False
