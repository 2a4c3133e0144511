"""`sqsjkr daemons`: every daemon of the fleet, from the item each keeps in the lock table.

Running, stopped (cleanly), or lost (not seen for three of its refresh intervals); status --check's
--min-daemons counts the running ones here too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import click

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.members import DynamoRoster, Member, State
from sqsjkr.commands.history import aligned, format_span, local_time, reading_table, store_options
from sqsjkr.commands.options import load
from sqsjkr.contract.config import Overrides

HEADER = [
    "HOST",
    "PID",
    "VERSION",
    "STATE",
    "UP SINCE",
    "LAST SEEN",
    "BUSY/IDLE",
    "QUEUES",
    "STATS",
]
#: Running daemons first, then those lost, then those that stopped.
_ORDER = {State.RUNNING: 0, State.LOST: 1, State.STOPPED: 2}


def ordered(members: Sequence[Member], now: float) -> list[Member]:
    """Running first, then lost, then stopped; by host and start within each."""
    return sorted(members, key=lambda m: (_ORDER[m.state(now)], m.host, m.started_at))


def live(members: Sequence[Member], now: float) -> list[Member]:
    """The daemons seen running within three of their refresh intervals."""
    return [m for m in members if m.state(now) is State.RUNNING]


def queues_text(member: Member) -> str:
    return ", ".join(f"{name} ({workers})" for name, workers in member.queues)


def daemon_row(member: Member, now: float) -> list[str]:
    """One line of the table (aligned() escapes its cells: a host name with a newline must not
    forge a line)."""
    state = member.state(now)
    return [
        member.host,
        str(member.pid),
        member.version,
        state.value,
        local_time(member.started_at),
        f"{local_time(member.seen_at)} ({format_span(now - member.seen_at)} ago)",
        f"{member.busy}/{member.idle}" if state is State.RUNNING else "-",
        queues_text(member),
        member.stats,
    ]


def daemon_json(member: Member, now: float) -> dict[str, Any]:
    return {
        **member.as_dict(),
        "state": member.state(now).value,
        "last_seen_age": now - member.seen_at,
    }


def show_daemons(members: Sequence[Member], *, as_json: bool, now: float, table: str) -> None:
    members = ordered(members, now)
    if as_json:
        click.echo(json.dumps({"daemons": [daemon_json(m, now) for m in members]}, indent=2))
        return
    if not members:
        click.echo(
            f"no daemons recorded in table {table!r} (Go daemons write none)",
            err=True,
        )
        return
    for line in aligned([HEADER, *(daemon_row(m, now) for m in members)]):
        click.echo(line)


def read_members(
    conf: str, lock_table: str | None, profile: str | None, region: str | None
) -> tuple[list[Member], str]:
    """Every daemon's item in the config's table, and the table's name."""
    config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
    session = make_session(region=config.account.region, profile=config.account.profile)
    table = config.lock.table
    with reading_table(table):
        return DynamoRoster(make_client(session, "dynamodb"), table).members(), table


@click.command()
@store_options
@click.option(
    "--json", "as_json", is_flag=True, help='Print a JSON object: "daemons", an object per daemon.'
)
def daemons(
    conf: str, lock_table: str | None, profile: str | None, region: str | None, as_json: bool
) -> None:
    """List the fleet's daemons: host, version, up since, last seen, busy/idle workers, queues.

    Each daemon refreshes its item every [kicker] member_refresh (60s): one not seen for three of
    them is "lost" (killed, crashed, or out of reach of the table); one that stopped cleanly is
    "stopped". Items leave the table 7 days after they were last seen. Go daemons write none.
    """
    members, table = read_members(conf, lock_table, profile, region)
    show_daemons(members, as_json=as_json, now=time.time(), table=table)
