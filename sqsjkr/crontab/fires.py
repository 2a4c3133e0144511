"""When an EventBridge schedule fires next: cron(), rate() and at() expressions, read in the
schedule's zone with EventBridge Scheduler's daylight saving behaviour (docs/schedules.md).

croniter does the cron arithmetic (L, W, #, the year field); this module translates EventBridge's
syntax to croniter's and applies the zone: a local time the clock skips never fires, one it
repeats fires once, in the first pass.
"""

from __future__ import annotations

import collections
import functools
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

from sqsjkr.crontab.eventbridge import WEEKDAYS, load_zone
from sqsjkr.errors import ScheduleExpressionError

#: The most candidate local times that are no fire, in a time the clock skips or at or before
#: `after` in a time it repeats: a minutely schedule through the longest change on record (a
#: whole day, Samoa 2011), with room. Past them the schedule is taken to fire no more, where
#: croniter would otherwise be asked for ever. Elsewhere every candidate is a fire.
_MOST_PASSED = 3 * 24 * 60
_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours|day|days)\)")
_UNIT_SECONDS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass(frozen=True)
class Fires:
    """The next times a schedule fires, in its zone; exact is False for a rate() whose start is
    unknown (a rule's), counted from now instead."""

    times: tuple[datetime, ...]
    exact: bool = True


@dataclass(frozen=True)
class Window:
    """When a schedule may fire at all: EventBridge Scheduler's StartDate and EndDate, and the
    moment a rate() counts from (its StartDate, else when it was created)."""

    start: datetime | None = None
    end: datetime | None = None
    created: datetime | None = None


def next_fires(
    expression: str, zone_name: str, after: datetime, count: int = 3, window: Window = Window()
) -> Fires:
    """The next `count` times after `after` (aware) that the schedule fires, fewer if it ends.

    ScheduleExpressionError names what in the expression or zone EventBridge would not take."""
    try:
        zone = load_zone(zone_name)
    except ValueError as exc:
        raise ScheduleExpressionError(f"time zone: {exc}") from None
    # In UTC: aware times of one zone compare by their wall clocks, blind to a repeated hour.
    after = after.astimezone(timezone.utc)
    if window.start is not None and window.start > after:
        after = window.start - timedelta(microseconds=1)
    fires = _fires(expression.strip(), zone, after, count, window)
    if window.end is not None:
        fires = Fires(tuple(t for t in fires.times if t <= window.end), fires.exact)
    return fires


def _fires(expression: str, zone: ZoneInfo, after: datetime, count: int, window: Window) -> Fires:
    if expression.startswith("cron(") and expression.endswith(")"):
        return Fires(tuple(_cron_fires(expression[5:-1], zone, after, count)))
    if expression.startswith("at(") and expression.endswith(")"):
        return Fires(_at_fire(expression[3:-1], zone, after))
    rate = _RATE.fullmatch(expression)
    if rate:
        return _rate_fires(int(rate[1]), rate[2], after, count, window.start or window.created)
    raise ScheduleExpressionError(
        f"{expression!r} is not a cron(...), rate(...) or at(...) expression"
    )


def _cron_fires(fields: str, zone: ZoneInfo, after: datetime, count: int) -> list[datetime]:
    spec = croniter_spec(fields)
    local_after = after.astimezone(zone).replace(tzinfo=None)
    try:
        # Naive local times: croniter then yields each wall-clock time once, as EventBridge
        # Scheduler runs a repeated time once; the zone is applied below.
        candidates = croniter(spec, local_after, second_at_beginning=True)
    except (CroniterBadCronError, ValueError) as exc:
        raise ScheduleExpressionError(f"cron({fields}): {exc}") from None
    fires: list[datetime] = []
    passed = 0
    while len(fires) < count and passed <= _MOST_PASSED:
        try:
            local: datetime = candidates.get_next(datetime)
        except CroniterBadDateError:
            break  # no time left (a year field in the past)
        instant = real_instant(local, zone)
        if instant is not None and instant > after:
            fires.append(instant)
        else:
            passed += 1
    return fires


def croniter_spec(fields: str) -> str:
    """EventBridge's six cron fields as croniter's seven (seconds first): `?` is `*`, and
    weekdays, numbered 1-7 from Sunday there, become croniter's 0-6."""
    parts = fields.split()
    if len(parts) != 6:
        raise ScheduleExpressionError(
            f"cron({fields}) has {len(parts)} fields: EventBridge takes six "
            "(minutes hours day-of-month month day-of-week year)"
        )
    minutes, hours, days, months, weekdays, years = parts
    if (days == "?") == (weekdays == "?"):
        raise ScheduleExpressionError(
            f"cron({fields}): one of day-of-month and day-of-week must be '?', and only one"
        )
    days = "*" if days == "?" else days
    weekdays = "*" if weekdays == "?" else ",".join(map(_weekday_item, weekdays.split(",")))
    return f"0 {minutes} {hours} {days} {months} {weekdays} {years}"


def _weekday_item(item: str) -> str:
    if item == "L":
        return "6"  # the last day of the week: Saturday
    if "#" in item:
        day, _, nth = item.partition("#")
        return f"{_weekday(day)}#{nth}"
    if item.endswith("L"):
        return f"L{_weekday(item[:-1])}"  # croniter writes "the last Thursday" L4
    first, slash, step = item.partition("/")
    low, dash, high = first.partition("-")
    translated = "*" if low == "*" else _weekday(low)
    if dash:
        translated += f"-{_weekday(high)}"
    return translated + (f"/{step}" if slash else "")


def _weekday(value: str) -> str:
    name = value.upper()
    if name in WEEKDAYS:
        return str(WEEKDAYS.index(name))
    if value.isdigit() and 1 <= int(value) <= 7:
        return str(int(value) - 1)
    raise ScheduleExpressionError(
        f"day-of-week {value!r}: EventBridge takes 1-7 (1 is Sunday) or SUN-SAT"
    )


def _at_fire(text: str, zone: ZoneInfo, after: datetime) -> tuple[datetime, ...]:
    try:
        local = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        raise ScheduleExpressionError(f"at({text}): expected yyyy-mm-ddThh:mm:ss") from None
    instant = real_instant(local, zone)
    return (instant,) if instant is not None and instant > after else ()


def real_instant(local: datetime, zone: ZoneInfo) -> datetime | None:
    """The instant of a naive local time as EventBridge Scheduler reads it: None for a time the
    clock skips (it does not run), the first pass for a time the clock repeats."""
    instant = local.replace(tzinfo=zone, fold=0)
    if instant.astimezone(timezone.utc).astimezone(zone).replace(tzinfo=None) != local:
        return None
    return instant


def _rate_fires(
    value: int, unit: str, after: datetime, count: int, anchor: datetime | None
) -> Fires:
    if value < 1:
        raise ScheduleExpressionError(f"rate({value} {unit}): the value must be at least 1")
    period = timedelta(seconds=value * _UNIT_SECONDS[unit.rstrip("s")])
    if anchor is None:
        return Fires(tuple(after + period * n for n in range(1, count + 1)), exact=False)
    done = (after - anchor) // period + 1 if after >= anchor else 0
    return Fires(tuple(anchor + period * (done + n) for n in range(count)))


@functools.lru_cache(maxsize=1024)
def next_firing(expression: str, zone_name: str | None, at: float) -> float | None:
    """The firing after the one due at `at` (unix seconds) of a schedule of this expression and
    zone (UTC when None), in unix seconds: a rate() counts from that firing. None when it fires
    no more, EventBridge would not take the expression, or it is past year 9999. Cached: a
    schedule's messages ask for the same firing again and again."""
    try:
        after = datetime.fromtimestamp(at, timezone.utc)
        fires = next_fires(expression, zone_name or "UTC", after, 1, Window(created=after))
        return fires.times[0].timestamp() if fires.times else None
    except (ScheduleExpressionError, OverflowError, ValueError):
        # Past Python's dates too: the contract refuses such a firing (contract/firing.py),
        # and a run's record, which asks for this, is written whatever the message said.
        return None


#: Fire times computed per call of next_fires while listing a span: few at first, since most
#: spans hold a handful of a schedule's firings and each costs croniter a step, then more.
_FIRST_BATCH = 4
_BATCH = 500


def fires_between(
    expression: str, zone_name: str, since: float, until: float, window: Window, most: int
) -> tuple[list[float], int]:
    """Every time the schedule fires in (since, until] (unix seconds, to the second as the
    Scheduler's scheduled-time says it): the newest `most` of them, and how many there were.
    Empty for an expression EventBridge would not take."""
    after = datetime.fromtimestamp(since, timezone.utc)
    times: collections.deque[float] = collections.deque(maxlen=most)
    seen = 0
    size = _FIRST_BATCH
    while True:
        try:
            batch = next_fires(expression, zone_name, after, size, window).times
        except ScheduleExpressionError:
            break
        # To the second: a rate() counts from its start, which may have microseconds.
        found = [float(int(t.timestamp())) for t in batch if t.timestamp() <= until]
        times.extend(found)
        seen += len(found)
        if len(batch) < size or batch[-1].timestamp() > until:
            break
        after = batch[-1]
        size = min(size * 4, _BATCH)
    return list(times), seen
