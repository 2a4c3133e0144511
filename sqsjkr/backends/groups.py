"""Concurrency groups: at most N jobs of one concurrency_key run at once, across all hosts.

Groups is the seam; a group is N slots, each leased like a lock. DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from sqsjkr.backends.aws import (
    conditional_write,
    lease_time,
    owner_condition,
    owner_of,
    renew_lease,
)
from sqsjkr.backends.lease import Lease, new_owner
from sqsjkr.backends.locks import RELEASE_MARK_SECONDS, Held
from sqsjkr.errors import quote

log = logging.getLogger("sqsjkr.groups")

#: The Type of a slot item is this and the slot's number: "slot#0", "slot#1", ...
SLOT_TYPE_PREFIX = "slot#"


@dataclass(frozen=True, kw_only=True)
class SlotLease(Lease):
    """A hold on one slot of a group: key is the concurrency_key, slot the slot's number."""

    slot: int


@dataclass(frozen=True)
class GroupFull(Held):
    """The answer of try_enter when every slot is taken: the holder whose lease ends first (so
    the log says when one may free up), and how many live holders the group has."""

    holders: int = 0
    limit: int = 0

    def describe(self, now: float) -> str:
        """ "full (3 held, limit 3): the first to end is held by HOST:PID for event E, ..." """
        return f"full ({self.holders} held, limit {self.limit}): the first to end is " + (
            super().describe(now)
        )


class Groups(Protocol):
    """Lets at most a group's limit of jobs in at once, and keeps and gives back their slots."""

    def try_enter(self, key: str, limit: int, event_id: str) -> SlotLease | GroupFull:
        """Take a slot of group key for event_id: its lease, or who holds the slots when
        limit of them are held. Raises on failure."""

    def renew(self, lease: Lease) -> bool:
        """Extend a held slot's lease: False if the slot is no longer ours."""

    def leave(self, lease: Lease) -> bool:
        """Give the slot back: False if it was no longer ours (our lease had passed and another
        job took it over, or it is gone)."""


class NoGroups:
    """Every group always has room: for a single host, or when limits need not hold."""

    def try_enter(self, key: str, limit: int, event_id: str) -> SlotLease | GroupFull:
        return SlotLease(key, "", slot=0)

    def renew(self, lease: Lease) -> bool:
        return True

    def leave(self, lease: Lease) -> bool:
        return True


class MemoryGroups:
    """Groups within one process, whose slots never expire: for tests and for embedding sqsjkr."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        #: key -> slot -> (owner, event_id) of each held slot
        self.held: dict[str, dict[int, tuple[str, str]]] = {}
        self._left_by: dict[tuple[str, int], str] = {}  # the owner that left a slot last

    def try_enter(self, key: str, limit: int, event_id: str) -> SlotLease | GroupFull:
        with self._mutex:
            slots = self.held.setdefault(key, {})
            if len(slots) >= limit:
                owner, event = slots[min(slots)]
                return GroupFull(owner, event, holders=len(slots), limit=limit)
            slot = min(set(range(limit)) - set(slots))
            lease = SlotLease(key, new_owner(), slot=slot)
            slots[slot] = (lease.owner, event_id)
            self._left_by.pop((key, slot), None)  # as a PutItem replaces the release mark
            return lease

    def renew(self, lease: Lease) -> bool:
        with self._mutex:
            return self._owner(lease) == lease.owner

    def leave(self, lease: Lease) -> bool:
        slot = slot_of(lease)
        with self._mutex:
            if self._owner(lease) != lease.owner:
                return self._left_by.get((lease.key, slot)) == lease.owner
            del self.held[lease.key][slot]
            self._left_by[lease.key, slot] = lease.owner
            return True

    def _owner(self, lease: Lease) -> str | None:
        held = self.held.get(lease.key, {}).get(slot_of(lease))
        return None if held is None else held[0]


@dataclass(frozen=True)
class SlotItem:
    """One slot item of a group, as a Query returned it."""

    slot: int
    item: dict[str, Any]

    def live(self, now: float) -> bool:
        """Held now: it has an EventId, and a lease that has not passed or none at all (an
        item no sqsjkr lease wrote, which only its writer or an operator frees)."""
        if "EventId" not in self.item:
            return False
        until = self.until
        return until is None or until >= now

    @property
    def until(self) -> float | None:
        until = self.item.get("LeaseUntil", {}).get("N")
        return None if until is None else float(until)


class DynamoGroups:
    """A group's slots as items of the lock table, all in the key's partition:
    {Id: key, Type: "slot#<i>", EventId, Owner, LeaseUntil, Limit} while held.

    A slot is taken, renewed, taken over and released exactly as DynamoLocker's lock item; the
    Go daemon never reads these items. try_enter counts the live slots with one Query, then
    takes a free slot below the limit with a conditional PutItem, trying the next free one when
    another job took it first. Holders of slots at or above the limit (entered with a larger
    limit earlier) count against the limit until they leave, but keep running.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
        rng: random.Random | None = None,
    ) -> None:
        self._client = client
        self._table = table
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._rng = rng or random.Random()

    def try_enter(self, key: str, limit: int, event_id: str) -> SlotLease | GroupFull:
        if limit < 1:
            raise ValueError(f"the limit of concurrency group {quote(key)} must be at least 1")
        now = self._clock()
        slots = self.slots(key)
        live = [slot for slot in slots if slot.live(now)]
        taken = {slot.slot for slot in live}
        free = [i for i in range(limit) if i not in taken]
        # A random order spreads jobs entering at the same moment over the free slots, so that
        # few of their writes lose a race; the lowest free slot first would make them all race.
        self._rng.shuffle(free)
        for i in free:
            if len(live) >= limit:
                break
            entered = self._take(key, i, limit, event_id)
            if isinstance(entered, SlotLease):
                return entered
            live.append(entered)
        first = min(live, key=lambda slot: math.inf if slot.until is None else slot.until)
        return GroupFull(
            owner_of(first.item),
            first.item["EventId"]["S"],
            first.until,
            holders=len(live),
            limit=limit,
        )

    def _take(self, key: str, slot: int, limit: int, event_id: str) -> SlotLease | SlotItem:
        """Take slot with a conditional PutItem: its lease, or the live item that holds it."""
        now = self._clock()
        lease = SlotLease(key, new_owner(), until=now + self._lease_seconds, slot=slot)
        taken, old = conditional_write(
            self._client.put_item,
            self._table,
            Item={
                **slot_key(key, slot),
                "EventId": {"S": event_id},
                "Owner": {"S": lease.owner},
                "LeaseUntil": lease_time(lease.until),
                "Limit": {"N": str(limit)},
            },
            ConditionExpression="attribute_not_exists(EventId) OR LeaseUntil < :now",
            ExpressionAttributeValues={":now": lease_time(now)},
            ReturnValues="ALL_OLD",
        )
        if taken:
            if "EventId" in old:
                log.warning(
                    "concurrency group %s: slot %d taken over from %s, whose lease ended at %s",
                    quote(key),
                    slot,
                    owner_of(old),
                    old.get("LeaseUntil", {}).get("N"),
                )
            return lease
        if owner_of(old) == lease.owner:
            return lease  # our own write, retried after its response was lost
        return SlotItem(slot, old)

    def slots(self, key: str) -> list[SlotItem]:
        """Every slot item of group key, held or not: one consistent Query of its partition (a
        page more per MB of items, which only a group of hundreds of slots reaches)."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "Id = :key AND begins_with(#type, :slot)",
            "ProjectionExpression": "#type, EventId, #owner, LeaseUntil",
            # TYPE and OWNER are DynamoDB reserved words.
            "ExpressionAttributeNames": {"#type": "Type", "#owner": "Owner"},
            "ExpressionAttributeValues": {":key": {"S": key}, ":slot": {"S": SLOT_TYPE_PREFIX}},
            "ConsistentRead": True,
        }
        items: list[dict[str, Any]] = []
        while True:
            page = self._client.query(**request)
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [
            SlotItem(slot, item)
            for item in items
            if (slot := parse_slot(item["Type"]["S"])) is not None
        ]

    def renew(self, lease: Lease) -> bool:
        until = self._clock() + self._lease_seconds
        key = slot_key(lease.key, slot_of(lease))
        return renew_lease(self._client, self._table, key, lease.owner, until)

    def leave(self, lease: Lease) -> bool:
        update = self.leave_update(lease)
        left, old = conditional_write(self._client.update_item, self._table, **update)
        return left or self.left_by(old, lease)

    def leave_update(self, lease: Lease) -> dict[str, Any]:
        """The UpdateItem request that gives the slot back, for leave() or a transaction: it
        leaves a release mark as a lock's release does."""
        return owner_condition(
            slot_key(lease.key, slot_of(lease)),
            lease.owner,
            UpdateExpression="REMOVE EventId, LeaseUntil, #owner, #limit "
            "SET ReleasedBy = :owner, Expired = :expired",
            ExpressionAttributeNames={"#limit": "Limit"},  # a reserved word too
            ExpressionAttributeValues={
                ":expired": {"N": str(int(self._clock()) + RELEASE_MARK_SECONDS)}
            },
        )

    @staticmethod
    def left_by(item: dict[str, Any], lease: Lease) -> bool:
        """Whether item, which failed a leave's condition, carries lease's own release mark: the
        same leave, retried after its answer was lost."""
        return item.get("ReleasedBy", {}).get("S") == lease.owner


def slot_of(lease: Lease) -> int:
    """The slot a lease holds; a lease of another store (a lock's, a claim's) is a caller's bug."""
    if not isinstance(lease, SlotLease):
        raise TypeError(f"not a concurrency group's lease: {lease!r}")
    return lease.slot


def slot_key(key: str, slot: int) -> dict[str, Any]:
    """The DynamoDB key of slot of group key."""
    return {"Id": {"S": key}, "Type": {"S": f"{SLOT_TYPE_PREFIX}{slot}"}}


def parse_slot(type_: str) -> int | None:
    """The slot number of a slot item's Type ("slot#3" -> 3); None for any other Type."""
    number = type_.removeprefix(SLOT_TYPE_PREFIX)
    if number == type_ or not (number.isascii() and number.isdigit()):
        return None
    return int(number)
