"""The audit trail: an item per operator action (who, what, on what, why, when) behind a Protocol.

DynamoAudit keeps them in the lock table for AUDIT_KEEP_SECONDS; MemoryAudit sits beside it.
"""

from __future__ import annotations

import json
import secrets
import threading
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from sqsjkr.backends.index import batch_get, items_of_type, json_value, keys_of_type

AUDIT_TYPE = "audit"
#: An audit item stays 400 days, then DynamoDB's TTL removes it.
AUDIT_KEEP_SECONDS = 400 * 86400


@dataclass(frozen=True)
class AuditEntry:
    """One action, written before it was taken. Times are unix seconds."""

    at: float
    action: str  # "pause", "resume", "route", "unlock", "kill", "trigger", "dlq redrive", "send"
    #: What it acted on: an event_id ("(one-off)" for a job sent without one), a lock_id,
    #: "all events", a queue; the messages it acted on are named in detail.
    target: str
    reason: str
    user: str  # the OS user@host of the command, or the dashboard's user
    identity: str  # the caller's AWS identity (an ARN), as STS names it
    detail: str = ""  # more of what was done, on one line (until when, to which queue)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditEntry:
        return cls(
            at=float(data["at"]),
            action=str(data["action"]),
            target=str(data["target"]),
            reason=str(data.get("reason", "")),
            user=str(data.get("user", "")),
            identity=str(data.get("identity", "")),
            detail=str(data.get("detail", "")),
        )


class AuditTrail(Protocol):
    """Keeps what operators did to a fleet."""

    def write(self, entry: AuditEntry) -> None:
        """Keep entry; raise if it was not kept."""

    def entries(self, since: float) -> list[AuditEntry]:
        """Every entry kept from since on, newest first."""

    def amend(self, entry: AuditEntry, amended: AuditEntry) -> None:
        """Keep amended in place of entry, which this trail wrote: what was done once it is
        known (the message id of a send). Raise if it was not kept."""


class MemoryAudit:
    """Entries within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._entries: list[AuditEntry] = []

    def write(self, entry: AuditEntry) -> None:
        with self._mutex:
            self._entries.append(entry)

    def entries(self, since: float) -> list[AuditEntry]:
        with self._mutex:
            kept = [e for e in self._entries if e.at >= since]
        return sorted(kept, key=lambda e: e.at, reverse=True)

    def amend(self, entry: AuditEntry, amended: AuditEntry) -> None:
        with self._mutex:
            self._entries[self._entries.index(entry)] = amended


class DynamoAudit:
    """{Id: "audit:<time>:<random>", Type: "audit"} items in the lock table, each with the entry
    as JSON and an Expired AUDIT_KEEP_SECONDS after it was written, so that the table's
    TypeExpiredIndex lists them by time (the range key is the time plus a constant)."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table
        self._ids: dict[AuditEntry, str] = {}  # the item Id of each entry written here

    def write(self, entry: AuditEntry) -> None:
        id_ = f"audit:{entry.at:.6f}:{secrets.token_hex(4)}"
        # A fresh random Id: the write can only fail, never overwrite another entry.
        self._put(id_, entry, "attribute_not_exists(Id)")
        self._ids[entry] = id_

    def amend(self, entry: AuditEntry, amended: AuditEntry) -> None:
        id_ = self._ids.pop(entry)
        self._put(id_, amended, "attribute_exists(Id)")
        self._ids[amended] = id_

    def _put(self, id_: str, entry: AuditEntry, condition: str) -> None:
        item = {
            "Id": {"S": id_},
            "Type": {"S": AUDIT_TYPE},
            "Expired": {"N": str(int(entry.at + AUDIT_KEEP_SECONDS))},
            "Audit": {"S": json.dumps(entry.as_dict())},
        }
        self._client.put_item(TableName=self._table, Item=item, ConditionExpression=condition)

    def entries(self, since: float) -> list[AuditEntry]:
        expired_from = int(since + AUDIT_KEEP_SECONDS)
        items = items_of_type(self._client, self._table, AUDIT_TYPE, expired_from=expired_from)
        kept = [e for e in map(_entry, items) if e.at >= since]
        return sorted(kept, key=lambda e: e.at, reverse=True)

    def page(
        self, since: float, after: tuple[float, str] | None, limit: int
    ) -> tuple[list[AuditEntry], tuple[float, str] | None]:
        """The entries from since on, newest first, after the position (time, item Id) of a
        previous page's last one; and this page's last position when more follow. The keys are
        listed (each Id holds its time); only the page's items are read."""
        expired_from = int(since + AUDIT_KEEP_SECONDS)
        found = []
        for key in keys_of_type(self._client, self._table, AUDIT_TYPE, expired_from=expired_from):
            at = _time_of(key["Id"]["S"])
            if at is not None and at >= since:
                found.append((at, key["Id"]["S"]))
        # Newest first; of two entries of the same microsecond, by Id.
        found.sort(key=lambda found: (-found[0], found[1]))
        if after is not None:
            found = [f for f in found if (-f[0], f[1]) > (-after[0], after[1])]
        shown = found[:limit]
        keys = [{"Id": {"S": id_}, "Type": {"S": AUDIT_TYPE}} for _, id_ in shown]
        items = {
            item["Id"]["S"]: _entry(item) for item in batch_get(self._client, self._table, keys)
        }
        # An entry that expired between the listing and the read is gone from the page.
        entries = [items[id_] for _, id_ in shown if id_ in items]
        return entries, shown[-1] if len(found) > limit else None


def _time_of(id_: str) -> float | None:
    """The time an audit item's Id holds ("audit:<unix seconds>:<random>")."""
    try:
        return float(id_.split(":")[1])
    except (IndexError, ValueError):
        return None


def _entry(item: dict[str, Any]) -> AuditEntry:
    return json_value(item, "Audit", AuditEntry.from_dict, "the audit item")
