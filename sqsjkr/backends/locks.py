"""Locks per lock_id, so that the same job never runs on two hosts at once.

Locker is the seam (the Go original's Lock/Unlock, plus lease renewal); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import logging
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
from sqsjkr.errors import quote

log = logging.getLogger("sqsjkr.locks")

#: The Type attribute of lock items, shared with the Go daemon's table.
LOCK_TYPE = "lock"
#: A released lock keeps a mark of who released it for this long (then DynamoDB's TTL on
#: Expired removes it), so that a release retried after a lost response knows it was its own.
RELEASE_MARK_SECONDS = 86400


@dataclass(frozen=True)
class Held:
    """The answer of try_lock when someone else holds the lock: who, as far as the store says."""

    owner: str | None = None  # host:pid:id; None for a Go daemon's lock
    event_id: str | None = None
    until: float | None = None  # when its lease ends; None: no lease (a Go daemon's lock)

    def describe(self, now: float) -> str:
        """ "held by HOST:PID for event E, 12s of its lease left", for the log."""
        who = "a Go daemon" if self.owner is None else ":".join(self.owner.split(":")[:2])
        text = f"held by {who}"
        if self.event_id:
            text += f" for event {quote(self.event_id)}"
        if self.until is None:
            return text + " (no lease: held until its holder releases it)"
        return text + f", {max(0.0, self.until - now):.0f}s of its lease left"


class Locker(Protocol):
    """Takes, keeps and gives back named locks."""

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        """Take lock_id for event_id: the lease if taken, who holds it if not. Raises on failure."""

    def renew(self, lease: Lease) -> bool:
        """Extend a held lock's lease: False if the lock is no longer ours."""

    def unlock(self, lease: Lease) -> bool:
        """Give the lock back: False if it was no longer ours (our lease had passed, and another
        holder took it over, or it is gone)."""


class NoopLocker:
    """Every lock is always free: for a single host, or when jobs need no mutual exclusion."""

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        return Lease(lock_id, "")

    def renew(self, lease: Lease) -> bool:
        return True

    def unlock(self, lease: Lease) -> bool:
        return True


class MemoryLocker:
    """Locks within one process, which never expire: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.held: dict[str, str] = {}  # lock_id -> event_id
        self._owners: dict[str, str] = {}
        self._released_by: dict[str, str] = {}  # lock_id -> the owner that released it last

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        with self._mutex:
            if lock_id in self.held:
                return Held(self._owners.get(lock_id), self.held[lock_id])
            lease = Lease(lock_id, new_owner())
            self.held[lock_id] = event_id
            self._owners[lock_id] = lease.owner
            return lease

    def renew(self, lease: Lease) -> bool:
        with self._mutex:
            return self._owners.get(lease.key) == lease.owner

    def unlock(self, lease: Lease) -> bool:
        with self._mutex:
            if self._owners.get(lease.key) != lease.owner:
                return self._released_by.get(lease.key) == lease.owner
            del self.held[lease.key], self._owners[lease.key]
            self._released_by[lease.key] = lease.owner
            return True


class DynamoLocker:
    """The Go daemon's lock items, {Id: lock_id, Type: "lock", EventId: event_id}, with a lease.

    Our items add Owner and LeaseUntil (unix seconds). A lock whose lease has passed may be taken
    over; a Go item has no LeaseUntil and counts as held, so both daemons can share a table.
    Releasing removes EventId, Owner and LeaseUntil and leaves ReleasedBy (and an Expired for the
    TTL): an item without EventId is a free lock to both daemons, and the mark tells a retried
    release its own work from a lock lost to another holder.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._table = table
        self._lease_seconds = lease_seconds
        self._clock = clock

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        now = self._clock()
        lease = Lease(lock_id, new_owner(), until=now + self._lease_seconds)
        taken, old = conditional_write(
            self._client.put_item,
            self._table,
            Item=_item(lease, event_id),
            ConditionExpression="attribute_not_exists(EventId) OR LeaseUntil < :now",
            ExpressionAttributeValues={":now": lease_time(now)},
            ReturnValues="ALL_OLD",
        )
        if taken:
            if "EventId" in old:
                log.warning(
                    "lock %s taken over from %s, whose lease ended at %s",
                    quote(lock_id),
                    owner_of(old),
                    old.get("LeaseUntil", {}).get("N"),
                )
            return lease
        if owner_of(old) == lease.owner:
            return lease  # our own write, retried after its response was lost
        until = old.get("LeaseUntil", {}).get("N")
        return Held(owner_of(old), old.get("EventId", {}).get("S"), float(until) if until else None)

    def take_put(self, lock_id: str, event_id: str) -> tuple[Lease, dict[str, Any]]:
        """The Put that takes lock_id if it is free (never taken, or released), for another
        store's transaction: with the lease it writes. A lock whose holder's lease has passed is
        left to try_lock, which logs the takeover."""
        lease = Lease(lock_id, new_owner(), until=self._clock() + self._lease_seconds)
        put = {
            "TableName": self._table,
            "Item": _item(lease, event_id),
            "ConditionExpression": "attribute_not_exists(EventId)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        return lease, put

    def renew(self, lease: Lease) -> bool:
        until = self._clock() + self._lease_seconds
        return renew_lease(self._client, self._table, _key(lease.key), lease.owner, until)

    def unlock(self, lease: Lease) -> bool:
        update = self.release_update(lease)
        released, old = conditional_write(self._client.update_item, self._table, **update)
        return released or self.released_by(old, lease)

    def release_update(self, lease: Lease) -> dict[str, Any]:
        """The UpdateItem request that releases the lock, for unlock() or a transaction."""
        return owner_condition(
            _key(lease.key),
            lease.owner,
            UpdateExpression="REMOVE EventId, LeaseUntil, #owner "
            "SET ReleasedBy = :owner, Expired = :expired",
            ExpressionAttributeValues={
                ":expired": {"N": str(int(self._clock()) + RELEASE_MARK_SECONDS)}
            },
        )

    @staticmethod
    def released_by(item: dict[str, Any], lease: Lease) -> bool:
        """Whether item, which failed a release's condition, carries lease's own release mark:
        the same release, retried after its answer was lost."""
        return item.get("ReleasedBy", {}).get("S") == lease.owner


def _key(lock_id: str) -> dict[str, Any]:
    return {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}


def _item(lease: Lease, event_id: str) -> dict[str, Any]:
    """The lock item of a held lock."""
    return {
        **_key(lease.key),
        "EventId": {"S": event_id},
        "Owner": {"S": lease.owner},
        "LeaseUntil": lease_time(lease.until),
    }
