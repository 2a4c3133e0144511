"""When a one-time job runs (`sqsjkr send --at TIME` or `--in DURATION`), as an EventBridge
Scheduler at() expression and the time zone it is read in.

A local time the zone's clock skips or repeats is refused rather than guessed.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError

# A date and a time (seconds optional), "T" or a blank between them, and an optional offset.
_TIME = re.compile(
    r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}(?::\d{2})?)(Z|[+-]\d{2}:\d{2})?", re.IGNORECASE
)


@dataclass(frozen=True)
class OneTime:
    """An at() schedule: its expression, the zone it is read in, and the instant it means."""

    expression: str  # at(yyyy-mm-ddThh:mm:ss)
    timezone: str
    instant: datetime  # aware, in UTC

    @property
    def iso(self) -> str:
        """The instant in RFC 3339, in its zone's offset (2030-01-31T09:30:00+09:00): the time
        the job runs, as the audit trail and messages name it."""
        return self.instant.astimezone(zone(self.timezone)).isoformat(timespec="seconds")


def zone(name: str) -> ZoneInfo:
    """The IANA zone of that name; ValueError says it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a known IANA time zone (e.g. Asia/Tokyo, UTC)") from None


def one_time_at(text: str, zone_name: str, now: datetime) -> OneTime:
    """`--at TEXT`: RFC 3339 with an offset, or a local date and time in zone_name.

    ValueError says why TEXT is not a time to run a job at.
    """
    match = _TIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not a time: give a date and a time, with a UTC offset "
            "(2030-01-31T09:30:00+09:00, 2030-01-31T00:30Z) or without (2030-01-31 09:30, read "
            "in the time zone)"
        )
    day, clock, offset = match.groups()
    try:
        local = datetime.fromisoformat(f"{day}T{clock}")
    except ValueError as exc:
        raise ValueError(f"{text!r} is not a time: {exc}") from None
    if offset:
        shift = timezone.utc if offset.upper() == "Z" else _offset(offset)
        instant = local.replace(tzinfo=shift).astimezone(timezone.utc)
        return _future(OneTime(_at(instant), "UTC", instant), text, now)
    where = zone(zone_name)
    instants = {local.replace(tzinfo=where, fold=fold).astimezone(timezone.utc) for fold in (0, 1)}
    real = sorted(i for i in instants if i.astimezone(where).replace(tzinfo=None) == local)
    if not real:
        raise ValueError(
            f"{text!r} does not exist in {zone_name}: the clock skips it (daylight saving "
            "time begins); give a time outside the skipped hour"
        )
    if len(real) > 1:
        raise ValueError(
            f"{text!r} happens twice in {zone_name} (daylight saving time ends): give it with "
            f"a UTC offset, {local.isoformat()}{_text(real[0], where)} for the first or "
            f"{local.isoformat()}{_text(real[1], where)} for the second"
        )
    return _future(OneTime(_at(local), zone_name, real[0]), text, now)


def one_time_in(text: str, now: datetime) -> OneTime:
    """`--in DURATION` (Go syntax: "90m", "2h", "1h30m") from now, in UTC."""
    try:
        duration = parse_duration(text)
    except DurationError as exc:
        raise ValueError(str(exc)) from None
    if duration.seconds <= 0:
        raise ValueError(f"{text!r} must be longer than 0")
    # at() counts whole seconds: round up, so the job never runs before the time asked for.
    instant = now.astimezone(timezone.utc) + timedelta(seconds=math.ceil(duration.seconds))
    instant = instant.replace(microsecond=0) + timedelta(seconds=1 if instant.microsecond else 0)
    return OneTime(_at(instant), "UTC", instant)


def _future(one_time: OneTime, text: str, now: datetime) -> OneTime:
    if one_time.instant <= now:
        raise ValueError(
            f"{text!r} is in the past ({one_time.instant:%Y-%m-%d %H:%M:%S} UTC; it is "
            f"{now.astimezone(timezone.utc):%Y-%m-%d %H:%M:%S} UTC now)"
        )
    return one_time


def _at(moment: datetime) -> str:
    return f"at({moment:%Y-%m-%dT%H:%M:%S})"


def _offset(text: str) -> timezone:
    sign = -1 if text[0] == "-" else 1
    hours, minutes = int(text[1:3]), int(text[4:6])
    if hours > 23 or minutes > 59:
        raise ValueError(f"{text!r} is not a UTC offset")
    return timezone(sign * timedelta(hours=hours, minutes=minutes))


def _text(instant: datetime, where: ZoneInfo) -> str:
    offset = instant.astimezone(where).utcoffset() or timedelta(0)
    minutes = int(offset.total_seconds()) // 60
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
