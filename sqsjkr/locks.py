"""Locks per lock_id, so that the same job never runs on two hosts at once.

Locker is the seam (the Go original's Lock/Unlock); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from .aws import conditional_put

#: The Type attribute of lock items, shared with the Go daemon's table.
LOCK_TYPE = "lock"


class Locker(Protocol):
    """Takes and gives back named locks."""

    def try_lock(self, lock_id: str, event_id: str) -> bool:
        """Take lock_id for event_id: True if taken, False if someone holds it. Raises on failure."""

    def unlock(self, lock_id: str) -> None:
        """Give lock_id back."""


class NoopLocker:
    """Every lock is always free: for a single host, or when jobs need no mutual exclusion."""

    def try_lock(self, lock_id: str, event_id: str) -> bool:
        return True

    def unlock(self, lock_id: str) -> None:
        return None


class MemoryLocker:
    """Locks within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.held: dict[str, str] = {}

    def try_lock(self, lock_id: str, event_id: str) -> bool:
        with self._mutex:
            if lock_id in self.held:
                return False
            self.held[lock_id] = event_id
            return True

    def unlock(self, lock_id: str) -> None:
        with self._mutex:
            self.held.pop(lock_id, None)


class DynamoLocker:
    """The Go daemon's lock items: {Id: lock_id, Type: "lock", EventId: event_id} while held."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def try_lock(self, lock_id: str, event_id: str) -> bool:
        return conditional_put(
            self._client,
            self._table,
            {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}, "EventId": {"S": event_id}},
            "attribute_not_exists(EventId)",
        )

    def unlock(self, lock_id: str) -> None:
        self._client.delete_item(
            TableName=self._table, Key={"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}
        )
