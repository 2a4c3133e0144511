"""A zone's daylight saving changes, and the crontab lines EventBridge Scheduler runs differently
from cron around them (docs/schedules.md has both sides).

Cron (Vixie, cronie) runs the fixed-time jobs of a skipped hour right after the change and the
wildcard jobs of a repeated hour in both passes; EventBridge Scheduler, as AWS documents it,
skips what the clock skips and runs a repeated time once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from sqsjkr.crontab.parse import CronJob, Schedule

#: How often a zone's offset is sampled: shorter than any span between two changes.
_STEP = timedelta(hours=6)


@dataclass(frozen=True)
class ZoneChange:
    """One change of a zone's UTC offset, and the local times it skips or repeats."""

    zone: str
    at: datetime  # the instant, in UTC
    before: int  # UTC offset in minutes east, until then
    after: int  # and from then on

    @property
    def skips(self) -> bool:
        """True when the clock jumps forward (those local times never happen that day)."""
        return self.after > self.before

    @property
    def local_times(self) -> list[datetime]:
        """The local (naive) times, minute by minute, that the change skips or repeats."""
        start = (self.at + timedelta(minutes=min(self.before, self.after))).replace(tzinfo=None)
        return [start + timedelta(minutes=m) for m in range(abs(self.after - self.before))]


def zone_changes(name: str, start: datetime, end: datetime) -> tuple[ZoneChange, ...]:
    """The offset changes of zone `name` between start and end (aware datetimes)."""
    zone = ZoneInfo(name)
    changes = []
    instant = start.astimezone(timezone.utc)
    offset = _offset(zone, instant)
    while instant < end:
        later = instant + _STEP
        if _offset(zone, later) != offset:
            changes.append(_find_change(name, zone, instant, later))
            offset = _offset(zone, later)
        instant = later
    return tuple(changes)


def _find_change(name: str, zone: ZoneInfo, low: datetime, high: datetime) -> ZoneChange:
    """The change between low (old offset) and high (new offset), to the minute."""
    before, after = _offset(zone, low), _offset(zone, high)
    while high - low > timedelta(minutes=1):
        middle = low + (high - low) / 2
        middle = middle.replace(second=0, microsecond=0)
        if middle <= low:
            middle = low + timedelta(minutes=1)
        if _offset(zone, middle) == before:
            low = middle
        else:
            high = middle
    return ZoneChange(name, high, before, after)


def _offset(zone: ZoneInfo, instant: datetime) -> int:
    offset = instant.astimezone(zone).utcoffset() or timedelta(0)
    return int(offset.total_seconds()) // 60


def runs_at(schedule: Schedule, local: datetime) -> bool:
    """Whether cron(8) runs the schedule at this local minute."""
    weekday = local.isoweekday() % 7
    in_days, in_weekdays = local.day in schedule.days, weekday in schedule.weekdays
    # Both day fields restricted: either matches; otherwise ("*" in one) both must.
    day = (in_days or in_weekdays) if schedule.day_or else (in_days and in_weekdays)
    return (
        day
        and local.month in schedule.months
        and local.hour in schedule.hours
        and local.minute in schedule.minutes
    )


def scheduler_difference(job: CronJob, changes: tuple[ZoneChange, ...]) -> str | None:
    """Why EventBridge Scheduler will run this line differently from cron at its zone's next
    change that matters to it, or None when no change does."""
    wildcard = job.schedule.wildcard
    for change in changes:
        if change.skips == wildcard:
            # Wildcard jobs in a skipped hour and fixed-time ones in a repeated hour: the same.
            continue
        times = change.local_times
        hit = next((t for t in times if runs_at(job.schedule, t)), None)
        if hit is None:
            continue
        span = f"{times[0]:%H:%M}-{times[-1] + timedelta(minutes=1):%H:%M} on {times[0]:%Y-%m-%d}"
        where = f"crontab line {job.line.number}"
        if change.skips:
            return (
                f"{where}: {change.zone} skips {span} (daylight saving time): cron runs this "
                f"line's {hit:%H:%M} run right after the change, EventBridge Scheduler not at "
                "all that day (docs/schedules.md)"
            )
        return (
            f"{where}: {change.zone} repeats {span} (daylight saving time): cron runs this "
            "wildcard line in both passes of it, EventBridge Scheduler once (docs/schedules.md)"
        )
    return None
