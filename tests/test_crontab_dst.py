"""`sqsjkr crontab2tf` for EventBridge Scheduler: local times in the crontab's zone, CRON_TZ per line,
and firing times over a year in zones with daylight saving time against the two documented models.

The models are the test's own: cron as Vixie cron and cronie run it around a clock change (cron.c),
EventBridge Scheduler as AWS documents it. docs/schedules.md states both.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sqsjkr.commands.cli import cli
from sqsjkr.crontab.dst import zone_changes
from sqsjkr.crontab.eventbridge import ConvertOptions, convert_crontab
from sqsjkr.crontab.parse import read_crontab
from sqsjkr.errors import CrontabError

from .test_crontab import NOW, cron_field, crontab_runs, eventbridge_runs, field_set

UTC = timezone.utc
YEAR = 2025  # within the years crontab2tf looks ahead from NOW
DST_ZONES = [
    "Europe/Berlin",  # 02:00 -> 03:00, 03:00 -> 02:00
    "America/New_York",  # at 02:00 local both ways
    "Europe/London",  # at 01:00
    "America/Santiago",  # at midnight: whole dates lose their first hour
    "Australia/Lord_Howe",  # half an hour
    "Pacific/Chatham",  # at 02:45, UTC+12:45 / +13:45
]


def convert(text: str, zone: str, **options: Any) -> Any:
    entries, problems = read_crontab(text)
    return convert_crontab(entries, ConvertOptions(zone, now=NOW, **options), problems=problems)


# --- the two models --------------------------------------------------------------------------


def instants_of(local: datetime, zone: ZoneInfo) -> list[datetime]:
    """The UTC instants a local time happens at: none when the clock skips it, two when it
    repeats it (first pass first)."""
    found: list[datetime] = []
    for fold in (0, 1):
        instant = local.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == local and instant not in found:
            found.append(instant)
    return sorted(found)


def clock_jump(local: datetime, zone: ZoneInfo) -> datetime:
    """The instant the clock jumped over a local time that does not exist."""
    instant = local.replace(tzinfo=zone, fold=1).astimezone(UTC)  # the earlier offset's reading
    while instant.astimezone(zone).replace(tzinfo=None) < local:
        instant += timedelta(minutes=1)
    return instant


def cron_instants(
    local_runs: Counter[datetime], zone: ZoneInfo, wildcard: bool
) -> tuple[Counter[datetime], Counter[tuple[str, datetime]]]:
    """(runs EventBridge Scheduler shares, runs only cron makes), Vixie cron and cronie's way:
    fixed-time jobs of skipped minutes run at the jump, wildcard jobs in both passes of a
    repeated hour; anything else at its one instant."""
    shared: Counter[datetime] = Counter()
    cron_only: Counter[tuple[str, datetime]] = Counter()
    for local, count in local_runs.items():
        instants = instants_of(local, zone)
        if not instants:
            if not wildcard:
                cron_only["caught up after the jump", clock_jump(local, zone)] += count
            continue
        shared[instants[0]] += count
        if len(instants) == 2 and wildcard:
            cron_only["second pass", instants[1]] += count
    return shared, cron_only


def scheduler_instants(local_runs: Counter[datetime], zone: ZoneInfo) -> Counter[datetime]:
    """EventBridge Scheduler, as documented: a skipped time does not run, a repeated one once
    (the first pass: AWS does not say which)."""
    runs: Counter[datetime] = Counter()
    for local, count in local_runs.items():
        instants = instants_of(local, zone)
        if instants:
            runs[instants[0]] += count
    return runs


def local_runs_of_expressions(expressions: list[str]) -> Counter[datetime]:
    runs: Counter[datetime] = Counter()
    start = date(YEAR, 1, 1)
    for expression in expressions:
        runs += eventbridge_runs(expression, start, (date(YEAR + 1, 1, 1) - start).days)
    return runs


def local_runs_of_crontab(fields: list[str]) -> Counter[datetime]:
    start = date(YEAR, 1, 1)
    runs = crontab_runs(fields, 0, start, (date(YEAR + 1, 1, 1) - start).days)
    return Counter({at: n for at, n in runs.items() if at.year == YEAR})


# --- the property ----------------------------------------------------------------------------

few_minutes = st.one_of(
    st.sampled_from(["0", "30", "45", "15,45", "*/20", "0-2", "59", "10-50/20"]),
    cron_field(0).filter(lambda text: len(field_set(text, 0)) <= 4),
)
# Hours the changes touch (0-3 in these zones) come up often.
hours = st.one_of(st.sampled_from(["2", "1-3", "0", "*", "*/2", "0,2", "1", "3"]), cron_field(1))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=st.tuples(few_minutes, hours, cron_field(2), cron_field(3), cron_field(4)),
    zone_name=st.sampled_from(DST_ZONES),
)
@example(fields=("30", "2", "*", "*", "*"), zone_name="Europe/Berlin")
@example(fields=("*/15", "*", "*", "*", "*"), zone_name="Europe/Berlin")
@example(fields=("0", "*", "*", "3,10", "0"), zone_name="America/New_York")
@example(fields=("30", "0", "*", "*", "*"), zone_name="America/Santiago")
@example(fields=("15,45", "1-2", "*", "*", "*"), zone_name="Australia/Lord_Howe")
@example(fields=("50", "2", "*", "*", "sun"), zone_name="Pacific/Chatham")
@example(fields=("0", "1", "25-31", "3", "*"), zone_name="Europe/London")
def test_scheduler_runs_each_local_firing_of_a_year_as_documented(
    fields: tuple[str, ...], zone_name: str
) -> None:
    zone = ZoneInfo(zone_name)
    line = " ".join(fields)
    try:
        conversion = convert(f"{line} x\n", zone_name, split_dom_dow=True)
    except CrontabError as refused:
        # In the crontab's own zone, only a date that never occurs (31 April) and cron's AND
        # of the day fields ("*/2" is restricted yet starts with "*") are refused.
        assert "never occurs" in str(refused) or "matching both" in str(refused)
        return
    expressions = [job.schedule_expression for job in conversion.jobs]
    assert {job.schedule_expression_timezone for job in conversion.jobs} == {zone_name}
    # 1. The schedule matches exactly the local times cron matches, minute by minute.
    scheduled = local_runs_of_expressions(expressions)
    expected = local_runs_of_crontab(list(fields))
    either = not (fields[2].startswith("*") or fields[4].startswith("*"))
    split = either and len(expressions) > 1 and any(j.key.endswith("dow") for j in conversion.jobs)
    if split:
        # Two schedules for cron's "either day field": both run on days matching both.
        assert set(scheduled) == set(expected)
        scheduled = Counter(set(scheduled))
        expected = Counter(set(expected))
    else:
        assert scheduled == expected
    # 2. Those times become the same instants, except where docs/schedules.md says they do not.
    wildcard = fields[0].startswith("*") or fields[1].startswith("*")
    shared, cron_only = cron_instants(expected, zone, wildcard)
    assert scheduler_instants(scheduled, zone) == shared
    changes = {
        c.at.astimezone(zone).date()
        for c in zone_changes(zone_name, NOW, NOW + timedelta(days=800))
    }
    assert {at.astimezone(zone).date() for _, at in cron_only} <= changes
    # 3. crontab2tf warns about every line that runs differently.
    warned = any(w.startswith("crontab line 1: ") for w in conversion.warnings)
    if cron_only:
        assert warned, (line, sorted(cron_only)[:3])


# --- the documented cases, spelled out ------------------------------------------------------


def runs_on(line: str, zone_name: str, day: date) -> tuple[list[str], list[str]]:
    """(cron's, EventBridge Scheduler's) runs of line on a day, as UTC times HH:MM."""
    zone = ZoneInfo(zone_name)
    (job,) = convert(f"{line} x\n", zone_name).jobs
    scheduled = local_runs_of_expressions([job.schedule_expression])
    expected = local_runs_of_crontab(line.split())
    assert scheduled == expected
    shared, cron_only = cron_instants(expected, zone, job_is_wildcard(line))
    cron = shared + Counter({at: n for (_, at), n in cron_only.items()})
    scheduler = scheduler_instants(scheduled, zone)

    def on_day(runs: Counter[datetime]) -> list[str]:
        return [
            f"{at:%H:%M}"
            for at in sorted(runs.elements())
            if at.astimezone(zone).date() == day or at.date() == day
        ]

    return on_day(cron), on_day(scheduler)


def job_is_wildcard(line: str) -> bool:
    minute, hour = line.split()[:2]
    return minute.startswith("*") or hour.startswith("*")


def test_a_fixed_time_in_the_skipped_hour_runs_after_the_jump_in_cron_only() -> None:
    # Berlin, 2025-03-30: 01:00 UTC is 02:00 CET, which becomes 03:00 CEST.
    assert runs_on("30 2 * * *", "Europe/Berlin", date(2025, 3, 30)) == (["01:00"], [])
    assert runs_on("30 2 * * *", "Europe/Berlin", date(2025, 3, 31)) == (["00:30"], ["00:30"])


def test_a_wildcard_time_in_the_skipped_hour_runs_in_neither() -> None:
    cron, scheduler = runs_on("30 */1 * * *", "Europe/Berlin", date(2025, 3, 30))
    assert cron == scheduler
    assert "00:30" in cron and "01:30" in cron  # 01:30 and 03:30 local; 02:30 never comes


def test_a_fixed_time_in_the_repeated_hour_runs_once_in_both() -> None:
    # Berlin, 2025-10-26: 02:30 comes at 00:30 UTC (CEST) and again at 01:30 UTC (CET).
    assert runs_on("30 2 * * *", "Europe/Berlin", date(2025, 10, 26)) == (["00:30"], ["00:30"])


def test_a_wildcard_time_in_the_repeated_hour_runs_twice_in_cron_once_in_scheduler() -> None:
    cron, scheduler = runs_on("30 * * * *", "Europe/Berlin", date(2025, 10, 26))
    assert cron.count("00:30") == 1 and cron.count("01:30") == 1
    assert "00:30" in scheduler and "01:30" not in scheduler
    assert len(cron) == len(scheduler) + 1


@pytest.mark.parametrize(
    ("line", "zone", "warning"),
    [
        ("30 2 * * *", "Europe/Berlin", "Europe/Berlin skips 02:00-03:00 on 2025-03-30"),
        ("*/15 * * * *", "Europe/Berlin", "Europe/Berlin repeats 02:00-03:00 on 2025-10-26"),
        ("30 0 * * *", "America/Santiago", "America/Santiago skips 00:00-01:00 on 2025-09-07"),
        (
            "15 2 * * *",
            "Australia/Lord_Howe",
            "Australia/Lord_Howe skips 02:00-02:30 on 2025-10-05",
        ),
        ("30 2 * * *", "Asia/Tokyo", None),  # no daylight saving time
        ("30 3 * * *", "Europe/Berlin", None),  # after the change both ways
        ("30 2 * * *", "America/New_York", "America/New_York skips 02:00-03:00 on 2025-03-09"),
        ("30 * * * *", "Europe/Berlin", "repeats 02:00-03:00 on 2025-10-26"),
        ("30 1-3 * * *", "Europe/Berlin", "skips 02:00-03:00 on 2025-03-30"),
        ("30 2 * * 1-6", "Europe/Berlin", None),  # the changes fall on Sundays
    ],
)
def test_lines_that_run_differently_are_warned_about(
    line: str, zone: str, warning: str | None
) -> None:
    warnings = convert(f"{line} x\n", zone).warnings
    if warning is None:
        assert warnings == ()
    else:
        (text,) = warnings
        assert text.startswith(
            f"crontab line 1: {warning}" if zone in warning else "crontab line 1: "
        )
        assert warning in text
        assert "docs/schedules.md" in text


def test_zone_changes_are_found_to_the_minute() -> None:
    berlin = zone_changes("Europe/Berlin", NOW, datetime(2026, 1, 1, tzinfo=UTC))
    assert [(c.at, c.before, c.after) for c in berlin] == [
        (datetime(2025, 3, 30, 1, 0, tzinfo=UTC), 60, 120),
        (datetime(2025, 10, 26, 1, 0, tzinfo=UTC), 120, 60),
    ]
    assert [t.strftime("%H:%M") for t in berlin[0].local_times[:2]] == ["02:00", "02:01"]
    assert len(berlin[0].local_times) == 60
    (howe, *_) = zone_changes("Australia/Lord_Howe", NOW, datetime(2026, 1, 1, tzinfo=UTC))
    assert (howe.before, howe.after, howe.skips) == (660, 630, False)
    assert zone_changes("Asia/Tokyo", NOW, datetime(2030, 1, 1, tzinfo=UTC)) == ()


# --- conversion and command line ------------------------------------------------------------


def test_scheduler_keeps_the_crontabs_times_and_zone() -> None:
    conversion = convert(
        "0 2 * * * backup\n0 9 1,15 * mon report\n", "Europe/Berlin", split_dom_dow=True
    )
    assert [(j.schedule_expression, j.schedule_expression_timezone) for j in conversion.jobs] == [
        ("cron(0 2 * * ? *)", "Europe/Berlin"),
        ("cron(0 9 1,15 * ? *)", "Europe/Berlin"),
        ("cron(0 9 ? * MON *)", "Europe/Berlin"),
    ]


def test_cron_tz_sets_each_lines_zone() -> None:
    text = "0 2 * * * a\nCRON_TZ=America/New_York\n0 2 * * * b\nCRON_TZ=UTC\n0 2 * * * c\n"
    jobs = convert(text, "Europe/Berlin").jobs
    assert [(j.schedule_expression, j.schedule_expression_timezone) for j in jobs] == [
        ("cron(0 2 * * ? *)", "Europe/Berlin"),
        ("cron(0 2 * * ? *)", "America/New_York"),
        ("cron(0 2 * * ? *)", "UTC"),
    ]
    assert [j.description.split(")")[0] for j in jobs] == [
        "crontab (Europe/Berlin",
        "crontab (America/New_York",
        "crontab (UTC",
    ]


def test_rules_write_utc_as_each_jobs_zone() -> None:
    (job,) = convert("0 2 * * * x\n", "Asia/Tokyo", engine="rules").jobs
    assert (job.schedule_expression, job.schedule_expression_timezone) == (
        "cron(0 17 * * ? *)",
        "UTC",
    )


def run(*args: str, input: str) -> Any:
    return CliRunner().invoke(cli, ["crontab2tf", "-", *args], input=input, catch_exceptions=False)


def test_cli_defaults_to_the_scheduler_and_writes_each_zone() -> None:
    result = run("--timezone", "Europe/Berlin", "--format", "json", input="30 2 * * * backup\n")
    assert result.exit_code == 0, result.output
    (job,) = json.loads(result.stdout)["jobs"].values()
    assert job["schedule_expression"] == "cron(30 2 * * ? *)"
    assert job["schedule_expression_timezone"] == "Europe/Berlin"
    assert "Europe/Berlin skips 02:00-03:00" in result.stderr
    hcl = run("--timezone", "Europe/Berlin", input="30 2 * * * backup\n")
    assert "EventBridge Scheduler schedules in the crontab's zone" in hcl.stdout
    assert 'schedule_expression_timezone = "Europe/Berlin"' in hcl.stdout


def test_cli_rules_engine_refuses_dst_zones_as_before() -> None:
    with pytest.raises(CrontabError, match="Europe/Berlin changes its UTC offset"):
        run("--timezone", "Europe/Berlin", "--engine", "rules", input="30 2 * * * backup\n")


def test_cli_accept_dst_shift_is_for_rules_only() -> None:
    refused = run(
        "--timezone", "Europe/Berlin", "--accept-dst-shift", "standard", input="@daily x\n"
    )
    assert refused.exit_code == 2
    assert "--accept-dst-shift is for --engine rules" in refused.output
    accepted = run(
        "--timezone",
        "Europe/Berlin",
        "--engine",
        "rules",
        "--accept-dst-shift",
        "standard",
        input="@daily x\n",
    )
    assert accepted.exit_code == 0, accepted.output
