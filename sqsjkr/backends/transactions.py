"""Group commit of DynamoDB transactions: the writes that several workers ask for at once (claims,
ends of runs) go out as one TransactWriteItems.

Nothing waits for a timer: the first writer sends at once, and what arrives while its call is on
the wire goes in the next call. A burst of jobs costs a few calls instead of one or two per job.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import error_code, retry_conflicts

#: DynamoDB's limit of actions in one transaction.
MAX_ACTIONS = 100
#: Parts are combined up to this much request (DynamoDB allows 4 MB): a run record may carry
#: hundreds of KiB of output, and one that big goes alone.
MAX_COMBINED_BYTES = 1 << 20
#: The longest a write waits behind another writer's call before it goes alone: a call that
#: hangs (up to aws.DYNAMODB_CALL_SECONDS) must not hold up every write of the daemon with it.
MAX_WAIT_SECONDS = 1.0
#: Errors of a combined call after which each part is sent again alone: one part's failed
#: condition (or conflict with another transaction) cancels the whole transaction, and what one
#: part's caller must learn from the cancellation (which condition failed, on which item) is
#: only told by its own call.
RETRY_ALONE = frozenset({"TransactionCanceledException", "ValidationException"})


@dataclass(eq=False)
class _Part:
    writes: list[dict[str, Any]]
    keys: frozenset[Hashable]
    size: int
    #: On Transactions' lock: only this part's writer is woken for it (a burst's writers would
    #: all wake at every call's end, to find nothing to do, with one Condition).
    ready: threading.Condition
    taken: bool = False  # into a call, which it must then wait for
    done: bool = False
    error: BaseException | None = None
    combined: bool = False


class Transactions:
    """TransactWriteItems on one client, combined across the threads that call write() at once.

    A caller sees what a call of its own would give: write() returns once its writes took
    effect, and raises the ClientError that its writes alone would have raised. A conflict
    with another transaction on one of its items is tried again (aws.retry_conflicts).
    """

    def __init__(self, client: Any, *, max_wait: float = MAX_WAIT_SECONDS) -> None:
        self._client = client
        self._max_wait = max_wait
        self._mutex = threading.Lock()
        self._waiting: list[_Part] = []
        self._sending = False

    @property
    def waiting(self) -> int:
        """How many callers' writes wait for the call on the wire to end."""
        with self._mutex:
            return len(self._waiting)

    def write(self, writes: list[dict[str, Any]]) -> None:
        """Apply writes (TransactItems, each with its TableName) all or none."""
        keys = frozenset(map(_item_key, writes))
        part = _Part(writes, keys, len(repr(writes)), threading.Condition(self._mutex))
        deadline = time.monotonic() + self._max_wait
        batch = None
        with self._mutex:
            self._waiting.append(part)
            while self._sending and not part.done:
                left = deadline - time.monotonic()
                if not part.taken and left <= 0:
                    self._waiting.remove(part)  # the call ahead is slow: go alone
                    break
                part.ready.wait(None if part.taken else left)
            else:
                if not part.done:
                    self._sending = True
                    batch = self._take(part)
        if batch is not None:
            self._send(batch)
        elif not part.done:
            self._alone(writes)
            return
        if part.error is None:
            return
        if part.combined and error_code(part.error) in RETRY_ALONE:
            self._alone(writes)
            return
        # A call of its own: tried again if another transaction's conflict refused it.
        self._alone(writes, failed=part.error)

    def _alone(self, writes: list[dict[str, Any]], failed: BaseException | None = None) -> None:
        """writes in a call of their own, tried again while a conflict with another transaction
        refuses them (aws.retry_conflicts): outside the group commit, whose next call would
        meet the same transaction at once."""
        retry_conflicts(
            lambda: self._client.transact_write_items(TransactItems=writes), failed=failed
        )

    def _take(self, first: _Part) -> list[_Part]:
        """first and the waiting parts that fit beside it, none touching an item twice (which
        DynamoDB refuses in one transaction)."""
        batch, keys, actions, size = [first], set(first.keys), len(first.writes), first.size
        self._waiting.remove(first)
        first.taken = True
        for part in list(self._waiting):
            if actions + len(part.writes) > MAX_ACTIONS or size + part.size > MAX_COMBINED_BYTES:
                break
            if keys.isdisjoint(part.keys):
                batch.append(part)
                self._waiting.remove(part)
                part.taken = True
                keys |= part.keys
                actions += len(part.writes)
                size += part.size
        return batch

    def _send(self, batch: list[_Part]) -> None:
        error: BaseException | None = None
        try:
            writes = [write for part in batch for write in part.writes]
            self._client.transact_write_items(TransactItems=writes)
        except BaseException as exc:
            # Whatever it was (an AWS error, no memory), every part's caller hears of it.
            error = exc
        with self._mutex:
            for part in batch:
                part.done, part.error, part.combined = True, error, len(batch) > 1
                part.ready.notify()
            self._sending = False
            if self._waiting:
                self._waiting[0].ready.notify()  # to send the next call


def _item_key(write: dict[str, Any]) -> Hashable:
    """The table and key of the item a TransactItem writes; the lock table's keys are Id and Type."""
    [(action, request)] = write.items()
    item = request["Item"] if action == "Put" else request["Key"]
    return request["TableName"], repr(item["Id"]), repr(item["Type"])
