"""What sqsjkr records of each run: the run record, its outcome, and the summary kept per event.

History stores, reporters and the `history`/`status` commands all speak these values.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote


class RunOutcome(enum.Enum):
    """How a job that reached a worker ended."""

    SUCCEEDED = "succeeded"  # the command exited 0
    ERRORED = "errored"  # the command ran and failed
    TIMED_OUT = "timed_out"  # stopped at its timeout
    CANCELLED = "cancelled"  # older than its life_time: not run
    ABORTED = "aborted"  # its lock was held and it had abort_if_locked: not run
    STOPPED = "stopped"  # stopped (or never started) by a shutdown: it runs again elsewhere
    FAILED_TO_START = "failed_to_start"  # its command could not be started
    KILLED = "killed"  # stopped (or never started) by `sqsjkr kill`: final, never retried
    #: A second message of one schedule's firing, whose claim another message holds: not run,
    #: its record names that message (RunRecord.duplicate_of). Not a run's end: /metrics and
    #: stats count it as a duplicate message, never among runs.
    DUPLICATE = "duplicate"

    @property
    def failed(self) -> bool:
        """Whether the outcome is one of FAILURES: a run that needs someone."""
        return self in FAILURES


#: The outcomes that are failures, for every face: a run that did not do its work when it
#: should have, so that someone must look (docs/semantics.md, "Outcomes"). A success, a kill
#: someone asked for (audited), an abort_if_locked job that found its lock held (its own rule:
#: the holder is doing the work) and a shutdown's stop (it runs again) are not. The alert
#: rules, Grafana, `status --check`, the dashboard, /metrics and report_on = "failure" count
#: these and only these, through sqsjkr_job_failures_total and the summary's failures in a row.
FAILURES = frozenset(
    {
        RunOutcome.ERRORED,
        RunOutcome.TIMED_OUT,
        RunOutcome.FAILED_TO_START,
        RunOutcome.CANCELLED,  # older than its life_time: it never ran when it should have
    }
)


def one_off(event_id: str, message_id: str) -> bool:
    """Whether a job was sent without an event_id: its message id stands in for one (as Job
    does), and no other message can share it, so its event has this one message only."""
    return event_id == message_id


@dataclass(frozen=True)
class RunContext:
    """Which scheduled run this is, as the job sees it: SQSJKR_* variables in a command's
    environment, X-Sqsjkr-* headers of an HTTP call. A message's envs cannot override them."""

    event_id: str
    message_id: str
    scheduled_at: float  # SQS SentTimestamp: when the schedule fired
    attempt: int
    host: str

    @property
    def scheduled(self) -> str:
        """scheduled_at in RFC 3339, UTC, to the millisecond."""
        moment = datetime.fromtimestamp(self.scheduled_at, timezone.utc)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    def environment(self) -> dict[str, str]:
        return {
            "SQSJKR_EVENT_ID": self.event_id,
            "SQSJKR_MESSAGE_ID": self.message_id,
            "SQSJKR_SCHEDULED_AT": self.scheduled,
            "SQSJKR_ATTEMPT": str(self.attempt),
            "SQSJKR_HOST": self.host,
        }

    def headers(self) -> dict[str, str]:
        # A header carries visible ASCII only: an event_id of "日本" or with a line break could
        # not be sent at all, and the call would fail to start at every run.
        return {
            "X-Sqsjkr-Event-Id": header_text(self.event_id),
            "X-Sqsjkr-Message-Id": header_text(self.message_id),
            "X-Sqsjkr-Scheduled-At": self.scheduled,
            "X-Sqsjkr-Attempt": str(self.attempt),
            "X-Sqsjkr-Host": header_text(self.host),
        }


#: What a header value carries as it is: visible ASCII but "%", which marks the encoded rest.
_HEADER_SAFE = "".join(chr(code) for code in range(0x21, 0x7F) if chr(code) != "%")


def header_text(value: str) -> str:
    """value as an HTTP header carries it: visible ASCII as it is, anything else (spaces, "%",
    other characters as UTF-8) percent-encoded, so that unquoting it gives value back."""
    return quote(value, safe=_HEADER_SAFE)


@dataclass(frozen=True)
class RunStart:
    """A job about to run: what the summary's "running now" shows, and what noticers get."""

    event_id: str
    message_id: str
    host: str
    owner: str  # the daemon's owner id on the job's claim (host:pid:random)
    started_at: float  # unix seconds
    sent_at: float
    command: str  # cut to a bounded length
    lock_id: str | None = None
    receive_count: int = 1
    attempt: int = 1
    #: While the job waits to run: what for ("lock" or "concurrency group"), its lock_id or
    #: concurrency_key, and the owner (host:pid:id) of its holder when last tried (None for a Go
    #: daemon's lock). Not waiting: all None.
    waiting_for: str | None = None
    waiting_key: str | None = None
    held_by: str | None = None
    #: The Id of the run's claim when it is not message_id: the key of the schedule's firing
    #: the message is (Firing.key), which every message of that firing shares.
    claim_id: str | None = None

    @property
    def one_off(self) -> bool:
        return one_off(self.event_id, self.message_id)

    @property
    def claim_item(self) -> str:
        """The Id of the run's claim (its dedupe item): kill, live and job states read it."""
        return self.claim_id or self.message_id


@dataclass(frozen=True)
class KillMark:
    """A kill request on a run's claim (`sqsjkr kill`): who asked (user@host), why, and when
    (unix seconds)."""

    by: str
    reason: str
    at: float

    def describe(self) -> str:
        """Who asked and why, as a run record's error gives it."""
        return f"killed by {self.by}" + (f": {self.reason}" if self.reason else "")


@dataclass(frozen=True)
class RunRecord:
    """One run that reached a worker and ended, whatever the outcome."""

    event_id: str
    message_id: str
    host: str
    owner: str
    command: str  # cut to a bounded length
    sent_at: float  # SQS SentTimestamp: the time the schedule fired
    claimed_at: float  # when a worker took the job up (its dedupe claim)
    ended_at: float
    outcome: RunOutcome
    version: str
    lock_id: str | None = None
    started_at: float | None = None  # when the command started; None if it never did
    lock_wait: float = 0.0  # seconds spent waiting for the lock
    exit_code: int | None = None  # None when no command ran, or a signal ended it
    signal: int | None = None  # the signal that ended the command, if one did
    receive_count: int = 1
    attempt: int = 1
    #: Whether this run settles the message (the summary counts only final runs): a run stopped
    #: by a shutdown, or deferred by a host fault, runs again and is not.
    final: bool = True
    error: str | None = None  # why it did not run, when it did not
    output: str = ""  # the last bytes of stdout and stderr merged, as configured
    stdout: str = ""
    stderr: str = ""
    pid: int | None = None
    #: Bytes the command printed in all, both streams (None: no command ran, or an older
    #: daemon's record): how `history --follow` knows which part of output it has not shown.
    output_bytes: int | None = None
    #: Set when `sqsjkr trigger` sent the message: who (user@host) and why (--reason). Records
    #: written before these fields existed load with None.
    triggered_by: str | None = None
    trigger_reason: str | None = None
    #: The schedule's firing the message was (Firing.at, Firing.schedule) and who sent it
    #: (Origin's value); None for a message without them, or a record written before them.
    firing_at: float | None = None
    firing_schedule: str | None = None
    origin: str | None = None
    #: The id of a re-run of the firing (Firing.rerun): a run forced again by `trigger
    #: --firing`, triggered_by naming who; None for the firing's own run.
    firing_rerun: str | None = None
    #: Set on the record of a second message of one firing, which did not run: the message id
    #: of the run that the firing's claim belongs to.
    duplicate_of: str | None = None
    #: A step of a pipeline: the run of its pipeline it belongs to (PipelineRun.key: its root's
    #: firing key, or its root's message id) and its step's name.
    pipeline_key: str | None = None
    pipeline_step: str | None = None

    @property
    def failure(self) -> bool:
        """Whether this run is a failure that needs someone: a final run (not one that will be
        retried, or run again after a shutdown) whose outcome is one of FAILURES."""
        return self.final and self.outcome.failed

    @property
    def duration(self) -> float:
        """From the command's start to the end; 0 when no command ran."""
        return 0.0 if self.started_at is None else self.ended_at - self.started_at

    @property
    def one_off(self) -> bool:
        return one_off(self.event_id, self.message_id)

    @property
    def queue_delay(self) -> float:
        """From the schedule's firing to the command's start, or to the end: the scheduler's
        delay included. From SQS's SentTimestamp for a message sent otherwise (by hand, a
        firing run again later): its wait on the queue, not how late the firing ran."""
        by_schedule = self.firing_at is not None and self.origin in (None, "schedule")
        fired = self.firing_at if by_schedule and self.firing_at is not None else self.sent_at
        return (self.started_at or self.ended_at) - fired

    @property
    def lateness(self) -> float | None:
        """From the firing the run fills to the command's start (or the end); None for a run of
        no firing. Apart from queue_delay: a missed firing run by hand a day later is a day late,
        though its message waited seconds."""
        if self.firing_at is None:
            return None
        return (self.started_at or self.ended_at) - self.firing_at

    def as_dict(self) -> dict[str, Any]:
        """The record as JSON-able data, with its derived figures."""
        # Its fields are plain values: a copy of them is what asdict() gives, at a tenth of its
        # cost (asdict deep-copies each value), and every run's end builds it.
        data = dict(vars(self))
        data["outcome"] = self.outcome.value
        data["duration"] = self.duration
        data["queue_delay"] = self.queue_delay
        data["lateness"] = self.lateness
        return data

    def encoded(self) -> tuple[str, str]:
        """The record as JSON, as its history item keeps it (without stdout and stderr, which
        are for reporters), and as its event's summary keeps it (without its output as well).

        One encode for both: the second is the first with its "output" member cut out, which
        gives the very text an encode of its own would. That member's key can be found as
        text, since an encoded string holds no bare quote."""
        data = self.as_dict()
        del data["stdout"], data["stderr"]
        record = json.dumps(data)
        last = record.replace(f', "output": {json.dumps(self.output)}', "", 1)
        return record, last

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        fields["outcome"] = RunOutcome(data["outcome"])
        return cls(**fields)


@dataclass(frozen=True)
class EventSummary:
    """What the store keeps current per event_id."""

    event_id: str
    last_run: RunRecord | None = None  # the last run to end, final or not
    last_success_at: float | None = None  # ended_at of the last successful run
    last_failure_at: float | None = None  # ended_at of the last final failure
    consecutive_failures: int = 0  # final failures since the last success
    #: Runs in progress, as their starts say; a daemon that died leaves one behind until its
    #: claim's lease ends (status looks at the claim).
    running: tuple[RunStart, ...] = field(default_factory=tuple)
    #: The schedule of the event's last scheduled firing, as its message carried it: its ARN
    #: or name, expression and zone, that firing's due time, and the next one's (unix seconds).
    #: None for an event no message of a firing has reached yet.
    schedule: str | None = None
    schedule_expression: str | None = None
    schedule_timezone: str | None = None
    last_firing_at: float | None = None
    next_firing_at: float | None = None

    @property
    def one_off(self) -> bool:
        """Whether the event is a job sent without an event_id (see one_off())."""
        if self.last_run is not None:
            return self.last_run.one_off
        return any(start.one_off for start in self.running)
