"""Routing overrides: an event whose jobs run from another queue than its schedule sends them to,
kept in the lock table behind a small Protocol; DynamoRoutes shares the controls item with pauses.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from sqsjkr.backends.controls import ControlItem, decode_attributes
from sqsjkr.backends.sqs import Message

#: The controls item has an attribute per routed event: this prefix and the event_id.
ROUTE_PREFIX = "Route:"
#: The message attribute of a forwarded copy: the id of the message first received, which its
#: job keeps (its claim, record and kill go by it), so that the copy and an original that
#: outlived a crash between the forward and its delete cannot both run.
FORWARDED_FROM_ATTRIBUTE = "sqsjkr_forwarded_from"
#: SQS takes ten message attributes at most: a message with ten forwards without the id.
MAX_MESSAGE_ATTRIBUTES = 10
#: What a message id looks like (SQS's are UUIDs): anything else in the attribute is ignored,
#: such as a firing's key, which would make a forged copy take that firing's claim.
_MESSAGE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Route:
    """Jobs of event_id run from queue (a queue name of the fleet), whichever queue they were
    sent to: a daemon that receives one on another queue forwards it there."""

    event_id: str
    queue: str
    since: float  # unix seconds
    reason: str
    by: str  # who routed: user@host of the command

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Route:
        return cls(
            event_id=str(data["event_id"]),
            queue=str(data["queue"]),
            since=float(data["since"]),
            reason=str(data.get("reason", "")),
            by=str(data.get("by", "")),
        )


class RouteStore(Protocol):
    """Keeps the routes of a fleet."""

    def routes(self) -> list[Route]:
        """Every route, by event."""

    def route(self, route: Route) -> None:
        """Add the route, or replace the event's route before it."""

    def clear(self, event_ids: Sequence[str]) -> list[Route]:
        """Remove the routes of these events; the ones removed."""


def routed(routes: Sequence[Route], event_id: str) -> Route | None:
    """The route of event_id, if it has one."""
    return next((route for route in routes if route.event_id == event_id), None)


class MemoryRoutes:
    """Routes within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._routes: dict[str, Route] = {}

    def routes(self) -> list[Route]:
        with self._mutex:
            return sorted(self._routes.values(), key=lambda route: route.event_id)

    def route(self, route: Route) -> None:
        with self._mutex:
            self._routes[route.event_id] = route

    def clear(self, event_ids: Sequence[str]) -> list[Route]:
        with self._mutex:
            cleared = [self._routes.pop(e) for e in sorted(set(event_ids)) if e in self._routes]
        return cleared


class DynamoRoutes:
    """An attribute "Route:<event_id>" per route, each the Route as JSON, in the controls item
    that the pauses use too: a daemon's refresh reads both in one GetItem (docs/semantics.md,
    "Routing")."""

    def __init__(self, client: Any, table: str) -> None:
        self._item = ControlItem(client, table)

    def routes(self) -> list[Route]:
        return decode_routes(self._item.read_attributes())

    def route(self, route: Route) -> None:
        self._item.put_attribute(ROUTE_PREFIX + route.event_id, json.dumps(route.as_dict()))

    def clear(self, event_ids: Sequence[str]) -> list[Route]:
        old = self._item.remove_attributes([ROUTE_PREFIX + e for e in sorted(set(event_ids))])
        return decode_routes(old, strict=False)


def decode_routes(item: dict[str, Any], *, strict: bool = True) -> list[Route]:
    """The routes of the item's "Route:" attributes, by event, each named by its attribute."""

    def build(event_id: str, data: dict[str, Any]) -> Route:
        return Route.from_dict({**data, "event_id": event_id})

    remedy = "`sqsjkr route EVENT_ID --clear` of its event removes it"
    found = decode_attributes(item, ROUTE_PREFIX, build, strict=strict, remedy=remedy)
    return sorted(found, key=lambda route: route.event_id)


def job_id(message: Message) -> str:
    """The id a received message's job goes by: the first message's, for a forwarded copy (its
    FORWARDED_FROM_ATTRIBUTE), else the message's own."""
    value = message.attributes.get(FORWARDED_FROM_ATTRIBUTE)
    found = value.get("StringValue") if isinstance(value, Mapping) else None
    if isinstance(found, str) and _MESSAGE_ID.fullmatch(found):
        return found
    return message.message_id


def without_forward(message: Message) -> Message:
    """message with no FORWARDED_FROM_ATTRIBUTE: its job goes by its own id."""
    attributes = {k: v for k, v in message.attributes.items() if k != FORWARDED_FROM_ATTRIBUTE}
    return replace(message, attributes=attributes)


def as_forwarded(message: Message) -> Message:
    """message as it is forwarded: with FORWARDED_FROM_ATTRIBUTE naming the first message
    (which a copy of a copy keeps), when SQS has room for one more attribute."""
    attributes = dict(message.attributes)
    if FORWARDED_FROM_ATTRIBUTE not in attributes and len(attributes) >= MAX_MESSAGE_ATTRIBUTES:
        return message
    attributes[FORWARDED_FROM_ATTRIBUTE] = {"DataType": "String", "StringValue": job_id(message)}
    return replace(message, attributes=attributes)
