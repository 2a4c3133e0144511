"""The locks and concurrency groups' slots held now, read from the lock table, and the jobs waiting
for one; the lock table of a config, opened for an operator.
"""

from __future__ import annotations

import itertools
import math
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.groups import SLOT_TYPE_PREFIX, parse_slot
from sqsjkr.backends.history import SUMMARY_TYPE, running_notes
from sqsjkr.backends.locks import LOCK_TYPE
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import RunStart
from sqsjkr.errors import quote
from sqsjkr.fleet.history import reading_table
from sqsjkr.fleet.paging import Paged, Position, page_after, position
from sqsjkr.fleet.wording import format_span


@dataclass(frozen=True)
class Table:
    """The lock table of a config, opened for an operator's command, and the client under it."""

    client: Any
    name: str

    def reading(self) -> AbstractContextManager[None]:
        return reading_table(self.name)


def table_of(config: Config) -> Table:
    """The [lock] table of a loaded config."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    return Table(make_client(session, "dynamodb"), config.lock.table)


@dataclass(frozen=True)
class HeldLock:
    """A lock item with an EventId: held, by sqsjkr with a lease or by a Go daemon without one."""

    lock_id: str
    event_id: str
    owner: str | None  # host:pid:id; None for a Go daemon's lock
    lease_until: float | None  # None for a Go daemon's lock

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> HeldLock:
        until = item.get("LeaseUntil", {}).get("N")
        return cls(
            lock_id=item["Id"]["S"],
            event_id=item["EventId"]["S"],
            owner=item.get("Owner", {}).get("S"),
            lease_until=None if until is None else float(until),
        )

    @property
    def name(self) -> str:
        """What unlock calls it: lock "L"."""
        return f"lock {quote(self.lock_id)}"

    def state(self, now: float) -> str:
        """ "go" (no lease), "live" or "expired"."""
        if self.lease_until is None:
            return "go"
        return "live" if self.lease_until >= now else "expired"

    def lease_text(self, now: float) -> str:
        """ "12s" left, "expired 3m ago: free to take", or "Go-style: no lease"."""
        if self.lease_until is None:
            return "Go-style: no lease"
        left = self.lease_until - now
        if left >= 0:
            return format_span(math.ceil(left))
        return f"expired {format_span(-left)} ago: free to take"

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "lock_id": self.lock_id,
            "event_id": self.event_id,
            "owner": self.owner,
            "lease_until": self.lease_until,
            "lease_left": None if self.lease_until is None else self.lease_until - now,
            "state": self.state(now),
        }


@dataclass(frozen=True)
class HeldSlot(HeldLock):
    """A slot item of a concurrency group with an EventId; lock_id is the group's key."""

    slot: int
    limit: int | None  # the concurrency_limit of the job that entered it

    @classmethod
    def from_item(cls, item: dict[str, Any]) -> HeldSlot:
        lock = HeldLock.from_item(item)
        slot = parse_slot(item["Type"]["S"])
        limit = item.get("Limit", {}).get("N")
        return cls(
            **vars(lock),
            slot=-1 if slot is None else slot,
            limit=None if limit is None else int(limit),
        )

    @property
    def name(self) -> str:
        """What unlock calls it: slot 2 of group "G"."""
        return f"slot {self.slot} of group {quote(self.lock_id)}"

    def state(self, now: float) -> str:
        """ "unleased" (written by hand: held until removed), "live" or "expired"."""
        return "unleased" if self.lease_until is None else super().state(now)

    def lease_text(self, now: float) -> str:
        return "no lease" if self.lease_until is None else super().lease_text(now)

    def as_json(self, now: float) -> dict[str, Any]:
        lock = super().as_json(now)
        del lock["lock_id"]
        return {"slot": self.slot, **lock, "limit": self.limit}


@dataclass(frozen=True)
class Group:
    """The held slots of one concurrency_key."""

    key: str
    slots: list[HeldSlot]

    def holders(self, now: float) -> int:
        """How many slots are held now: not those whose lease has passed (free to take)."""
        return sum(slot.state(now) != "expired" for slot in self.slots)

    @property
    def limit(self) -> int | None:
        """The largest limit its holders entered with (the table keeps no limit of its own)."""
        return max((slot.limit for slot in self.slots if slot.limit is not None), default=None)

    def held_text(self, now: float) -> str:
        """ "2 of 3" held; "2" when no holder says the limit."""
        held = str(self.holders(now))
        return held if self.limit is None else f"{held} of {self.limit}"

    def as_json(self, now: float) -> dict[str, Any]:
        return {
            "key": self.key,
            "holders": self.holders(now),
            "limit": self.limit,
            "slots": [slot.as_json(now) for slot in self.slots],
        }


@dataclass(frozen=True)
class Holdings:
    """What the lock table holds now: the held locks, the groups with held slots, and the jobs
    that wait for one, as their daemons noted them in their events' summaries."""

    locks: list[HeldLock]
    groups: list[Group]
    waiting: list[RunStart] = field(default_factory=list)

    def as_json(self, now: float) -> dict[str, Any]:
        """`locks --json`'s object."""
        return {
            "locks": [lock.as_json(now) for lock in self.locks],
            "groups": [group.as_json(now) for group in self.groups],
            "waiting": [waiting_json(run) for run in self.waiting],
        }


def holdings_page(
    holdings: Holdings, now: float, after: Position | None, limit: int
) -> Paged[dict[str, Any]]:
    """A page of every holding as one object of its kind: a held lock ("lock"), a group's held
    slot ("slot", with its group's key) and a job waiting ("waiting"), in that order, each kind
    by its ids; past the previous page's position (PageError for one of another list)."""
    listed: list[tuple[Position, dict[str, Any]]] = []
    for lock in holdings.locks:
        listed.append(((0, lock.lock_id, 0, ""), {"kind": "lock", **lock.as_json(now)}))
    for group in holdings.groups:
        for slot in group.slots:
            shown = {"kind": "slot", "key": group.key, **slot.as_json(now)}
            listed.append(((1, group.key, slot.slot, ""), shown))
    for run in holdings.waiting:
        key = (2, run.event_id, 0, run.message_id)
        listed.append((key, {"kind": "waiting", **waiting_json(run)}))
    start = None if after is None else position(after, (int, str, int, str))
    page = page_after(listed, lambda pair: pair[0], start, limit)
    return Paged([shown for _, shown in page.items], page.after)


def waiting_json(start: RunStart) -> dict[str, Any]:
    """A job waiting for a lock or a slot, as its daemon noted it."""
    return {
        "for": start.waiting_for,
        "key": start.waiting_key,
        "held_by": start.held_by,
        "event_id": start.event_id,
        "message_id": start.message_id,
        "host": start.host,
        "owner": start.owner,
        "since": start.started_at,
    }


def held(table: Table, *, page_size: int | None = None) -> Holdings:
    """Every held lock and group slot of the table, by lock_id and by key and slot: a Scan of the
    whole table, page by page (of at most page_size items read, else of DynamoDB's 1 MB).

    A released lock or slot (no EventId, only its ReleasedBy mark) is free, and not listed. The
    events' summaries come in the same Scan (a Scan's cost is the items it reads, not those it
    returns), for the jobs waiting for a lock or a slot.
    """
    request: dict[str, Any] = {
        "TableName": table.name,
        "FilterExpression": "((#type = :lock OR begins_with(#type, :slot)) "
        "AND attribute_exists(EventId)) OR #type = :summary",
        # TYPE is a DynamoDB reserved word.
        "ExpressionAttributeNames": {"#type": "Type"},
        "ExpressionAttributeValues": {
            ":lock": {"S": LOCK_TYPE},
            ":slot": {"S": SLOT_TYPE_PREFIX},
            ":summary": {"S": SUMMARY_TYPE},
        },
        "ConsistentRead": True,
    }
    locks: list[HeldLock] = []
    slots: list[HeldSlot] = []
    waiting: list[RunStart] = []
    with table.reading():
        pages = table.client.get_paginator("scan").paginate(
            **request, PaginationConfig={"PageSize": page_size} if page_size else {}
        )
        for page in pages:
            for item in page.get("Items", []):
                if item["Type"]["S"] == LOCK_TYPE:
                    locks.append(HeldLock.from_item(item))
                elif parse_slot(item["Type"]["S"]) is not None:
                    slots.append(HeldSlot.from_item(item))
                elif item["Type"]["S"] == SUMMARY_TYPE:
                    waiting += [run for run in running_notes(item) if run.waiting_for]
    slots.sort(key=lambda slot: (slot.lock_id, slot.slot))
    groups = [
        Group(key, list(members))
        for key, members in itertools.groupby(slots, key=lambda slot: slot.lock_id)
    ]
    waiting.sort(key=lambda run: (run.waiting_for or "", run.waiting_key or "", run.started_at))
    return Holdings(sorted(locks, key=lambda lock: lock.lock_id), groups, waiting)


def lock_of(table: Table, lock_id: str) -> HeldLock | None:
    """Who holds lock_id now: one GetItem (None: free)."""
    key = {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}
    item = table.client.get_item(TableName=table.name, Key=key).get("Item")
    return HeldLock.from_item(item) if item and "EventId" in item else None
