"""The fleet's daemons: an item per daemon in the lock table, which it keeps current, behind a Protocol.

DynamoRoster writes and lists them (docs/history.md has the item layout); MemoryRoster and NoRoster sit beside it.
"""

from __future__ import annotations

import enum
import json
import threading
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from sqsjkr.backends.index import items_of_type, json_value

#: The Type of a daemon's item; its Id is the daemon's owner id (host:pid:random).
MEMBER_TYPE = "daemon"
#: A daemon's item stays this long after it was last seen, so that a stopped or lost daemon
#: stays listed for a while; then DynamoDB's TTL removes it.
MEMBER_KEEP_SECONDS = 7 * 86400
#: A running daemon not seen for this many of its refresh intervals is lost: it died without
#: saying so (kill -9, a crash, a host gone), or it cannot reach the table.
LOST_AFTER_REFRESHES = 3


class State(enum.Enum):
    """What a daemon's item says of it, as read at some moment."""

    RUNNING = "running"
    STOPPED = "stopped"  # it stopped cleanly
    LOST = "lost"  # not seen for LOST_AFTER_REFRESHES refresh intervals


@dataclass(frozen=True)
class Member:
    """One daemon, as its item describes it. Times are unix seconds."""

    owner: str  # host:pid:random, unique to this run of the daemon
    host: str
    pid: int
    version: str
    queues: tuple[tuple[str, int], ...]  # each queue's name and its workers
    started_at: float
    stats: str  # where its stats listen: "127.0.0.1:8061", "unix:/path"
    refresh: float  # seconds between its refreshes
    seen_at: float  # its last write
    busy: int = 0
    idle: int = 0
    stopped_at: float | None = None

    def state(self, now: float) -> State:
        if self.stopped_at is not None:
            return State.STOPPED
        if now - self.seen_at > LOST_AFTER_REFRESHES * self.refresh:
            return State.LOST
        return State.RUNNING

    def seen(self, now: float, busy: int, idle: int, *, stopped: bool = False) -> Member:
        """The member as written at now, with these counts."""
        return replace(self, seen_at=now, busy=busy, idle=idle, stopped_at=now if stopped else None)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["queues"] = [{"name": name, "workers": workers} for name, workers in self.queues]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Member:
        """Fields a newer daemon added are ignored; a missing or wrong one raises."""
        stopped = data.get("stopped_at")
        return cls(
            owner=str(data["owner"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            version=str(data["version"]),
            queues=tuple((str(q["name"]), int(q["workers"])) for q in data["queues"]),
            started_at=float(data["started_at"]),
            stats=str(data["stats"]),
            refresh=float(data["refresh"]),
            seen_at=float(data["seen_at"]),
            busy=int(data.get("busy", 0)),
            idle=int(data.get("idle", 0)),
            stopped_at=None if stopped is None else float(stopped),
        )


class Roster(Protocol):
    """Keeps an item per daemon of the fleet."""

    def write(self, member: Member) -> None:
        """Write member's item, replacing the one it wrote before."""

    def members(self) -> list[Member]:
        """Every daemon whose item has not expired, in no order."""


class NoRoster:
    """Keeps nothing: a daemon that uses no table."""

    def write(self, member: Member) -> None:
        return None

    def members(self) -> list[Member]:
        return []


class MemoryRoster:
    """Daemons within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._members: dict[str, Member] = {}

    def write(self, member: Member) -> None:
        with self._mutex:
            self._members[member.owner] = member

    def members(self) -> list[Member]:
        with self._mutex:
            return list(self._members.values())


class DynamoRoster:
    """{Id: owner id, Type: "daemon"} items in the lock table, each with the Member as JSON, its
    State, and an Expired MEMBER_KEEP_SECONDS after it was last seen. Listed through the
    table's TypeExpiredIndex, as summaries are. The Go daemon reads only "lock" and "throttle"
    items and never sees them."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def write(self, member: Member) -> None:
        item = {
            "Id": {"S": member.owner},
            "Type": {"S": MEMBER_TYPE},
            "Expired": {"N": str(int(member.seen_at + MEMBER_KEEP_SECONDS))},
            # For a look in the console; a lost daemon's item still says "running".
            "State": {"S": State.STOPPED.value if member.stopped_at else State.RUNNING.value},
            "Daemon": {"S": json.dumps(member.as_dict())},
        }
        self._client.put_item(TableName=self._table, Item=item)

    def members(self) -> list[Member]:
        items = items_of_type(self._client, self._table, MEMBER_TYPE)
        return [_member(item) for item in items]


def _member(item: dict[str, Any]) -> Member:
    return json_value(item, "Daemon", Member.from_dict, "the daemon item")
