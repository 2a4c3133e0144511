"""`sqsjkr locks`: the locks and group slots held now, read from the lock table; `sqsjkr unlock`: remove a stuck one.

It also holds what `sqsjkr pause` shares with it: the lock table of a config, opened for the commands.
"""

from __future__ import annotations

import json
import time

import click

from sqsjkr.commands.options import note, reason_option, warn
from sqsjkr.commands.store import Where, audited_table, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.text import escape
from sqsjkr.errors import NotHeld, UnlockRefused
from sqsjkr.fleet.locks import Group, HeldLock, Holdings, held
from sqsjkr.fleet.unlock import FORCE_WARNING, removed_text, unlock_held
from sqsjkr.fleet.wording import local_time, waiting_text


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
def locks(where: Where, as_json: bool) -> None:
    """Show the locks held now: lock, event, owner (host:pid:id) and lease left (read-only);
    then the concurrency groups with held slots: key, holders (of the limit), and each slot;
    then the jobs waiting for a lock or a slot, as their daemons last noted them.

    A Go daemon's lock has no owner and no lease ("Go-style"): it is held until that daemon
    deletes it. This reads the whole table (a Scan, page by page), so it costs reads in
    proportion to the table's size.
    """
    table = where.table()
    holdings = held(table)
    now = time.time()
    if as_json:
        click.echo(json.dumps(holdings.as_json(now), indent=2))
        return
    if not holdings.locks and not holdings.groups:
        note(f"no locks held in table {table.name!r}")
    show_tables(holdings, now)


def show_tables(holdings: Holdings, now: float) -> None:
    """The text of `locks`: a table of the held locks, one of the groups, one of the waiters."""
    if holdings.locks:
        rows = [
            ["LOCK", "EVENT", "OWNER", "LEASE"],
            *(lock_row(lock, now) for lock in holdings.locks),
        ]
        echo_lines(aligned(rows))
    if holdings.groups:
        if holdings.locks:
            click.echo()
        rows = [["GROUP", "HELD", "SLOT", "EVENT", "OWNER", "LEASE"]]
        for group in holdings.groups:
            rows += group_rows(group, now)
        echo_lines(aligned(rows))
    if holdings.waiting:
        if holdings.locks or holdings.groups:
            click.echo()
        rows = [["WAITING FOR", "EVENT", "HOST", "SINCE"]]
        rows += [
            [waiting_text(run), escape(run.event_id), escape(run.host), local_time(run.started_at)]
            for run in holdings.waiting
        ]
        echo_lines(aligned(rows))


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
    where: Where,
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
    config = where.config()
    now = time.time()
    try:
        lock = unlock_held(*audited_table(config), lock_id, slot, force, reason, now)
    except UnlockRefused as exc:
        raise click.ClickException(f"{exc} (--force removes it; beware: {FORCE_WARNING})") from exc
    except NotHeld as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(removed_text(lock, now))
    if lock.state(now) == "live":
        warn(FORCE_WARNING)
