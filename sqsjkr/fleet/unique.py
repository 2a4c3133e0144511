"""send(unique_for=...): one item per job body (or caller's unique_key) and queue, so that the same
job sent while the first is unfinished is not sent again, found by its key instead of by scanning.

The item {Id: "unique:<sha256 of queue and body, or of queue and key>", Type: "unique"} holds the first send's message
id until Expired (unix seconds, the table's TTL); a job that has ended gives its item up to the
next send, so the daemon need not know of it. fleet/idempotency.py keeps its items beside these.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import conditional_write
from sqsjkr.errors import UniqueSendBusy

#: The Type of uniqueness items; their Ids start with UNIQUE_PREFIX (the senders' IAM policy
#: allows writes to those Ids only).
UNIQUE_TYPE = "unique"
UNIQUE_PREFIX = "unique:"
#: How long a send holds the item before it knows its message id: a sender that dies between
#: the two leaves the job sendable again after this long.
PENDING_SECONDS = 60
#: How long a second send waits for the first to name its message id before giving up.
BUSY_WAIT_SECONDS = 10.0
POLL_SECONDS = 0.25
#: The item is new, or has expired (a TTL deletes it only within a day or two).
FREE = "attribute_not_exists(Id) OR Expired < :now"


@dataclass(frozen=True)
class Reservation:
    """This send holds the job's item: it sends, then names its message (hold) or lets go."""

    key: dict[str, Any]
    owner: str


@dataclass(frozen=True)
class Earlier:
    """The unfinished identical job that holds the item: its message and event ids."""

    message_id: str
    event_id: str


def unique_key(
    queue: str, body: str, key: str | None = None, scope: str | None = None
) -> dict[str, Any]:
    """The key of the item of body sent to queue: identical jobs are the same body, same queue;
    with a caller's key, the same key, same queue, whatever the body (the two never meet); with
    a scope too (an API token's name), the key is that scope's alone, so that no other sender
    suppresses its job by guessing its key."""
    if key is None:
        same = f"{queue}\n{body}"
    elif scope is None:
        same = f"key\0{queue}\0{key}"
    else:
        same = f"scoped-key\0{scope}\0{queue}\0{key}"
    return item_key(same)


def item_key(same: str) -> dict[str, Any]:
    digest = hashlib.sha256(same.encode()).hexdigest()
    return {"Id": {"S": UNIQUE_PREFIX + digest}, "Type": {"S": UNIQUE_TYPE}}


class TableItems:
    """Items of one table that a send holds for a while, with the clock and the sleep of its
    waits for another send (injected where tests need them)."""

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._client = client
        self._table = table
        self._clock = clock
        self._sleep = sleep

    def let_go(self, reservation: Reservation) -> None:
        """Delete the item: the send failed, and the next may send the job."""
        conditional_write(
            self._client.delete_item,
            self._table,
            Key=reservation.key,
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues={":owner": {"S": reservation.owner}},
        )


def is_own(old: dict[str, Any], mine: Reservation) -> bool:
    """Whether the item that failed a reservation's condition is that reservation's own: its
    write, tried again after its answer was lost."""
    return bool(old.get("Owner", {}).get("S") == mine.owner)


class UniqueSends(TableItems):
    """The uniqueness items of one table."""

    def reserve(
        self,
        queue: str,
        body: str,
        unfinished: Callable[[Earlier], bool],
        *,
        key: str | None = None,
        scope: str | None = None,
    ) -> Reservation | Earlier:
        """Hold the item of body (or of the caller's key, in its scope) on queue for this send,
        or the earlier job that holds it while unfinished (it asks). UniqueSendBusy when another
        send holds it and names no message."""
        item_key = unique_key(queue, body, key, scope)
        mine = Reservation(item_key, secrets.token_hex(16))
        waited_since = self._clock()
        condition, values = FREE, dict[str, Any]()
        while True:
            taken, old = self._put(mine, condition, values)
            if taken or is_own(old, mine):
                return mine
            if "MessageId" not in old:
                if self._clock() - waited_since > BUSY_WAIT_SECONDS:
                    raise UniqueSendBusy(
                        f"{'a job of that unique_key' if key else 'an identical job'} is being "
                        f"sent to queue {queue} by another sender: "
                        "nothing was sent; try again in a minute"
                    )
                self._sleep(POLL_SECONDS)
                condition, values = FREE, {}
                continue
            earlier = Earlier(old["MessageId"]["S"], old.get("EventId", {}).get("S", ""))
            if unfinished(earlier):
                return earlier
            # Ended: take the item over, unless another send was quicker.
            condition = f"({FREE}) OR MessageId = :earlier"
            values = {":earlier": old["MessageId"]}

    def hold(
        self, reservation: Reservation, message_id: str, event_id: str, seconds: float
    ) -> None:
        """Name the message sent, and keep the item that long (unique_for)."""
        self._client.update_item(
            TableName=self._table,
            Key=reservation.key,
            UpdateExpression="SET MessageId = :id, EventId = :event, Expired = :expired",
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues={
                ":id": {"S": message_id},
                ":event": {"S": event_id},
                ":expired": {"N": str(int(self._clock() + seconds))},
                ":owner": {"S": reservation.owner},
            },
        )

    def _put(
        self, mine: Reservation, condition: str, values: dict[str, Any]
    ) -> tuple[bool, dict[str, Any]]:
        now = self._clock()
        return conditional_write(
            self._client.put_item,
            self._table,
            Item={
                **mine.key,
                "Owner": {"S": mine.owner},
                "Expired": {"N": str(int(now + PENDING_SECONDS))},
            },
            ConditionExpression=condition,
            ExpressionAttributeValues={":now": {"N": str(int(now))}, **values},
        )
