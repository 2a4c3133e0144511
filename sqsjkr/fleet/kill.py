"""Killing a run in progress, on whichever host runs it, by a mark on its claim; and the wait for
that run to end. The daemon that holds the claim acts at its next heartbeat (docs/semantics.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.dedupe import claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.kills import KillAnswer as KillAnswer
from sqsjkr.backends.kills import KillResult, request_kill
from sqsjkr.backends.lease import lease_timing
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary, KillMark, RunRecord, RunStart
from sqsjkr.errors import NothingToDo, RequestError, quote
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.fleet.wording import format_duration, local_time
from sqsjkr.observability.logs import escape

#: How often a wait reads whether the run has ended.
WAIT_POLL_SECONDS = 1.0
#: How many of the event's last runs a wait reads for the killed one's record.
WAIT_RUNS = 20
#: What a wait that gave up leaves behind.
STILL = "the kill request stays on the run's claim, for its daemon's next heartbeat"


def heartbeat_seconds(config: Config) -> float:
    """How often the daemon that holds a run reads its claim's kill mark: a third of [lock] lease."""
    beat, _ = lease_timing(config.lock.lease.seconds)
    return beat


@dataclass(frozen=True)
class Target:
    """A run to kill: its message, and its note in its event's summary (None: none shows it)."""

    message_id: str
    start: RunStart | None = None

    @property
    def claim_item(self) -> str:
        """The Id of its claim: a firing's key when its note says so, else its message id."""
        return self.message_id if self.start is None else self.start.claim_item

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
    notes), or the run of the message of that id. NothingToDo when it is an event that runs
    nothing."""
    summary = history.summary(target)
    if summary is not None and summary.running:
        return [Target(start.message_id, start) for start in summary.running]
    if summary is not None:
        raise NothingToDo(nothing_running(summary))
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
    """What a kill request of target did, on one line: what both faces say."""
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
    return ended_line(target)


def ended_line(target: Target) -> str:
    return f"{target.text()} is not in progress (it has ended, or never ran)"


def need_claims(store: Store, conf: str) -> None:
    """RequestError unless the runs' claims are in the table, where a kill marks them; conf
    names the config as the face knows it."""
    if store.config.dedupe.backend != "dynamodb":
        raise RequestError(
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
    """Mark the claim of each run of target in progress, audited first. say hears the runs of
    target that have ended; NothingToDo, before anything is written, when none is in progress."""
    with store.reading():
        live = live_runs(store, target, say)
        ids = ", ".join(run.message_id for run in live)
        # Named by event and message whether target was an event_id or a message id.
        events = ", ".join(dict.fromkeys(run.start.event_id for run in live if run.start))
        audit("kill", events or target, reason=reason, detail=f"message {ids}")
        mark = KillMark(by, reason, time.time())
        return [
            (run, request_kill(store.client, store.table, claim_key(run.claim_item), mark))
            for run in live
        ]


def live_runs(store: Store, target: str, say: Callable[[str], None]) -> list[Target]:
    """The runs of target whose claims are in progress now (say hears those that have ended);
    NothingToDo when there are none."""
    runs = find_runs(store.history, target)
    live = [run for run in runs if in_progress(store, run)]
    if not live and len(runs) == 1:
        raise NothingToDo(f"{ended_line(runs[0])}: nothing changed")
    for run in runs:
        if run not in live:
            say(ended_line(run))
    if not live:
        raise NothingToDo(f"no run of {quote(target)} is in progress: nothing changed")
    return live


def wait_ended(store: Store, run: Target, deadline: Deadline) -> RunRecord | None:
    """Wait until run has ended; its record, or None for a run that no note names (its record
    is under its event). WaitTimedOut once the deadline has passed."""
    what = f"the end of {run.text()}"
    if run.start is None:
        # No note says which event it is: only its claim tells that it has ended.
        while in_progress(store, run):
            deadline.pause(WAIT_POLL_SECONDS, what, STILL)
        return None
    record = None
    while record is None:
        record = _record(store.history, run.start)
        if record is None:
            deadline.pause(WAIT_POLL_SECONDS, what, STILL)
    return record


def _record(history: DynamoHistory, start: RunStart) -> RunRecord | None:
    """The record of start's run (or of a later run of its message), once written."""
    for record in history.runs(start.event_id, WAIT_RUNS):
        if record.message_id == start.message_id and record.attempt >= start.attempt:
            return record
    return None


def in_progress(store: Store, run: Target) -> bool:
    """Whether run's claim is held: its lease is in the table."""
    key: dict[str, Any] = {
        "TableName": store.table,
        "Key": claim_key(run.claim_item),
        "ConsistentRead": True,
    }
    return "LeaseUntil" in store.client.get_item(**key).get("Item", {})
