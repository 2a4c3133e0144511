"""A scheduled job's catch-up: how old a missed firing of its schedule may be and still run once by
itself, and the message that runs it (the schedule's own, sent as that firing, origin "catch-up").

The `catch_up` field of a schedule's message (the module's `catch_up`); the daemon reads it from
the Scheduler's own schedule, never from a message it receives (docs/schedules.md, Catch-up).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from sqsjkr.contract.duration import Duration, DurationError, duration_value
from sqsjkr.contract.fields import field_error, json_type
from sqsjkr.contract.firing import Firing, Origin

#: The message field.
CATCH_UP_FIELD = "catch_up"
#: The longest catch_up: a firing's claim lives for the queue's retention + 15 days
#: (backends/dedupe.py), so a firing caught up within a week is still known to have run for as
#: long as anyone may look for it, and a look reads at most a week of a schedule's firings.
MAX_CATCH_UP = Duration.of_seconds(7 * 86400)


def parse_catch_up(fields: Mapping[str, object]) -> Duration | None:
    """The message's catch_up (int seconds, or "6h", "2d"), None without one or for 0;
    InvalidJobError naming the field for anything else or more than MAX_CATCH_UP."""
    value = fields.get(CATCH_UP_FIELD)
    if value is None:
        return None
    try:
        duration = duration_value(value, days=True)
    except DurationError as error:
        reason = str(error)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            reason += f", got {json_type(value)}"
        raise field_error(CATCH_UP_FIELD, reason) from None
    if duration.ns > MAX_CATCH_UP.ns:
        raise field_error(
            CATCH_UP_FIELD,
            f"must be at most {MAX_CATCH_UP} (7 days), got {duration}: a firing's claim must "
            "outlive the window in which it may be caught up",
        )
    return duration if duration.ns else None


def catch_up_message(fields: Mapping[str, object], firing: Firing) -> str:
    """The schedule's message (its target input, parsed) as a catch-up sends it: as that firing,
    origin "catch-up", never the placeholders the Scheduler fills in."""
    body = dict(fields)
    body["firing"] = firing.as_fields()
    body["origin"] = Origin.CATCH_UP.value
    return json.dumps(body, ensure_ascii=True, separators=(",", ":"))
