"""send(idempotency_key=...): one item per sender and key, {Id: "unique:<sha256 of the sender and
the key>"}, holding the request's fingerprint and the first send's answer for IDEMPOTENCY_SECONDS.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import conditional_write
from sqsjkr.errors import IdempotencyKeyReused, UniqueSendBusy
from sqsjkr.fleet.unique import (
    BUSY_WAIT_SECONDS,
    FREE,
    PENDING_SECONDS,
    POLL_SECONDS,
    Reservation,
    TableItems,
    is_own,
    item_key,
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


class IdempotentSends(TableItems):
    """The idempotency items of one table: a sender's key, the request it came with, the answer."""

    def begin(self, scope: str, key: str, request: str) -> Reservation | Answered:
        """Hold the item of scope's key for this request (its fingerprint), or the answer of its
        first send. IdempotencyKeyReused when the key came with another request;
        UniqueSendBusy when its first send is still under way after BUSY_WAIT_SECONDS."""
        mine = Reservation(item_key(f"idempotency\0{scope}\0{key}"), secrets.token_hex(16))
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
                ConditionExpression=FREE,
                ExpressionAttributeValues={":now": {"N": str(int(now))}},
            )
            if taken or is_own(old, mine):
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
            self._sleep(POLL_SECONDS)

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
