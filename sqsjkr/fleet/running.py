"""The runs in progress, as the events' summaries list them, each checked against its dedupe claim:
stale when the daemon that started it died and stopped renewing the claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.backends.index import BATCH_GET_LIMIT
from sqsjkr.contract.run import EventSummary, RunStart
from sqsjkr.fleet.history import Store


@dataclass(frozen=True)
class Running:
    """A run the summary shows in progress; stale when the daemon that started it died."""

    start: RunStart
    stale: bool


def claim_is_live(claim: Mapping[str, Any] | None, now: float) -> bool:
    """Whether a job's dedupe claim is still leased: a daemon that died stops renewing it, and a
    finished job's claim has no LeaseUntil."""
    if not claim or "LeaseUntil" not in claim:
        return False
    return float(claim["LeaseUntil"]["N"]) >= now


def running_now(store: Store, summary: EventSummary, now: float) -> list[Running]:
    """The summary's runs in progress, each checked against its claim."""
    running = []
    for start in summary.running:
        response = store.client.get_item(
            TableName=store.table,
            Key={"Id": {"S": start.claim_item}, "Type": {"S": THROTTLE_TYPE}},
            ConsistentRead=True,
        )
        running.append(Running(start, stale=not claim_is_live(response.get("Item"), now)))
    return running


@dataclass(frozen=True)
class RunningNow:
    """A run the summaries show in progress, against its claim: stale when its daemon died."""

    start: RunStart
    stale: bool
    lease_until: float | None

    def lease_left(self, now: float) -> float | None:
        return None if self.lease_until is None else self.lease_until - now


def read_claims(client: Any, table: str, message_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The dedupe claims of these runs by their Id (RunStart.claim_item: the message id, or the
    firing's key), read BATCH_GET_LIMIT a call."""
    keys = list(dict.fromkeys(message_ids))
    found: dict[str, dict[str, Any]] = {}
    for i in range(0, len(keys), BATCH_GET_LIMIT):
        batch = [
            {"Id": {"S": k}, "Type": {"S": THROTTLE_TYPE}} for k in keys[i : i + BATCH_GET_LIMIT]
        ]
        pending: dict[str, Any] = {table: {"Keys": batch, "ConsistentRead": True}}
        while pending:
            response = client.batch_get_item(RequestItems=pending)
            for item in response["Responses"].get(table, []):
                found[item["Id"]["S"]] = item
            pending = response.get("UnprocessedKeys") or {}
    return found


def running_against(
    starts: Sequence[RunStart], claims: Mapping[str, Mapping[str, Any]], now: float
) -> list[RunningNow]:
    """Every run in progress, oldest first, each against its claim and its lease."""
    shown = []
    for start in sorted(starts, key=lambda s: s.started_at):
        claim = claims.get(start.claim_item)
        until = claim.get("LeaseUntil", {}).get("N") if claim else None
        stale = not claim_is_live(claim, now)
        shown.append(RunningNow(start, stale, None if until is None else float(until)))
    return shown
