"""send(unique_for=...): one item per job body (or caller's unique_key) and queue, so that the same
job sent while the first is unfinished is not sent again, found by its key instead of by scanning;
and send(idempotency_key=...): one item per sender and key, holding the first send's answer.

The item {Id: "unique:<sha256 of queue and body, or of queue and key>", Type: "unique"} holds the first send's message
id until Expired (unix seconds, the table's TTL); a job that has ended gives its item up to the
next send, so the daemon need not know of it. An idempotency item, {Id: "unique:<sha256 of the
sender and the key>"}, holds the request's fingerprint and the answer for IDEMPOTENCY_SECONDS.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import conditional_write
from sqsjkr.errors import IdempotencyKeyReused, UniqueSendBusy

#: The Type of uniqueness items; their Ids start with UNIQUE_PREFIX (the senders' IAM policy
#: allows writes to those Ids only).
UNIQUE_TYPE = "unique"
UNIQUE_PREFIX = "unique:"
#: How long a send holds the item before it knows its message id: a sender that dies between
#: the two leaves the job sendable again after this long.
PENDING_SECONDS = 60
#: How long a second send waits for the first to name its message id before giving up.
BUSY_WAIT_SECONDS = 10.0
_POLL_SECONDS = 0.25
#: The item is new, or has expired (a TTL deletes it only within a day or two).
_FREE = "attribute_not_exists(Id) OR Expired < :now"


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
    return _item_key(same)


def _item_key(same: str) -> dict[str, Any]:
    digest = hashlib.sha256(same.encode()).hexdigest()
    return {"Id": {"S": UNIQUE_PREFIX + digest}, "Type": {"S": UNIQUE_TYPE}}


class UniqueSends:
    """The uniqueness items of one table."""

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
        condition, values = _FREE, dict[str, Any]()
        while True:
            taken, old = self._put(mine, condition, values)
            if taken or old.get("Owner", {}).get("S") == mine.owner:
                return mine  # the second case: our own write, tried again after its answer was lost
            if "MessageId" not in old:
                if self._clock() - waited_since > BUSY_WAIT_SECONDS:
                    raise UniqueSendBusy(
                        f"{'a job of that unique_key' if key else 'an identical job'} is being "
                        f"sent to queue {queue} by another sender: "
                        "nothing was sent; try again in a minute"
                    )
                self._sleep(_POLL_SECONDS)
                condition, values = _FREE, {}
                continue
            earlier = Earlier(old["MessageId"]["S"], old.get("EventId", {}).get("S", ""))
            if unfinished(earlier):
                return earlier
            # Ended: take the item over, unless another send was quicker.
            condition = f"({_FREE}) OR MessageId = :earlier"
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


#: How long an idempotency key's answer is kept: a client's retries of one request come within
#: it (the IETF draft "The Idempotency-Key HTTP Header Field" leaves the window to the server).
IDEMPOTENCY_SECONDS = 86400


@dataclass(frozen=True)
class Answered:
    """The answer of the first send of an idempotency key: its job, and whether unique_for
    found it unfinished (sent nothing)."""

    message_id: str
    event_id: str
    queue: str
    deduplicated: bool


def fingerprint(request: Any) -> str:
    """What makes two requests the same: their JSON, keys sorted (a body's order is no change)."""
    text = json.dumps(request, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class IdempotentSends:
    """The idempotency items of one table: a sender's key, the request it came with, the answer."""

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

    def begin(self, scope: str, key: str, request: str) -> Reservation | Answered:
        """Hold the item of scope's key for this request (its fingerprint), or the answer of its
        first send. IdempotencyKeyReused when the key came with another request;
        UniqueSendBusy when its first send is still under way after BUSY_WAIT_SECONDS."""
        mine = Reservation(_item_key(f"idempotency\0{scope}\0{key}"), secrets.token_hex(16))
        waited_since = self._clock()
        while True:
            now = self._clock()
            taken, old = conditional_write(
                self._client.put_item,
                self._table,
                Item={
                    **mine.key,
                    "Owner": {"S": mine.owner},
                    "Request": {"S": request},
                    "Expired": {"N": str(int(now + PENDING_SECONDS))},
                },
                ConditionExpression=_FREE,
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
            if taken:
                return mine
            if old.get("Request", {}).get("S") != request:
                raise IdempotencyKeyReused(
                    f"Idempotency-Key {key!r} was used with another request in the last "
                    f"{IDEMPOTENCY_SECONDS // 3600} hours: nothing was sent; use a new key for a "
                    "new request"
                )
            if "MessageId" in old:
                return Answered(
                    old["MessageId"]["S"],
                    old.get("EventId", {}).get("S", ""),
                    old.get("Queue", {}).get("S", ""),
                    old.get("Deduplicated", {}).get("BOOL", False),
                )
            if self._clock() - waited_since > BUSY_WAIT_SECONDS:
                raise UniqueSendBusy(
                    f"the first request of Idempotency-Key {key!r} is still being sent: nothing "
                    "was sent; try again in a minute"
                )
            self._sleep(_POLL_SECONDS)

    def answer(self, reservation: Reservation, answered: Answered) -> None:
        """Keep the first send's answer for IDEMPOTENCY_SECONDS."""
        self._client.update_item(
            TableName=self._table,
            Key=reservation.key,
            UpdateExpression=(
                "SET MessageId = :id, EventId = :event, #queue = :queue, "
                "Deduplicated = :dedup, Expired = :expired"
            ),
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner", "#queue": "Queue"},
            ExpressionAttributeValues={
                ":id": {"S": answered.message_id},
                ":event": {"S": answered.event_id},
                ":queue": {"S": answered.queue},
                ":dedup": {"BOOL": answered.deduplicated},
                ":expired": {"N": str(int(self._clock() + IDEMPOTENCY_SECONDS))},
                ":owner": {"S": reservation.owner},
            },
        )

    def let_go(self, reservation: Reservation) -> None:
        """Delete the item: the send failed, and a retry of the request may send it."""
        UniqueSends(self._client, self._table).let_go(reservation)
