"""Crontab jobs as EventBridge cron schedules, as the entries of terraform's `jobs` variable.

For EventBridge Scheduler in the crontab's own zone; for rules in UTC, exact or refused: a line
whose local-time schedule has no exact UTC equivalent raises CrontabError.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Literal, NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqsjkr.crontab.dst import ZoneChange, scheduler_difference, zone_changes
from sqsjkr.crontab.parse import (
    CronJob,
    CrontabProblems,
    Entry,
    EnvSetting,
    Line,
    LineError,
    Schedule,
    looks_like_user,
)
from sqsjkr.errors import CrontabError

DstChoice = Literal["standard", "daylight"]
DST_CHOICES: tuple[DstChoice, ...] = ("standard", "daylight")
#: What runs the schedules: EventBridge Scheduler (in any zone) or EventBridge rules (in UTC).
Engine = Literal["scheduler", "rules"]
ENGINES: tuple[Engine, ...] = ("scheduler", "rules")

#: Longest job key by default: the module names a rule or schedule <name>-<key>, which
#: EventBridge limits to 64 characters, so this leaves 23 for the module's name.
MAX_KEY_LENGTH = 40
#: The longest key the module takes: a rule is named <name>-<key>, name one character or more.
MAX_MODULE_KEY_LENGTH = 62
#: A key's hash part, which is all of a key that has no room for a slug of its command.
DIGEST_LENGTH = 8
#: What the module takes as a job key.
KEY_CHARACTERS = re.compile(r"[0-9A-Za-z._-]*")
#: EventBridge's limit on a rule's description.
MAX_DESCRIPTION_LENGTH = 512
#: How far ahead a zone's UTC offsets are checked, and how often within that span.
ZONE_CHECK_YEARS = 10
ZONE_CHECK_STEP = timedelta(hours=6)

#: cron settings that mean nothing to sqsjkr; they are kept out of the jobs' envs.
MAIL_SETTINGS = ("MAILTO", "MAILFROM")
WEEKDAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
#: The most days each month has (February in a leap year).
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
MINUTES_PER_DAY = 24 * 60


@dataclass(frozen=True)
class ZoneOffsets:
    """The UTC offsets (minutes east) a zone uses in the coming years, split by its dst() flag."""

    name: str
    standard: tuple[int, ...]
    daylight: tuple[int, ...]
    changes: tuple[ZoneChange, ...] = ()

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(sorted({*self.standard, *self.daylight}))

    @property
    def fixed(self) -> bool:
        return len(self.offsets) == 1


@dataclass(frozen=True)
class ConvertOptions:
    """How to convert: the crontab's zone, the engine, and the inexact conversions the user accepts."""

    timezone: str
    engine: Engine = "scheduler"
    # Rules: convert a zone with daylight saving time with one of its offsets; runs then drift.
    accept_dst_shift: DstChoice | None = None
    # A line restricting both day fields becomes two rules; cron ran it once on days matching both.
    split_dom_dow: bool = False
    # Start of the span checked for offset changes; None: now.
    now: datetime | None = None
    # Keys are key_prefix + a slug of the command + a hash, within max_key_length characters.
    key_prefix: str = ""
    max_key_length: int = MAX_KEY_LENGTH


@dataclass(frozen=True)
class TerraformJob:
    """One element of the terraform module's `jobs` map."""

    key: str
    schedule_expression: str
    command: str
    lock_id: str
    description: str
    envs: Mapping[str, str] = field(default_factory=dict)
    # Written even when UTC: the module's default zone may be another.
    schedule_expression_timezone: str = "UTC"

    def fields(self) -> dict[str, object]:
        """The object's attributes in output order; empty envs are left to the default."""
        fields: dict[str, object] = {
            "schedule_expression": self.schedule_expression,
            "schedule_expression_timezone": self.schedule_expression_timezone,
            "command": self.command,
            "event_id": self.key,
            "lock_id": self.lock_id,
            "description": self.description,
        }
        if self.envs:
            fields["envs"] = dict(self.envs)
        return fields


@dataclass(frozen=True)
class Conversion:
    """The jobs of a crontab and what the user should know about them."""

    jobs: tuple[TerraformJob, ...]
    warnings: tuple[str, ...]
    engine: Engine = "scheduler"


class Day(NamedTuple):
    """What a cron expression can see of a date."""

    month: int
    day: int
    weekday: int  # 0 = Sunday
    last: bool  # the last day of its month


@dataclass(frozen=True)
class DayFilter:
    """The local dates a crontab line runs on: months, and days of the month or of the week."""

    months: frozenset[int]
    days: frozenset[int] | None = None  # None: any
    weekdays: frozenset[int] | None = None  # None: any

    def matches(self, day: Day) -> bool:
        return (
            day.month in self.months
            and (self.days is None or day.day in self.days)
            and (self.weekdays is None or day.weekday in self.weekdays)
        )


DayKind = Literal["all", "days", "weekdays", "last"]


@dataclass(frozen=True)
class DayRule:
    """The date fields of one EventBridge expression: all days, days of the month, weekdays or L."""

    months: frozenset[int]
    kind: DayKind
    values: frozenset[int] = frozenset()


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone of that name; ValueError says it is unknown."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not a known IANA time zone (e.g. Asia/Tokyo, UTC)") from None


def zone_offsets(name: str, now: datetime) -> ZoneOffsets:
    """The offsets the zone uses from now on; ValueError for an unknown zone or sub-minute offsets."""
    zone = load_zone(name)
    standard: set[int] = set()
    daylight: set[int] = set()
    instant = now.astimezone(timezone.utc)
    end = instant + timedelta(days=366 * ZONE_CHECK_YEARS)
    while instant < end:
        local = instant.astimezone(zone)
        offset = local.utcoffset() or timedelta(0)
        if offset.total_seconds() % 60:
            raise ValueError(f"{name}: UTC offset {offset} is not whole minutes")
        minutes = int(offset.total_seconds()) // 60
        (daylight if local.dst() else standard).add(minutes)
        instant += ZONE_CHECK_STEP
    changes = zone_changes(name, now, end) if len(standard | daylight) > 1 else ()
    return ZoneOffsets(name, tuple(sorted(standard)), tuple(sorted(daylight)), changes)


@dataclass
class _Progress:
    """What converting a crontab has met so far."""

    warnings: list[str] = field(default_factory=list)
    seen: dict[str, Line] = field(default_factory=dict)  # the line of each job id
    users: set[str] = field(default_factory=set)

    def warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)


def convert_crontab(
    entries: Sequence[Entry], options: ConvertOptions, *, problems: Sequence[LineError] = ()
) -> Conversion:
    """The terraform jobs of a parsed crontab.

    CrontabProblems names every line that cannot be converted, with the problems given (those
    of the lines that did not parse).
    """
    now = options.now or datetime.now(timezone.utc)
    zones = {options.timezone: zone_offsets(options.timezone, now)}
    # None below a CRON_TZ line that names no zone: that line is the problem of the jobs below.
    zone_name: str | None = options.timezone
    progress = _Progress()
    jobs: list[TerraformJob] = []
    found = list(problems)
    for entry in entries:
        try:
            if isinstance(entry, EnvSetting):
                zone_name = _apply_setting(entry, zone_name, zones, now, progress.warnings)
            elif zone_name is not None:
                jobs += _convert_entry(entry, zones[zone_name], options, progress)
        except LineError as problem:
            found.append(problem)
            if isinstance(entry, EnvSetting) and entry.name == "CRON_TZ":
                zone_name = None
    if found:
        raise CrontabProblems(found)
    return Conversion(tuple(jobs), tuple(progress.warnings), options.engine)


def _convert_entry(
    entry: CronJob, zone: ZoneOffsets, options: ConvertOptions, progress: _Progress
) -> list[TerraformJob]:
    where = f"crontab line {entry.line.number}"
    if entry.user is not None and entry.user not in progress.users:
        progress.users.add(entry.user)
        progress.warn(
            f"{where}: cron ran the jobs of user {entry.user!r} as that user; sqsjkr runs "
            "every job as the daemon's user"
        )
    if entry.user is None and (user := looks_like_user(entry.written)):
        progress.warn(
            f"{where}: the command starts with {user!r}, a user of this host and not a command "
            "on PATH: if this is a system crontab (/etc/crontab, /etc/cron.d/*), whose lines "
            "name the user before the command, pass --system"
        )
    base = job_id(entry)
    if base in progress.seen:
        raise entry.line.error(
            f"the same schedule and command as line {progress.seen[base].number}: cron runs "
            "both, one EventBridge rule cannot; remove one"
        )
    progress.seen[base] = entry.line
    converted, warning = convert_job(entry, zone, options)
    if warning:
        progress.warn(warning)
    return converted


def _apply_setting(
    entry: EnvSetting,
    zone_name: str | None,
    zones: dict[str, ZoneOffsets],
    now: datetime,
    warnings: list[str],
) -> str | None:
    """Act on a cron setting; returns the zone of the jobs below it."""
    where = f"crontab line {entry.line.number}"
    if entry.name == "CRON_TZ":
        # cronie reads the times of the jobs below a CRON_TZ line in that zone.
        if entry.value not in zones:
            try:
                zones[entry.value] = zone_offsets(entry.value, now)
            except ValueError as exc:
                raise entry.line.error(f"CRON_TZ: {exc}") from None
        return entry.value
    if entry.name in MAIL_SETTINGS:
        warnings.append(
            f"{where}: {entry.name} is ignored: sqsjkr sends no mail; job output and failures "
            "are in the daemon's log, and a late job runs the life_time trigger"
        )
    elif entry.name == "SHELL" and entry.value != "/bin/sh":
        warnings.append(
            f"{where}: SHELL={entry.value}: cron ran the jobs below with it, sqsjkr runs every "
            "command with `sh -c` (SHELL stays in their environment)"
        )
    elif entry.name == "TZ":
        warnings.append(
            f"{where}: TZ only sets the jobs' environment; their times are read in {zone_name} "
            "(--timezone, or a CRON_TZ line)"
        )
    elif entry.name == "RANDOM_DELAY":
        raise entry.line.error(
            "cronie delays the jobs below by a random number of minutes, which a schedule "
            "cannot express: remove the line"
        )
    return zone_name


def job_id(job: CronJob, prefix: str = "", max_length: int = MAX_KEY_LENGTH, tail: int = 0) -> str:
    """A stable id of a crontab line: prefix, a slug of its command and a hash of its schedule
    and command, leaving tail characters of max_length for a suffix (the slug gives way first).

    It depends on nothing else in the file, so adding or moving lines never changes it.
    """
    source = f"{job.user or ''}\n{job.schedule.text}\n{job.written}"
    digest = hashlib.sha256(source.encode("utf-8")).hexdigest()[:DIGEST_LENGTH]
    room = max_length - tail - len(prefix) - len(digest) - 1
    if room < 1:
        return f"{prefix}{digest}"
    return f"{prefix}{_slug(job.command, room)}-{digest}"


def _slug(command: str, limit: int) -> str:
    # Directories and redirections say little about a job: "/usr/local/bin/backup.sh --full
    # >/dev/null 2>&1" becomes "backup-sh-full".
    words: list[str] = []
    target = False
    for token in command.lower().split():
        if target or "<" in token or ">" in token:
            target = token in ("<", ">", ">>", "2>", "2>>", "&>")
            continue
        if "/" in token.rstrip("/"):
            token = token.rstrip("/").rsplit("/", 1)[1]
        words += re.findall(r"[a-z0-9]+", token)
    slug = ""
    for word in words:
        candidate = f"{slug}-{word}" if slug else word
        if len(candidate) > limit:
            break
        slug = candidate
    return slug or (words[0] if words else "job")[:limit]


def convert_job(
    job: CronJob, zone: ZoneOffsets, options: ConvertOptions
) -> tuple[list[TerraformJob], str | None]:
    """The terraform jobs of one crontab line, and a warning to show once (a DST shift)."""
    parts = _day_parts(job, options.split_dom_dow)
    if options.engine == "scheduler":
        # The scheduler reads the expressions in the zone itself: local dates, no shift.
        jobs = _terraform_jobs(job, _expressions_at(job, parts, 0), zone.name, options)
        return jobs, scheduler_difference(job, zone.changes)
    if zone.fixed:
        return _terraform_jobs(
            job, _expressions_at(job, parts, zone.offsets[0]), zone.name, options
        ), None
    unmoved = _expressions_across(job, parts, zone)
    if unmoved is not None:
        return _terraform_jobs(job, unmoved, zone.name, options), None
    expressions, note, warning = _expressions_shifted(job, parts, zone, options)
    return _terraform_jobs(job, expressions, zone.name, options, note), warning


# The parts of a line: a suffix for its keys ("" for a whole line) and its local dates.
Parts = tuple[tuple[str, DayFilter], ...]
# The EventBridge expressions of each part.
Expressions = tuple[tuple[str, tuple[str, ...]], ...]


def _day_parts(job: CronJob, split: bool) -> Parts:
    parts = _day_filters(job, split)
    for _, days in parts:
        if days.days is not None and not any(
            day <= MONTH_DAYS[month - 1] for month in days.months for day in days.days
        ):
            raise job.line.error(_no_such_date(job.schedule))
    return parts


def _no_such_date(schedule: Schedule) -> str:
    fields = schedule.text.split()
    reason = (
        f"day-of-month {fields[2]} never occurs in month(s) {fields[3]}: cron "
        "accepts the line but never runs it"
    )
    if schedule.day_or:
        return f"{reason} on those days (only on its days of the week); write * as its day-of-month"
    return f"{reason}; fix the date or remove the line"


def _day_filters(job: CronJob, split: bool) -> Parts:
    schedule = job.schedule
    months = schedule.months
    if schedule.all_days and schedule.all_weekdays:
        return (("", DayFilter(months)),)
    if schedule.day_or:
        if schedule.all_days or schedule.all_weekdays:
            # Either field alone matches every day.
            return (("", DayFilter(months)),)
        if not split:
            raise job.line.error(
                "both day-of-month and day-of-week are restricted, so cron runs the job on days "
                "matching either; one EventBridge rule cannot express that. Pass --split-dom-dow "
                "for two rules sharing a lock (they run twice on days matching both), or change "
                "the line"
            )
        return (
            ("dom", DayFilter(months, days=schedule.days)),
            ("dow", DayFilter(months, weekdays=schedule.weekdays)),
        )
    if schedule.all_weekdays:
        return (("", DayFilter(months, days=schedule.days)),)
    if schedule.all_days:
        return (("", DayFilter(months, weekdays=schedule.weekdays)),)
    raise job.line.error(
        "a day field starting with '*' makes cron run the job only on days matching both "
        "day-of-month and day-of-week; one EventBridge rule cannot restrict both"
    )


def _expressions_at(job: CronJob, parts: Parts, offset: int) -> Expressions:
    """The expressions of each part with the zone at offset; CrontabError when there are none."""
    return tuple((suffix, _part_expressions(job, days, offset)) for suffix, days in parts)


def _expressions_across(job: CronJob, parts: Parts, zone: ZoneOffsets) -> Expressions | None:
    """The expressions of a line the zone's offset changes never move, else None.

    Only for cronie's wildcard jobs: they follow the clock across a change, while fixed-time
    jobs are caught up or skipped then, which no UTC schedule does.
    """
    if not job.schedule.wildcard:
        return None
    results = set()
    for offset in zone.offsets:
        try:
            results.add(_expressions_at(job, parts, offset))
        except CrontabError:
            return None
    return results.pop() if len(results) == 1 else None


def _expressions_shifted(
    job: CronJob, parts: Parts, zone: ZoneOffsets, options: ConvertOptions
) -> tuple[Expressions, str, str]:
    offsets = ", ".join(_utc_offset(o) for o in zone.offsets)
    choice = options.accept_dst_shift
    if choice is None:
        raise job.line.error(
            f"{zone.name} changes its UTC offset ({offsets}: daylight saving time) and EventBridge "
            "runs schedules in UTC, so no schedule runs this job at the same local time all "
            "year. Pass --accept-dst-shift standard|daylight to convert with one offset (runs "
            "drift part of the year), or use a zone without daylight saving time"
        )
    chosen = zone.standard if choice == "standard" else zone.daylight
    if len(chosen) != 1:
        raise job.line.error(
            f"--accept-dst-shift {choice}: {zone.name} has no single {choice} offset "
            f"({offsets}) in the next {ZONE_CHECK_YEARS} years"
        )
    offset = chosen[0]
    drifts = [
        f"{_duration(abs(other - offset))} {'later' if other > offset else 'earlier'} by the "
        f"local clock while {zone.name} is at {_utc_offset(other)}"
        for other in zone.offsets
        if other != offset
    ]
    note = f"converted with {_utc_offset(offset)} ({choice} time): runs " + "; ".join(drifts)
    warning = f"{zone.name}: {note}"
    return _expressions_at(job, parts, offset), note, warning


def _part_expressions(job: CronJob, days: DayFilter, offset: int) -> tuple[str, ...]:
    schedule = job.schedule
    # Local minutes of the day, by how many days their UTC time lies from the local date.
    times: dict[int, set[int]] = {}
    for hour in schedule.hours:
        for minute in schedule.minutes:
            shift, utc_minute = divmod(hour * 60 + minute - offset, MINUTES_PER_DAY)
            times.setdefault(shift, set()).add(utc_minute)
    by_rule: dict[DayRule, set[int]] = {}
    for shift, minutes in sorted(times.items()):
        rules = utc_day_rules(days, shift)
        if rules is None:
            raise job.line.error(_day_shift_reason(schedule, offset, shift))
        for rule in rules:
            by_rule.setdefault(rule, set()).update(minutes)
    expressions = {
        render_expression(minutes, hours, rule)
        for rule, day_minutes in by_rule.items()
        for minutes, hours in _time_groups(day_minutes)
    }
    return tuple(sorted(expressions))


def _day_shift_reason(schedule: Schedule, offset: int, shift: int) -> str:
    when = "the day before" if shift < 0 else "the day after"
    fields = schedule.text.split()
    days = schedule.text if schedule.text.startswith("@") else " ".join(fields[2:5])
    return (
        f"with the zone at {_utc_offset(offset)} some runs fall on {when} in UTC, and its days "
        f"({days}) moved by a day have no exact EventBridge equivalent (months differ in "
        "length); change the time or the days"
    )


@functools.cache
def _day_pairs(shift: int) -> tuple[tuple[Day, Day], ...]:
    """Every (UTC date, local date) pair, as cron sees them, with UTC = local + shift days.

    A constant, computed on first use: 2001-2028 holds all fourteen kinds of year (leap or not,
    starting on each weekday), and one day before or after depends only on the year's kind.
    """
    pairs: set[tuple[Day, Day]] = set()
    first, last = date(2001, 1, 1).toordinal(), date(2028, 12, 31).toordinal()
    for ordinal in range(first, last + 1):
        pairs.add((_day(ordinal + shift), _day(ordinal)))
    return tuple(sorted(pairs))


def _day(ordinal: int) -> Day:
    today = date.fromordinal(ordinal)
    tomorrow = date.fromordinal(ordinal + 1)
    return Day(today.month, today.day, today.isoweekday() % 7, tomorrow.day == 1)


# The date fields serving one month: one rule, or days of the month plus L.
MonthRules = tuple[tuple[DayKind, frozenset[int]], ...]
_PREFERENCE: tuple[DayKind, ...] = ("all", "days", "weekdays", "last")
_LAST: MonthRules = (("last", frozenset()),)


class _Month(NamedTuple):
    """The UTC dates of one month that a rule must match, and those it must not."""

    days: frozenset[int]
    weekdays: frozenset[int]
    plain_days: frozenset[int]  # of the dates that are not the month's last day
    last_days: frozenset[int]  # of the dates that are
    all_last: bool
    unwanted: bool
    unwanted_days: frozenset[int]
    unwanted_weekdays: frozenset[int]
    unwanted_last: bool

    def served_by(self, option: MonthRules) -> bool:
        kinds = tuple(kind for kind, _ in option)
        values = option[0][1]
        if kinds == ("all",):
            return not self.unwanted
        if kinds == ("days",):
            return self.days <= values and not self.unwanted_days & values
        if kinds == ("weekdays",):
            return self.weekdays <= values and not self.unwanted_weekdays & values
        if kinds == ("last",):
            return self.all_last and not self.unwanted_last
        # Days plus L: neither may match an unwanted date, and they must not both match one
        # date, or EventBridge would send the job twice.
        return (
            self.plain_days <= values
            and not self.unwanted_days & values
            and not self.unwanted_last
            and not self.last_days & values
        )


@functools.cache
def utc_day_rules(days: DayFilter, shift: int) -> tuple[DayRule, ...] | None:
    """EventBridge date rules matching exactly the UTC dates `shift` days after the local dates
    of days, or None when there are none.

    Month by month: the UTC dates to match and not to match, and which of all days, some days
    of the month, some weekdays, the last day (L), or days plus L tell them apart. Checked
    against every kind of date, so the rules are exact or not given. Months then share the
    choices that serve the most of them, for few rules.
    """
    wanted: dict[int, list[Day]] = {month: [] for month in range(1, 13)}
    unwanted: dict[int, list[Day]] = {month: [] for month in range(1, 13)}
    for utc, local in _day_pairs(shift):
        (wanted if days.matches(local) else unwanted)[utc.month].append(utc)
    months = {
        month: _summary(wanted[month], unwanted[month]) for month in range(1, 13) if wanted[month]
    }
    options = _options(months.values())
    choices = {
        month: [option for option in options if summary.served_by(option)]
        for month, summary in months.items()
    }
    if not all(choices.values()):
        return None
    months_of: dict[tuple[DayKind, frozenset[int]], set[int]] = {}
    while choices:
        served: dict[MonthRules, set[int]] = {}
        for month, candidates in choices.items():
            for option in candidates:
                served.setdefault(option, set()).add(month)
        best = min(served, key=lambda option: (-len(served[option]), _rank(option)))
        for month in served[best]:
            del choices[month]
        for rule in best:
            # The days half of days-plus-L only where it matches a date.
            useful = {
                m
                for m in served[best]
                if len(best) == 1 or rule[0] != "days" or months[m].plain_days
            }
            if useful:
                months_of.setdefault(rule, set()).update(useful)
    return tuple(
        DayRule(frozenset(months), kind, values) for (kind, values), months in months_of.items()
    )


def _summary(wanted: list[Day], unwanted: list[Day]) -> _Month:
    return _Month(
        days=frozenset(d.day for d in wanted),
        weekdays=frozenset(d.weekday for d in wanted),
        plain_days=frozenset(d.day for d in wanted if not d.last),
        last_days=frozenset(d.day for d in wanted if d.last),
        all_last=all(d.last for d in wanted),
        unwanted=bool(unwanted),
        unwanted_days=frozenset(d.day for d in unwanted),
        unwanted_weekdays=frozenset(d.weekday for d in unwanted),
        unwanted_last=any(d.last for d in unwanted),
    )


def _options(months: Iterable[_Month]) -> list[MonthRules]:
    """The rules worth trying: each month's own days or weekdays, and all months' together."""
    summaries = list(months)
    days = {m.days for m in summaries} | {frozenset().union(*(m.days for m in summaries))}
    weekdays = {m.weekdays for m in summaries}
    weekdays.add(frozenset().union(*weekdays))
    plain = {m.plain_days for m in summaries}
    plain.add(frozenset().union(*plain))
    options: list[MonthRules] = [(("all", frozenset()),), _LAST]
    options += [(("days", d),) for d in days]
    options += [(("weekdays", w),) for w in weekdays]
    options += [(("days", p), ("last", frozenset())) for p in plain if p]
    return sorted(set(options), key=_rank)


def _rank(option: MonthRules) -> tuple[int, ...]:
    # Simpler rules first, then a fixed order so that the output never varies.
    return (
        len(option),
        *(_PREFERENCE.index(kind) for kind, _ in option),
        *(v for _, values in option for v in sorted(values)),
    )


def _time_groups(day_minutes: Iterable[int]) -> list[tuple[frozenset[int], frozenset[int]]]:
    """Minutes of the day as few (minutes, hours) products as two simple groupings give."""
    by_hour: dict[int, set[int]] = {}
    by_minute: dict[int, set[int]] = {}
    for value in day_minutes:
        hour, minute = divmod(value, 60)
        by_hour.setdefault(hour, set()).add(minute)
        by_minute.setdefault(minute, set()).add(hour)
    hours_of: dict[frozenset[int], set[int]] = {}
    for hour, minutes in by_hour.items():
        hours_of.setdefault(frozenset(minutes), set()).add(hour)
    minutes_of: dict[frozenset[int], set[int]] = {}
    for minute, hours in by_minute.items():
        minutes_of.setdefault(frozenset(hours), set()).add(minute)
    if len(minutes_of) < len(hours_of):
        return [(frozenset(m), hours) for hours, m in minutes_of.items()]
    return [(minutes, frozenset(h)) for minutes, h in hours_of.items()]


def render_expression(minutes: frozenset[int], hours: frozenset[int], rule: DayRule) -> str:
    """cron(Minutes Hours Day-of-month Month Day-of-week Year) of one rule."""
    if rule.kind == "all":
        day_of_month, day_of_week = "*", "?"
    elif rule.kind == "days":
        day_of_month, day_of_week = _values(rule.values, 1, 31), "?"
    elif rule.kind == "last":
        day_of_month, day_of_week = "L", "?"
    else:
        # Names: EventBridge numbers days 1-7 from Sunday, crontab 0-6; names cannot be misread.
        day_of_month, day_of_week = "?", _values(rule.values, 0, 6, names=WEEKDAYS)
    return (
        f"cron({_values(minutes, 0, 59, steps=True)} {_values(hours, 0, 23, steps=True)} "
        f"{day_of_month} {_values(rule.months, 1, 12)} {day_of_week} *)"
    )


def _values(
    values: Iterable[int],
    low: int,
    high: int,
    *,
    steps: bool = False,
    names: Sequence[str] = (),
) -> str:
    ordered = sorted(values)
    if ordered == list(range(low, high + 1)):
        return "*"
    if steps and len(ordered) >= 3:
        step = ordered[1] - ordered[0]
        if step > 1 and ordered == list(range(ordered[0], high + 1, step)):
            return f"{ordered[0]}/{step}"

    def name(value: int) -> str:
        return names[value - low] if names else str(value)

    items = []
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - start >= 2:
            items.append(f"{name(ordered[start])}-{name(ordered[end])}")
        else:
            items += [name(v) for v in ordered[start : end + 1]]
        start = end + 1
    return ",".join(items)


def _terraform_jobs(
    job: CronJob,
    expressions: Expressions,
    zone_name: str,
    options: ConvertOptions,
    note: str | None = None,
) -> list[TerraformJob]:
    named = [
        (suffix, index, len(part), expression)
        for suffix, part in expressions
        for index, expression in enumerate(part, start=1)
    ]
    keys = []
    for suffix, index, count, _ in named:
        tail = (f"-{suffix}" if suffix else "") + (f"-{index}" if count > 1 else "")
        keys.append(tail)
    longest = max(len(tail) for tail in keys)
    prefix, max_length = options.key_prefix, options.max_key_length
    base = job_id(job, prefix, max_length, longest)
    if len(base) + longest > max_length:
        raise job.line.error(
            f"its keys need {len(base) + longest} characters (the prefix {prefix!r}, a "
            f"{DIGEST_LENGTH}-character hash and {max(keys, key=len)!r}), more than --max-key-length "
            f"{max_length}"
        )
    envs = {k: v for k, v in job.envs.items() if k not in (*MAIL_SETTINGS, "CRON_TZ")}
    result = []
    for (suffix, index, count, expression), tail in zip(named, keys, strict=True):
        notes = [note] if note else []
        if suffix:
            other = "day-of-week" if suffix == "dom" else "day-of-month"
            notes.append(
                f"the {suffix} half of a line cron ran on days matching day-of-month or "
                f"day-of-week (the {other} half shares its lock_id; both run on days matching "
                "both)"
            )
        if count > 1:
            notes.append(f"rule {index} of {count} for this line: one expression cannot hold it")
        result.append(
            TerraformJob(
                key=base + tail,
                schedule_expression=expression,
                command=job.shell_command,
                lock_id=base,
                description=_description(job.line.text.strip(), zone_name, notes),
                envs=envs,
                schedule_expression_timezone=(
                    zone_name if options.engine == "scheduler" else "UTC"
                ),
            )
        )
    return result


def _description(line: str, zone_name: str, notes: list[str]) -> str:
    head = f"crontab ({zone_name}): "
    tail = "".join(f" -- {note}" for note in notes)
    room = MAX_DESCRIPTION_LENGTH - len(head) - len(tail)
    if len(line) > room:
        line = line[: max(room - 1, 0)] + "…"
    return (head + line + tail)[:MAX_DESCRIPTION_LENGTH]


def _utc_offset(minutes: int) -> str:
    sign = "-" if minutes < 0 else "+"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"


def _duration(minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    return (f"{hours}h" if hours else "") + (f"{rest}m" if rest else "")
