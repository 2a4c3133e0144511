"""Which scheduled firing a message is: its schedule, the time it was due, and who sent it.

A message's `firing` and `origin` fields; the Go daemon ignores both (unknown JSON fields).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone

from sqsjkr.contract.fields import field_error, json_type, text
from sqsjkr.contract.limits import (
    EARLIEST_FIRING,
    LATEST_FIRING,
    MAX_KEY_BYTES,
    MAX_RATE_SECONDS,
)

#: The Scheduler's context attributes, as the module's schedules write them into the message
#: (its guide's "Adding context attributes"); a rule's input transformer writes <time>.
SCHEDULED_TIME = "<aws.scheduler.scheduled-time>"
SCHEDULE_ARN = "<aws.scheduler.schedule-arn>"
#: Longest expression or zone a firing carries: EventBridge's own limits are 256 and 50.
MAX_EXPRESSION = 256
#: How far a firing's time may lie after its message was sent: the clocks' skew. The Scheduler
#: sends a firing when it is due (scheduled-time is the time it was due, also within a flexible
#: window), never before, so a firing further ahead is forged: it would make the real firing,
#: when it comes, a duplicate of a run that already happened.
FIRING_SKEW_SECONDS = 300
#: Longest id of a re-run (trigger sends 32 hex digits).
MAX_RERUN = 64
#: Longest schedule a firing names, in bytes of UTF-8: its claim's key is `<schedule>@<time>`,
#: a DynamoDB key of at most MAX_KEY_BYTES, and half of that leaves room for what a claim may
#: add to it. An ARN of EventBridge's longest group and schedule names is about 200 bytes.
MAX_SCHEDULE_BYTES = MAX_KEY_BYTES // 2
#: A rate() expression, loosely: any spacing or case, any unit, so that every value is bounded
#: whatever form the next firing's arithmetic (crontab/fires.py) comes to take.
_RATE = re.compile(r"\s*rate\s*\(\s*(\d+)\s*([a-z]*)\s*\)\s*", re.IGNORECASE)
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


class Origin(enum.Enum):
    """Who put the message on the queue: a schedule's firing, `sqsjkr send` (or a program's
    Fleet.send), `sqsjkr trigger` (run now, or a missed firing run by hand), or a daemon
    starting a pipeline's step once the steps it needs have succeeded, or a daemon catching up
    a missed firing (catch-up)."""

    SCHEDULE = "schedule"
    SEND = "send"
    TRIGGER = "trigger"
    PIPELINE = "pipeline"  # a step's message, sent by the daemon that ran its parents
    CATCH_UP = "catch-up"  # a missed firing a daemon sent by itself (contract/catchup.py)


@dataclass(frozen=True)
class Firing:
    """One firing of one schedule: the time it was due (unix seconds, UTC), the schedule (its
    ARN, or a name) and, when the message carries them, its expression and time zone."""

    at: float
    schedule: str
    expression: str | None = None
    timezone: str | None = None
    #: Set on a firing run again on purpose (`trigger --firing`, after it ran or was cancelled):
    #: an id of that re-run, so that it runs once as a run of its own, outside the firing's claim.
    rerun: str | None = None

    @property
    def iso(self) -> str:
        """at in RFC 3339, UTC, to the second, as the Scheduler writes scheduled-time."""
        moment = datetime.fromtimestamp(self.at, timezone.utc)
        return moment.isoformat(timespec="seconds").replace("+00:00", "Z")

    @property
    def key(self) -> str:
        """What every message of this firing shares, and no other firing's: the claim's key,
        so that two deliveries of one firing run once in the fleet."""
        return f"{self.schedule}@{self.iso}"

    @property
    def claim_key(self) -> str:
        """The key of the claim its messages share: the firing's, or its re-run's."""
        return self.key if self.rerun is None else f"{self.key}#rerun-{self.rerun}"

    def as_fields(self) -> dict[str, str]:
        """The message's `firing` object."""
        fields = {"time": self.iso, "schedule": self.schedule}
        if self.expression:
            fields["expression"] = self.expression
        if self.timezone:
            fields["timezone"] = self.timezone
        if self.rerun:
            fields["rerun"] = self.rerun
        return fields


def parse_firing(fields: Mapping[str, object]) -> Firing | None:
    """The message's `firing` object, or None without one; InvalidJobError (naming the field)
    for a malformed one, such as a context attribute the Scheduler did not substitute."""
    value = fields.get("firing")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise field_error("firing", f"must be an object, got {json_type(value)}")
    at = _time(value.get("time"))
    schedule = _text(
        value, "schedule", MAX_SCHEDULE_BYTES, required=True, why=" (part of its claim's key)"
    )
    expression = _text(value, "expression", MAX_EXPRESSION)
    if expression is not None:
        _check_rate(expression)
    zone = _text(value, "timezone", MAX_EXPRESSION)
    rerun = _text(value, "rerun", MAX_RERUN)
    return Firing(at, schedule or "", expression, zone, rerun)


def check_firing_sent(firing: Firing, sent_at: float) -> None:
    """InvalidJobError for a firing due later than its message was sent (SQS's SentTimestamp,
    which no sender sets), beyond the clocks' skew."""
    ahead = firing.at - sent_at
    if ahead > FIRING_SKEW_SECONDS:
        raise field_error(
            "firing.time",
            f"is {firing.iso}, {ahead:.0f}s after its message was sent: a schedule sends a firing "
            "once it is due, so this one would make the real firing a duplicate; refused",
        )


def parse_origin(fields: Mapping[str, object]) -> Origin | None:
    value = fields.get("origin")
    if value is None:
        return None
    known = ", ".join(o.value for o in Origin)
    if not isinstance(value, str):
        raise field_error("origin", f"must be one of {known}, got {json_type(value)}")
    try:
        return Origin(value)
    except ValueError:
        raise field_error("origin", f"must be one of {known}") from None


def _time(value: object) -> float:
    if not isinstance(value, str):
        raise field_error("firing.time", f"must be an RFC 3339 time, got {json_type(value)}")
    if value.startswith("<"):
        raise field_error(
            "firing.time",
            f"is {value[:40]}, not a time: the schedule's target did not substitute it "
            f"(EventBridge Scheduler substitutes {SCHEDULED_TIME} in a target's input)",
        )
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise field_error(
            "firing.time", "must be an RFC 3339 time (2030-01-31T09:30:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise field_error("firing.time", "must give its UTC offset (Z, or +09:00)")
    at = moment.timestamp()  # plain arithmetic: a date past 9999 in UTC does not raise here
    if not EARLIEST_FIRING <= at < LATEST_FIRING:
        raise field_error(
            "firing.time",
            f"is {value[:40]}: must lie from 1970-01-01 to before 9000-01-01 (UTC)",
        )
    return at


def _check_rate(expression: str) -> None:
    """A rate() whose period is longer than MAX_RATE_SECONDS is refused: its next firing
    could lie past Python's dates, and computing it would stop the run's record."""
    rate = _RATE.fullmatch(expression)
    if rate is None:
        return  # cron(), at(), or what no one computes: crontab/fires.py says so itself
    value, unit = int(rate[1]), rate[2].lower().rstrip("s")
    # An unknown unit is counted as the shortest: any value is bounded all the same.
    if value * _UNIT_SECONDS.get(unit, 60) > MAX_RATE_SECONDS:
        raise field_error(
            "firing.expression",
            f"{expression[:40]} repeats less often than every {MAX_RATE_SECONDS // 86400} "
            "days, the longest rate() a firing may carry",
        )


def _text(
    value: Mapping[str, object], name: str, limit: int, *, required: bool = False, why: str = ""
) -> str | None:
    item = value.get(name)
    path = f"firing.{name}"
    if item is None or item == "":
        if required:
            raise field_error(path, "is required: the schedule's ARN or name")
        return None
    item = text(path, item)  # a string, without an unpaired surrogate
    size = len(item.encode("utf-8"))
    if size > limit:
        raise field_error(path, f"must be at most {limit} bytes, got {size}{why}")
    if item.startswith("<aws."):
        raise field_error(path, f"is {item[:40]}: the schedule's target did not substitute it")
    return item
