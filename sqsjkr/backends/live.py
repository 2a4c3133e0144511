"""Live output: the tail of a running job's output so far, kept where `history --follow` reads it.

DynamoLive keeps an item per running run in the lock table (docs/history.md); MemoryLive sits beside it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Protocol

from sqsjkr.errors import StoreError, quote

#: A run's live item has the Type "live#<message id>" and its event_id as Id.
LIVE_TYPE_PREFIX = "live#"
#: A live item's TTL: the run's final write deletes it, so this only bounds what a daemon that
#: died mid-run leaves behind. The writer rewrites an unchanged item after half of it, so that
#: a job silent for hours keeps its item.
LIVE_KEEP_SECONDS = 86400


@dataclass(frozen=True)
class LiveOutput:
    """What a running run has printed so far, as its daemon last wrote it."""

    event_id: str
    message_id: str
    output: str  # the last [history] output_tail bytes of stdout and stderr merged
    printed: int  # bytes printed in all so far: a reader knows from it what it has not seen
    at: float  # when it was written (unix seconds)
    host: str


class LiveStore(Protocol):
    """Keeps the live output of each running run."""

    def write(self, live: LiveOutput) -> None:
        """Write the run's live output, replacing what was written before."""

    def read(self, event_id: str, message_id: str) -> LiveOutput | None:
        """The run's live output, or None if none was written (or it has ended)."""


class MemoryLive:
    """Live output within one process: for tests and for embedding sqsjkr in Python."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._outputs: dict[tuple[str, str], LiveOutput] = {}
        self.writes = 0

    def write(self, live: LiveOutput) -> None:
        with self._mutex:
            self._outputs[live.event_id, live.message_id] = live
            self.writes += 1

    def read(self, event_id: str, message_id: str) -> LiveOutput | None:
        with self._mutex:
            return self._outputs.get((event_id, message_id))

    def end(self, event_id: str, message_id: str) -> None:
        """The run ended: its live output goes."""
        with self._mutex:
            self._outputs.pop((event_id, message_id), None)


class DynamoLive:
    """{Id: event_id, Type: "live#<message id>"} items in the lock table, with the tail in
    `Output`, the bytes printed in `Printed`, and an `Expired` LIVE_KEEP_SECONDS on.

    It remembers which runs it has written an item for, so that the run's final write (one
    TransactWriteItems, DynamoHistory.finished) deletes the item at no call of its own, and
    a run that never had one pays nothing.
    """

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table
        self._mutex = threading.Lock()
        self._written: set[tuple[str, str]] = set()

    def write(self, live: LiveOutput) -> None:
        with self._mutex:
            # Before the call: a write whose answer is lost may still have landed.
            self._written.add((live.event_id, live.message_id))
        item = {
            **live_key(live.event_id, live.message_id),
            "Expired": {"N": str(int(live.at + LIVE_KEEP_SECONDS))},
            "Output": {"S": live.output},
            "Printed": {"N": str(live.printed)},
            "At": {"N": repr(live.at)},
            "Host": {"S": live.host},
        }
        self._client.put_item(TableName=self._table, Item=item)

    def end_delete(self, event_id: str, message_id: str) -> dict[str, Any] | None:
        """The Delete of the run's live item, for the transaction that ends the run; None if
        no item was written for it. Asked once per run end: the run is forgotten."""
        with self._mutex:
            if (event_id, message_id) not in self._written:
                return None
            self._written.discard((event_id, message_id))
        return {"Delete": {"Key": live_key(event_id, message_id)}}

    def read(self, event_id: str, message_id: str) -> LiveOutput | None:
        response = self._client.get_item(
            TableName=self._table, Key=live_key(event_id, message_id), ConsistentRead=True
        )
        item = response.get("Item")
        return None if item is None else _live(item)


def live_key(event_id: str, message_id: str) -> dict[str, Any]:
    return {"Id": {"S": event_id}, "Type": {"S": LIVE_TYPE_PREFIX + message_id}}


def _live(item: dict[str, Any]) -> LiveOutput:
    """The LiveOutput an item holds; a damaged item is named, so that it can be deleted."""
    try:
        return LiveOutput(
            event_id=item["Id"]["S"],
            message_id=item["Type"]["S"].removeprefix(LIVE_TYPE_PREFIX),
            output=item["Output"]["S"],
            printed=int(item["Printed"]["N"]),
            at=float(item["At"]["N"]),
            host=item["Host"]["S"],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            f"the live output item {quote(item.get('Type', {}).get('S', '?'))} of event "
            f"{quote(item.get('Id', {}).get('S', '?'))} is damaged ({exc!r}); it expires on its "
            "own, or delete it"
        ) from exc
