"""Limits of AWS services, of Python's timers and of error text, which the contract obeys.

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

#: DynamoDB's longest partition key value, in bytes of UTF-8. A message's event_id, lock_id and
#: concurrency_key each become one (of its run records and summary, its lock, its group's slots).
MAX_KEY_BYTES = 2048

#: The most characters of a message's own text that an error about it quotes. A reason is
#: logged and kept in a dead letter's attribute: it must stay small whatever the message holds.
MAX_SHOWN = 100


def bounded_wait(seconds: float | None) -> float | None:
    """A timeout that threading accepts: None stays None (no limit), the rest at most MAX_WAIT_SECONDS."""
    return None if seconds is None else min(seconds, MAX_WAIT_SECONDS)
