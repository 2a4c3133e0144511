"""Kill requests (`sqsjkr kill`): a mark on a run's dedupe claim that its holder acts on.

The command writes the mark; the daemon's claim renewals fail on it (no call more per heartbeat) and read it.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.aws import conditional_write, lease_time
from sqsjkr.contract.run import KillMark

#: The attributes of a marked claim; KillAt is the mark itself (conditions test it).
KILL_AT, KILL_BY, KILL_REASON = "KillAt", "KillBy", "KillReason"
#: The condition that keeps a write off a marked claim.
NOT_MARKED = f"attribute_not_exists({KILL_AT})"


class KillRequested(Exception):
    """Not an error: a claim's renewal found a kill request on it. The lease was renewed all
    the same, so that the run's end stays its holder's to record."""

    def __init__(self, mark: KillMark) -> None:
        super().__init__(mark.describe())
        self.mark = mark


class KillAnswer(enum.Enum):
    """What a kill request found on the claim."""

    MARKED = "marked"  # the run was in progress: its holder stops it at its next heartbeat
    ALREADY = "already"  # someone had asked already (KillResult.mark says who): nothing changed
    ENDED = "ended"  # no run of that message is in progress: nothing changed


@dataclass(frozen=True)
class KillResult:
    answer: KillAnswer
    #: The mark on the claim now: ours when MARKED, the earlier one when ALREADY.
    mark: KillMark | None = None


def mark_of(item: dict[str, Any]) -> KillMark | None:
    """The kill request on a claim item, if it has one."""
    if KILL_AT not in item:
        return None
    return KillMark(
        by=item.get(KILL_BY, {}).get("S", ""),
        reason=item.get(KILL_REASON, {}).get("S", ""),
        at=float(item[KILL_AT]["N"]),
    )


def request_kill(client: Any, table: str, key: dict[str, Any], mark: KillMark) -> KillResult:
    """Mark the claim at key (a dedupe item) with mark, if its run is in progress (it has a
    lease, even one that passed: a dead holder's message comes back to a receiver that reads
    the mark) and no one asked before."""
    written, old = conditional_write(
        client.update_item,
        table,
        Key=key,
        UpdateExpression=f"SET {KILL_AT} = :at, {KILL_BY} = :by, {KILL_REASON} = :why",
        ConditionExpression=f"attribute_exists(LeaseUntil) AND {NOT_MARKED}",
        ExpressionAttributeValues={
            ":at": lease_time(mark.at),
            ":by": {"S": mark.by},
            ":why": {"S": mark.reason},
        },
    )
    if written:
        return KillResult(KillAnswer.MARKED, mark)
    earlier = mark_of(old)
    if earlier is not None and "LeaseUntil" in old:
        return KillResult(KillAnswer.ALREADY, earlier)
    return KillResult(KillAnswer.ENDED)


def kill_due(item: dict[str, Any], now: float) -> bool:
    """Whether a claim item carries a kill request that no live holder will act on: its
    holder's lease passed (it died), or its run ended leaving a retry, which must not run."""
    if KILL_AT not in item:
        return False
    if "LeaseUntil" in item:
        return float(item["LeaseUntil"]["N"]) < now
    return "RetryAt" in item
