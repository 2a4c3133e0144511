"""Catch-up's items in the lock table: the lease that lets one daemon of the fleet at a time look
for missed firings, and the read of which firings' claims exist (a firing that ran has one).

The lease is one item, {Id: "catchup:<schedule group>", Type: "catchup", Owner, LeaseUntil}.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import conditional_write
from sqsjkr.backends.dedupe import claim_key
from sqsjkr.backends.index import batch_get

#: The Type of the lease's item.
LEASE_TYPE = "catchup"
#: How long a lease item stays after its last write before DynamoDB's TTL removes it.
LEASE_KEEP_SECONDS = 7 * 86400


@dataclass(frozen=True)
class Turn:
    """The answer to a take: whether the lease is ours, and until when it is held (by us, or by
    the daemon that has it: no need to ask again before then)."""

    ours: bool
    until: float
    holder: str | None = None


class CatchUpLease:
    """The fleet's catch-up lease for one schedule group, in the lock table: its holder renews it
    at each of its looks; another daemon takes it only once it has lapsed (its holder died, or
    stopped and gave it up)."""

    def __init__(self, client: Any, table: str, group: str) -> None:
        self._client = client
        self._table = table
        self._key = {"Id": {"S": f"catchup:{group}"}, "Type": {"S": LEASE_TYPE}}

    def take(self, owner: str, seconds: float, now: float | None = None) -> Turn:
        """Hold the lease for `seconds` from now if it is free, lapsed or ours already: one
        conditional write, whose refusal says who holds it and until when."""
        now = time.time() if now is None else now
        until = now + seconds
        taken, old = conditional_write(
            self._client.update_item,
            self._table,
            Key=self._key,
            UpdateExpression="SET #owner = :owner, LeaseUntil = :until, Expired = :expired",
            ConditionExpression=(
                "attribute_not_exists(LeaseUntil) OR LeaseUntil < :now OR #owner = :owner"
            ),
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues={
                ":owner": {"S": owner},
                ":until": {"N": f"{until:.3f}"},
                ":now": {"N": f"{now:.3f}"},
                ":expired": {"N": str(int(now) + LEASE_KEEP_SECONDS)},
            },
        )
        if taken:
            return Turn(True, until, owner)
        held = float(old.get("LeaseUntil", {}).get("N", until))
        return Turn(False, held, old.get("Owner", {}).get("S"))

    def give_up(self, owner: str) -> None:
        """End our lease now (a clean stop), so that a daemon started next looks at once."""
        conditional_write(
            self._client.update_item,
            self._table,
            Key=self._key,
            UpdateExpression="SET LeaseUntil = :zero",
            ConditionExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues={":owner": {"S": owner}, ":zero": {"N": "0"}},
        )


def claimed(client: Any, table: str, keys: Iterable[str]) -> set[str]:
    """Which of these claim keys (firings' keys) have a claim in the table: BatchGetItem, a call
    per 100, eventually consistent (a claim missed by a stale read costs one message, which the
    claim then drops as a duplicate)."""
    found = batch_get(client, table, [claim_key(key) for key in sorted(set(keys))], "Id")
    return {item["Id"]["S"] for item in found}
