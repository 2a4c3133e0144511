"""Limits of AWS services and of Python's timers that the contract, the config and every wait obey.

Kept here, below the backends, so that validating a value never needs to import a backend.
"""

#: SQS's longest visibility timeout: 12 hours.
MAX_VISIBILITY_SECONDS = 43200
#: The longest a received message can be hidden for: SQS counts its 12 hours from the receipt,
#: which was a moment ago.
LONGEST_HIDE_SECONDS = MAX_VISIBILITY_SECONDS - 60

#: The longest wait the daemon hands to a timer. Durations may be as long as Go's largest
#: (about 292 years), beyond what threading's timeouts accept; a wait of ten years is as good
#: as none, so every wait is cut to this.
MAX_WAIT_SECONDS = 10 * 365 * 86400.0


def bounded_wait(seconds: float | None) -> float | None:
    """A timeout that threading accepts: None stays None (no limit), the rest at most MAX_WAIT_SECONDS."""
    return None if seconds is None else min(seconds, MAX_WAIT_SECONDS)
