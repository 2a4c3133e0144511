"""One firing of local mode's scheduler delivered as EventBridge delivers it: the target's input put
on its queue, or, when the queue refuses it, on the dead-letter queue with the error's attributes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code

log = logging.getLogger("sqsjkr.local")

#: A queue's ARN, in any partition: arn:aws:sqs:REGION:ACCOUNT:NAME.
_QUEUE_ARN = re.compile(r"arn:aws[a-z-]*:sqs:([a-z0-9-]+):(\d{12}):([A-Za-z0-9_.-]+)")


@dataclass(frozen=True)
class Delivery:
    """A firing to deliver: its target (a queue's ARN), the body, the FIFO message group; where a
    refused one goes (a queue's ARN, or None: dropped, as EventBridge drops it), with which body
    and which attributes besides the error's."""

    target_arn: str
    body: str
    group_id: str | None = None
    dead_letter_arn: str | None = None
    dead_letter_body: str = ""
    attributes: Mapping[str, str] = field(default_factory=dict)


def is_queue(arn: str | None) -> bool:
    """Whether a target is an SQS queue: the only targets local mode delivers to."""
    return arn is not None and _QUEUE_ARN.fullmatch(arn) is not None


def substituted(template: str, values: Mapping[str, str]) -> str:
    """template with each placeholder (`<aws.scheduler.scheduled-time>`, `<time>`) replaced by its
    value, where it stands, as EventBridge substitutes them in a target's input."""
    for placeholder, value in values.items():
        template = template.replace(placeholder, value)
    return template


def deliver(sqs: Any, delivery: Delivery) -> str:
    """Send the firing to its queue, or dead-letter it when SQS refuses it (one attempt: local
    mode does not retry); what became of it, in words. A BotoCoreError (the endpoint is gone)
    is raised: the firing is tried again at the next look."""
    try:
        sent = sqs.send_message(
            QueueUrl=queue_url(sqs, delivery.target_arn),
            MessageBody=delivery.body,
            **({"MessageGroupId": delivery.group_id} if delivery.group_id else {}),
        )
    except ClientError as exc:
        return _dead_letter(sqs, delivery, exc)
    return f"sent as message {sent['MessageId']}"


def queue_url(sqs: Any, arn: str) -> str:
    """The URL of the queue of that ARN (GetQueueUrl: its error when there is no such queue)."""
    match = _QUEUE_ARN.fullmatch(arn)
    if match is None:
        raise ClientError(
            {"Error": {"Code": "InvalidTarget", "Message": f"{arn} is not an SQS queue's ARN"}},
            "GetQueueUrl",
        )
    _, account, name = match.groups()
    answer = sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)
    return str(answer["QueueUrl"])


def _dead_letter(sqs: Any, delivery: Delivery, exc: ClientError) -> str:
    code = error_code(exc) or "Error"
    message = str(exc.response.get("Error", {}).get("Message") or code)
    why = f"refused by its queue ({code}: {message})"
    if delivery.dead_letter_arn is None:
        return f"{why}, and dropped: its target has no DeadLetterConfig"
    attributes = {
        **delivery.attributes,
        "ERROR_CODE": code,
        "ERROR_MESSAGE": message,
        "RETRY_ATTEMPTS": "0",
        "TARGET_ARN": delivery.target_arn,
    }
    try:
        sqs.send_message(
            QueueUrl=queue_url(sqs, delivery.dead_letter_arn),
            MessageBody=delivery.dead_letter_body or delivery.body,
            MessageAttributes={
                name: {"DataType": "String", "StringValue": value}
                for name, value in sorted(attributes.items())
            },
        )
    except ClientError as lost:
        return f"{why}, and lost: its dead-letter queue refused it too ({error_code(lost)})"
    return f"{why}, and put on its dead-letter queue {delivery.dead_letter_arn}"
