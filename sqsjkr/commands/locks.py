"""`sqsjkr locks`: the locks and group slots held now, read from the lock table; `sqsjkr unlock`: remove a stuck one.

It also holds what `sqsjkr pause` shares with it: the lock table of a config, opened for the commands.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import click

from sqsjkr.backends.aws import (
    conditional_write,
    lease_time,
    make_client,
    make_session,
)
from sqsjkr.backends.groups import SLOT_TYPE_PREFIX, parse_slot, slot_key
from sqsjkr.backends.history import SUMMARY_TYPE, running_notes
from sqsjkr.backends.locks import LOCK_TYPE
from sqsjkr.commands.history import (
    aligned,
    format_span,
    local_time,
    reading_table,
    store_options,
)
from sqsjkr.commands.options import load, reason_option
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.run import RunStart
from sqsjkr.errors import NotHeld, UnlockRefused, quote
from sqsjkr.fleet.audit import Auditor, command_auditor
from sqsjkr.observability.logs import escape

#: What a forced unlock of a live lease means, for --help and the command's own warning.
FORCE_WARNING = (
    "the holder's job may still be running: another job of this lock may start beside it, "
    "and the holder logs LOST when it renews or releases the lock"
)


@dataclass(frozen=True)
class Table:
    """The lock table of a config, opened for an operator's command, and the client under it."""

    client: Any
    name: str

    def reading(self) -> AbstractContextManager[None]:
        return reading_table(self.name)


def open_table(conf: str, lock_table: str | None, profile: str | None, region: str | None) -> Table:
    """The [lock] table of the config, with --lock-table, --profile and --region applied."""
    return table_of(load(conf, Overrides(lock_table=lock_table, profile=profile, region=region)))


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


def waiting_text(start: RunStart) -> str:
    """'lock "L", held by HOST:PID' or 'concurrency group "db", full; the first slot to end
    held by HOST:PID': what a waiting job waits for, escaped for a terminal."""
    holder = "a Go daemon" if start.held_by is None else ":".join(start.held_by.split(":")[:2])
    full = ", full; the first slot to end" if start.waiting_for == "concurrency group" else ","
    return f"{start.waiting_for} {quote(start.waiting_key or '')}{full} held by {escape(holder)}"


def waiting_json(start: RunStart) -> dict[str, Any]:
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


def lock_row(lock: HeldLock, now: float) -> list[str]:
    return [
        escape(lock.lock_id),
        escape(lock.event_id),
        escape(lock.owner or "-"),
        lock.lease_text(now),
    ]


def group_rows(group: Group, now: float) -> list[list[str]]:
    """A row per held slot of group: its key and how many are held, then the slot as a lock."""
    key, count = escape(group.key), group.held_text(now)
    return [[key, count, str(slot.slot), *lock_row(slot, now)[1:]] for slot in group.slots]


@click.command()
@store_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print a JSON object: "locks", an object per lock, and "groups", one per group.',
)
def locks(
    conf: str, lock_table: str | None, profile: str | None, region: str | None, as_json: bool
) -> None:
    """Show the locks held now: lock, event, owner (host:pid:id) and lease left (read-only);
    then the concurrency groups with held slots: key, holders (of the limit), and each slot;
    then the jobs waiting for a lock or a slot, as their daemons last noted them.

    A Go daemon's lock has no owner and no lease ("Go-style"): it is held until that daemon
    deletes it. This reads the whole table (a Scan, page by page), so it costs reads in
    proportion to the table's size.
    """
    table = open_table(conf, lock_table, profile, region)
    holdings = held(table)
    now = time.time()
    if as_json:
        output = {
            "locks": [lock.as_json(now) for lock in holdings.locks],
            "groups": [group.as_json(now) for group in holdings.groups],
            "waiting": [waiting_json(run) for run in holdings.waiting],
        }
        click.echo(json.dumps(output, indent=2))
        return
    if not holdings.locks and not holdings.groups:
        click.echo(f"no locks held in table {table.name!r}", err=True)
    show_tables(holdings, now)


def show_tables(holdings: Holdings, now: float) -> None:
    """The text of `locks`: a table of the held locks, one of the groups, one of the waiters."""
    if holdings.locks:
        rows = [
            ["LOCK", "EVENT", "OWNER", "LEASE"],
            *(lock_row(lock, now) for lock in holdings.locks),
        ]
        for line in aligned(rows):
            click.echo(line)
    if holdings.groups:
        if holdings.locks:
            click.echo()
        rows = [["GROUP", "HELD", "SLOT", "EVENT", "OWNER", "LEASE"]]
        for group in holdings.groups:
            rows += group_rows(group, now)
        for line in aligned(rows):
            click.echo(line)
    if holdings.waiting:
        if holdings.locks or holdings.groups:
            click.echo()
        rows = [["WAITING FOR", "EVENT", "HOST", "SINCE"]]
        rows += [
            [waiting_text(run), escape(run.event_id), escape(run.host), local_time(run.started_at)]
            for run in holdings.waiting
        ]
        for line in aligned(rows):
            click.echo(line)


def remove_lock(
    table: Table, lock_id: str, *, force: bool, now: float, slot: int | None = None
) -> tuple[bool, dict[str, Any]]:
    """Delete lock_id's item (or slot of group lock_id's) if it is held, and (unless force) its
    lease has passed or it has none: (True, the item removed) or (False, the item that was kept;
    {} if none)."""
    condition = "attribute_exists(EventId)"
    values: dict[str, Any] = {}
    if not force:
        condition += " AND (attribute_not_exists(LeaseUntil) OR LeaseUntil < :now)"
        values[":now"] = lease_time(now)
    key = (
        {"Id": {"S": lock_id}, "Type": {"S": LOCK_TYPE}}
        if slot is None
        else slot_key(lock_id, slot)
    )
    return conditional_write(
        table.client.delete_item,
        table.name,
        Key=key,
        ConditionExpression=condition,
        ReturnValues="ALL_OLD",
        **({"ExpressionAttributeValues": values} if values else {}),
    )


def unlock_held(
    table: Table,
    audit: Auditor,
    lock_id: str,
    slot: int | None,
    force: bool,
    reason: str,
    now: float,
) -> HeldLock:
    """Remove lock_id (or slot of group lock_id) as `unlock` and the dashboard do, audited
    first; the lock removed. NotHeld when none is held, UnlockRefused for a live lease
    without force."""
    target = f"lock {lock_id}" if slot is None else f"slot {slot} of group {lock_id}"
    audit("unlock", target, reason=reason, detail="--force" if force else "")
    removed, item = remove_lock(table, lock_id, force=force, now=now, slot=slot)
    what = f"lock {quote(lock_id)}" if slot is None else f"slot {slot} of group {quote(lock_id)}"
    if not removed and "EventId" not in item:
        raise NotHeld(f"no {what} is held in table {table.name!r}: nothing removed")
    lock = HeldLock.from_item(item) if slot is None else HeldSlot.from_item(item)
    if not removed:
        raise UnlockRefused(
            f"{what} is held by {escape(lock.owner or '-')} with "
            f"{lock.lease_text(now)} of its lease left: not removed"
        )
    return lock


@click.command()
@store_options
@click.argument("lock_id")
@click.option(
    "--slot",
    type=click.IntRange(min=0),
    help="Remove this slot of the concurrency group LOCK_ID (as `locks` lists it), not a lock.",
)
@click.option(
    "--force",
    is_flag=True,
    help=f"Remove the lock even while its lease lives. Beware: {FORCE_WARNING}.",
)
@reason_option
def unlock(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    lock_id: str,
    slot: int | None,
    force: bool,
    reason: str,
) -> None:
    """Remove LOCK_ID when its lease has expired or it is a Go daemon's lock (which has no lease).

    With --slot N, remove slot N of the concurrency group LOCK_ID, by the same rules. A live
    lease is refused unless --force. It says what it removed. A Go daemon's lock is removed
    without --force: make sure its Go daemon is not still running that job.
    """
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    now = time.time()
    try:
        lock = unlock_held(
            table_of(config), command_auditor(config), lock_id, slot, force, reason, now
        )
    except UnlockRefused as exc:
        raise click.ClickException(f"{exc} (--force removes it; beware: {FORCE_WARNING})") from exc
    except NotHeld as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(removed_text(lock, now))
    if lock.state(now) == "live":
        click.echo(f"sqsjkr: warning: {FORCE_WARNING}", err=True)


def removed_text(lock: HeldLock, now: float) -> str:
    """What unlock says it removed: the lock or slot, its event, its owner and its lease's state."""
    what = f"removed {lock.name} of event {quote(lock.event_id)}"
    state = lock.state(now)
    if state == "go":
        return f"{what}, a Go daemon's lock (no owner, no lease)"
    if state == "unleased":
        return f"{what} (no owner, no lease)"
    lease = lock.lease_text(now)
    if state == "live":
        lease = f"a live lease with {lease} left, removed by --force"
    return f"{what}, owner {escape(lock.owner or '-')} ({lease})"
