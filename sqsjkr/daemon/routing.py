"""Routes as one queue's intake honours them: a message of a routed event received on another queue
than its route names is sent on to that queue, and only then deleted here; it runs there, not here.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.routes import Route, as_forwarded, routed
from sqsjkr.backends.sqs import Message
from sqsjkr.daemon.controls import ControlsCopy
from sqsjkr.errors import quote

log = logging.getLogger("sqsjkr.route")


class Forwarder(Protocol):
    """Sends a received message on to another queue (backends/sqs.py QueueForwarder)."""

    def forward(self, message: Message, queue: str, event_id: str) -> str:
        """Send message's body and attributes to the queue named queue; the new message's id."""


@dataclass
class Rerouted:
    """What routing did with a batch of received messages."""

    #: Sent on to their route's queue: to delete here, unrun.
    forwarded: list[Message] = field(default_factory=list)
    #: The ids of every message routed away, forwarded or not: none runs here. One whose send
    #: failed stays in flight, and comes back when its visibility timeout ends.
    taken: set[str] = field(default_factory=set)


class Routing:
    """Forwards the messages of events routed to another queue than this intake's."""

    def __init__(self, controls: ControlsCopy, queue: str, forwarder: Forwarder) -> None:
        self._controls = controls
        self._queue = queue
        self._forwarder = forwarder

    def reroute(self, received: Sequence[tuple[Message, str]]) -> Rerouted:
        """Of (message, event_id) pairs just received, forward those whose event is routed to
        another queue. The controls are read only as often as the pauses are (the same copy)."""
        done = Rerouted()
        routes = self._controls.current().routes
        if not routes:
            return done
        for message, event_id in received:
            route = routed(routes, event_id)
            if route is None or route.queue == self._queue:
                continue
            done.taken.add(message.message_id)
            if self._forward(message, event_id, route):
                done.forwarded.append(message)
        return done

    def routed_here(self, event_id: str) -> bool:
        """Whether event_id is routed to this intake's queue: where a forwarded copy arrives."""
        route = routed(self._controls.current().routes, event_id)
        return route is not None and route.queue == self._queue

    def _forward(self, message: Message, event_id: str, route: Route) -> bool:
        try:
            sent = self._forwarder.forward(as_forwarded(message), route.queue, event_id)
        except AWS_ERRORS as exc:
            # Not deleted: it comes back here when its visibility timeout ends, and is forwarded
            # then (or run, if the route is gone by then).
            log.error(
                "message %s of event %s could not be forwarded from queue %s to queue %s, its "
                "route (%s); it stays on queue %s for a later try",
                message.message_id,
                quote(event_id),
                self._queue,
                route.queue,
                describe(exc),
                self._queue,
            )
            return False
        log.info(
            "message %s of event %s forwarded from queue %s to queue %s as message %s: %s",
            message.message_id,
            quote(event_id),
            self._queue,
            route.queue,
            sent,
            describe_route(route),
        )
        return True


def describe_route(route: Route) -> str:
    reason = f" ({route.reason})" if route.reason else ""
    return f"routed by {route.by}{reason}"
