"""Unlock: remove a stuck lock or group slot from the lock table, audited, refused while its lease
lives unless forced; and what was removed, in words.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqsjkr.backends.aws import conditional_write, lease_time
from sqsjkr.backends.groups import slot_key
from sqsjkr.backends.locks import LOCK_TYPE
from sqsjkr.errors import NotHeld, UnlockRefused, quote
from sqsjkr.fleet.locks import HeldLock, HeldSlot, Table
from sqsjkr.observability.logs import escape

if TYPE_CHECKING:
    # fleet-actions moves the Auditor into sqsjkr/fleet/audit.py: the lead points this there.
    from sqsjkr.fleet.audit import Auditor


#: What a forced unlock of a live lease means, for --help and the command's own warning.
FORCE_WARNING = (
    "the holder's job may still be running: another job of this lock may start beside it, "
    "and the holder logs LOST when it renews or releases the lock"
)


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
    entry = audit("unlock", target, reason=reason, force=force)
    removed, item = remove_lock(table, lock_id, force=force, now=now, slot=slot)
    what = f"lock {quote(lock_id)}" if slot is None else f"slot {slot} of group {quote(lock_id)}"
    if not removed and "EventId" not in item:
        problem = audit.refused(entry, "none was held")
        raise NotHeld(_with(f"no {what} is held in table {table.name!r}: nothing removed", problem))
    lock = HeldLock.from_item(item) if slot is None else HeldSlot.from_item(item)
    if not removed:
        left = lock.lease_text(now)
        problem = audit.refused(entry, f"its lease lives ({left} left)")
        raise UnlockRefused(
            _with(
                f"{what} is held by {escape(lock.owner or '-')} with {left} of its lease left: "
                "not removed",
                problem,
            )
        )
    return lock


def _with(refusal: str, problem: str | None) -> str:
    """A refusal, and why its audit item still reads as if it were done, when it does."""
    return refusal if problem is None else f"{refusal} ({problem})"


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
