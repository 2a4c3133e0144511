"""Leases: who holds a lock or a job's dedupe record, and until when.

A holder renews its leases while it lives; a lease it stops renewing ends, so a dead daemon frees what it held.
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass


@dataclass(frozen=True)
class Lease:
    """One hold on a store item: the item's key and the owner id written into it."""

    key: str
    owner: str


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
