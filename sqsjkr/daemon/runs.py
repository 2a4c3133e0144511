"""One run as the worker learns it, from claim to end, and the record it leaves.

RunProgress gathers the times and the result; Ending is how the worker's path ended.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, replace
from typing import Protocol

from sqsjkr import __version__
from sqsjkr.backends.dedupe import Retry
from sqsjkr.backends.sqs import Message, trigger_note
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.job import Job
from sqsjkr.contract.run import KillMark, RunContext, RunOutcome, RunRecord, RunStart
from sqsjkr.daemon.runner import RunResult
from sqsjkr.observability.logs import shorten_command
from sqsjkr.observability.stats import Outcome

#: Longest command a run record (and a report) keeps.
MAX_RECORDED_COMMAND = 4096


@dataclass(frozen=True)
class Settle:
    """What becomes of a job's message once the worker is done with it."""

    delete: bool = False  # the job finished (succeeded, errored or cancelled)
    visible_in: int | None = None  # make the message visible again in this many seconds
    #: The dedupe store or the host failed: receiving pauses a while, as more would fail too.
    pause_intake: bool = False
    #: The message is no job to run (a step its run did not send): taken off the queue as an
    #: invalid message is, to the dead-letter queue when there is one, for this reason.
    reject: str | None = None

    @property
    def removed(self) -> bool:
        """Whether the message leaves the queue (deleted, or moved to the dead-letter queue)."""
        return self.delete or self.reject is not None

    # Neither delete nor visible_in: leave the message to reappear when its visibility ends.


DELETE = Settle(delete=True)
GIVE_BACK = Settle(visible_in=0)
LEAVE = Settle()
PAUSE = Settle(pause_intake=True)


@dataclass(frozen=True)
class Ending:
    """How one job's path ended: its message, its counters, and what its run record says."""

    settle: Settle
    counts: tuple[Outcome, ...] = ()
    run: RunOutcome | None = None  # None: no run to record (a duplicate; a claim not ours)
    error: str | None = None  # why it did not run, when it did not
    retry: Retry | None = None  # the run failed with retries left: the next one, and when
    #: The run is the job's last though its message is not deleted: SQS dead-letters it
    #: before its retry can run (the queue's maxReceiveCount).
    last: bool = False


def killed(mark: KillMark | None) -> Ending:
    """The end of a run that `sqsjkr kill` stopped, or kept from starting: final (its message
    deleted) and never retried. Not the command's own failure: counted failed, not errored."""
    why = mark.describe() if mark is not None else "killed"
    return Ending(DELETE, (Outcome.FAILED,), RunOutcome.KILLED, why)


class RunListener(Protocol):
    """Told of runs as they start and end, off the job's path (reporters)."""

    def notice(self, start: RunStart) -> None: ...

    def report(self, record: RunRecord) -> None: ...

    def fired(self, event_id: str, firing: Firing) -> None:
        """A final run of the message of a schedule's firing has ended (after report)."""


class NoListener:
    def notice(self, start: RunStart) -> None:
        return None

    def report(self, record: RunRecord) -> None:
        return None

    def fired(self, event_id: str, firing: Firing) -> None:
        return None


class Listeners:
    """Several listeners as one, told in order."""

    def __init__(self, *listeners: RunListener) -> None:
        self._listeners = listeners

    def notice(self, start: RunStart) -> None:
        for listener in self._listeners:
            listener.notice(start)

    def report(self, record: RunRecord) -> None:
        for listener in self._listeners:
            listener.report(record)

    def fired(self, event_id: str, firing: Firing) -> None:
        for listener in self._listeners:
            listener.fired(event_id, firing)


#: This host's name, as records and reports give it.
HOST = socket.gethostname()


@dataclass
class RunProgress:
    """What the worker learns of one run as it goes: set by one worker thread only."""

    job: Job
    message: Message
    claimed_at: float
    owner: str = ""  # the owner id of the job's claim, once claimed
    attempt: int = 1
    lock_wait: float = 0.0
    started_at: float | None = None
    result: RunResult | None = field(default=None, repr=False)
    #: What the run waits for, as its note shows it: (kind, key, the holder's owner).
    waiting: tuple[str, str, str | None] | None = None

    @property
    def command(self) -> str:
        return shorten_command(self.job.what, MAX_RECORDED_COMMAND)

    @property
    def claim_id(self) -> str:
        """The Id of the job's claim: its firing's key, which every message of one firing
        shares so that it runs once in the fleet, else its message id."""
        firing, pipeline = self.job.firing, self.job.pipeline
        if pipeline is not None and not pipeline.is_root:
            # One claim per step of each run of its pipeline: two copies of a step's message
            # (two parents that ended at once, a redelivery) run it once.
            return pipeline.claim_key(self.job.rerun)
        return self.job.message_id if firing is None else firing.claim_key

    def claimed(self, owner: str, attempt: int | None) -> None:
        self.owner = owner
        # A store that does not count runs: SQS's count of deliveries stands in for it.
        self.attempt = attempt if attempt is not None else self.message.receive_count

    def note(self) -> RunStart:
        """The run as its event's summary shows it in progress, from its claim on: waiting for
        a lock or a group's slot, if it is."""
        start = self._start(self.claimed_at)
        if self.waiting is None:
            return start
        kind, key, holder = self.waiting
        return replace(start, waiting_for=kind, waiting_key=key, held_by=holder)

    def start(self, now: float) -> RunStart:
        """The command starts now: what noticers are told."""
        self.started_at = now
        return self._start(now)

    def context(self) -> RunContext:
        job = self.job
        return RunContext(job.event_id, job.message_id, job.sent_at, self.attempt, HOST)

    def _start(self, at: float) -> RunStart:
        return RunStart(
            event_id=self.job.event_id,
            message_id=self.job.message_id,
            host=HOST,
            owner=self.owner or f"{HOST}:{os.getpid()}",
            started_at=at,
            sent_at=self.job.sent_at,
            command=self.command,
            lock_id=self.job.lock_id,
            receive_count=self.message.receive_count,
            attempt=self.attempt,
            claim_id=None if self.claim_id == self.job.message_id else self.claim_id,
        )

    def record(self, ending: Ending, now: float) -> RunRecord:
        assert ending.run is not None
        result = self.result
        exit_code = signal = None
        if result is not None and result.start_error is None:
            if result.exit_code < 0:
                signal = -result.exit_code
            else:
                exit_code = result.exit_code
        output = result.output if result is not None else None
        started = self.started_at
        if result is not None and result.start_error is not None:
            started = None  # the command never ran
        triggered_by, trigger_reason = trigger_note(self.message.attributes)
        firing, origin = self.job.firing, self.job.origin
        return RunRecord(
            event_id=self.job.event_id,
            message_id=self.job.message_id,
            host=HOST,
            owner=self.owner or f"{HOST}:{os.getpid()}",
            command=self.command,
            sent_at=self.job.sent_at,
            claimed_at=self.claimed_at,
            ended_at=now,
            outcome=ending.run,
            version=__version__,
            lock_id=self.job.lock_id,
            started_at=started,
            lock_wait=self.lock_wait,
            exit_code=exit_code,
            signal=signal,
            receive_count=self.message.receive_count,
            attempt=self.attempt,
            final=ending.settle.delete or ending.last,
            error=ending.error,
            output=output.merged if output else "",
            stdout=output.stdout if output else "",
            stderr=output.stderr if output else "",
            pid=result.pid if result is not None else None,
            output_bytes=output.merged_bytes if output else None,
            triggered_by=triggered_by,
            trigger_reason=trigger_reason,
            firing_at=None if firing is None else firing.at,
            firing_schedule=None if firing is None else firing.schedule,
            firing_rerun=None if firing is None else firing.rerun,
            origin=None if origin is None else origin.value,
            pipeline_key=None if self.job.pipeline is None else self.job.pipeline.key,
            pipeline_step=None if self.job.pipeline is None else self.job.pipeline.step,
        )
