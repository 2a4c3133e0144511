"""Catch-up's items in the lock table: the lease that lets one daemon of the fleet at a time look
for missed firings (with what the looks have seen of each schedule), and the read of the firings'
claims (a firing that ran has one, which says whether its run has ended).

The lease is one item, {Id: "catchup:<schedule group>", Type: "catchup", Owner, LeaseUntil, Seen}.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import conditional_write
from sqsjkr.backends.dedupe import claim_key
from sqsjkr.backends.index import batch_get

#: The Type of the lease's item.
LEASE_TYPE = "catchup"
#: How long a lease item stays after its last write before DynamoDB's TTL removes it.
LEASE_KEEP_SECONDS = 7 * 86400
#: The lease item's attribute that keeps what the looks have seen of each schedule (JSON,
#: contract/catchup.py's seen_text).
SEEN = "Seen"


@dataclass(frozen=True)
class Turn:
    """The answer to a take: whether the lease is ours, and until when it is held (by us, or by
    the daemon that has it: no need to ask again before then); who held it before this take,
    what its item kept of the schedules (Seen), and the time AWS answered at (its Date header,
    unix seconds, to the second), when it said."""

    ours: bool
    until: float
    holder: str | None = None
    previous: str | None = None
    seen: str | None = None
    answered_at: float | None = None


class CatchUpLease:
    """The fleet's catch-up lease for one schedule group, in the lock table: its holder renews it
    at each of its looks; another daemon takes it only once it has lapsed (its holder died, or
    stopped and gave it up)."""

    def __init__(self, client: Any, table: str, group: str) -> None:
        self._client = client
        self._table = table
        self._key = {"Id": {"S": f"catchup:{group}"}, "Type": {"S": LEASE_TYPE}}

    def take(
        self, owner: str, seconds: float, now: float | None = None, seen: str | None = None
    ) -> Turn:
        """Hold the lease for `seconds` from now if it is free, lapsed or ours already: one
        conditional write, whose refusal says who holds it and until when. seen: what this
        daemon has seen of the schedules, kept in the item by the same write (left as it is
        when None)."""
        now = time.time() if now is None else now
        until = now + seconds
        answer: dict[str, float | None] = {}

        def update(**request: Any) -> Any:
            try:
                response = self._client.update_item(**request)
            except ClientError as exc:
                answer["at"] = answer_time(exc.response)
                raise
            answer["at"] = answer_time(response)
            return response

        values = {
            ":owner": {"S": owner},
            ":until": {"N": f"{until:.3f}"},
            ":now": {"N": f"{now:.3f}"},
            ":expired": {"N": str(int(now) + LEASE_KEEP_SECONDS)},
        }
        expression = "SET #owner = :owner, LeaseUntil = :until, Expired = :expired"
        if seen is not None:
            expression += f", {SEEN} = :seen"
            values[":seen"] = {"S": seen}
        taken, old = conditional_write(
            update,
            self._table,
            Key=self._key,
            UpdateExpression=expression,
            ConditionExpression=(
                "attribute_not_exists(LeaseUntil) OR LeaseUntil < :now OR #owner = :owner"
            ),
            ExpressionAttributeNames={"#owner": "Owner"},
            ExpressionAttributeValues=values,
            ReturnValues="ALL_OLD",
        )
        previous = old.get("Owner", {}).get("S")
        kept = old.get(SEEN, {}).get("S")
        if taken:
            return Turn(True, until, owner, previous, kept, answer.get("at"))
        held = float(old.get("LeaseUntil", {}).get("N", until))
        return Turn(False, held, previous, previous, kept, answer.get("at"))

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


def answer_time(response: Mapping[str, Any]) -> float | None:
    """The time an AWS answer was given at (its Date header, to the second), if it says."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    try:
        return parsedate_to_datetime(headers["date"]).timestamp()
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def claimed(client: Any, table: str, keys: Iterable[str]) -> set[str]:
    """Which of these claim keys (firings' keys) have a claim in the table."""
    return set(claims(client, table, keys))


def claims(client: Any, table: str, keys: Iterable[str]) -> dict[str, float | None]:
    """The claims of these firings' keys that exist: for each, None once its run has ended
    (finished, or taken by a Go daemon), else until when it is held (its holder's lease, or the
    time its retry is due). BatchGetItem, a call per 100, eventually consistent (a claim missed
    by a stale read costs one message, which the claim then drops as a duplicate)."""
    found = batch_get(
        client,
        table,
        [claim_key(key) for key in sorted(set(keys))],
        "Id, LeaseUntil, RetryAt",
    )
    held: dict[str, float | None] = {}
    for item in found:
        until = item.get("LeaseUntil") or item.get("RetryAt")
        held[item["Id"]["S"]] = None if until is None else float(until["N"])
    return held
