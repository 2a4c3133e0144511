"""Group commit of DynamoDB transactions: the writes that several workers ask for at once (claims,
ends of runs) go out as one TransactWriteItems.

A claim sends at once, and what arrives while its call is on the wire goes in the next call. A
run's end may wait a little (linger) for the next claim to carry it: a burst of jobs costs a few
calls instead of one or two per job, and one worker's end of a run shares its next job's claim.
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
#: What a write counts for beside its attribute values (its table's name, its expressions and
#: their names): more than most take, and 100 writes of DynamoDB's longest expressions (4 KB)
#: would still keep a combined call within its 4 MB with MAX_COMBINED_BYTES of values.
WRITE_BYTES = 512
#: The longest a write waits behind another writer's call before it goes alone: a call that
#: hangs (up to aws.DYNAMODB_CALL_SECONDS) must not hold up every write of the daemon with it.
MAX_WAIT_SECONDS = 1.0
#: Errors of a combined call after which each part is sent again alone: one part's failed
#: condition (or conflict with another transaction) cancels the whole transaction, and what one
#: part's caller must learn from the cancellation (which condition failed, on which item) is
#: only told by its own call.
RETRY_ALONE = frozenset({"TransactionCanceledException", "ValidationException"})
#: The longest a write that may linger (a run's end, written behind its worker) waits for
#: another writer's call to carry it before it sends one of its own.
MAX_LINGER_SECONDS = 0.25


@dataclass(eq=False)
class _Part:
    writes: list[dict[str, Any]]
    keys: frozenset[Hashable]
    size: int
    #: When it sends a call of its own, if no other writer's call has taken it by then.
    due: float
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

    def __init__(
        self,
        client: Any,
        *,
        max_wait: float = MAX_WAIT_SECONDS,
        max_linger: float = MAX_LINGER_SECONDS,
    ) -> None:
        self._client = client
        self._max_wait = max_wait
        self._max_linger = max_linger
        self._mutex = threading.Lock()
        self._waiting: list[_Part] = []
        self._sending = False
        # Each writing thread's Condition on _mutex, made once: a thread waits on one part at
        # a time, and every wait is in a loop that looks at its part's state again.
        self._conditions = threading.local()

    def _condition(self) -> threading.Condition:
        """The calling thread's Condition on the mutex, for the part it writes."""
        condition: threading.Condition | None = getattr(self._conditions, "ready", None)
        if condition is None:
            condition = self._conditions.ready = threading.Condition(self._mutex)
        return condition

    @property
    def waiting(self) -> int:
        """How many callers' writes wait for the call on the wire to end."""
        with self._mutex:
            return len(self._waiting)

    def write(self, writes: list[dict[str, Any]], *, linger: float = 0.0) -> None:
        """Apply writes (TransactItems, each with its TableName) all or none. linger: how long
        they may wait (at most max_linger) for another writer's call to take them along
        before they send one of their own; 0 sends at once when no call is on the wire."""
        keys = frozenset(map(_item_key, writes))
        due = time.monotonic() + min(max(0.0, linger), self._max_linger)
        part = _Part(writes, keys, _size(writes), due, self._condition())
        deadline = due + self._max_wait
        with self._mutex:
            self._waiting.append(part)
            batch = self._wait_turn(part, deadline)
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

    def _wait_turn(self, part: _Part, deadline: float) -> list[_Part] | None:
        """On the lock: wait until part is done, taken into another writer's call, or due to
        send one of its own (then the batch to send: part and what fits beside it). None
        otherwise, with part out of the queue when the call ahead was too slow to wait for."""
        while not part.done:
            now = time.monotonic()
            if part.taken:
                part.ready.wait()
            elif not self._sending:
                if now >= part.due:
                    self._sending = True
                    return self._take(part)
                part.ready.wait(part.due - now)  # another writer's call may take it first
            elif now >= deadline:
                self._waiting.remove(part)  # the call ahead is slow: go alone
                return None
            else:
                part.ready.wait(deadline - now)
        return None

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
        """batch in one call; when a condition or conflict of some parts cancelled it, the
        others in another call at once (the cancellation names each write's reason), so that a
        duplicate's claim does not cost every other claim of its call a call of its own."""
        pending = batch
        while pending:
            error: BaseException | None = None
            try:
                writes = [write for part in pending for write in part.writes]
                self._client.transact_write_items(TransactItems=writes)
            except BaseException as exc:
                # Whatever it was (an AWS error, no memory), every part's caller hears of it.
                error = exc
            again = [] if error is None else _not_refused(pending, error)
            with self._mutex:
                for part in pending:
                    if not any(part is other for other in again):
                        part.done, part.error, part.combined = True, error, len(batch) > 1
                        part.ready.notify()
            pending = again
        with self._mutex:
            self._sending = False
            if self._waiting:
                # The one due first sends the next call (or waits out its linger for a writer
                # that sends at once).
                min(self._waiting, key=lambda part: part.due).ready.notify()


def _not_refused(parts: list[_Part], error: BaseException) -> list[_Part]:
    """Of the parts of a cancelled call, those whose writes the cancellation did not refuse
    (reason None each), when it refused some others: nothing of them was written, and they go
    again together. [] when the error does not say write by write."""
    if len(parts) < 2 or error_code(error) != "TransactionCanceledException":
        return []
    reasons = getattr(error, "response", {}).get("CancellationReasons") or []
    if len(reasons) != sum(len(part.writes) for part in parts):
        return []
    spared, at = [], 0
    for part in parts:
        codes = {reason.get("Code", "None") for reason in reasons[at : at + len(part.writes)]}
        at += len(part.writes)
        if codes == {"None"}:
            spared.append(part)
    return spared if len(spared) < len(parts) else []


def _size(writes: list[dict[str, Any]]) -> int:
    """About the bytes writes take in a request: their attribute values' text (a run record's
    output is what can be big), and WRITE_BYTES each for the rest. A walk of the values only:
    repr() of every write cost a run's end and its claim some 40 us each."""
    size = 0
    for write in writes:
        for request in write.values():
            size += WRITE_BYTES
            for values in (request.get("Item"), request.get("ExpressionAttributeValues")):
                for value in (values or {}).values():
                    for typed in value.values():
                        size += len(typed) if isinstance(typed, str) else len(repr(typed))
    return size


def _item_key(write: dict[str, Any]) -> Hashable:
    """The table and key of the item a TransactItem writes; the lock table's keys are Id and Type."""
    [(action, request)] = write.items()
    item = request["Item"] if action == "Put" else request["Key"]
    # Each key attribute is a one-entry dict ({"S": text}): its entry is its hashable value.
    [id_] = item["Id"].items()
    [type_] = item["Type"].items()
    return request["TableName"], id_, type_
