"""One job on the queue, followed by its message id: its handle, its state, and the wait for its run.

The state is read as `kill` and `trigger --wait` read runs: the job's claim, its note in its event's summary, its records.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.backends.dedupe import CLAIMED_AS, EVENT_ID, claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart
from sqsjkr.errors import RequestError, ResourceMissingError, WaitTimedOut, quote
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.waiting import Deadline

#: How many of an event's last runs are read for a job's final record.
RECORD_RUNS = 20
#: The shape of every id SQS gives a message: a UUID. An id of another shape was never a
#: message's, so no queue can hold it.
_SQS_MESSAGE_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE
)


class JobPhase(enum.Enum):
    """Where a job is on its way: sent, taken and waiting, running, or ended."""

    QUEUED = "queued"  # on the queue (or in flight to a daemon), not taken yet
    #: No trace of it in the table (no claim, no note, no record) for an id not known to be
    #: sent: not taken yet, or no job of this fleet (a mistyped id, one past retention).
    UNKNOWN = "unknown"
    WAITING = "waiting"  # taken, waiting for its lock, its concurrency group's slot or its retry
    RUNNING = "running"
    ENDED = "ended"


@dataclass(frozen=True)
class JobState:
    """What one job is doing now, as its claim, its event's summary and its records say."""

    message_id: str
    event_id: str
    phase: JobPhase
    #: RUNNING and WAITING: the daemon's host holding it (None while waiting for a retry).
    host: str | None = None
    started_at: float | None = None
    #: WAITING: what for ("lock", "concurrency group" or "retry") and its lock_id or key.
    waiting_for: str | None = None
    waiting_key: str | None = None
    #: ENDED: its final record; None when the history is off or no longer keeps it.
    record: RunRecord | None = None

    @property
    def outcome(self) -> RunOutcome | None:
        """ENDED: how its run ended, when its record is kept."""
        return None if self.record is None else self.record.outcome

    @property
    def ended(self) -> bool:
        return self.phase is JobPhase.ENDED

    @property
    def may_be_queued(self) -> bool:
        """False when the job is known to be on no queue: no daemon left a trace of it (UNKNOWN)
        and its id is not one SQS gives (a mistyped or made-up id). An UNKNOWN job with an id
        of SQS's shape may still wait on its queue, not taken yet."""
        if self.phase is not JobPhase.UNKNOWN:
            return self.phase is JobPhase.QUEUED
        return of_sqs_shape(self.message_id)

    def as_json(self) -> dict[str, object]:
        """`job --json`'s object: its times unix seconds, as its record's and history --json's."""
        return {
            "message_id": self.message_id,
            "event_id": self.event_id,
            "state": self.phase.value,
            "host": self.host,
            "started_at": self.started_at,
            "waiting_for": self.waiting_for,
            "waiting_key": self.waiting_key,
            "outcome": None if self.outcome is None else self.outcome.value,
            "record": None if self.record is None else record_json(self.record, output=True),
        }


def of_sqs_shape(message_id: str) -> bool:
    """Whether message_id could be one SQS gave a message (a UUID)."""
    return _SQS_MESSAGE_ID.fullmatch(message_id) is not None


@dataclass(frozen=True)
class JobHandle:
    """A job put on a queue: what a send returns at once, to read its state or wait for its run."""

    message_id: str
    event_id: str
    queue: str
    store: Store = field(repr=False, compare=False)
    #: A send with unique_for that found the same job unfinished, and sent nothing: this is
    #: that earlier job's handle.
    deduplicated: bool = field(default=False, compare=False)
    #: False for Fleet.handle of a job no daemon had taken (its event not known): event_id is
    #: then a guess (the message id), and the wait finds its event once a daemon takes it.
    event_known: bool = field(default=True, repr=False, compare=False)

    def state(self) -> JobState:
        """Where the job is now (a few reads of the table)."""
        event_id = self.event_id if self.event_known else None
        return job_state(self.store, self.message_id, event_id, sent=True)

    def wait(self, timeout: float | None = 3600.0) -> RunRecord:
        """The final record of the job's run, once it has ended (retries included);
        WaitTimedOut after timeout seconds (None: wait for ever). The job is never stopped."""
        if self.store.config.history.backend == "none":
            raise ResourceMissingError(
                'waiting for a run reads the run history, which is off ([history] backend = "none")'
            )
        # Here, not at the top: fleet.trigger brings the crontab parser, croniter and the
        # pipelines, which a command that sends without waiting never needs.
        from sqsjkr.fleet.trigger import wait_for_run

        deadline = Deadline(timeout, named="timeout")
        try:
            event_id = self.event_id if self.event_known else self._event(deadline)
            if isinstance(event_id, RunRecord):
                return event_id
            # A run that ends but runs again (a retry, a stopped daemon) is no answer yet.
            return wait_for_run(self.store, event_id, self.message_id, deadline, lambda _: None)
        except WaitTimedOut as exc:
            raise WaitTimedOut(
                f"gave up waiting for the run of message {quote(self.message_id)} after "
                f"{timeout:g}s: it stays queued or runs"
            ) from exc

    def _event(self, deadline: Deadline) -> str | RunRecord:
        """The job's event, once its state names it; or its final record, found first."""
        from sqsjkr.fleet.trigger import WAIT_POLL_SECONDS

        while True:
            state = job_state(self.store, self.message_id, None, sent=True)
            if state.ended and state.record is not None:
                return state.record
            if state.event_id != self.message_id or state.phase is not JobPhase.QUEUED:
                return state.event_id
            deadline.pause(
                WAIT_POLL_SECONDS, f"the run of message {self.message_id}", "it stays queued"
            )


def job_state(
    store: Store, message_id: str, event_id: str | None = None, *, sent: bool = False
) -> JobState:
    """The state of the job of message_id. event_id: its event, when known; without it, the
    events' summaries, then their last runs, tell which it is, else it is a job sent without
    one (its message id). sent: the id is known to be a sent job's, so that no trace of it
    means QUEUED, not UNKNOWN. RequestError for an empty id."""
    if not message_id:
        raise RequestError("a message id is needed (as `sqsjkr send` printed it), not an empty one")
    with store.reading():
        claim = _claim(store, message_id)
        if event_id is None and claim is not None and EVENT_ID in claim:
            event_id = claim[EVENT_ID]["S"]  # its claim names its event: one read, no scan
        if claim is not None and CLAIMED_AS in claim:
            # The message's mark: its claim is its firing's.
            claim = _claim(store, claim[CLAIMED_AS]["S"])
        note, found, summaries = _note(store.history, message_id, event_id)
        if note is not None:
            return _from_note(note)
        if claim is not None and ("LeaseUntil" in claim or "RetryAt" in claim):
            return _from_claim(message_id, found, claim)
        # A finished claim; or none: not taken yet, or a run only its record shows (with dedupe
        # off, a firing's run, a duplicate).
        record = _record(store.history, message_id, found, summaries, known=event_id is not None)
        if record is not None:
            return JobState(message_id, record.event_id, JobPhase.ENDED, record=record)
        if claim is not None:
            return JobState(message_id, found, JobPhase.ENDED)
        return JobState(message_id, found, JobPhase.QUEUED if sent else JobPhase.UNKNOWN)


def _claim(store: Store, claim_id: str) -> dict[str, Any] | None:
    item = store.client.get_item(
        TableName=store.table, Key=claim_key(claim_id), ConsistentRead=True
    ).get("Item")
    return None if item is None else dict(item)


def _note(
    history: DynamoHistory, message_id: str, event_id: str | None
) -> tuple[RunStart | None, str, list[EventSummary]]:
    """The job's note in its event's summary (running or waiting), its event's id (the message
    id when no summary names it), and the summaries read (none when event_id was given)."""
    if event_id is not None:
        summary = history.summary(event_id)
        summaries = []
        found: list[EventSummary] = [] if summary is None else [summary]
    else:
        summaries = found = history.summaries()
    for summary in found:
        for start in summary.running:
            if start.message_id == message_id:
                return start, start.event_id, summaries
        if summary.last_run is not None and summary.last_run.message_id == message_id:
            event_id = summary.event_id
    return None, event_id if event_id is not None else message_id, summaries


def _record(
    history: DynamoHistory,
    message_id: str,
    event_id: str,
    summaries: list[EventSummary],
    *,
    known: bool,
) -> RunRecord | None:
    """The job's final record: among event_id's last runs; when its event was not given, and
    no summary names it as its last run, among every event's (a few reads each)."""
    record = final_record(history, event_id, message_id)
    if record is not None or known:
        return record
    for summary in summaries:
        if summary.event_id != event_id:
            record = final_record(history, summary.event_id, message_id)
            if record is not None:
                return record
    return None


def _from_note(start: RunStart) -> JobState:
    phase = JobPhase.WAITING if start.waiting_for else JobPhase.RUNNING
    return JobState(
        start.message_id,
        start.event_id,
        phase,
        host=start.host,
        started_at=start.started_at,
        waiting_for=start.waiting_for,
        waiting_key=start.waiting_key,
    )


def _from_claim(message_id: str, event_id: str, claim: dict[str, Any]) -> JobState:
    """A live claim with no note (the history is off, or the note is not written yet): its
    lease says running, its RetryAt waiting for a retry."""
    if "LeaseUntil" in claim:
        # The owner is host:pid:random (backends/lease.py).
        host = claim.get("Owner", {}).get("S", "").rsplit(":", 2)[0] or None
        return JobState(message_id, event_id, JobPhase.RUNNING, host=host)
    return JobState(message_id, event_id, JobPhase.WAITING, waiting_for="retry")


def final_record(history: DynamoHistory, event_id: str, message_id: str) -> RunRecord | None:
    """The final record of the message's run among its event's last runs, or None."""
    for record in history.runs(event_id, RECORD_RUNS):
        if record.message_id == message_id and record.final:
            return record
    return None
