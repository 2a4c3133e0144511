"""`sqsjkr schedules` and status's next-run column against moto's EventBridge Scheduler and rules
over HTTP, and the fire times of EventBridge's expressions: DST changes, L, W, #, rate and at.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import boto3
import pytest

from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.pause import DynamoPauses, Pause
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.crontab.fires import Window, next_fires
from sqsjkr.errors import ScheduleExpressionError

from .conftest import REGION, Aws, config_text, sqsjkr

UTC = timezone.utc
BERLIN = ZoneInfo("Europe/Berlin")
ROLE_ARN = "arn:aws:iam::123456789012:role/sqsjkr-scheduler"


def fires(expression: str, zone: str, after: datetime, count: int = 3, **window: Any) -> list[str]:
    found = next_fires(expression, zone, after, count, Window(**window))
    return [fire.isoformat() for fire in found.times]


# --- fire times --------------------------------------------------------------------------------


def test_a_fixed_time_the_clock_skips_does_not_fire_that_day() -> None:
    # Europe/Berlin skips 02:00-03:00 on 2026-03-29 (docs/schedules.md): no 02:30 that day.
    assert fires("cron(30 2 * * ? *)", "Europe/Berlin", datetime(2026, 3, 27, 12, tzinfo=UTC)) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]


def test_a_time_the_clock_repeats_fires_once_in_the_first_pass() -> None:
    # 02:00-03:00 comes twice on 2026-10-25 in Berlin, first at +02:00, then at +01:00.
    after = datetime(2026, 10, 25, 1, 50, tzinfo=BERLIN)
    assert fires("cron(0/30 * * * ? *)", "Europe/Berlin", after, 4) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T03:00:00+01:00",
        "2026-10-25T03:30:00+01:00",
    ]
    assert fires("cron(30 2 * * ? *)", "Europe/Berlin", after, 2) == [
        "2026-10-25T02:30:00+02:00",
        "2026-10-26T02:30:00+01:00",
    ]
    # In the second pass, the repeated time has fired already.
    second_pass = datetime(2026, 10, 25, 2, 10, tzinfo=BERLIN).replace(fold=1)
    assert fires("cron(30 2 * * ? *)", "Europe/Berlin", second_pass, 1) == [
        "2026-10-26T02:30:00+01:00"
    ]


def test_a_minutely_schedule_fires_again_after_an_hour_the_clock_skips() -> None:
    # Sixty candidate minutes of 02:xx are skipped on 2026-03-29 in Berlin: they are no fires,
    # and the schedule goes on at 03:00 (it was taken to fire no more after eight of them).
    before = datetime(2026, 3, 29, 1, 58, tzinfo=BERLIN)
    assert fires("cron(* 2,3 * * ? *)", "Europe/Berlin", before, 2) == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:01:00+02:00",
    ]


def test_a_minutely_schedule_fires_again_after_the_second_pass_of_a_repeated_hour() -> None:
    second_pass = datetime(2026, 10, 25, 2, 1, tzinfo=BERLIN).replace(fold=1)
    assert fires("cron(* * * * ? *)", "Europe/Berlin", second_pass, 1) == [
        "2026-10-25T03:00:00+01:00"
    ]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # L: the last day of the month (February 2028 has 29 days).
        ("cron(0 9 L * ? *)", ["2028-01-31", "2028-02-29", "2028-03-31"]),
        # W: the weekday nearest the 15th (2028-01-15 is a Saturday, 2028-04-15 too).
        ("cron(0 9 15W * ? *)", ["2028-01-14", "2028-02-15", "2028-03-15"]),
        # #: the third Friday; EventBridge numbers weekdays 1-7 from Sunday, so 6 is Friday.
        ("cron(0 9 ? * 6#3 *)", ["2028-01-21", "2028-02-18", "2028-03-17"]),
        ("cron(0 9 ? * FRI#3 *)", ["2028-01-21", "2028-02-18", "2028-03-17"]),
        # nL: the last Thursday of the month.
        ("cron(0 9 ? * 5L *)", ["2028-01-27", "2028-02-24", "2028-03-30"]),
        # A range of weekday numbers, Monday to Friday, and a year field.
        ("cron(0 9 ? * 2-6 2029)", ["2029-01-01", "2029-01-02", "2029-01-03"]),
        ("cron(0 9 ? * 1,7 *)", ["2028-01-01", "2028-01-02", "2028-01-08"]),
    ],
)
def test_eventbridge_day_syntax(expression: str, expected: list[str]) -> None:
    found = fires(expression, "Asia/Tokyo", datetime(2027, 12, 31, tzinfo=UTC))
    assert found == [f"{day}T09:00:00+09:00" for day in expected]


def test_a_year_in_the_past_never_fires() -> None:
    assert fires("cron(0 9 * * ? 2020)", "UTC", datetime(2028, 1, 1, tzinfo=UTC)) == []


def test_rate_counts_from_the_schedule_start_or_from_now_when_unknown() -> None:
    after = datetime(2028, 1, 1, 0, 7, tzinfo=UTC)
    created = datetime(2028, 1, 1, tzinfo=UTC)
    assert fires("rate(5 minutes)", "UTC", after, created=created) == [
        "2028-01-01T00:10:00+00:00",
        "2028-01-01T00:15:00+00:00",
        "2028-01-01T00:20:00+00:00",
    ]
    unknown = next_fires("rate(1 hour)", "UTC", after, 2)
    assert not unknown.exact
    assert [f.isoformat() for f in unknown.times] == [
        "2028-01-01T01:07:00+00:00",
        "2028-01-01T02:07:00+00:00",
    ]


def test_start_and_end_dates_bound_the_fires() -> None:
    after = datetime(2028, 1, 1, tzinfo=UTC)
    window = {"start": datetime(2028, 1, 10, tzinfo=UTC), "end": datetime(2028, 1, 12, tzinfo=UTC)}
    assert fires("cron(0 9 * * ? *)", "UTC", after, **window) == [
        "2028-01-10T09:00:00+00:00",
        "2028-01-11T09:00:00+00:00",
    ]


def test_at_fires_once_and_not_at_a_skipped_time() -> None:
    after = datetime(2026, 1, 1, tzinfo=UTC)
    assert fires("at(2026-10-25T02:30:00)", "Europe/Berlin", after) == ["2026-10-25T02:30:00+02:00"]
    assert fires("at(2026-03-29T02:30:00)", "Europe/Berlin", after) == []
    assert fires("at(2025-03-29T02:30:00)", "Europe/Berlin", after) == []


@pytest.mark.parametrize(
    ("expression", "zone", "message"),
    [
        ("cron(0 9 * * *)", "UTC", "has 5 fields: EventBridge takes six"),
        ("cron(0 9 * * MON *)", "UTC", "one of day-of-month and day-of-week must be '?'"),
        ("cron(0 9 ? * 8 *)", "UTC", "day-of-week '8': EventBridge takes 1-7"),
        ("every day", "UTC", "is not a cron(...), rate(...) or at(...) expression"),
        ("at(tomorrow)", "UTC", "expected yyyy-mm-ddThh:mm:ss"),
        ("cron(0 9 * * ? *)", "Mars/Olympus", "time zone"),
    ],
)
def test_bad_expressions_say_what_is_wrong(expression: str, zone: str, message: str) -> None:
    with pytest.raises(ScheduleExpressionError, match=re.escape(message)):
        next_fires(expression, zone, datetime(2028, 1, 1, tzinfo=UTC))


# --- against moto ----------------------------------------------------------------------------


def scheduler() -> Any:
    return boto3.client("scheduler", region_name=REGION)


def backdate(group: str, name: str, seconds: float) -> None:
    """Make moto's schedule `name` of `group` created `seconds` earlier: the ledger counts a
    schedule's firings from its creation, and moto (in this process) has no other way to make
    one that existed yesterday."""
    from moto.scheduler.models import scheduler_backends

    for regions in scheduler_backends.values():
        for backend in regions.values():
            found = backend.schedule_groups.get(group)
            if found is not None and name in found.schedules:
                found.schedules[name].creation_date -= seconds
                return
    raise AssertionError(f"no schedule {name} in group {group}")


def events() -> Any:
    return boto3.client("events", region_name=REGION)


def queue_arn(aws: Aws) -> str:
    attributes = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["QueueArn"])
    return str(attributes["Attributes"]["QueueArn"])


@pytest.fixture
def group(aws: Aws) -> str:
    name = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    scheduler().create_schedule_group(Name=name)
    return name


def write_conf(tmp_path: Path, aws: Aws, **schedule: str) -> str:
    path = tmp_path / "config.toml"
    lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in schedule.items())
    path.write_text(config_text(aws, stats="stats_port = 0") + f"\n[schedule]\n{lines}\n")
    return str(path)


def schedule(
    aws: Aws, group: str, name: str, expression: str, message: dict[str, Any], **more: Any
) -> None:
    scheduler().create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression=expression,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue_arn(aws), "RoleArn": ROLE_ARN, "Input": json.dumps(message)},
        **more,
    )


def finished(aws: Aws, event_id: str, outcome: RunOutcome, ended_at: float) -> None:
    record = RunRecord(
        event_id=event_id,
        message_id=f"m-{uuid.uuid4().hex[:6]}",
        host="batch1",
        owner="o",
        command="run-it",
        sent_at=ended_at - 6,
        claimed_at=ended_at - 5,
        ended_at=ended_at,
        outcome=outcome,
        version="test",
        started_at=ended_at - 5,
        exit_code=0 if outcome is RunOutcome.SUCCEEDED else 1,
    )
    DynamoHistory(aws.dynamodb, aws.table, retention_seconds=86400).finished(record)


def test_schedules_lists_the_groups_schedules_with_their_fires_and_events(
    tmp_path: Path, aws: Aws, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    schedule(
        aws, group, "sqsjkr-nightly", "cron(30 2 ? * 2#1 *)",
        {"event_id": "nightly", "command": "backup --all\nsecond line", "envs": {"PASSWORD": "hunter2"}},
        ScheduleExpressionTimezone="Europe/Berlin",
    )  # fmt: skip
    schedule(
        aws, group, "sqsjkr-tick", "rate(5 minutes)",
        {"event_id": "tick\x1b[31m", "command": "echo \x1b[2J"}, State="DISABLED",
    )  # fmt: skip
    finished(aws, "nightly", RunOutcome.ERRORED, now - 60)
    DynamoPauses(aws.dynamodb, aws.table).pause(Pause("nightly", now - 30, None, "disk", "me@h"))
    path = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "schedules", "-c", path)
    assert (code, err) == (0, "")
    # Columns are aligned with runs of spaces: compare with one space between cells' words.
    header, nightly, tick = (" ".join(line.split()) for line in out.splitlines())
    assert header == "NAME EXPRESSION ZONE STATE NEXT EVENT COMMAND LAST RUN"
    expected = next_fires("cron(30 2 ? * 2#1 *)", "Europe/Berlin", datetime.now(UTC)).times
    assert nightly.split()[:4] == ["sqsjkr-nightly", "cron(30", "2", "?"]
    assert "Europe/Berlin enabled" in nightly
    assert "next " + ", ".join(f.isoformat() for f in expected) in nightly
    assert " nightly backup --all (+1 lines) last errored " in nightly
    assert nightly.endswith("PAUSED")
    assert "second line" not in out and "hunter2" not in out
    assert "DISABLED next - tick\\x1b[31m echo \\x1b[2J no run ended yet" in tick
    assert "\x1b" not in out

    code, out, _ = sqsjkr(capsys, "schedules", "-c", path, "--json")
    assert code == 0
    first, second = json.loads(out)
    assert first["name"] == "sqsjkr-nightly" and first["timezone"] == "Europe/Berlin"
    assert first["next"] == [f.isoformat() for f in expected]
    assert (first["event_id"], first["command"]) == ("nightly", "backup --all (+1 lines)")
    assert first["last_run"]["outcome"] == "errored"
    assert first["paused"]["reason"] == "disk"
    assert (second["enabled"], second["next"], second["last_run"]) == (False, [], None)
    assert "hunter2" not in out


def test_schedules_with_the_rules_engine_reads_the_rules_on_the_queue(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    client = events()
    rule = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    client.put_rule(Name=rule, ScheduleExpression="cron(0 9 L * ? *)", State="ENABLED")
    message = {"event_id": "month-end", "command": "close-books"}
    client.put_targets(
        Rule=rule, Targets=[{"Id": "job", "Arn": queue_arn(aws), "Input": json.dumps(message)}]
    )
    other = f"other-{uuid.uuid4().hex[:8]}"
    client.put_rule(Name=other, ScheduleExpression="rate(1 hour)")
    client.put_targets(Rule=other, Targets=[{"Id": "x", "Arn": "arn:aws:sqs:us-east-1:1:other"}])
    path = write_conf(tmp_path, aws, engine="rules")
    code, out, err = sqsjkr(capsys, "schedules", "-c", path, "--json")
    assert (code, err) == (0, "")
    (shown,) = json.loads(out)
    expected = next_fires("cron(0 9 L * ? *)", "UTC", datetime.now(UTC)).times
    assert shown["name"] == rule and shown["timezone"] == "UTC" and shown["enabled"]
    assert shown["next"] == [f.isoformat() for f in expected]
    assert all(fire.endswith("T09:00:00+00:00") for fire in shown["next"])
    assert (shown["event_id"], shown["command"]) == ("month-end", "close-books")


def test_schedules_of_an_empty_group_says_so(
    tmp_path: Path, aws: Aws, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = sqsjkr(capsys, "schedules", "-c", write_conf(tmp_path, aws, group=group))
    assert (code, out) == (0, "")
    assert f'no schedule in EventBridge Scheduler group "{group}"' in err


def test_status_shows_each_events_next_run(
    tmp_path: Path, aws: Aws, group: str, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    schedule(
        aws, group, "sqsjkr-hourly", "cron(15 * * * ? *)", {"event_id": "hourly", "command": "x"}
    )
    schedule(
        aws, group, "sqsjkr-hourly-b", "cron(45 * * * ? *)", {"event_id": "hourly", "command": "x"}
    )
    schedule(
        aws, group, "sqsjkr-held", "rate(1 hour)", {"event_id": "held", "command": "x"},
        State="DISABLED",
    )  # fmt: skip
    finished(aws, "hourly", RunOutcome.SUCCEEDED, now - 60)
    finished(aws, "held", RunOutcome.SUCCEEDED, now - 60)
    finished(aws, "unscheduled", RunOutcome.SUCCEEDED, now - 60)
    path = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "status", "-c", path)
    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split()[0] == "EVENT" and "NEXT RUN" in header
    held, hourly, unscheduled = sorted(lines)
    soonest = min(
        next_fires(e, "UTC", datetime.now(UTC), 1).times[0]
        for e in ("cron(15 * * * ? *)", "cron(45 * * * ? *)")
    )
    assert f"next run {soonest.isoformat()}" in hourly
    assert "no next run" in unscheduled and "DISABLED" not in unscheduled
    # Its only schedule disabled, the event is marked: it runs only when sent by hand.
    assert "no next run: schedule DISABLED" in held
    code, out, _ = sqsjkr(capsys, "status", "-c", path, "--json")
    events = json.loads(out)["events"]
    shown = {event["event_id"]: event["next_run"] for event in events}
    assert shown == {"hourly": soonest.isoformat(), "held": None, "unscheduled": None}
    disabled = {event["event_id"]: event["schedule_disabled"] for event in events}
    assert disabled == {"hourly": False, "held": True, "unscheduled": False}


def test_status_says_when_the_next_runs_cannot_be_read(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    finished(aws, "hourly", RunOutcome.SUCCEEDED, time.time() - 60)
    path = tmp_path / "config.toml"
    # The rules engine reads the queue's ARN first: a queue that is not there fails it.
    text = config_text(aws, stats="stats_port = 0").replace(aws.queue_name, "no-such-queue")
    path.write_text(text + '\n[schedule]\nengine = "rules"\n')
    code, out, err = sqsjkr(capsys, "status", "-c", str(path))
    assert code == 0
    assert "next run ?" in out
    assert "sqsjkr: next runs unknown: " in err and "no-such-queue" in err
