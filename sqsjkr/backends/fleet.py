"""What a daemon reads at each refresh of the fleet's controls: the pauses and the routes together,
in one read (one GetItem of the controls item with DynamoDB).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from sqsjkr.backends.controls import ControlItem
from sqsjkr.backends.pause import Pause, PauseStore, decode_pauses, in_effect
from sqsjkr.backends.routes import Route, RouteStore, decode_routes


@dataclass(frozen=True)
class Controls:
    """The pauses in effect and the routes, as read at one moment."""

    pauses: list[Pause] = field(default_factory=list)
    routes: list[Route] = field(default_factory=list)


class ControlStore(Protocol):
    """Reads the fleet's controls."""

    def controls(self) -> Controls:
        """The pauses in effect and every route."""


class DynamoControls:
    """The controls item of a table, read once for both."""

    def __init__(self, client: Any, table: str, *, clock: Callable[[], float] = time.time) -> None:
        self._item = ControlItem(client, table)
        self._clock = clock

    def controls(self) -> Controls:
        item = self._item.read_attributes()
        return Controls(in_effect(decode_pauses(item), self._clock()), decode_routes(item))


class StoresControls:
    """The controls of a pause store and a route store (MemoryPauses and MemoryRoutes in tests)."""

    def __init__(self, pauses: PauseStore, routes: RouteStore) -> None:
        self._pauses = pauses
        self._routes = routes

    def controls(self) -> Controls:
        return Controls(self._pauses.pauses(), self._routes.routes())
