"""Order inside a daemon for FIFO queues: one message of a message group at a time, in order.

GroupOrder is pure bookkeeping that the receive loop calls; it makes no AWS call of its own.

SQS hands a FIFO queue's messages of one group out in order and holds the group back while any of
them is in flight, but a single receive may return several messages of one group. Run side by
side, those would break the group's order, so GroupOrder lets the first start and keeps the others
waiting behind it, in order: the next one starts when the one before it ends with its message
deleted. One that ends without being deleted (given back, hidden for a retry, left to reappear)
will run again later, so the messages behind it must not run before it: they are handed back to
the caller to give back to the queue, where SQS keeps them behind it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from sqsjkr.backends.sqs import Message


class HasMessage(Protocol):
    """What GroupOrder orders: anything that carries its received message (the loop's InFlight)."""

    @property
    def message(self) -> Message: ...


E = TypeVar("E", bound=HasMessage)


@dataclass
class _Group(Generic[E]):
    holder: str  # the message id of the one message of the group that may run
    waiting: deque[E] = field(default_factory=deque)


class GroupOrder(Generic[E]):
    """Which received messages may start now, and which wait behind an earlier one of their group.

    Thread-safe: the receive loop admits, the workers' ends release. Messages without a group
    (a standard queue's) always start at once and are never tracked.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._groups: dict[str, _Group[E]] = {}

    def admit(self, entries: Sequence[E]) -> list[E]:
        """Of entries, in the order received, those that may start now; the others wait behind
        the message of their group that this daemon holds (one started earlier, or earlier in
        entries), and start one by one as finished() hands them out."""
        start = []
        with self._mutex:
            for entry in entries:
                group_id = entry.message.group_id
                if group_id is None:
                    start.append(entry)
                    continue
                group = self._groups.get(group_id)
                if group is None:
                    self._groups[group_id] = _Group(entry.message.message_id)
                    start.append(entry)
                else:
                    group.waiting.append(entry)
        return start

    def finished(self, entry: E) -> E | None:
        """entry's message is deleted (or is to be): the next of its group to start, if any."""
        with self._mutex:
            group = self._held_by(entry)
            if group is None:
                return None
            if not group.waiting:
                del self._groups[entry.message.group_id or ""]
                return None
            following = group.waiting.popleft()
            group.holder = following.message.message_id
            return following

    def given_back(self, entry: E) -> list[E]:
        """entry's message is NOT deleted (made visible, hidden for a while, or left to reappear):
        it runs again later, so every message waiting behind it must go back to the queue too.
        Returns them, in order; the caller makes them visible again at once (SQS holds them back
        while entry's message is in flight, and hands them out after it)."""
        with self._mutex:
            group = self._held_by(entry)
            if group is None:
                return []
            del self._groups[entry.message.group_id or ""]
            return list(group.waiting)

    def drain(self) -> list[E]:
        """Every waiting message, for a stopping daemon to give back; forgets all groups."""
        with self._mutex:
            waiting = [entry for group in self._groups.values() for entry in group.waiting]
            self._groups.clear()
            return waiting

    def waiting(self) -> int:
        """How many messages wait behind another of their group."""
        with self._mutex:
            return sum(len(group.waiting) for group in self._groups.values())

    def _held_by(self, entry: E) -> _Group[E] | None:
        group_id = entry.message.group_id
        if group_id is None:
            return None
        group = self._groups.get(group_id)
        if group is None or group.holder != entry.message.message_id:
            return None
        return group


def behind_held(entries: Sequence[E], held: Collection[str]) -> tuple[list[E], list[E]]:
    """Split entries (in the order received) around messages the daemon holds back unrun (a
    pause hides them): (those that may go on, those to give back because an earlier message of
    their group is held). A held message stays in flight, so SQS keeps the ones given back
    behind it."""
    blocked: set[str] = set()
    keep, give_back = [], []
    for entry in entries:
        message = entry.message
        if message.message_id in held:
            if message.group_id is not None:
                blocked.add(message.group_id)
        elif message.group_id is not None and message.group_id in blocked:
            give_back.append(entry)
        else:
            keep.append(entry)
    return keep, give_back
