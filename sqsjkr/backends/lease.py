"""Leases: who holds a lock or a job's dedupe record, and until when.

A holder renews its leases while it lives; a lease it stops renewing ends, so a dead daemon frees what it held.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from dataclasses import dataclass

from sqsjkr.backends.aws import DYNAMODB_CALL_SECONDS

#: The shortest lease that one slow store call cannot eat. A job starts with at least two
#: thirds of its lease left; the heartbeat renews within a third of a lease from then, and that
#: renewal may take a whole call's retry budget to land. So a third of the lease must cover the
#: budget: lease >= 3 x 20 s = 60 s (docs/semantics.md has the arithmetic).
MIN_SAFE_LEASE_SECONDS = 3 * DYNAMODB_CALL_SECONDS
#: The share of its lease a lock or claim must have left for its job to start.
FRESH_LEASE_SHARE = 2 / 3


@dataclass(frozen=True)
class Lease:
    """One hold on a store item: the item's key, the owner id written into it, and the unix time
    its lease was written to end at (infinite for stores without leases)."""

    key: str
    owner: str
    until: float = math.inf


def new_owner() -> str:
    """An owner id unique to one hold: host and pid say who, the random part tells holds apart.

    Unique per hold, not per daemon, so that a conditional write that reads back its own owner
    id knows that it was this very write (a retried request whose first response was lost), not
    another job of the same daemon.
    """
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(6)}"


def lease_timing(lease_seconds: float) -> tuple[float, int]:
    """The heartbeat interval and the SQS visibility timeout that go with a lease.

    The heartbeat renews three times per lease, so two missed beats lose nothing. Visibility
    outlasts the lease by a quarter (at least 2 s), so that when a dead daemon's message
    reappears, its claim on the message has already expired and another daemon may take it over.
    """
    margin = max(2.0, lease_seconds / 4)
    return lease_seconds / 3, int(-(-(lease_seconds + margin) // 1))
