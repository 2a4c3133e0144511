"""`sqsjkr job MESSAGE_ID`: where one job sent to the queue is now: queued, waiting for its lock,
running on a host, or ended (with its run's record).
"""

from __future__ import annotations

import json

import click

from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.contract.text import escape
from sqsjkr.errors import quote
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.jobs import JobPhase, JobState, job_state
from sqsjkr.fleet.wording import local_time


def state_text(state: JobState) -> str:
    """The job's state in words, on one line."""
    if state.phase is JobPhase.QUEUED:
        return "queued (no daemon has taken it yet)"
    if state.phase is JobPhase.UNKNOWN:
        return "unknown (no daemon has taken it yet, or it is no job of this fleet's table)"
    if state.phase is JobPhase.ENDED:
        if state.record is None:
            return "ended (its record is not kept: the history is off, or past its retention)"
        return f"ended {state.record.outcome.value} at {local_time(state.record.ended_at)}"
    host = f" on {escape(state.host)}" if state.host else ""
    since = "" if state.started_at is None else f" since {local_time(state.started_at)}"
    if state.phase is JobPhase.RUNNING:
        return f"running{host}{since}"
    if state.waiting_for == "retry":
        return "waiting for its retry"
    key = f" {quote(state.waiting_key)}" if state.waiting_key else ""
    return f"waiting for its {state.waiting_for}{key}{host}{since}"


@click.command()
@store_options
@click.argument("message_id")
@click.option(
    "--event-id",
    metavar="ID",
    help="The job's event_id, when known (saves reading every event's summary).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as a JSON object.")
def job(
    where: Where,
    message_id: str,
    event_id: str | None,
    as_json: bool,
) -> int:
    """Show where the job of MESSAGE_ID (as `sqsjkr send` printed it) is now: waiting for its lock
    or concurrency group, running on a host, or ended, with its run's record. Exits 1 when no
    daemon has taken it: still queued, or an id no daemon of this table knows."""
    config = where.config()
    state = job_state(store_of(config), message_id, event_id)
    if as_json:
        click.echo(json.dumps(state.as_json(), indent=2))
        return 1 if state.phase is JobPhase.UNKNOWN else 0
    click.echo(f"message  {escape(state.message_id)}")
    click.echo(f"event    {escape(state.event_id)}")
    click.echo(f"state    {state_text(state)}")
    if state.record is not None:
        click.echo("")
        echo_lines(history_lines([state.record], output=True))
    return 1 if state.phase is JobPhase.UNKNOWN else 0
