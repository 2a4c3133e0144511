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

#: SQS's largest message: 1 MiB. No job is larger, so no body the HTTP API takes is either.
MAX_MESSAGE_BYTES = 1024 * 1024

#: DynamoDB's longest partition key value, in bytes of UTF-8. A message's event_id, lock_id and
#: concurrency_key each become one (of its run records and summary, its lock, its group's slots).
MAX_KEY_BYTES = 2048

#: The deepest a JSON body may nest its arrays and objects (a job's own fields nest three deep).
#: Every reader of a body or a dead letter decodes it through contract/safe_json.py, which
#: refuses a deeper one before Python's recursive decoder and any walk of the value see it.
MAX_JSON_DEPTH = 64

#: A firing's time lies in [EARLIEST_FIRING, LATEST_FIRING) (unix seconds, UTC): far inside
#: Python's dates (years 1 to 9999), so that its next firing, a claim's expiry or any time
#: computed from it is a date too. 1970-01-01 and 9000-01-01.
EARLIEST_FIRING = 0.0
LATEST_FIRING = 221845392000.0
#: The longest period of a firing's rate() expression: ten years. No real schedule waits
#: longer, and its next firing (LATEST_FIRING plus this) is still a date.
MAX_RATE_SECONDS = 3650 * 86400

#: The most characters of a message's own text that an error about it quotes. A reason is
#: logged and kept in a dead letter's attribute: it must stay small whatever the message holds.
MAX_SHOWN = 100


def bounded_wait(seconds: float | None) -> float | None:
    """A timeout that threading accepts: None stays None (no limit), the rest at most MAX_WAIT_SECONDS."""
    return None if seconds is None else min(seconds, MAX_WAIT_SECONDS)
