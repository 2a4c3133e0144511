"""Whether the daemon is alive and ready: its receive loop turns, and its last AWS calls succeeded.

The receive loop reports its turns; the AWS clients report their calls through botocore's events.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The receive loop turns at least once per long poll (20 s at most) or backoff (30 s at most);
#: a loop that has not turned for this long is stuck.
LIVENESS_SECONDS = 120.0

#: DynamoDB calls that write: their failure is a store failure.
_STORE_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})
#: Answers that refuse a conditional write: the store works, the condition did not hold.
CONDITION_CODES = frozenset({"ConditionalCheckFailedException", "TransactionCanceledException"})


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str

    def body(self) -> dict[str, str]:
        return {"status": "ok" if self.ok else "unavailable", "reason": self.reason}


class Health:
    """What /healthz and /readyz answer from: the loop's turns and the last calls' outcomes."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._clock = clock
        self._wall_clock = wall_clock
        self._lock = threading.Lock()
        self._last_turn: float | None = None
        #: Unix time of the last turn, for sqsjkr_receive_loop_last_turn_timestamp_seconds.
        self.last_turn_at: float | None = None
        self._draining = False
        self._receive_error: str | None = "no receive yet"
        self._store_error: str | None = None

    def turned(self) -> None:
        """The receive loop went round once."""
        with self._lock:
            self._last_turn = self._clock()
            self.last_turn_at = self._wall_clock()

    def draining(self) -> None:
        with self._lock:
            self._draining = True

    def call_ended(self, service: str, operation: str, error: str | None) -> None:
        """An AWS call ended (error: its code, or None); only receives and store writes count."""
        with self._lock:
            if service == "sqs" and operation == "ReceiveMessage":
                self._receive_error = error
            elif service == "dynamodb" and operation in _STORE_WRITES:
                self._store_error = error

    def live(self) -> Verdict:
        with self._lock:
            last = self._last_turn
        if last is None:
            return Verdict(False, "the receive loop has not started")
        idle = self._clock() - last
        if idle > LIVENESS_SECONDS:
            return Verdict(False, f"the receive loop has not turned for {idle:.0f}s")
        return Verdict(True, "the receive loop turns")

    def ready(self) -> Verdict:
        live = self.live()
        if not live.ok:
            return live
        with self._lock:
            if self._draining:
                return Verdict(False, "stopping: no longer receiving")
            if self._receive_error is not None:
                return Verdict(False, f"the last receive failed: {self._receive_error}")
            if self._store_error is not None:
                return Verdict(False, f"the last store write failed: {self._store_error}")
        return Verdict(True, "receiving; the last receive and store write succeeded")


def call_error(response: Any, caught_exception: BaseException | None) -> str | None:
    """The error code of one attempt of an AWS call as botocore's needs-retry event gives it;
    None for a success, or for a refused condition (the store answered)."""
    if caught_exception is not None:
        return type(caught_exception).__name__
    if response is None:
        return None
    http, parsed = response
    if http.status_code < 400:
        return None
    code = str(parsed.get("Error", {}).get("Code") or f"HTTP {http.status_code}")
    return None if code in CONDITION_CODES else code
