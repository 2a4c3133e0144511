"""Run history: a record of every run and a summary per event, behind a small Protocol.

DynamoHistory keeps both in the lock table (docs/history.md has the item layout); MemoryHistory
and NoHistory sit beside it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import (
    failed_condition,
    lease_time,
    raise_if_missing,
    retry_conflicts,
)
from sqsjkr.backends.dedupe import DynamoDedupe
from sqsjkr.backends.groups import DynamoGroups
from sqsjkr.backends.index import items_of_type
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import DynamoLocker
from sqsjkr.backends.transactions import Transactions
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart

#: Type of the per-event summary item; the Go daemon's TypeExpiredIndex lists them by Type.
SUMMARY_TYPE = "summary"
#: Run items have the Type "run#<ended_at in ms, 13 digits>#<message id>": newest last.
RUN_TYPE_PREFIX = "run#"
#: A summary stays this long after its event last ran, so that a yearly job stays listed; a
#: job sent without an event_id (one run, no next) is kept only as long as its run's record.
SUMMARY_KEEP_SECONDS = 400 * 86400
#: The summary attribute of a run in progress is this prefix and the run's message id.
RUNNING_PREFIX = "Running:"


@dataclass(frozen=True)
class Ended:
    """What finished() did with the claim, the lock and the concurrency group slot it was given:
    True, done; False, no longer ours (lost); None, not done: left to its store."""

    claim: bool | None = None
    lock: bool | None = None
    slot: bool | None = None


NOT_FOLDED = Ended()


class History(Protocol):
    """Keeps a record of each run and a summary per event."""

    def started(self, start: RunStart) -> None:
        """The run is in progress: the event's summary shows it as running now."""

    def finished(
        self,
        record: RunRecord,
        *,
        claim: Lease | None = None,
        lock: Lease | None = None,
        slot: Lease | None = None,
        firing: Firing | None = None,
        linger: float = 0.0,
    ) -> Ended:
        """Store the record and bring the event's summary up to date: with firing (the
        schedule's firing the message was), its schedule and next firing too. A duplicate's
        record (RunOutcome.DUPLICATE) is stored and leaves the summary as it is.

        A store that shares the table of the dedupe store, the locker and the groups may, in the
        same write, mark claim finished and release lock and slot, and says so in its answer.
        linger: how long that write may wait to share another writer's call (a run's end
        written behind its worker: Transactions.write).
        """

    def runs(self, event_id: str, limit: int) -> list[RunRecord]:
        """The event's last runs, newest first."""

    def summaries(self) -> list[EventSummary]:
        """The summary of every event."""


class NoHistory:
    """Keeps nothing: `[history] backend = "none"`."""

    def started(self, start: RunStart) -> None:
        return None

    def finished(
        self,
        record: RunRecord,
        *,
        claim: Lease | None = None,
        lock: Lease | None = None,
        slot: Lease | None = None,
        firing: Firing | None = None,
        linger: float = 0.0,
    ) -> Ended:
        return NOT_FOLDED

    def runs(self, event_id: str, limit: int) -> list[RunRecord]:
        return []

    def summaries(self) -> list[EventSummary]:
        return []


class MemoryHistory:
    """History within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.records: list[RunRecord] = []
        self._summaries: dict[str, EventSummary] = {}

    def started(self, start: RunStart) -> None:
        with self._mutex:
            summary = self._summaries.get(start.event_id, EventSummary(start.event_id))
            # A run noted again (it waits, or no longer does) replaces its note, as in DynamoDB.
            others = (r for r in summary.running if r.message_id != start.message_id)
            running = (*others, start)
            self._summaries[start.event_id] = replace(summary, running=running)

    def finished(
        self,
        record: RunRecord,
        *,
        claim: Lease | None = None,
        lock: Lease | None = None,
        slot: Lease | None = None,
        firing: Firing | None = None,
        linger: float = 0.0,
    ) -> Ended:
        with self._mutex:
            self.records.append(record)
            if record.outcome is RunOutcome.DUPLICATE:
                return NOT_FOLDED
            summary = self._summaries.get(record.event_id, EventSummary(record.event_id))
            self._summaries[record.event_id] = summarise(summary, record, firing)
        return NOT_FOLDED

    def runs(self, event_id: str, limit: int) -> list[RunRecord]:
        with self._mutex:
            mine = [r for r in self.records if r.event_id == event_id]
        return sorted(mine, key=lambda r: r.ended_at, reverse=True)[:limit]

    def summaries(self) -> list[EventSummary]:
        with self._mutex:
            return sorted(self._summaries.values(), key=lambda s: s.event_id)


def summarise(
    summary: EventSummary, record: RunRecord, firing: Firing | None = None
) -> EventSummary:
    """The summary after record ended: what DynamoHistory's update expression does too."""
    running = tuple(r for r in summary.running if r.message_id != record.message_id)
    summary = replace(summary, last_run=record, running=running)
    if firing is not None:
        known: dict[str, Any] = {k: v for k, v in schedule_fields(firing).items() if v is not None}
        summary = replace(summary, **known)
    if not record.final:
        return summary
    if record.outcome is RunOutcome.SUCCEEDED:
        return replace(summary, last_success_at=record.ended_at, consecutive_failures=0)
    # A kill, a lock abort: no failure (contract.run.FAILURES), and no success to reset on either.
    if not record.failure:
        return summary
    return replace(
        summary,
        last_failure_at=record.ended_at,
        consecutive_failures=summary.consecutive_failures + 1,
    )


class DynamoHistory:
    """Run items and summary items in the lock table, next to locks and dedupe records.

    Given the DynamoDedupe, DynamoLocker and DynamoGroups of the same table, a finished run's
    record, its summary, the finish of its claim and the release of its lock and its group's
    slot are one TransactWriteItems: the record costs no call of its own, and a job with a lock
    or a group saves one for each.
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        retention_seconds: float,
        claims: DynamoDedupe | None = None,
        locks: DynamoLocker | None = None,
        slots: DynamoGroups | None = None,
        clock: Callable[[], float] = time.time,
        transactions: Transactions | None = None,
        live_delete: Callable[[str, str], dict[str, Any] | None] | None = None,
    ) -> None:
        """live_delete: given a run's event and message ids, the Delete of its live output
        item (DynamoLive.end_delete), written in the transaction that records its end."""
        self._client = client
        self._transactions = transactions or Transactions(client)
        self._table = table
        self._retention = retention_seconds
        self._claims = claims
        self._locks = locks
        self._slots = slots
        self._clock = clock
        self._live_delete = live_delete

    # -- writing ----------------------------------------------------------------------------

    def started(self, start: RunStart) -> None:
        update = running_update(start)
        retry_conflicts(lambda: self._client.update_item(TableName=self._table, **update))

    def finished(
        self,
        record: RunRecord,
        *,
        claim: Lease | None = None,
        lock: Lease | None = None,
        slot: Lease | None = None,
        firing: Firing | None = None,
        linger: float = 0.0,
    ) -> Ended:
        data, last = record.encoded()
        writes: list[dict[str, Any]] = [{"Put": self._run_item(record, data)}]
        if record.outcome is RunOutcome.DUPLICATE:
            # Its own record only: the summary is the firing's run's, which is another's.
            self._transact(writes)
            return NOT_FOLDED
        writes.append({"Update": self._summary_update(record, last, firing)})
        live = self._live_delete and self._live_delete(record.event_id, record.message_id)
        if live:
            writes.append(live)  # a job that ran past one live_output_interval had one
        folds = self._folds(claim, lock, slot, record.outcome.value)
        try:
            self._transact([{"Update": fold.update} for fold in folds] + writes, linger)
        except ClientError as exc:
            failed = _failed_items(exc, len(folds))
            if not folds or failed is None:
                raise
            return self._after_cancel(folds, failed, writes)
        return Ended(**{fold.name: True for fold in folds})

    def _folds(
        self, claim: Lease | None, lock: Lease | None, slot: Lease | None, outcome: str
    ) -> list[_Fold]:
        """The claim's finish (keeping outcome), the lock's and the slot's release, as writes of
        one transaction."""
        folds = []
        if claim is not None and self._claims is not None:
            update = self._claims.finish_update(claim, outcome)
            folds.append(_Fold("claim", claim, update, self._claims.finished_by))
        if lock is not None and self._locks is not None:
            update = self._locks.release_update(lock)
            folds.append(_Fold("lock", lock, update, self._locks.released_by))
        if slot is not None and self._slots is not None:
            update = self._slots.leave_update(slot)
            folds.append(_Fold("slot", slot, update, self._slots.left_by))
        return folds

    def _after_cancel(
        self, folds: list[_Fold], failed: list[dict[str, Any] | None], writes: list[dict[str, Any]]
    ) -> Ended:
        """The condition of the claim's finish or the lock's release failed, so nothing was
        written. When each failed one carries our own mark, this was our transaction, retried
        after its answer was lost: it all took effect. Otherwise the record and summary are
        written alone; a failed fold is lost, and one that did not fail is left to its store."""
        if all(
            item is not None and fold.ours(item, fold.lease)
            for fold, item in zip(folds, failed, strict=True)
        ):
            return Ended(**{fold.name: True for fold in folds})
        self._transact(writes)
        return Ended(
            **{
                fold.name: (None if item is None else False)
                for fold, item in zip(folds, failed, strict=True)
            }
        )

    def _transact(self, writes: list[dict[str, Any]], linger: float = 0.0) -> None:
        for write in writes:
            write[next(iter(write))]["TableName"] = self._table
        try:
            self._transactions.write(writes, linger=linger)
        except ClientError as exc:
            raise_if_missing(exc, self._table)
            raise

    def _run_item(self, record: RunRecord, data: str) -> dict[str, Any]:
        """data: the record's encoded text (RunRecord.encoded)."""
        return {
            "Item": {
                **_key(record.event_id, run_type(record)),
                "Expired": _number(record.ended_at + self._retention),
                "Outcome": {"S": record.outcome.value},
                "Record": {"S": data},
            }
        }

    def _summary_update(
        self, record: RunRecord, last: str, firing: Firing | None
    ) -> dict[str, Any]:
        """last: the record's encoded text as the summary keeps it (RunRecord.encoded)."""
        sets = ["LastRun = :run", "Expired = :expired"]
        keep = self._retention if record.one_off else SUMMARY_KEEP_SECONDS
        values: dict[str, Any] = {
            ":run": {"S": last},
            ":expired": _number(record.ended_at + keep),
        }
        add = ""
        if record.final and record.outcome is RunOutcome.SUCCEEDED:
            sets += ["LastSuccessAt = :ended", "ConsecutiveFailures = :zero"]
            values[":ended"], values[":zero"] = lease_time(record.ended_at), {"N": "0"}
        elif record.failure:
            sets.append("LastFailureAt = :ended")
            values[":ended"] = lease_time(record.ended_at)
            add = " ADD ConsecutiveFailures :one"
            values[":one"] = {"N": "1"}
        if firing is not None:
            schedule = _schedule_values(firing)
            sets += [f"{name} = :{name}" for name in schedule]
            values.update({f":{name}": value for name, value in schedule.items()})
        return {
            "Key": _key(record.event_id, SUMMARY_TYPE),
            "UpdateExpression": f"SET {', '.join(sets)}{add} REMOVE #running",
            "ExpressionAttributeNames": {"#running": RUNNING_PREFIX + record.message_id},
            "ExpressionAttributeValues": values,
        }

    def forget(self, event_id: str) -> EventSummary | None:
        """Delete the event's summary, so that it leaves `status` until it runs again; its runs'
        records stay until their TTL. The summary it had, or None if it had none."""
        response = self._client.delete_item(
            TableName=self._table, Key=_key(event_id, SUMMARY_TYPE), ReturnValues="ALL_OLD"
        )
        old = response.get("Attributes")
        return _summary(old) if old else None

    # -- reading ----------------------------------------------------------------------------

    def runs(
        self, event_id: str, limit: int, *, failed: bool = False, before: str | None = None
    ) -> list[RunRecord]:
        """The event's last runs, newest first; failed: only those that did not succeed (a
        duplicate, a copy dropped because its job ran, is no such run); before: only those
        older than the run of that run_type (a page after it)."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "Id = :id AND begins_with(#type, :prefix)",
            "ExpressionAttributeNames": {"#type": "Type"},
            "ExpressionAttributeValues": {
                ":id": {"S": event_id},
                ":prefix": {"S": RUN_TYPE_PREFIX},
            },
            "ScanIndexForward": False,
        }
        if before is not None:
            # Run types sort as their end times: the page starts past the one it names.
            request["KeyConditionExpression"] = "Id = :id AND #type BETWEEN :prefix AND :before"
            request["ExpressionAttributeValues"][":before"] = {"S": before}
            request["ExclusiveStartKey"] = _key(event_id, before)
        if failed:
            request["FilterExpression"] = "Outcome <> :succeeded AND Outcome <> :duplicate"
            request["ExpressionAttributeValues"][":succeeded"] = {"S": RunOutcome.SUCCEEDED.value}
            request["ExpressionAttributeValues"][":duplicate"] = {"S": RunOutcome.DUPLICATE.value}
        records: list[RunRecord] = []
        # A query answers at most 1 MB: with long output tails, a page holds fewer runs.
        while len(records) < limit:
            response = self._client.query(**request, Limit=limit - len(records))
            records += [
                RunRecord.from_dict(json.loads(i["Record"]["S"])) for i in response["Items"]
            ]
            if "LastEvaluatedKey" not in response:
                break
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return records

    def summary(self, event_id: str) -> EventSummary | None:
        """The event's summary as it is now (a consistent read), or None if it has none."""
        response = self._client.get_item(
            TableName=self._table, Key=_key(event_id, SUMMARY_TYPE), ConsistentRead=True
        )
        item = response.get("Item")
        return _summary(item) if item else None

    def record_of(self, event_id: str, type_: str) -> RunRecord | None:
        """The run of event_id whose item's Type (its run_type) is type_, or None."""
        if not type_.startswith(RUN_TYPE_PREFIX):
            return None
        item = self._client.get_item(TableName=self._table, Key=_key(event_id, type_)).get("Item")
        return None if item is None else RunRecord.from_dict(json.loads(item["Record"]["S"]))

    def summaries(self) -> list[EventSummary]:
        items = items_of_type(self._client, self._table, SUMMARY_TYPE)
        return sorted((_summary(item) for item in items), key=lambda s: s.event_id)


def running_update(start: RunStart) -> dict[str, Any]:
    """The UpdateItem request (without its table) that shows start as running now in its
    event's summary: for DynamoHistory.started(), or for the claim's own write (DynamoDedupe's
    note_running)."""
    return {
        "Key": _key(start.event_id, SUMMARY_TYPE),
        "UpdateExpression": "SET #running = :start, Expired = :expired",
        "ExpressionAttributeNames": {"#running": RUNNING_PREFIX + start.message_id},
        "ExpressionAttributeValues": {
            ":start": {"S": json.dumps(vars(start))},  # plain values: asdict() would copy them
            ":expired": _number(start.started_at + SUMMARY_KEEP_SECONDS),
        },
    }


#: The summary's attributes of its schedule, by EventSummary field.
_SCHEDULE_ATTRIBUTES = {
    "schedule": "Schedule",
    "schedule_expression": "ScheduleExpression",
    "schedule_timezone": "ScheduleTimezone",
    "last_firing_at": "LastFiringAt",
    "next_firing_at": "NextFiringAt",
}


def schedule_fields(firing: Firing) -> dict[str, str | float | None]:
    """What an event's summary keeps of a firing of its schedule, by EventSummary field: the
    schedule, its expression and zone as the message carried them, the firing's due time and
    the next one's, computed from them (None without an expression)."""
    following = None
    if firing.expression is not None:
        # Imported at a firing's first run, not at start-up: croniter costs a daemon's start
        # time, and a daemon whose messages carry no firing never needs it.
        from sqsjkr.crontab.fires import next_firing

        following = next_firing(firing.expression, firing.timezone, firing.at)
    return {
        "schedule": firing.schedule,
        "schedule_expression": firing.expression,
        "schedule_timezone": firing.timezone,
        "last_firing_at": firing.at,
        "next_firing_at": following,
    }


def _schedule_values(firing: Firing) -> dict[str, dict[str, str]]:
    """The summary's schedule attributes for firing, by name: those it knows."""
    values = {}
    for name, value in schedule_fields(firing).items():
        if isinstance(value, str):
            values[_SCHEDULE_ATTRIBUTES[name]] = {"S": value}
        elif value is not None:
            values[_SCHEDULE_ATTRIBUTES[name]] = lease_time(value)
    return values


def run_type(record: RunRecord) -> str:
    """The range key of a run item: sorted by end time, unique by message id."""
    return f"{RUN_TYPE_PREFIX}{int(record.ended_at * 1000):013d}#{record.message_id}"


def _summary(item: dict[str, Any]) -> EventSummary:
    def number(name: str) -> float | None:
        return float(item[name]["N"]) if name in item else None

    def text(name: str) -> str | None:
        return str(item[name]["S"]) if name in item else None

    running = running_notes(item)
    last = item.get("LastRun")
    return EventSummary(
        event_id=item["Id"]["S"],
        last_run=RunRecord.from_dict(json.loads(last["S"])) if last else None,
        last_success_at=number("LastSuccessAt"),
        last_failure_at=number("LastFailureAt"),
        consecutive_failures=int(number("ConsecutiveFailures") or 0),
        running=running,
        schedule=text("Schedule"),
        schedule_expression=text("ScheduleExpression"),
        schedule_timezone=text("ScheduleTimezone"),
        last_firing_at=number("LastFiringAt"),
        next_firing_at=number("NextFiringAt"),
    )


def running_notes(item: dict[str, Any]) -> tuple[RunStart, ...]:
    """The runs a summary item shows in progress, oldest first. Fields a newer daemon wrote and
    this one does not know are left out."""
    known = RunStart.__dataclass_fields__
    running = (
        RunStart(**{k: v for k, v in json.loads(value["S"]).items() if k in known})
        for name, value in item.items()
        if name.startswith(RUNNING_PREFIX)
    )
    return tuple(sorted(running, key=lambda r: r.started_at))


@dataclass(frozen=True)
class _Fold:
    """A claim's finish or a lock's release, written in a run's transaction."""

    name: str  # the field of Ended that answers for it
    lease: Lease
    update: dict[str, Any]
    ours: Callable[[dict[str, Any], Lease], bool]  # whether a failed item is our own write

    def __post_init__(self) -> None:
        self.update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"


def _failed_items(exc: ClientError, count: int) -> list[dict[str, Any] | None] | None:
    """For the first count writes of a transaction cancelled by a failed condition: the item
    that failed each one's condition ({} if gone), None for those that did not fail. None if
    the transaction failed for another reason."""
    failed = [failed_condition(exc, index) for index in range(count)]
    return None if all(item is None for item in failed) else failed


def _key(id_: str, type_: str) -> dict[str, Any]:
    return {"Id": {"S": id_}, "Type": {"S": type_}}


def _number(value: float) -> dict[str, str]:
    return {"N": str(int(value))}
