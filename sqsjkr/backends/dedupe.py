"""Dedupe of queue messages: SQS may deliver a message twice, the job must run once.

DedupeStore is the seam (the Go original's Throttler, plus leases); DynamoDB, in-memory and no-op implementations follow.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import (
    conditional_write,
    error_code,
    failed_condition,
    lease_time,
    owner_condition,
    owner_of,
    raise_if_missing,
    renew_lease,
    write_if_owner,
)
from sqsjkr.backends.kills import NOT_MARKED, KillRequested, kill_due, mark_of
from sqsjkr.backends.lease import Lease, new_owner
from sqsjkr.backends.transactions import Transactions
from sqsjkr.contract.run import KillMark, RunOutcome, RunStart
from sqsjkr.errors import StoreError

#: The Type attribute of dedupe items, shared with the Go daemon's table.
THROTTLE_TYPE = "throttle"
#: The attribute of a firing's claim that names the message holding it.
HOLDER = "MessageId"
#: The attribute of a message's mark that names the firing claimed for it: a mark without it
#: is the Go daemon's throttle item, which took the message itself.
CLAIMED_AS = "Firing"
#: The attribute of a claim (and a message's mark) naming the job's event: `sqsjkr job ID`
#: finds the run of a message by it, without the event's id.
EVENT_ID = "EventId"
#: The attribute of a finished claim saying how its run ended (a RunOutcome's value).
OUTCOME = "Outcome"
#: How long after its first run a copy of a firing can still arrive, beyond the queue's own
#: retention: EventBridge retries a delivery for up to 24 hours (the most a schedule's or a
#: rule's maximum event age allows), and a letter waits up to 14 days (SQS's longest
#: retention) in a dead-letter queue before `dlq redrive` sends it back to the queue.
LATE_COPY_SECONDS = 86400 + 14 * 86400


class ClaimState(enum.Enum):
    """What a claim on a message found."""

    CLAIMED = "claimed"  # the job is ours to run
    FINISHED = "finished"  # its job has finished (or a Go daemon took it): delete the message
    RUNNING = "running"  # another live daemon holds it: hide the message until its lease ends
    WAITING = "waiting"  # its retry is due later: hide the message until then
    #: `sqsjkr kill` asked to stop its run, whose holder did not act on it (it died, or the run
    #: ended first leaving a retry): the claim is now finished and ours, and the run ends
    #: killed without running.
    KILLED = "killed"


@dataclass(frozen=True)
class Claim:
    """The answer to claim(): the lease when CLAIMED, until when when RUNNING or WAITING."""

    state: ClaimState
    lease: Lease | None = None
    held_until: float | None = None
    #: Which run of the job this claim is for (1, then 2 for its first retry...); None when the
    #: store does not count runs.
    attempt: int | None = 1
    #: Whether the store noted the run about to begin (claim's running) in the same write.
    noted: bool = False
    #: The lock the claim's own write took (claim's lock), when the store could take it.
    lock: Lease | None = None
    #: The kill request, when KILLED.
    kill: KillMark | None = None
    #: RUNNING, WAITING and FINISHED: the message whose claim it is (the message id the claim
    #: was taken for), when the store knows it.
    holder: str | None = None
    #: FINISHED: how its run ended (a RunOutcome's value), when the store kept it: a
    #: redelivery finishes from it what the run's end left undone (a pipeline moved on).
    outcome: str | None = None


@dataclass(frozen=True)
class WantedLock:
    """A lock the job needs before it runs, which a store that keeps locks beside its claims
    may take in the claim's own write."""

    lock_id: str
    event_id: str


@dataclass(frozen=True)
class Retry:
    """A run that failed with retries left: runs done so far, and when the next may start."""

    attempts: int
    at: float


class DedupeStore(Protocol):
    """Remembers which messages have been taken, by whom, and whether their jobs finished."""

    def claim(
        self,
        key: str,
        *,
        message_id: str | None = None,
        running: RunStart | None = None,
        lock: WantedLock | None = None,
        noting: bool = True,
    ) -> Claim:
        """Take the claim key (a message id, or the key of a firing that several messages
        share, taken for message_id), or say who has it (Claim.holder). running: the run about to
        begin, its event named on the claim, which a store that keeps history may note in the
        same write (Claim.noted) when noting; lock: the job's lock, which it may take in that
        write too if it is free (Claim.lock). Raises on failure."""

    def claim_ahead(self, keys: Mapping[str, str]) -> dict[str, Claim]:
        """Take the claims keys (message ids, each to the id of its job's event) of a receive's
        jobs, in one write where the store can, noting no run: the CLAIMED ones. A key left out
        is claimed by its job's worker (claim()) when its turn comes: its claim was refused, or
        refused in the same write as others. Raises on failure."""

    def renew(self, lease: Lease) -> bool:
        """Extend the claim's lease: False if it is no longer ours. Raises KillRequested (after
        extending it) when `sqsjkr kill` marked it."""

    def finish(self, lease: Lease, outcome: str | None = None) -> bool:
        """Mark the job finished for good (later deliveries are FINISHED, with outcome, how its
        run ended): False if the claim was no longer ours (its lease had passed and another
        daemon took it over)."""

    def release(self, lease: Lease, retry: Retry | None = None) -> None:
        """Give the claim up unfinished, so that a later delivery runs the job: with retry, not
        before retry.at, as its run retry.attempts + 1."""


class NoopDedupe:
    """Remembers nothing: every delivery runs, and runs are not counted (Claim.attempt None)."""

    def claim(
        self,
        key: str,
        *,
        message_id: str | None = None,
        running: RunStart | None = None,
        lock: WantedLock | None = None,
        noting: bool = True,
    ) -> Claim:
        return Claim(ClaimState.CLAIMED, Lease(key, ""), attempt=None)

    def claim_ahead(self, keys: Mapping[str, str]) -> dict[str, Claim]:
        return {key: self.claim(key) for key in keys}

    def renew(self, lease: Lease) -> bool:
        return True

    def finish(self, lease: Lease, outcome: str | None = None) -> bool:
        return True

    def release(self, lease: Lease, retry: Retry | None = None) -> None:
        return None


class MemoryDedupe:
    """Dedupe within one process, whose claims never expire: for tests and for embedding sqsjkr."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        """Its sets are of claim keys: message ids, or firings' keys."""
        self._mutex = threading.Lock()
        self._clock = clock
        self.running: dict[str, str] = {}  # message id -> owner
        self.finished: set[str] = set()
        self._finished_by: dict[str, str] = {}  # message id -> the owner that finished it
        self.retries: dict[str, Retry] = {}  # message id -> its retry to come
        self._holders: dict[str, str] = {}  # claim key -> the message id it was taken for
        self._outcomes: dict[str, str] = {}  # claim key -> how its finished run ended

    def claim(
        self,
        key: str,
        *,
        message_id: str | None = None,
        running: RunStart | None = None,
        lock: WantedLock | None = None,
        noting: bool = True,
    ) -> Claim:
        with self._mutex:
            holder = self._holders.get(key, key)
            if key in self.finished:
                return Claim(ClaimState.FINISHED, holder=holder, outcome=self._outcomes.get(key))
            if key in self.running:
                return Claim(ClaimState.RUNNING, held_until=float("inf"), holder=holder)
            retry = self.retries.get(key)
            if retry is not None and retry.at > self._clock():
                return Claim(ClaimState.WAITING, held_until=retry.at, holder=holder)
            self.retries.pop(key, None)
            lease = Lease(key, new_owner())
            self.running[key] = lease.owner
            self._holders[key] = message_id or key
            attempt = 1 if retry is None else retry.attempts + 1
            return Claim(ClaimState.CLAIMED, lease, attempt=attempt)

    def claim_ahead(self, keys: Mapping[str, str]) -> dict[str, Claim]:
        claims = {key: self.claim(key) for key in keys}
        return {key: claim for key, claim in claims.items() if claim.state is ClaimState.CLAIMED}

    def renew(self, lease: Lease) -> bool:
        with self._mutex:
            return self.running.get(lease.key) == lease.owner

    def finish(self, lease: Lease, outcome: str | None = None) -> bool:
        with self._mutex:
            if self.running.get(lease.key) != lease.owner:
                return self._finished_by.get(lease.key) == lease.owner
            del self.running[lease.key]
            self.finished.add(lease.key)
            self._finished_by[lease.key] = lease.owner
            if outcome is not None:
                self._outcomes[lease.key] = outcome
            return True

    def release(self, lease: Lease, retry: Retry | None = None) -> None:
        with self._mutex:
            if self.running.get(lease.key) == lease.owner:
                del self.running[lease.key]
                if retry is not None:
                    self.retries[lease.key] = retry

    @property
    def seen(self) -> set[str]:
        """Every message id claimed so far, running or finished."""
        with self._mutex:
            return set(self.running) | self.finished


#: The claim's condition: a new message, or a claim whose holder died (its lease passed). An
#: item that counts runs (Attempts) goes through _claim_again instead, and one that carries a
#: kill request through _take_kill.
_CLAIM_CONDITION = (
    "attribute_not_exists(Expired) OR "
    f"(LeaseUntil < :now AND attribute_not_exists(Attempts) AND {NOT_MARKED})"
)
#: Claiming again an item that counts runs: its retry is due, or its holder died meanwhile.
_CLAIM_AGAIN_CONDITION = (
    f"Attempts = :attempts AND {NOT_MARKED} AND ((attribute_not_exists(LeaseUntil) AND "
    "RetryAt <= :now) OR LeaseUntil < :now)"
)
#: Taking over a claim whose kill request no live holder will act on (kills.kill_due).
_TAKE_KILL_CONDITION = (
    "KillAt = :at AND (LeaseUntil < :now OR "
    "(attribute_not_exists(LeaseUntil) AND attribute_exists(RetryAt)))"
)


class DynamoDedupe:
    """The Go daemon's throttle items, {Id: message id, Type: "throttle", Expired: unix seconds},
    with a lease while the job runs, and a count of runs when it is retried. A message of a
    schedule's firing claims the firing's key instead (Firing.key, which all its messages share),
    the item naming the message that holds it (MessageId): the firing runs once in the fleet.

    Expired is now + the queue's retention period, after which SQS cannot deliver the message
    again; a TTL on Expired lets DynamoDB remove the item. While the job waits or runs, the item
    also has Owner and LeaseUntil; finishing removes LeaseUntil. An item without LeaseUntil or
    RetryAt (a finished job, or one a Go daemon took) stops every later delivery. A run that
    failed with retries left leaves Attempts (runs so far) and RetryAt (when the next may start).

    With note_running (DynamoHistory.running_update), a claim notes the run about to begin in
    its event's summary in the same TransactWriteItems. That write goes through transactions,
    which combines it with the other workers' writes of the moment (given the history's own
    Transactions, claims and ends of runs share calls). With take_lock too
    (DynamoLocker.take_put), that write also takes the job's lock when it is free: a job with a
    lock_id saves the lock's own call.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_seconds: int,
        lease_seconds: float,
        clock: Callable[[], float] = time.time,
        note_running: Callable[[RunStart], dict[str, Any]] | None = None,
        take_lock: Callable[[str, str], tuple[Lease, dict[str, Any]]] | None = None,
        transactions: Transactions | None = None,
    ) -> None:
        self._client = client
        self._take_lock = take_lock
        self._transactions = transactions or Transactions(client)
        self._table = table
        self._retention_seconds = retention_seconds
        self._lease_seconds = lease_seconds
        self._clock = clock
        self._note_running = note_running

    def claim(
        self,
        key: str,
        *,
        message_id: str | None = None,
        running: RunStart | None = None,
        lock: WantedLock | None = None,
        noting: bool = True,
    ) -> Claim:
        now = self._clock()
        lease = Lease(key, new_owner(), until=now + self._lease_seconds)
        event_id = None if running is None else running.event_id
        put = self._claim_put(lease, now, _CLAIM_CONDITION, {}, message_id, event_id)
        note = running if noting else None
        written = self._write(put, note, lock, self._mark(lease.key, message_id, now, event_id))
        if written.claimed or owner_of(written.old) == lease.owner:
            # The second case: our own write, retried after its answer was lost.
            return self._claimed(lease, _attempts(written.old) + 1, written)
        if written.taken_by_go:
            return Claim(ClaimState.FINISHED, holder=message_id)
        if kill_due(written.old, now):
            return self._take_kill(lease, now, written.old)
        if "Attempts" in written.old and _due(written.old, now):
            return self._claim_again(lease, now, written.old, message_id, running, lock, noting)
        return self._state(key, written.old, now)

    def claim_ahead(self, keys: Mapping[str, str]) -> dict[str, Claim]:
        """New claims of messages (as claim() puts a message's own, its event named) in one
        TransactWriteItems, all or none written. When it is refused, a claim whose item this
        daemon's own write made (botocore's try again of a call whose answer was lost) is still
        taken; every other is left to claim(), which learns what its item says."""
        if not keys:
            return {}
        now = self._clock()
        leases = [Lease(key, new_owner(), until=now + self._lease_seconds) for key in keys]
        puts = [
            self._claim_put(lease, now, _CLAIM_CONDITION, {}, None, keys[lease.key])
            for lease in leases
        ]
        try:
            self._transactions.write([{"Put": self._in_table(put)} for put in puts])
        except ClientError as exc:
            raise_if_missing(exc, self._table)
            if error_code(exc) != "TransactionCanceledException":
                raise
            leases = [
                lease
                for index, lease in enumerate(leases)
                if owner_of(failed_condition(exc, index) or {}) == lease.owner
            ]
        return {lease.key: Claim(ClaimState.CLAIMED, lease) for lease in leases}

    def _claim_again(
        self,
        lease: Lease,
        now: float,
        old: dict[str, Any],
        message_id: str | None,
        running: RunStart | None,
        lock: WantedLock | None,
        noting: bool,
    ) -> Claim:
        """Claim an item that counts runs: as run attempts + 1 of its job (a firing's retry
        runs as the message that claims it, whichever of its messages that is)."""
        attempts = _attempts(old)
        values = {":attempts": {"N": str(attempts)}, "Attempts": {"N": str(attempts)}}
        event_id = None if running is None else running.event_id
        put = self._claim_put(lease, now, _CLAIM_AGAIN_CONDITION, values, message_id, event_id)
        note = running if noting else None
        written = self._write(put, note, lock, self._mark(lease.key, message_id, now, event_id))
        if written.claimed or owner_of(written.old) == lease.owner:
            return self._claimed(lease, attempts + 1, written)
        if written.taken_by_go:
            return Claim(ClaimState.FINISHED, holder=message_id)
        return self._state(lease.key, written.old, now)  # another daemon was quicker

    def _take_kill(self, lease: Lease, now: float, old: dict[str, Any]) -> Claim:
        """Finish a claim whose kill request its holder never acted on, as lease's owner: its
        run ends killed here, unrun, and later deliveries find it FINISHED."""
        done, failed = conditional_write(
            self._client.update_item,
            self._table,
            Key=_key(lease.key),
            UpdateExpression=f"SET #owner = :owner, {OUTCOME} = :outcome REMOVE LeaseUntil, "
            "RetryAt",
            ConditionExpression=_TAKE_KILL_CONDITION,
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues={
                ":owner": {"S": lease.owner},
                ":outcome": {"S": RunOutcome.KILLED.value},
                ":at": old["KillAt"],
                ":now": lease_time(now),
            },
        )
        # The second case: our own write, retried after its answer was lost.
        if done or self.finished_by(failed, lease):
            attempt = _attempts(old) + 1
            return Claim(ClaimState.KILLED, lease, attempt=attempt, kill=mark_of(old))
        return self._state(lease.key, failed, now)  # another daemon was quicker

    @staticmethod
    def _claimed(lease: Lease, attempt: int, written: _Written) -> Claim:
        return Claim(
            ClaimState.CLAIMED, lease, attempt=attempt, noted=written.noted, lock=written.lock
        )

    def _claim_put(
        self,
        lease: Lease,
        now: float,
        condition: str,
        extra: dict[str, Any],
        message_id: str | None,
        event_id: str | None = None,
    ) -> dict[str, Any]:
        lives = self._retention_seconds
        item = {
            **_key(lease.key),
            "Owner": {"S": lease.owner},
            "LeaseUntil": lease_time(lease.until),
        }
        if message_id is not None and message_id != lease.key:
            # A firing's claim: which of its messages holds it, so that the others are told
            # whose duplicates they are, and a run is found by that message's id. It outlives
            # every copy of the firing that may still come (a Scheduler's retry, a redriven
            # letter), not only the message that took it.
            item[HOLDER] = {"S": message_id}
            lives += LATE_COPY_SECONDS
        item["Expired"] = {"N": str(int(now) + lives)}
        if event_id is not None:
            item[EVENT_ID] = {"S": event_id}
        values = {":now": lease_time(now)}
        if extra:
            item["Attempts"] = extra.pop("Attempts")
            values.update(extra)
        return {"Item": item, "ConditionExpression": condition, "ExpressionAttributeValues": values}

    def _mark(
        self, key: str, message_id: str | None, now: float, event_id: str | None = None
    ) -> dict[str, Any] | None:
        """A firing's claim also marks its message as the Go daemon marks the messages it takes
        ({Id: message id, Type: "throttle", Expired}), naming the firing (CLAIMED_AS): a Go daemon
        on the same table skips the message, and a port daemon learns that a Go daemon took it
        (a mark without CLAIMED_AS). None for a message's own claim, which is that item."""
        if message_id is None or message_id == key:
            return None
        item = {
            **_key(message_id),
            "Expired": {"N": str(int(now) + self._retention_seconds)},
            CLAIMED_AS: {"S": key},
        }
        if event_id is not None:
            item[EVENT_ID] = {"S": event_id}
        return {
            "Item": item,
            "ConditionExpression": "attribute_not_exists(Expired) OR #claimed = :claimed",
            "ExpressionAttributeNames": {"#claimed": CLAIMED_AS},
            "ExpressionAttributeValues": {":claimed": {"S": key}},
        }

    def _write(
        self,
        put: dict[str, Any],
        running: RunStart | None,
        lock: WantedLock | None,
        mark: dict[str, Any] | None = None,
    ) -> _Written:
        """The claim's conditional write, with the run's note, the lock and the message's mark
        when it can: a transaction, which other workers' writes at once may share."""
        note = (
            None if running is None or self._note_running is None else self._note_running(running)
        )
        noting = note is not None
        writes = [{"Put": self._in_table(put)}]
        if note is not None:
            writes.append({"Update": {**note, "TableName": self._table}})
        taken = None
        if noting and lock is not None and self._take_lock is not None:
            taken, take = self._take_lock(lock.lock_id, lock.event_id)
            writes.append({"Put": take})
        if mark is not None:
            writes.append({"Put": self._in_table(mark)})
        try:
            self._transactions.write(writes)
        except ClientError as exc:
            failed = failed_condition(exc, 0)
            held = None if taken is None else failed_condition(exc, 2)
            marked = None if mark is None else failed_condition(exc, len(writes) - 1)
            if failed is None and marked is not None:
                # Only the message's mark stood in the way: a Go daemon took the message.
                return _Written(False, {}, noted=False, taken_by_go=True)
            if failed is None and held is not None:
                # The lock is not free: the claim goes alone, and the job waits for the lock.
                return self._write(put, running, None, mark)
            if failed is None:
                raise_if_missing(exc, self._table)
                raise
            # Nothing was written: a claim by our own earlier attempt noted the run, and took
            # the lock, too.
            ours = taken if taken is not None and owner_of(held or {}) == taken.owner else None
            return _Written(False, failed, noted=noting, lock=ours)
        return _Written(True, {}, noted=noting, lock=taken)

    def _in_table(self, request: dict[str, Any]) -> dict[str, Any]:
        """A Put of a transaction: the table named, and the item returned when it fails."""
        return {
            **request,
            "TableName": self._table,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _state(self, key: str, old: dict[str, Any], now: float) -> Claim:
        """What an item that failed a claim's condition says of its message."""
        if not old:
            # The condition can only fail on an item that exists: an endpoint that does not
            # return it (ReturnValuesOnConditionCheckFailure) leaves the state unknown, and
            # calling it finished would delete the message unrun.
            raise StoreError(
                f"the claim {key} failed its condition, and the table "
                f"{self._table!r} did not return the item that failed it"
            )
        holder = old[HOLDER]["S"] if HOLDER in old else key
        if "LeaseUntil" in old:
            held = float(old["LeaseUntil"]["N"])
            return Claim(ClaimState.RUNNING, held_until=held, holder=holder)
        if "RetryAt" in old:
            held = float(old["RetryAt"]["N"])
            return Claim(ClaimState.WAITING, held_until=held, holder=holder)
        outcome = old[OUTCOME]["S"] if OUTCOME in old else None
        return Claim(ClaimState.FINISHED, holder=holder, outcome=outcome)

    def renew(self, lease: Lease) -> bool:
        until = self._clock() + self._lease_seconds
        request = owner_condition(
            _key(lease.key),
            lease.owner,
            UpdateExpression="SET LeaseUntil = :until",
            ExpressionAttributeValues={":until": lease_time(until)},
        )
        # Conditional on no kill request, so that seeing one costs no call more per beat: the
        # failed condition returns the item, and its mark.
        request["ConditionExpression"] += f" AND {NOT_MARKED}"
        renewed, old = conditional_write(self._client.update_item, self._table, **request)
        mark = mark_of(old)
        if renewed or mark is None or owner_of(old) != lease.owner or "LeaseUntil" not in old:
            return renewed
        # Still ours: kept while the job is stopped, so that no other daemon takes the claim
        # over (and records the kill a second time) before its end is recorded here.
        if not renew_lease(self._client, self._table, _key(lease.key), lease.owner, until):
            return False
        raise KillRequested(mark)

    def finish(self, lease: Lease, outcome: str | None = None) -> bool:
        update = self.finish_update(lease, outcome)
        finished, old = conditional_write(self._client.update_item, self._table, **update)
        return finished or self.finished_by(old, lease)

    def finish_update(self, lease: Lease, outcome: str | None = None) -> dict[str, Any]:
        """The UpdateItem request that finishes the claim (keeping outcome, how its run ended),
        for this call or a transaction."""
        if outcome is None:
            return owner_condition(
                _key(lease.key), lease.owner, UpdateExpression="REMOVE LeaseUntil, RetryAt"
            )
        return owner_condition(
            _key(lease.key),
            lease.owner,
            UpdateExpression=f"SET {OUTCOME} = :outcome REMOVE LeaseUntil, RetryAt",
            ExpressionAttributeValues={":outcome": {"S": outcome}},
        )

    @staticmethod
    def finished_by(item: dict[str, Any], lease: Lease) -> bool:
        """Whether item, which failed a finish's condition, was finished by lease's owner: the
        same write, retried after its answer was lost."""
        return owner_of(item) == lease.owner and "LeaseUntil" not in item

    def release(self, lease: Lease, retry: Retry | None = None) -> None:
        if retry is None:
            self._give_up(lease)
            return
        write_if_owner(
            self._client.update_item,
            self._table,
            _key(lease.key),
            lease.owner,
            UpdateExpression="REMOVE LeaseUntil SET Attempts = :attempts, RetryAt = :at",
            ExpressionAttributeValues={
                ":attempts": {"N": str(retry.attempts)},
                ":at": lease_time(retry.at),
            },
        )

    def _give_up(self, lease: Lease) -> None:
        """Delete the claim, so that a later delivery runs the job; but a claim that carries a
        kill request is kept, its lease ended now, so that the next receiver acts on it."""
        request = owner_condition(_key(lease.key), lease.owner)
        request["ConditionExpression"] += f" AND {NOT_MARKED}"
        deleted, old = conditional_write(self._client.delete_item, self._table, **request)
        if deleted or mark_of(old) is None or owner_of(old) != lease.owner:
            return
        now = self._clock()
        renew_lease(self._client, self._table, _key(lease.key), lease.owner, now)


@dataclass(frozen=True)
class _Written:
    """What a claim's write did: claimed, or the item that failed its condition (old)."""

    claimed: bool
    old: dict[str, Any]
    noted: bool
    lock: Lease | None = None
    #: The message's mark was the Go daemon's: it took the message, and nothing was written.
    taken_by_go: bool = False


def _attempts(item: dict[str, Any]) -> int:
    return int(item["Attempts"]["N"]) if "Attempts" in item else 0


def _due(item: dict[str, Any], now: float) -> bool:
    """Whether an item that counts runs may be claimed again now."""
    if "LeaseUntil" in item:
        return float(item["LeaseUntil"]["N"]) < now  # its holder died
    return "RetryAt" in item and float(item["RetryAt"]["N"]) <= now


def claim_key(claim_id: str) -> dict[str, Any]:
    """The key of a claim (a dedupe item): a message id, or a firing's key (RunStart.claim_item)."""
    return {"Id": {"S": claim_id}, "Type": {"S": THROTTLE_TYPE}}


_key = claim_key
