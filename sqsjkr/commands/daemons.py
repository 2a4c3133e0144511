"""`sqsjkr daemons`: every daemon of the fleet, from the item each keeps in the lock table.

Running, stopped (cleanly), or lost (not seen for three of its refresh intervals): the reading and
the states are the fleet layer's (sqsjkr/fleet/daemons.py); this module shows them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence

import click

from sqsjkr.commands.options import note
from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.fleet.daemons import Member, State, daemons_json, ordered, read_members
from sqsjkr.fleet.wording import format_span, local_time, queues_text

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


def show_daemons(members: Sequence[Member], *, as_json: bool, now: float, table: str) -> None:
    members = ordered(members, now)
    if as_json:
        click.echo(json.dumps(daemons_json(members, now), indent=2))
        return
    if not members:
        note(f"no daemons recorded in table {table!r} (Go daemons write none)")
        return
    echo_lines(aligned([HEADER, *(daemon_row(m, now) for m in members)]))


@click.command()
@store_options
@click.option(
    "--json", "as_json", is_flag=True, help='Print a JSON object: "daemons", an object per daemon.'
)
def daemons(where: Where, as_json: bool) -> None:
    """List the fleet's daemons: host, version, up since, last seen, busy/idle workers, queues.

    Each daemon refreshes its item every [kicker] member_refresh (60s): one not seen for three of
    them is "lost" (killed, crashed, or out of reach of the table); one that stopped cleanly is
    "stopped". Items leave the table 7 days after they were last seen. Go daemons write none.
    """
    config = where.config()
    show_daemons(read_members(config), as_json=as_json, now=time.time(), table=config.lock.table)
