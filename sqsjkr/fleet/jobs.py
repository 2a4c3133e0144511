"""One job on the queue, followed by its message id: its handle, its state, and the wait for its run.

The state is read as `kill` and `trigger --wait` read runs: the job's claim, its note in its event's summary, its records.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.backends.dedupe import CLAIMED_AS, EVENT_ID, claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.errors import RequestError, ResourceMissingError, WaitTimedOut, quote
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.trigger import WAIT_POLL_SECONDS, wait_for_run
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.fleet.wording import local_time

#: How many of an event's last runs are read for a job's final record.
RECORD_RUNS = 20


class JobPhase(enum.Enum):
    """Where a job is on its way: sent, taken and waiting, running, or ended."""

    QUEUED = "queued"  # on the queue (or in flight to a daemon), not taken yet
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

    def as_json(self) -> dict[str, object]:
        """`job --json`'s object."""
        return {
            "message_id": self.message_id,
            "event_id": self.event_id,
            "state": self.phase.value,
            "host": self.host,
            "started_at": None if self.started_at is None else local_time(self.started_at),
            "waiting_for": self.waiting_for,
            "waiting_key": self.waiting_key,
            "outcome": None if self.outcome is None else self.outcome.value,
            "record": None if self.record is None else record_json(self.record, output=True),
        }


@dataclass(frozen=True)
class JobHandle:
    """A job put on a queue: what a send returns at once, to read its state or wait for its run."""

    message_id: str
    event_id: str
    queue: str
    store: Store = field(repr=False, compare=False)
    #: False for a handle made from a message id alone whose job no daemon had taken yet: its
    #: event is learnt from the job's state while waiting.
    event_known: bool = field(default=True, compare=False)

    def state(self) -> JobState:
        """Where the job is now (a few reads of the table)."""
        return job_state(self.store, self.message_id, self.event_id)

    def wait(self, timeout: float | None = 3600.0) -> RunRecord:
        """The final record of the job's run, once it has ended (retries included);
        WaitTimedOut after timeout seconds (None: wait for ever). The job is never stopped."""
        if self.store.config.history.backend == "none":
            raise ResourceMissingError(
                'waiting for a run reads the run history, which is off ([history] backend = "none")'
            )
        deadline = Deadline(timeout)
        try:
            event_id = self.event_id if self.event_known else self._event(deadline)
            # A run that ends but runs again (a retry, a stopped daemon) is no answer yet.
            return wait_for_run(self.store, event_id, self.message_id, deadline, lambda _: None)
        except WaitTimedOut as exc:
            raise WaitTimedOut(
                f"gave up waiting for the run of message {quote(self.message_id)} after "
                f"{timeout:g}s: it stays queued or runs"
            ) from exc

    def _event(self, deadline: Deadline) -> str:
        """The job's event, once a daemon has taken it (its claim names it)."""
        while True:
            state = job_state(self.store, self.message_id)
            if state.phase is not JobPhase.QUEUED:
                return state.event_id
            deadline.pause(
                WAIT_POLL_SECONDS,
                f"the run of message {self.message_id}",
                "no daemon has taken it yet",
            )


#: The longest message id looked up: SQS's are UUIDs, and DynamoDB keys stop at 2,048 bytes.
MAX_MESSAGE_ID = 128


def job_state(store: Store, message_id: str, event_id: str | None = None) -> JobState:
    """The state of the job of message_id. event_id: its event, when known; without it, its
    claim names it (or else the events' summaries), else it is a job sent without one (its
    message id). RequestError for what cannot be a message id."""
    if not message_id.strip() or len(message_id) > MAX_MESSAGE_ID or not message_id.isprintable():
        raise RequestError(
            f"{quote(message_id)} is not a message id (as `sqsjkr send` prints it: "
            "SQS's are like 0b5e7c2a-3f1d-4a8e-9c6b-2d4f8a1e7c3b)"
        )
    with store.reading():
        claim = _claim(store, message_id)
        if event_id is None and claim is not None and EVENT_ID in claim:
            event_id = claim[EVENT_ID]["S"]
        if claim is not None and CLAIMED_AS in claim:
            # The message's mark: its claim is its firing's.
            claim = _claim(store, claim[CLAIMED_AS]["S"])
        note, event_id = _note(store.history, message_id, event_id)
        if note is not None:
            return _from_note(note)
        if claim is not None:
            return _from_claim(store.history, message_id, event_id, claim)
        # No claim: not taken yet; or a run only its record shows: with dedupe off, or a
        # firing's run (its claim is the firing's key) or duplicate.
        record = final_record(store.history, event_id, message_id)
        if record is not None:
            return JobState(message_id, event_id, JobPhase.ENDED, record=record)
        return JobState(message_id, event_id, JobPhase.QUEUED)


def _claim(store: Store, claim_id: str) -> dict[str, Any] | None:
    item = store.client.get_item(
        TableName=store.table, Key=claim_key(claim_id), ConsistentRead=True
    ).get("Item")
    return None if item is None else dict(item)


def _note(
    history: DynamoHistory, message_id: str, event_id: str | None
) -> tuple[RunStart | None, str]:
    """The job's note in its event's summary (running or waiting), and its event's id."""
    summaries = [history.summary(event_id)] if event_id is not None else history.summaries()
    for summary in summaries:
        if summary is None:
            continue
        for start in summary.running:
            if start.message_id == message_id:
                return start, start.event_id
        if summary.last_run is not None and summary.last_run.message_id == message_id:
            event_id = summary.event_id
    return None, event_id if event_id is not None else message_id


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


def _from_claim(
    history: DynamoHistory, message_id: str, event_id: str, claim: dict[str, Any]
) -> JobState:
    """A claim with no note (the history is off, or the note is not written yet): its lease
    says running, its RetryAt waiting for a retry, neither that the job has ended."""
    if "LeaseUntil" in claim:
        # The owner is host:pid:random (backends/lease.py).
        host = claim.get("Owner", {}).get("S", "").rsplit(":", 2)[0] or None
        return JobState(message_id, event_id, JobPhase.RUNNING, host=host)
    if "RetryAt" in claim:
        return JobState(message_id, event_id, JobPhase.WAITING, waiting_for="retry")
    record = final_record(history, event_id, message_id)
    return JobState(message_id, event_id, JobPhase.ENDED, record=record)


def final_record(history: DynamoHistory, event_id: str, message_id: str) -> RunRecord | None:
    """The final record of the message's run among its event's last runs, or None."""
    for record in history.runs(event_id, RECORD_RUNS):
        if record.message_id == message_id and record.final:
            return record
    return None
