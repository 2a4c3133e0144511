"""`sqsjkr kill`: stop a run in progress, on whichever host it runs, by a mark on its claim.

The daemon that holds the claim acts on it at its next heartbeat (docs/semantics.md, "Killing a run").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from sqsjkr.backends.dedupe import claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.kills import KillAnswer, KillResult, request_kill
from sqsjkr.backends.lease import lease_timing
from sqsjkr.commands.audit import Auditor, command_auditor, os_user
from sqsjkr.commands.options import UsageFailure, reason_option
from sqsjkr.commands.store import open_store, store_options
from sqsjkr.commands.tables import history_lines
from sqsjkr.commands.waiting import Deadline, timeout_of, timeout_option
from sqsjkr.contract.run import EventSummary, KillMark, RunOutcome, RunRecord, RunStart
from sqsjkr.errors import quote
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.wording import format_duration, local_time
from sqsjkr.observability.logs import escape

#: How often --wait reads whether the run has ended.
WAIT_POLL_SECONDS = 1.0
#: How many of the event's last runs --wait reads for the killed one's record.
WAIT_RUNS = 20
#: What a --wait that gave up leaves behind.
STILL = "the kill request stays on the run's claim, for its daemon's next heartbeat"


@dataclass(frozen=True)
class Target:
    """A run to kill: its message, and its note in its event's summary (None: none shows it)."""

    message_id: str
    start: RunStart | None = None

    def text(self) -> str:
        start = self.start
        if start is None:
            return f"the run of message {quote(self.message_id)}"
        waits = ""
        if start.waiting_for:
            waits = f", waiting for its {start.waiting_for} {quote(start.waiting_key or '')}"
        return (
            f"the run of event {quote(start.event_id)} (message {quote(start.message_id)}) on "
            f"{escape(start.host)}, started {local_time(start.started_at)}{waits}"
        )


def find_runs(history: DynamoHistory, target: str) -> list[Target]:
    """The runs in progress that target names: every run of the event of that id (its summary's
    notes), or the run of the message of that id. A ClickException (exit 1) when it is an
    event that runs nothing."""
    summary = history.summary(target)
    if summary is not None and summary.running:
        return [Target(start.message_id, start) for start in summary.running]
    if summary is not None:
        raise click.ClickException(nothing_running(summary))
    # A message id: its claim says whether its run is in progress, and a note which event it is.
    for other in history.summaries():
        for start in other.running:
            if start.message_id == target:
                return [Target(target, start)]
    return [Target(target)]


def nothing_running(summary: EventSummary) -> str:
    last = summary.last_run
    ran = "it has not run"
    if last is not None:
        ran = f"its last run {last.outcome.value} at {local_time(last.ended_at)}"
    return f"event {quote(summary.event_id)} has nothing running ({ran}): nothing changed"


def answer_line(target: Target, result: KillResult, beat: float) -> str:
    if result.answer is KillAnswer.MARKED:
        return (
            f"kill requested: {target.text()}; its daemon stops it at its next heartbeat, "
            f"within {format_duration(beat)} (a third of [lock] lease)"
        )
    if result.answer is KillAnswer.ALREADY and result.mark is not None:
        mark = result.mark
        why = f" ({escape(mark.reason)})" if mark.reason else ""
        return (
            f"kill already requested by {escape(mark.by)} at {local_time(mark.at)}{why}: "
            f"{target.text()}; nothing changed"
        )
    return _ended_line(target)


def _ended_line(target: Target) -> str:
    return f"{target.text()} is not in progress (it has ended, or never ran)"


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
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
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
    store = open_store(conf, lock_table, profile, region)
    need_claims(store, conf)
    results = kill_runs(store, command_auditor(store.config), os_user(), target, reason, _warn)
    beat, _ = lease_timing(store.config.lock.lease.seconds)
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
        killed = [wait_for(store, run, deadline) for run in asked]
    return 0 if all(killed) else 1


def need_claims(store: Store, conf: str) -> None:
    """Refused unless the runs' claims are in the table, where a kill marks them."""
    if store.config.dedupe.backend != "dynamodb":
        raise UsageFailure(
            f'kill needs the runs\' claims in the table ([dedupe] backend = "dynamodb"); {conf} '
            f"has {store.config.dedupe.backend!r}"
        )


def kill_runs(
    store: Store,
    audit: Auditor,
    by: str,
    target: str,
    reason: str,
    say: Callable[[str], None],
) -> list[tuple[Target, KillResult]]:
    """Mark the claim of each run of target in progress, audited first: what `kill` and the
    dashboard both do. say hears the runs of target that have ended."""
    with store.reading():
        live = live_runs(store, target, say)
        ids = ", ".join(run.message_id for run in live)
        # Named by event and message whether target was an event_id or a message id.
        events = ", ".join(dict.fromkeys(run.start.event_id for run in live if run.start))
        audit("kill", events or target, reason=reason, detail=f"message {ids}")
        mark = KillMark(by, reason, time.time())
        return [
            (run, request_kill(store.client, store.table, claim_key(run.message_id), mark))
            for run in live
        ]


def _warn(line: str) -> None:
    click.echo(f"sqsjkr: {line}", err=True)


def live_runs(store: Store, target: str, say: Callable[[str], None]) -> list[Target]:
    """The runs of target whose claims are in progress now (say hears those that have ended);
    a ClickException, before anything is written, when there are none."""
    runs = find_runs(store.history, target)
    live = [run for run in runs if _in_progress(store.client.get_item(**_claim(store, run)))]
    if not live and len(runs) == 1:
        raise click.ClickException(f"{_ended_line(runs[0])}: nothing changed")
    for run in runs:
        if run not in live:
            say(_ended_line(run))
    if not live:
        raise click.ClickException(f"no run of {quote(target)} is in progress: nothing changed")
    return live


def wait_for(store: Store, run: Target, deadline: Deadline) -> bool:
    """Wait until run has ended, say how: True if the kill ended it. WaitTimedOut once the
    deadline has passed."""
    what = f"the end of {run.text()}"
    if run.start is None:
        # No note says which event it is: only its claim tells that it has ended.
        while _in_progress(store.client.get_item(**_claim(store, run))):
            deadline.pause(WAIT_POLL_SECONDS, what, STILL)
        click.echo(
            f"{run.text()} has ended: its record is under its event in `sqsjkr history`",
        )
        return True
    record = None
    while record is None:
        record = _record(store.history, run.start)
        if record is None:
            deadline.pause(WAIT_POLL_SECONDS, what, STILL)
    for line in history_lines([record], output=False, events=True):
        click.echo(line)
    if record.outcome is RunOutcome.KILLED:
        click.echo(escape(record.error or "killed"))
        return True
    after = ""
    if not record.final:
        after = "; its next run will not start: it ends killed when its message comes back"
    click.echo(f"ended on its own ({record.outcome.value}) before the kill reached it{after}")
    return False


def _record(history: DynamoHistory, start: RunStart) -> RunRecord | None:
    """The record of start's run (or of a later run of its message), once written."""
    for record in history.runs(start.event_id, WAIT_RUNS):
        if record.message_id == start.message_id and record.attempt >= start.attempt:
            return record
    return None


def _claim(store: Store, run: Target) -> dict[str, Any]:
    return {
        "TableName": store.table,
        "Key": claim_key(run.message_id),
        "ConsistentRead": True,
    }


def _in_progress(response: dict[str, Any]) -> bool:
    return "LeaseUntil" in response.get("Item", {})
