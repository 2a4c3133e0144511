"""Fleet-wide pauses of events (or of all of them), kept in the lock table behind a small Protocol.

DynamoPauses keeps them in the controls item, which one GetItem reads; MemoryPauses sits beside it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from sqsjkr.backends.controls import CONTROLS_ID, CONTROLS_TYPE, ControlItem, decode_attributes

#: The key of the one item that holds every pause (and every route).
PAUSES_ID = CONTROLS_ID
PAUSE_TYPE = CONTROLS_TYPE
#: The item has an attribute per scope: this prefix and the event_id, or ALL_SCOPE.
ATTRIBUTE_PREFIX = "Pause:"
ALL_SCOPE = "*"


@dataclass(frozen=True)
class Pause:
    """Jobs of event_id (of every event when None) are not run from since until until (or until
    resumed, when None)."""

    event_id: str | None
    since: float  # unix seconds
    until: float | None
    reason: str
    by: str  # who paused: user@host of the command

    @property
    def scope(self) -> str:
        return ALL_SCOPE if self.event_id is None else self.event_id

    def in_effect(self, now: float) -> bool:
        return self.until is None or self.until > now

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Pause:
        until = data.get("until")
        return cls(
            event_id=data.get("event_id"),
            since=float(data["since"]),
            until=None if until is None else float(until),
            reason=str(data.get("reason", "")),
            by=str(data.get("by", "")),
        )


class PauseStore(Protocol):
    """Keeps the pauses of a fleet."""

    def pauses(self) -> list[Pause]:
        """The pauses in effect: one whose until has passed is left out."""

    def pause(self, *pauses: Pause) -> None:
        """Add the pauses, each replacing the one of its scope (the same event, or all): all of
        them, or none when the store refuses the write."""

    def resume(self, event_ids: Sequence[str] | None) -> list[Pause]:
        """Lift the pauses of these events (None: every pause, all included); the ones lifted
        that were in effect."""


def paused(pauses: Sequence[Pause], event_id: str, now: float) -> Pause | None:
    """The pause that holds event_id at now: its own or the pause of all, whichever ends later
    (its own on a tie); None when the event may run."""
    holding = [
        p for p in pauses if p.in_effect(now) and (p.event_id is None or p.event_id == event_id)
    ]
    if not holding:
        return None
    return max(holding, key=lambda p: (p.until is None, p.until or 0.0, p.event_id is not None))


class MemoryPauses:
    """Pauses within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._mutex = threading.Lock()
        self._pauses: dict[str, Pause] = {}
        self._clock = clock

    def pauses(self) -> list[Pause]:
        now = self._clock()
        with self._mutex:
            return sorted((p for p in self._pauses.values() if p.in_effect(now)), key=_order)

    def pause(self, *pauses: Pause) -> None:
        with self._mutex:
            self._pauses.update((p.scope, p) for p in pauses)

    def resume(self, event_ids: Sequence[str] | None) -> list[Pause]:
        now = self._clock()
        with self._mutex:
            scopes = list(self._pauses) if event_ids is None else event_ids
            lifted = [self._pauses.pop(s) for s in scopes if s in self._pauses]
        return sorted((p for p in lifted if p.in_effect(now)), key=_order)


class DynamoPauses:
    """An attribute "Pause:<scope>" per pause, each the Pause as JSON, in the fleet's controls
    item (backends/controls.py; docs/semantics.md, "Pauses"), which routes share.

    One item is what keeps a daemon's reads of the pause state to one GetItem per refresh.
    """

    def __init__(self, client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._item = ControlItem(client, table)
        self._clock = clock

    def pauses(self) -> list[Pause]:
        return in_effect(decode_pauses(self._item.read_attributes()), self._clock())

    def pause(self, *pauses: Pause) -> None:
        # One UpdateItem: a pause of many events is made whole, or not at all.
        self._item.put_attributes(
            {ATTRIBUTE_PREFIX + p.scope: json.dumps(p.as_dict()) for p in pauses}
        )

    def resume(self, event_ids: Sequence[str] | None) -> list[Pause]:
        if event_ids is None:
            # Every pause attribute goes, whatever follows its prefix; the routes stay.
            old = self._item.remove_prefixed_attributes(ATTRIBUTE_PREFIX)
        else:
            old = self._item.remove_attributes(
                [ATTRIBUTE_PREFIX + e for e in sorted(set(event_ids))]
            )
        # A damaged attribute is gone now too; only the pauses it can still tell of are told.
        return in_effect(decode_pauses(old, strict=False), self._clock())


def in_effect(pauses: Sequence[Pause], now: float) -> list[Pause]:
    """The pauses in effect at now, all first, then by event."""
    return sorted((p for p in pauses if p.in_effect(now)), key=_order)


def decode_pauses(item: dict[str, Any], *, strict: bool = True) -> list[Pause]:
    """The pauses of the item's "Pause:" attributes, each scoped by its attribute's name."""

    def build(scope: str, data: dict[str, Any]) -> Pause:
        return Pause.from_dict({**data, "event_id": None if scope == ALL_SCOPE else scope})

    remedy = "`sqsjkr resume` of its event (or --all) removes it"
    return decode_attributes(item, ATTRIBUTE_PREFIX, build, strict=strict, remedy=remedy)


def _order(pause: Pause) -> tuple[bool, str]:
    """All first, then by event."""
    return (pause.event_id is not None, pause.event_id or "")
