"""Dedupe of queue messages: SQS may deliver a message twice, the job must run once.

DedupeStore is the seam (the Go original's Throttler); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from .aws import conditional_put

#: The Type attribute of dedupe items, shared with the Go daemon's table.
THROTTLE_TYPE = "throttle"


class DedupeStore(Protocol):
    """Remembers which messages have been taken."""

    def claim(self, message_id: str) -> bool:
        """Record message_id: True the first time, False for a duplicate. Raises on failure."""


class NoopDedupe:
    """Remembers nothing: every delivery runs."""

    def claim(self, message_id: str) -> bool:
        return True


class MemoryDedupe:
    """Dedupe within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.seen: set[str] = set()

    def claim(self, message_id: str) -> bool:
        with self._mutex:
            if message_id in self.seen:
                return False
            self.seen.add(message_id)
            return True


class DynamoDedupe:
    """The Go daemon's throttle items: {Id: message id, Type: "throttle", Expired: unix seconds}.

    Expired is now + the queue's retention period, after which SQS cannot deliver the message again;
    a TTL on Expired lets DynamoDB remove the item.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_seconds: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._table = table
        self._retention_seconds = retention_seconds
        self._clock = clock

    def claim(self, message_id: str) -> bool:
        expired = int(self._clock()) + self._retention_seconds
        return conditional_put(
            self._client,
            self._table,
            {"Id": {"S": message_id}, "Type": {"S": THROTTLE_TYPE}, "Expired": {"N": str(expired)}},
            "attribute_not_exists(Expired)",
        )
