"""moto's SQS queues made cheaper: counting a queue's messages reads moto's clock once per count,
not once per message, and checking a received message's retention counts nothing.

moto 5 reads a queue's attributes (ApproximateNumberOfMessages and the like, each counted over
every message, each message asking the clock through datetime) to check one received message's
retention period and one sent message's content-based deduplication: a burst of N messages costs
it about 6 N x N clock reads, and a queue of a few hundred jobs kept its server's cpu busy (issue
39: 87 % of the benchmark's moto CPU). The same answers here, each count one pass with one clock
read, and the retention period read where the queue keeps it.
"""

from __future__ import annotations

from typing import Any

from moto.core.utils import unix_time, unix_time_millis
from moto.sqs.models import Message, Queue, SQSBackend


def install_fair_queues() -> None:
    """In this process: moto's SQS queues count their messages on one clock read a count.

    Idempotent; for the whole process, as moto's backends are.
    """
    if getattr(SQSBackend, "_sqsjkr_fair", False):
        return
    Queue.messages = property(_messages)  # type: ignore[method-assign,assignment]
    Queue.approximate_number_of_messages = property(  # type: ignore[method-assign,assignment]
        lambda queue: len(_messages(queue))
    )
    Queue.approximate_number_of_messages_delayed = property(  # type: ignore[method-assign,assignment]
        _delayed_count
    )
    Queue.approximate_number_of_messages_not_visible = property(  # type: ignore[method-assign,assignment]
        _not_visible_count
    )
    SQSBackend.is_message_valid_based_on_retention_period = _retained  # type: ignore[method-assign]
    SQSBackend._sqsjkr_fair = True  # type: ignore[attr-defined]


# Each as moto's Message.visible and Message.delayed say, against one reading of moto's clock.


def _messages(queue: Queue) -> list[Message]:
    """The visible messages that are not delayed (Queue.messages)."""
    now = unix_time_millis()
    return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]


def _delayed_count(queue: Queue) -> int:
    now = unix_time_millis()
    return sum(1 for m in queue._messages if now < m.delayed_until)


def _not_visible_count(queue: Queue) -> int:
    now = unix_time_millis()
    return sum(1 for m in queue._messages if not now > m.visible_at)


def _retained(backend: SQSBackend, queue_name: str, message: Message) -> bool:
    """Whether message is still within its queue's MessageRetentionPeriod."""
    period: Any = backend.get_queue(queue_name).message_retention_period  # type: ignore[attr-defined]
    return int(period) + message.sent_timestamp / 1000 > unix_time()  # type: ignore[operator,no-any-return]
