"""The fleet's daemons, from the item each keeps in the lock table: running, stopped (cleanly), or lost
(not seen for three of its refresh intervals).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.members import DynamoRoster
from sqsjkr.backends.members import Member as Member
from sqsjkr.backends.members import State as State
from sqsjkr.contract.config import Config
from sqsjkr.fleet.history import reading_table

#: Running daemons first, then those lost, then those that stopped.
_ORDER = {State.RUNNING: 0, State.LOST: 1, State.STOPPED: 2}


def ordered(members: Sequence[Member], now: float) -> list[Member]:
    """Running first, then lost, then stopped; by host and start within each."""
    return sorted(members, key=lambda m: daemon_key(m, now))


def daemon_key(member: Member, now: float) -> tuple[int, str, float, str]:
    """Where a daemon sorts in ordered()'s order, its owner (unique) last: a page's position."""
    return (_ORDER[member.state(now)], member.host, member.started_at, member.owner)


def live(members: Sequence[Member], now: float) -> list[Member]:
    """The daemons seen running within three of their refresh intervals."""
    return [m for m in members if m.state(now) is State.RUNNING]


def read_members(config: Config, client: Any = None) -> list[Member]:
    """Every daemon's item in the config's table, read through client (default: a DynamoDB
    client of the config's own)."""
    if client is None:
        session = make_session(region=config.account.region, profile=config.account.profile)
        client = make_client(session, "dynamodb")
    table = config.lock.table
    with reading_table(table):
        return DynamoRoster(client, table).members()


def members_in(client: Any, table: str) -> list[Member]:
    """Every daemon's item in table, read through client; the caller names a missing table."""
    return DynamoRoster(client, table).members()


def daemons_json(members: Sequence[Member], now: float) -> dict[str, Any]:
    """`daemons --json`'s object: each member with its state and how long since it was seen."""
    return {
        "daemons": [
            {**m.as_dict(), "state": m.state(now).value, "last_seen_age": now - m.seen_at}
            for m in members
        ]
    }
