"""A scheduled job's catch-up: how old a missed firing of its schedule may be and still run once by
itself, the message that runs it (the schedule's own, sent as that firing, origin "catch-up"), and
when a schedule may have been disabled, whose firings are never caught up.

The `catch_up` field of a schedule's message (the module's `catch_up`); the daemon reads it from
the Scheduler's own schedule, never from a message it receives (docs/schedules.md, Catch-up).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from sqsjkr.contract import safe_json
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


#: Longest text of the records the lease item keeps: a DynamoDB item holds at most 400 KB (about
#: 2,000 schedules' records fit).
MAX_SEEN_BYTES = 300_000
#: Most spans a schedule's seen record keeps: a schedule changed more often within a week has
#: its oldest two spans merged into one, which holds back more, never less.
MAX_GAPS = 16


@dataclass(frozen=True)
class Seen:
    """What the daemons that look have seen of one schedule: its LastModificationDate when last
    seen enabled (`modified`), the last look that saw it so (`ok`), and the spans (`gaps`,
    open intervals of unix seconds) in which it may have been disabled, whose firings are
    never caught up.

    The Scheduler keeps no history of a schedule's state, but every change of it (disabling,
    enabling, an edit) moves its LastModificationDate: a schedule enabled now and modified at M
    has been enabled since M; one seen enabled and unchanged at a look was enabled from its
    modification to that look. Between a look that saw it unchanged and its next modification,
    it may have been disabled: that span is a gap."""

    modified: float
    ok: float
    gaps: tuple[tuple[float, float], ...] = ()

    def holds_back(self, at: float) -> bool:
        """Whether a firing due at `at` falls where the schedule may have been disabled."""
        return any(start < at < end for start, end in self.gaps)


def seen_enabled(before: Seen | None, modified: float, now: float) -> Seen:
    """The record of a schedule seen enabled at `now` with LastModificationDate `modified`,
    after `before` (None: never seen enabled by the fleet's looks, as far as they recorded)."""
    if before is None:
        # Nothing known before its last change, which may have been its enabling.
        gaps: list[tuple[float, float]] = [(0.0, modified)]
    elif before.modified == modified:
        gaps = list(before.gaps)
    else:
        # Changed since the last look that saw it: it may have been disabled in between.
        gaps = [*before.gaps, (before.ok, modified)]
    gaps = [gap for gap in gaps if gap[1] > gap[0]]
    while len(gaps) > MAX_GAPS:
        gaps[:2] = [(gaps[0][0], gaps[1][1])]
    return Seen(modified, max(now, modified), tuple(gaps))


def drop_old_gaps(seen: Seen, oldest: float) -> Seen:
    """seen without the gaps that end before `oldest` (no firing that old is looked at)."""
    return Seen(seen.modified, seen.ok, tuple(g for g in seen.gaps if g[1] >= oldest))


def seen_text(records: Mapping[str, Seen], limit: int = MAX_SEEN_BYTES) -> str:
    """The records as the lease item keeps them (a JSON object by schedule name), at most limit
    characters: the records past it are left out (those schedules are then caught up only from
    their last change, which holds back more, not less)."""
    data = {
        name: {"m": r.modified, "ok": r.ok, "gaps": [list(g) for g in r.gaps]}
        for name, r in sorted(records.items())
    }
    text = json.dumps(data, separators=(",", ":"))
    while len(text) > limit and data:
        del data[next(reversed(data))]
        text = json.dumps(data, separators=(",", ":"))
    return text


def read_seen(text: str | None) -> dict[str, Seen]:
    """The records of seen_text; a damaged record (or a damaged text) is left out: a schedule
    without a record is caught up only from its last change, which holds back more, not less."""
    if not text:
        return {}
    try:
        data = safe_json.loads_object(text)
    except ValueError:
        return {}
    records = {}
    for name, value in data.items():
        try:
            gaps = tuple((float(a), float(b)) for a, b in value["gaps"])
            records[name] = Seen(float(value["m"]), float(value["ok"]), gaps)
        except (KeyError, TypeError, ValueError):
            continue
    return records
