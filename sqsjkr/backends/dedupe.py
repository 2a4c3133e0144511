"""Dedupe of queue messages: SQS may deliver a message twice, the job must run once.

DedupeStore is the seam (the Go original's Throttler, plus leases); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import enum
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
    write_if_owner,
)
from sqsjkr.backends.lease import Lease, new_owner
from sqsjkr.errors import StoreError

#: The Type attribute of dedupe items, shared with the Go daemon's table.
THROTTLE_TYPE = "throttle"


class ClaimState(enum.Enum):
    """What a claim on a message found."""

    CLAIMED = "claimed"  # the job is ours to run
    FINISHED = "finished"  # its job has finished (or a Go daemon took it): delete the message
    RUNNING = "running"  # another live daemon holds it: hide the message until its lease ends


@dataclass(frozen=True)
class Claim:
    """The answer to claim(): the lease when CLAIMED, the other holder's lease end when RUNNING."""

    state: ClaimState
    lease: Lease | None = None
    held_until: float | None = None


class DedupeStore(Protocol):
    """Remembers which messages have been taken, by whom, and whether their jobs finished."""

    def claim(self, message_id: str) -> Claim:
        """Take message_id, or say who has it. Raises on failure."""

    def renew(self, lease: Lease) -> bool:
        """Extend the claim's lease: False if it is no longer ours."""

    def finish(self, lease: Lease) -> bool:
        """Mark the job finished for good (later deliveries are FINISHED): False if the claim
        was no longer ours (its lease had passed and another daemon took it over)."""

    def release(self, lease: Lease) -> None:
        """Give the claim up unfinished, so that a later delivery runs the job."""


class NoopDedupe:
    """Remembers nothing: every delivery runs."""

    def claim(self, message_id: str) -> Claim:
        return Claim(ClaimState.CLAIMED, Lease(message_id, ""))

    def renew(self, lease: Lease) -> bool:
        return True

    def finish(self, lease: Lease) -> bool:
        return True

    def release(self, lease: Lease) -> None:
        return None


class MemoryDedupe:
    """Dedupe within one process, whose claims never expire: for tests and for embedding sqsjkr."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.running: dict[str, str] = {}  # message id -> owner
        self.finished: set[str] = set()
        self._finished_by: dict[str, str] = {}  # message id -> the owner that finished it

    def claim(self, message_id: str) -> Claim:
        with self._mutex:
            if message_id in self.finished:
                return Claim(ClaimState.FINISHED)
            if message_id in self.running:
                return Claim(ClaimState.RUNNING, held_until=float("inf"))
            lease = Lease(message_id, new_owner())
            self.running[message_id] = lease.owner
            return Claim(ClaimState.CLAIMED, lease)

    def renew(self, lease: Lease) -> bool:
        with self._mutex:
            return self.running.get(lease.key) == lease.owner

    def finish(self, lease: Lease) -> bool:
        with self._mutex:
            if self.running.get(lease.key) != lease.owner:
                return self._finished_by.get(lease.key) == lease.owner
            del self.running[lease.key]
            self.finished.add(lease.key)
            self._finished_by[lease.key] = lease.owner
            return True

    def release(self, lease: Lease) -> None:
        with self._mutex:
            if self.running.get(lease.key) == lease.owner:
                del self.running[lease.key]

    @property
    def seen(self) -> set[str]:
        """Every message id claimed so far, running or finished."""
        with self._mutex:
            return set(self.running) | self.finished


class DynamoDedupe:
    """The Go daemon's throttle items, {Id: message id, Type: "throttle", Expired: unix seconds},
    with a lease while the job runs.

    Expired is now + the queue's retention period, after which SQS cannot deliver the message
    again; a TTL on Expired lets DynamoDB remove the item. While the job waits or runs, the item
    also has Owner and LeaseUntil; finishing removes LeaseUntil. An item without LeaseUntil (a
    finished job, or one a Go daemon took) stops every later delivery.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_seconds: int,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._table = table
        self._retention_seconds = retention_seconds
        self._lease_seconds = lease_seconds
        self._clock = clock

    def claim(self, message_id: str) -> Claim:
        now = self._clock()
        lease = Lease(message_id, new_owner(), until=now + self._lease_seconds)
        claimed, old = conditional_write(
            self._client.put_item,
            self._table,
            Item={
                **_key(message_id),
                "Expired": {"N": str(int(now) + self._retention_seconds)},
                "Owner": {"S": lease.owner},
                "LeaseUntil": lease_time(lease.until),
            },
            # A claim whose lease has passed belongs to a daemon that died: take it over.
            ConditionExpression="attribute_not_exists(Expired) OR LeaseUntil < :now",
            ExpressionAttributeValues={":now": lease_time(now)},
        )
        if claimed or owner_of(old) == lease.owner:
            # The second case: our own write, retried after its response was lost.
            return Claim(ClaimState.CLAIMED, lease)
        if not old:
            # The condition can only fail on an item that exists: an endpoint that does not
            # return it (ReturnValuesOnConditionCheckFailure) leaves the state unknown, and
            # calling it finished would delete the message unrun.
            raise StoreError(
                f"the claim of message {message_id} failed its condition, and the table "
                f"{self._table!r} did not return the item that failed it"
            )
        if "LeaseUntil" not in old:
            return Claim(ClaimState.FINISHED)
        return Claim(ClaimState.RUNNING, held_until=float(old["LeaseUntil"]["N"]))

    def renew(self, lease: Lease) -> bool:
        until = self._clock() + self._lease_seconds
        return renew_lease(self._client, self._table, _key(lease.key), lease.owner, until)

    def finish(self, lease: Lease) -> bool:
        update = self.finish_update(lease)
        finished, old = conditional_write(self._client.update_item, self._table, **update)
        return finished or self.finished_by(old, lease)

    def finish_update(self, lease: Lease) -> dict[str, Any]:
        """The UpdateItem request that finishes the claim, for this call or a transaction."""
        return owner_condition(_key(lease.key), lease.owner, UpdateExpression="REMOVE LeaseUntil")

    @staticmethod
    def finished_by(item: dict[str, Any], lease: Lease) -> bool:
        """Whether item, which failed a finish's condition, was finished by lease's owner: the
        same write, retried after its answer was lost."""
        return owner_of(item) == lease.owner and "LeaseUntil" not in item

    def release(self, lease: Lease) -> None:
        write_if_owner(self._client.delete_item, self._table, _key(lease.key), lease.owner)


def _key(message_id: str) -> dict[str, Any]:
    return {"Id": {"S": message_id}, "Type": {"S": THROTTLE_TYPE}}
