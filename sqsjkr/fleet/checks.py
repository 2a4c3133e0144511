"""What a sender is told of a job the daemon accepts all the same: fields it ignores, and retries
that its queue's RedrivePolicy would cut short.
"""

from __future__ import annotations

import difflib
import json

from sqsjkr.backends.sqs import SendSettings
from sqsjkr.contract.job import MESSAGE_FIELDS, parse_job
from sqsjkr.errors import quote


def unknown_fields(body: str) -> list[str]:
    """A warning for each field the daemon ignores, with the known name it is closest to."""
    warnings = []
    # Called once parse_job accepted the body, so it is a JSON object.
    for name in json.loads(body):
        if name in MESSAGE_FIELDS:
            continue
        warning = f"field {quote(name)} is not a job field and the daemon ignores it"
        close = difflib.get_close_matches(name, sorted(MESSAGE_FIELDS), n=1)
        if close:
            warning += f"; did you mean {quote(close[0])}?"
        warnings.append(warning)
    return warnings


def retries_warning(queue_name: str, settings: SendSettings, body: str) -> str | None:
    """Whether a job's retries can take it past the queue's maxReceiveCount: every run is a
    receive, and SQS moves a message received that many times to the dead-letter queue."""
    retries = parse_job(body, message_id="(not sent)", sent_at=0.0).retries
    count = settings.max_receive_count
    if not retries or count is None or count > retries + 1:
        return None
    return (
        f"queue {queue_name} moves a message to its dead-letter queue "
        f"after {count} receives (RedrivePolicy maxReceiveCount), and a job with "
        f"{retries} retries may be received {retries + 1} times or more: its retries "
        f"can move it to the dead-letter queue (give the queue a count above "
        f"{retries + 1})"
    )
