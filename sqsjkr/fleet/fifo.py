"""What a job sent to a FIFO queue needs: its MessageGroupId and MessageDeduplicationId, checked
against the queue's settings (no per-message delay, content-based deduplication for a later send).
"""

from __future__ import annotations

import json

from sqsjkr.backends.sqs import SendSettings, fifo_id_error, fifo_send_parameters, group_id_of
from sqsjkr.errors import RequestError


def fifo_parameters(
    name: str,
    settings: SendSettings,
    body: str,
    group_id: str | None,
    dedupe_id: str | None,
    *,
    delay: int,
    later: bool,
) -> dict[str, str] | None:
    """MessageGroupId (and MessageDeduplicationId) for a job sent to queue name (later: by
    EventBridge Scheduler), if it is a FIFO queue; None for a standard one. RequestError for
    what the queue cannot take."""
    if not settings.fifo:
        for option, value in (("--group-id", group_id), ("--dedupe-id", dedupe_id)):
            if value is not None:
                raise RequestError(f"{option} is for FIFO queues; queue {name} is a standard queue")
        return None
    if delay:
        raise RequestError(
            f"--delay: queue {name} is a FIFO queue, and SQS takes no per-message delay "
            "on those (only the queue's own DelaySeconds); use --in for a later run"
        )
    for option, value in (("--group-id", group_id), ("--dedupe-id", dedupe_id)):
        error = None if value is None else fifo_id_error(value)
        if error is not None:
            raise RequestError(f"{option}: {error}")
    _check_deduplication(name, settings, dedupe_id, later)
    group = group_id or group_id_of(json.loads(body).get("event_id"))
    if dedupe_id is not None:
        return fifo_send_parameters(group, dedupe_id)
    return {"MessageGroupId": group}  # deduplicated by its content


def _check_deduplication(
    name: str, settings: SendSettings, dedupe_id: str | None, later: bool
) -> None:
    if later:
        if dedupe_id is not None:
            raise RequestError(
                "--dedupe-id is for jobs sent now: EventBridge Scheduler sends to a FIFO "
                "queue with no deduplication id, by the queue's content-based deduplication"
            )
        if not settings.content_based_deduplication:
            raise RequestError(
                f"--at and --in: queue {name} is a FIFO queue without content-based "
                "deduplication, and EventBridge Scheduler can only send to a FIFO queue that "
                "has it (ContentBasedDeduplication; the terraform module sets it)"
            )
    elif dedupe_id is None and not settings.content_based_deduplication:
        raise RequestError(
            f"queue {name} is a FIFO queue without content-based deduplication: give "
            "--dedupe-id ID (SQS drops a later message with the same id for 5 minutes), or "
            "turn on ContentBasedDeduplication on the queue"
        )
