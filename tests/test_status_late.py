"""`sqsjkr status --check` judging scheduled events by their firings, against moto over HTTP:
late after its grace, cleared once it runs, not while paused or disabled; and its calls."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import botocore.client
import pytest

from sqsjkr.backends.history import SUMMARY_TYPE, DynamoHistory
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.crontab.fires import next_fires

from .conftest import Aws, sqsjkr
from .test_schedules import schedule, scheduler, write_conf

HOUR = 3600.0
NIGHTLY = "cron(0 2 * * ? *)"
BERLIN = "Europe/Berlin"


@pytest.fixture
def group(aws: Aws) -> str:
    name = f"sqsjkr-{aws.table[-10:]}"
    scheduler().create_schedule_group(Name=name)
    return name


def put_summary(aws: Aws, event_id: str, *, last_firing: float, next_firing: float) -> None:
    """The summary a daemon leaves after the run of a firing at last_firing (the daemon's own
    writing is another module's: this writes its fields as they are kept)."""
    run = {
        "event_id": event_id,
        "message_id": f"m-{event_id}-{int(last_firing)}",
        "host": "batch1",
        "owner": "batch1:1:x",
        "command": "run-it",
        "sent_at": last_firing,
        "claimed_at": last_firing + 1,
        "started_at": last_firing + 1,
        "ended_at": last_firing + 5,
        "outcome": "succeeded",
        "version": "test",
        "exit_code": 0,
        "firing_at": last_firing,
        "firing_schedule": f"arn:aws:scheduler:::schedule/sqsjkr/{event_id}",
        "origin": "schedule",
    }
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={
            "Id": {"S": event_id},
            "Type": {"S": SUMMARY_TYPE},
            "Expired": {"N": str(int(last_firing + 400 * 86400))},
            "LastRun": {"S": json.dumps(run)},
            "LastSuccessAt": {"N": str(int(last_firing + 5))},
            "ConsecutiveFailures": {"N": "0"},
            "Schedule": {"S": run["firing_schedule"]},
            "ScheduleExpression": {"S": NIGHTLY},
            "ScheduleTimezone": {"S": BERLIN},
            "LastFiringAt": {"N": str(int(last_firing))},
            "NextFiringAt": {"N": str(int(next_firing))},
        },
    )


def conf_with_grace(tmp_path: Path, aws: Aws, grace: str = "5m", **sched: str) -> str:
    path = write_conf(tmp_path, aws, **sched)
    Path(path).write_text(Path(path).read_text() + f'\n[check]\ngrace = "{grace}"\n')
    return path


def check(capsys: pytest.CaptureFixture[str], conf: str, *more: str) -> tuple[int, str]:
    code, out, _ = sqsjkr(capsys, "status", "-c", conf, "--check", *more)
    return code, out.strip()


def berlin_hhmm(at: float) -> str:
    return datetime.fromtimestamp(at, ZoneInfo(BERLIN)).strftime("%H:%M")


def test_a_firing_is_late_after_its_grace_and_cleared_once_it_runs(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws, "5m")
    now = time.time()
    due = now - 14 * 60 - 30
    put_summary(aws, "nightly-report", last_firing=due - 86400, next_firing=due)
    assert check(capsys, conf) == (
        2,
        f"SQSJKR CRITICAL - nightly-report: the {berlin_hhmm(due)} {BERLIN} firing of "
        "nightly-report has not run (14m late)",
    )
    # Within its grace it is not late yet, though past due.
    put_summary(aws, "nightly-report", last_firing=now - 86400 - 120, next_firing=now - 120)
    assert check(capsys, conf) == (0, "SQSJKR OK - 1 event")
    # A larger grace covers the late one too.
    put_summary(aws, "nightly-report", last_firing=due - 86400, next_firing=due)
    assert check(capsys, conf_with_grace(tmp_path, aws, "20m"))[0] == 0
    # The firing runs: the daemon's summary moves on to the next one.
    put_summary(aws, "nightly-report", last_firing=due, next_firing=due + 86400)
    assert check(capsys, conf) == (0, "SQSJKR OK - 1 event")


def test_a_paused_event_is_not_late(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws)
    now = time.time()
    put_summary(aws, "held", last_firing=now - 2 * 86400, next_firing=now - 86400)
    assert check(capsys, conf)[0] == 2
    assert sqsjkr(capsys, "pause", "-c", conf, "held", "--reason", "maintenance")[0] == 0
    assert check(capsys, conf) == (0, "SQSJKR OK - 1 event")


def test_a_disabled_schedule_is_not_late(
    aws: Aws, group: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws, group=group)
    now = time.time()
    for event_id in ("off", "on"):
        put_summary(aws, event_id, last_firing=now - 2 * 86400, next_firing=now - 86400)
    message = {"command": "run-it"}
    schedule(aws, group, "off", NIGHTLY, {**message, "event_id": "off"}, State="DISABLED")
    schedule(aws, group, "on", NIGHTLY, {**message, "event_id": "on"})
    code, line = check(capsys, conf, "--schedules")
    assert code == 2
    assert line.startswith("SQSJKR CRITICAL - on: the ") and "off" not in line
    # Without --schedules too: the schedules' states come with their list.
    code, line = check(capsys, conf)
    assert code == 2 and "on: the " in line and "off" not in line


def test_a_schedule_no_firing_has_reached_is_late_by_the_scheduler(
    aws: Aws, group: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws, group=group)
    start = datetime.fromtimestamp(time.time() - 3 * HOUR).astimezone()
    schedule(aws, group, "hourly", "rate(1 hour)", {"command": "x", "event_id": "new"},
             StartDate=start)  # fmt: skip
    code, line = check(capsys, conf, "--schedules")
    assert code == 2 and "firing of new has not run" in line, line
    # The plain check too: a scheduled event that never ran is judged from its first firing.
    code, line = check(capsys, conf)
    assert code == 2 and "firing of new has not run" in line, line
    # And status lists it, with nothing run yet.
    code, out, _ = sqsjkr(capsys, "status", "-c", conf)
    assert code == 0 and any(
        row.startswith("new ") and "no run ended yet" in row for row in out.splitlines()
    ), out
    code, out, _ = sqsjkr(capsys, "status", "--json", "-c", conf)
    assert [e["event_id"] for e in json.loads(out)["events"]] == ["new"]


@contextmanager
def counting() -> Iterator[Counter[str]]:
    """Every AWS API call this process makes in the block, by operation."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()
    original = botocore.client.BaseClient._make_api_call

    def counted(self: Any, operation: str, params: Any) -> Any:
        with lock:
            calls[operation] += 1
        return original(self, operation, params)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.client.BaseClient, "_make_api_call", counted)
        yield calls


def test_the_checks_calls_do_not_grow_with_its_events(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws)
    now = time.time()
    events = 250
    for n in range(events):
        put_summary(aws, f"e{n:03d}", last_firing=now - 600, next_firing=now + 86400)
    with counting() as calls:
        assert check(capsys, conf) == (0, f"SQSJKR OK - {events} events")
    # The index's pages, a BatchGetItem per 100 summaries, the controls and the pauses, and
    # one Query of the index for the pipelines' runs (none here): no query of any event's runs.
    assert calls["BatchGetItem"] == 3, calls
    assert sum(calls.values()) <= 2 + 2 + 1 + events / 100, calls


def last_nightly(before: float) -> float:
    """The newest 02:00 Berlin firing at or before `before`."""
    after = datetime.fromtimestamp(before - 3 * 86400, timezone.utc)
    times = next_fires(NIGHTLY, BERLIN, after, 4).times
    return max(t.timestamp() for t in times if t.timestamp() <= before)


def test_a_forged_expression_in_a_message_does_not_silence_a_late_firing(
    aws: Aws, group: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws, group=group)
    due = last_nightly(time.time() - HOUR)
    put_summary(aws, "nightly", last_firing=due - 86400, next_firing=due)
    # A sender's message of a real event, with an expression of its own: the daemon keeps it
    # in the summary, with the next firing it implies (in 2,739 years).
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key={"Id": {"S": "nightly"}, "Type": {"S": SUMMARY_TYPE}},
        UpdateExpression="SET ScheduleExpression = :e, NextFiringAt = :n",
        ExpressionAttributeValues={":e": {"S": "rate(1000000 days)"}, ":n": {"N": "8.8e10"}},
    )
    schedule(aws, group, "nightly", NIGHTLY, {"command": "x", "event_id": "nightly"},
             ScheduleExpressionTimezone=BERLIN)  # fmt: skip
    code, line = check(capsys, conf, "--schedules")
    assert code == 2 and "firing of nightly has not run" in line, line


def test_an_older_firing_run_after_a_newer_one_does_not_make_the_newer_late(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws)
    # The newest firing, whatever the time of day: an hour back, within an hour after 02:00
    # Berlin the newest would be the day before's, and today's then late indeed.
    newer = last_nightly(time.time() - 60)
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=86400)
    history.finished(
        RunRecord(
            event_id="monthly",
            message_id="m-newer",
            host="b",
            owner="o",
            command="x",
            sent_at=newer,
            claimed_at=newer,
            started_at=newer,
            ended_at=newer + 5,
            outcome=RunOutcome.SUCCEEDED,
            version="t",
            exit_code=0,
            firing_at=newer,
            firing_schedule="arn:aws:scheduler:::schedule/sqsjkr/monthly",
        )  # fmt: skip
    )
    # Then the firing before it is run by hand (trigger --firing): the summary keeps the last
    # run's firing, which is the older one, and its next, which is the newer one.
    put_summary(aws, "monthly", last_firing=newer - 86400, next_firing=newer)
    assert check(capsys, conf) == (0, "SQSJKR OK - 1 event")


def test_a_deleted_schedule_is_not_late_for_ever(
    aws: Aws, group: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = conf_with_grace(tmp_path, aws, group=group)
    due = last_nightly(time.time() - HOUR)
    put_summary(aws, "retired", last_firing=due - 86400, next_firing=due)
    assert check(capsys, conf, "--schedules") == (0, "SQSJKR OK - 1 event")
