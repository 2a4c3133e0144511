"""sqsjkr.Fleet: the one object a program reads and steers the fleet with; its sends and jobs here,
its reads in client_reads.py, its actions in client_actions.py, its shared state in connection.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqsjkr.fleet.client_actions import Actions
from sqsjkr.fleet.jobs import JobHandle, JobPhase, JobState, job_state


class Fleet(Actions):
    """The fleet of one config: `Fleet("/etc/sqsjkr/config.toml")` or `Fleet(config)`.

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
        reason: str = "",
    ) -> JobHandle:
        """Check job (a message body, or its fields as a dict) with the daemon's parser, put
        it on queue (default: [sqs] queue_name), audited, and return its handle at once.

        InvalidJobError, and nothing sent, for a job the daemon would refuse. unique_for
        (seconds): while an identical job sent with it that long ago is unfinished, return
        that job's handle and send nothing."""
        return self.sender.send(job, queue=queue, delay=delay, unique_for=unique_for, reason=reason)

    def job(self, message_id: str, event_id: str | None = None) -> JobState:
        """Where the job of message_id is now: queued, waiting, running or ended (with its
        record). event_id, when known, saves reading every event's summary."""
        return job_state(self.store, message_id, event_id)

    def handle(
        self, message_id: str, event_id: str | None = None, *, queue: str | None = None
    ) -> JobHandle:
        """The handle of a job sent elsewhere (by another process, a trigger, a schedule), to
        wait for its run; without event_id, its state names its event."""
        known = True
        if event_id is None:
            state = self.job(message_id)
            event_id, known = state.event_id, state.phase is not JobPhase.QUEUED
        queue = queue or self.config.sqs.queue_name
        return JobHandle(message_id, event_id, queue, self.store, event_known=known)
