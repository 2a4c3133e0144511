"""moto's TransactWriteItems as DynamoDB does it: every condition checked, then every write applied,
with no copy of the table, and moto's DynamoDB requests taking turns so that none races another.

moto 5's own transaction deep-copies each table it touches once per item (its rollback), which
makes a call cost as much as the table is big, and copies while other request threads change
the table: HTTP 500 "dictionary changed size during iteration". The race is not the copy's
alone: moto's Table.items is a defaultdict, so even a GetItem of a missing key adds an entry to
the dict that a Scan, a Query, a DescribeTable's item count or the copy is iterating. DynamoDB
serialises transactions with every other write and never answers a read with half of one, so
one lock around each DynamoDB request is both the fix and DynamoDB's own isolation.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from typing import Any

from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.responses import DynamoHandler

#: The transaction's operations, as DynamoDB names them.
OPERATIONS = ("ConditionCheck", "Put", "Delete", "Update")
#: The cancellation reason of an item that passed, as moto's TransactionCanceledException takes it.
PASSED: tuple[None, None, None] = (None, None, None)

Reason = tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]


@dataclass(frozen=True)
class Write:
    """One item of a transaction whose condition held: what to write, and where."""

    kind: str  # one of OPERATIONS
    operation: dict[str, Any]
    table_name: str
    key: dict[str, Any]


@dataclass(frozen=True)
class Saved:
    """An item as it was before the transaction wrote it (None: there was none), to put it back."""

    table: Table
    hash_value: DynamoType
    range_value: DynamoType | None
    item: Item | None


def install_fair_transactions() -> None:
    """In this process: moto's DynamoDB requests take turns, and TransactWriteItems is this module's.

    Idempotent; for the whole process, as moto's backends are (the server's request threads
    share them).
    """
    if getattr(DynamoDBBackend, "_sqsjkr_fair", False):
        return
    lock = threading.RLock()
    handle = DynamoHandler.call_action

    def call_action(self: DynamoHandler) -> Any:
        with lock:
            return handle(self)

    DynamoHandler.call_action = call_action  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign,assignment]
    DynamoDBBackend._sqsjkr_fair = True  # type: ignore[attr-defined]


def transact_write_items(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> None:
    """DynamoDBBackend.transact_write_items: moto's errors and reasons, DynamoDB's order of work.

    Every item's condition is checked against the table as it was before the call; if any
    fails, TransactionCanceledException with one reason per item, in order ("None" for those
    that passed), and nothing is written. Then the writes, each item's old value kept so that
    an error while writing (moto validates some updates only then) puts them all back.
    """
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    writes, reasons = _check_all(backend, transact_items)
    if any(code is not None for code, _, _ in reasons):
        raise TransactionCanceledException(reasons)
    _write_all(backend, writes)


def _check_all(
    backend: DynamoDBBackend, transact_items: list[dict[str, Any]]
) -> tuple[list[Write], list[Reason]]:
    """The writes of the items whose conditions held, and every item's reason, in order."""
    targets: set[tuple[str, str]] = set()
    writes: list[Write] = []
    reasons: list[Reason] = []
    for transact_item in transact_items:
        if len(transact_item) > 1:
            raise TransactWriteSingleOpException()
        try:
            write = _check(backend, transact_item, targets)
        except (MultipleTransactionsException, MockValidationException):
            raise  # the whole request is refused, as by moto and DynamoDB
        except _ConditionFailed as failed:
            reasons.append(("ConditionalCheckFailed", str(failed.error.message), failed.item))
            continue
        except Exception as exc:  # noqa: BLE001 - moto reports any other error as the item's reason
            reasons.append((type(exc).__name__, str(exc), None))
            continue
        writes.append(write)
        reasons.append(PASSED)
    return writes, reasons


class _ConditionFailed(Exception):
    """An item's condition did not hold; item: its old value, if it asked for ALL_OLD."""

    def __init__(self, error: ConditionalCheckFailed, item: dict[str, Any] | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.item = item


def _check(
    backend: DynamoDBBackend, transact_item: dict[str, Any], targets: set[tuple[str, str]]
) -> Write:
    kind, operation = next(iter(transact_item.items()))
    if kind not in OPERATIONS:
        raise ValueError("Unsupported transaction operation")
    table_name = operation["TableName"]
    if kind == "Put":
        table = backend.get_table(table_name)
        attrs = operation["Item"]
        key = {table.hash_key_attr: attrs[table.hash_key_attr]}
        if table.range_key_attr is not None:
            key[table.range_key_attr] = attrs[table.range_key_attr]
    else:
        key = operation["Key"]
    target = (str(table_name), str(dict(sorted(key.items()))))
    if target in targets:
        raise MultipleTransactionsException()
    targets.add(target)
    current = backend.get_item(table_name, key)
    condition = operation.get("ConditionExpression")
    if condition is not None:
        holds = get_filter_expression(
            condition,
            operation.get("ExpressionAttributeNames"),
            operation.get("ExpressionAttributeValues"),
        )
        if not holds.expr(current):
            old = None
            if operation.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD" and current:
                old = current.to_json()["Attributes"]
            raise _ConditionFailed(ConditionalCheckFailed(), old)
    return Write(kind, operation, table_name, key)


def _write_all(backend: DynamoDBBackend, writes: list[Write]) -> None:
    """Apply the writes in order; on an error, put back every item written and raise."""
    saved: list[Saved] = []
    for n, write in enumerate(writes):
        if write.kind == "ConditionCheck":
            continue
        saved.append(_save(backend, write))
        try:
            _apply(backend, write)
        except MockValidationException:
            _restore(saved)
            raise
        except Exception as exc:  # noqa: BLE001 - as moto: the item's reason, the others "None"
            _restore(saved)
            reasons: list[Reason] = [PASSED] * len(writes)
            reasons[n] = (type(exc).__name__, str(exc), None)
            raise TransactionCanceledException(reasons) from exc


def _save(backend: DynamoDBBackend, write: Write) -> Saved:
    table = backend.get_table(write.table_name)
    hash_value, range_value = backend.get_keys_value(table, write.key)
    item = table.get_item(hash_value, range_value)
    # An update changes the item in place; a put or a delete leaves the old object alone.
    kept = copy.deepcopy(item) if write.kind == "Update" and item is not None else item
    return Saved(table, hash_value, range_value, kept)


def _restore(saved: list[Saved]) -> None:
    """Put the items back as they were; a stream's records of the writes stay (our table has none)."""
    for entry in reversed(saved):
        table = entry.table
        if entry.item is None:
            table.delete_item(entry.hash_value, entry.range_value)
        elif entry.range_value is not None:
            table.items[entry.hash_value][entry.range_value] = entry.item
        else:
            table.items[entry.hash_value] = entry.item  # type: ignore[assignment]  # as moto's own


def _apply(backend: DynamoDBBackend, write: Write) -> None:
    """One write; its condition was checked with the others, before any write."""
    operation = write.operation
    # None when absent, as moto's own transaction passes them.
    names: Any = operation.get("ExpressionAttributeNames")
    values: Any = operation.get("ExpressionAttributeValues")
    if write.kind == "Put":
        backend.put_item(write.table_name, operation["Item"])
    elif write.kind == "Delete":
        backend.delete_item(write.table_name, write.key)
    else:
        backend.update_item(
            write.table_name,
            write.key,
            update_expression=operation["UpdateExpression"],
            expression_attribute_names=names,
            expression_attribute_values=values,
        )
