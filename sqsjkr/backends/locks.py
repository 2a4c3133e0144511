"""Locks per lock_id, so that the same job never runs on two hosts at once.

Locker is the seam (the Go original's Lock/Unlock, plus lease renewal); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from sqsjkr.backends.aws import conditional_write, renew_lease, write_if_owner
from sqsjkr.backends.lease import Lease, new_owner
from sqsjkr.errors import quote

log = logging.getLogger("sqsjkr.locks")

#: The Type attribute of lock items, shared with the Go daemon's table.
LOCK_TYPE = "lock"


class Locker(Protocol):
    """Takes, keeps and gives back named locks."""

    def try_lock(self, lock_id: str, event_id: str) -> Lease | None:
        """Take lock_id for event_id: the lease if taken, None if someone holds it. Raises on failure."""

    def renew(self, lease: Lease) -> bool:
        """Extend a held lock's lease: False if the lock is no longer ours."""

    def unlock(self, lease: Lease) -> bool:
        """Give the lock back: False if another holder has it now (ours had lapsed)."""


class NoopLocker:
    """Every lock is always free: for a single host, or when jobs need no mutual exclusion."""

    def try_lock(self, lock_id: str, event_id: str) -> Lease | None:
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

    def try_lock(self, lock_id: str, event_id: str) -> Lease | None:
        with self._mutex:
            if lock_id in self.held:
                return None
            lease = Lease(lock_id, new_owner())
            self.held[lock_id] = event_id
            self._owners[lock_id] = lease.owner
            return lease

    def renew(self, lease: Lease) -> bool:
        with self._mutex:
            return self._owners.get(lease.key) == lease.owner

    def unlock(self, lease: Lease) -> bool:
        with self._mutex:
            owner = self._owners.get(lease.key)
            if owner is None:
                return True
            if owner != lease.owner:
                return False
            del self.held[lease.key], self._owners[lease.key]
            return True


class DynamoLocker:
    """The Go daemon's lock items, {Id: lock_id, Type: "lock", EventId: event_id}, with a lease.

    Our items add Owner and LeaseUntil (unix seconds). A lock whose lease has passed may be taken
    over; a Go item has no LeaseUntil and counts as held, so both daemons can share a table.
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

    def try_lock(self, lock_id: str, event_id: str) -> Lease | None:
        lease = Lease(lock_id, new_owner())
        now = self._clock()
        taken, old = conditional_write(
            self._client.put_item,
            self._table,
            Item={
                **_key(lock_id),
                "EventId": {"S": event_id},
                "Owner": {"S": lease.owner},
                "LeaseUntil": {"N": str(int(now + self._lease_seconds))},
            },
            ConditionExpression="attribute_not_exists(EventId) OR LeaseUntil < :now",
            ExpressionAttributeValues={":now": {"N": str(int(now))}},
            ReturnValues="ALL_OLD",
        )
        if taken:
            if old:
                log.warning(
                    "lock %s taken over from %s, whose lease ended at %s",
                    quote(lock_id),
                    _owner(old),
                    old.get("LeaseUntil", {}).get("N"),
                )
            return lease
        if _owner(old) == lease.owner:
            return lease  # our own write, retried after its response was lost
        return None

    def renew(self, lease: Lease) -> bool:
        until = self._clock() + self._lease_seconds
        return renew_lease(self._client, self._table, _key(lease.key), lease.owner, until)

    def unlock(self, lease: Lease) -> bool:
        deleted, left = write_if_owner(
            self._client.delete_item, self._table, _key(lease.key), lease.owner
        )
        # Nothing left: our own delete, retried after its response was lost.
        return deleted or not left


def _key(lock_id: str) -> dict[str, Any]:
    return {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}


def _owner(item: dict[str, Any]) -> str | None:
    return item.get("Owner", {}).get("S")
