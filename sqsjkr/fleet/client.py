"""sqsjkr.Fleet: the one object a program reads and steers the fleet with; its sends and jobs here,
its reads in client_reads.py, its actions in client_actions.py, its shared state in connection.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from sqsjkr.backends.scheduler import ScheduledJob
from sqsjkr.errors import RequestError
from sqsjkr.fleet.client_actions import Actions
from sqsjkr.fleet.jobs import JobHandle, JobState, job_state
from sqsjkr.fleet.scheduled import cancel_scheduled, schedule_job, scheduled_jobs, when_of


@dataclass(frozen=True)
class ScheduledSend:
    """A job EventBridge Scheduler puts on its queue later (send_later): its one-time
    schedule's name (to cancel it), when it goes (UTC), and the queue."""

    name: str
    at: datetime
    queue: str


class Fleet(Actions):
    """The fleet of one config: `Fleet("/etc/sqsjkr/config.toml")` or `Fleet(config)`; `Fleet()`
    reads the file SQSJKR_CONF names, else /etc/sqsjkr/config.toml, as the commands do.

    actor: who its actions and sends are audited as (default: user@host of this process, as
    the CLI's). It holds one boto3 session and the clients made from it, each once, under a
    lock: one Fleet is safe to share between threads. Methods return the fleet layer's
    dataclasses and raise the errors of sqsjkr.errors."""

    def send(
        self,
        job: str | Mapping[str, Any],
        *,
        queue: str | None = None,
        delay: int = 0,
        unique_for: float | None = None,
        unique_key: str | None = None,
        reason: str = "",
        unique_scope: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobHandle:
        """Check job (a message body, or its fields as a dict) with the daemon's parser, put
        it on queue (default: [sqs] queue_name), audited, and return its handle at once.

        queue may name any queue of the account that this Fleet's AWS identity may send to (a
        program holds that identity's rights anyway); the HTTP API sends only to
        job_queues(), the config's and those its routes name.

        InvalidJobError, and nothing sent, for a job the daemon would refuse; RequestError for
        a delay outside 0..900 or a unique_for that is not a number of seconds above 0.
        unique_for (seconds): while a job sent with it that long ago is unfinished and is the
        same (the same unique_key, else the same body; same queue), return that job's handle,
        with deduplicated True, and send nothing. unique_scope: whose unique_key it is (the HTTP
        API gives its token's name): the same key in another scope does not meet it.

        idempotency_key: a retry of the same request (the same key from this Fleet's actor,
        the same arguments) within a day answers the first send's handle and sends nothing;
        IdempotencyKeyReused (a RequestError), nothing sent, when the key came with other
        arguments."""
        return self.sender.send(
            job,
            queue=queue,
            delay=delay,
            unique_for=unique_for,
            unique_key=unique_key,
            reason=reason,
            unique_scope=unique_scope,
            idempotency_key=idempotency_key,
        )

    def send_later(
        self,
        job: str | Mapping[str, Any],
        *,
        at: datetime | str | None = None,
        in_: float | str | None = None,
        queue: str | None = None,
        reason: str = "",
    ) -> ScheduledSend:
        """Have EventBridge Scheduler put job on queue later, as `sqsjkr send --at/--in`: at a
        time (an aware datetime, or text as --at takes it: RFC 3339, or a wall time in
        [schedule] timezone), or in_ seconds (or a duration, "90m") from now. Audited; needs
        [schedule] role_arn (ConfigError). cancel_scheduled(its name) cancels it."""
        at_text, in_text = _at_text(at), _in_text(in_)
        if (at_text is None) == (in_text is None):
            raise RequestError("give send_later at= or in_=, one of them")
        when = when_of(self.config, at_text, in_text, None)
        out = self.sender.outgoing(job, queue, 0)
        name = schedule_job(
            self.config, self.session, self.sqs, self.auditor, out, when, reason=reason
        )
        return ScheduledSend(name, when.instant, out.queue_name)

    def scheduled_sends(self) -> list[ScheduledJob]:
        """The jobs send_later (or `send --at/--in`) scheduled that are still to run, soonest
        first."""
        return scheduled_jobs(self.config)

    def cancel_scheduled(self, name: str, *, reason: str = "") -> None:
        """Cancel the scheduled send of that name, audited; ResourceMissingError when there is
        none, RequestError for a name that is not a scheduled send's."""
        try:
            cancel_scheduled(self.config, self.auditor, name, reason=reason)
        except ValueError as exc:
            raise RequestError(str(exc)) from exc

    def job(self, message_id: str, event_id: str | None = None) -> JobState:
        """Where the job of message_id is now: queued, waiting, running, ended (with its
        record), or UNKNOWN: no daemon has taken it (yet), or it is no job of this fleet.
        event_id, when known, saves reading every event's summary."""
        return job_state(self.store, message_id, event_id)

    def handle(
        self, message_id: str, event_id: str | None = None, *, queue: str | None = None
    ) -> JobHandle:
        """The handle of a job sent elsewhere (by another process, a trigger, a schedule), to
        wait for its run; without event_id, its state names its event once a daemon took it."""
        known = event_id is not None
        if event_id is None:
            event_id = self.job(message_id).event_id
        return JobHandle(
            message_id,
            event_id,
            queue or self.config.sqs.queue_name,
            self.store,
            event_known=known,
        )


def _at_text(at: datetime | str | None) -> str | None:
    """send_later's at as --at's text: an aware datetime to the next whole second, in UTC."""
    if at is None or isinstance(at, str):
        return at
    if at.tzinfo is None or at.utcoffset() is None:
        raise RequestError(f"at {at.isoformat()} has no time zone: give an aware datetime")
    return datetime.fromtimestamp(math.ceil(at.timestamp()), timezone.utc).isoformat()


def _in_text(in_: float | str | None) -> str | None:
    """send_later's in_ as --in's text: seconds to whole seconds, up (never early)."""
    if in_ is None or isinstance(in_, str):
        return in_
    if isinstance(in_, bool) or not 0 < in_ < math.inf:
        raise RequestError(f"in_ {in_!r}: give the seconds from now, a number above 0")
    return f"{math.ceil(in_)}s"
