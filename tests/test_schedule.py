"""One-time jobs: `sqsjkr send --at/--in`, `--list-scheduled` and `--cancel` against moto's
EventBridge Scheduler over HTTP, the [schedule] config section, and the times --at accepts.

moto keeps schedules but never fires them; the firing test puts a schedule's input on its target
queue as the scheduler would, and a real daemon runs the job.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from sqsjkr.backends.scheduler import QueueTarget, create_one_time
from sqsjkr.contract.config import ScheduleConfig, parse_config
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.when import one_time_at, one_time_in
from sqsjkr.errors import ConfigError, ResourceMissingError
from sqsjkr.fleet.wording import local_time

from .conftest import (
    REGION,
    Aws,
    Cli,
    Daemon,
    config_text,
    counted,
    free_port,
    wait_until,
)

ROLE_ARN = "arn:aws:iam::123456789012:role/sqsjkr-scheduler"
NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


@pytest.fixture
def group(aws: Aws) -> str:
    """A schedule group of this test's own, as the terraform module makes one."""
    name = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    scheduler().create_schedule_group(Name=name)
    return name


def scheduler() -> Any:
    return boto3.client("scheduler", region_name=REGION)


def conf(tmp_path: Path, aws: Aws, group: str, **schedule: str) -> str:
    path = tmp_path / "config.toml"
    values = {"role_arn": ROLE_ARN, "group": group, **schedule}
    lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in values.items())
    path.write_text(config_text(aws, stats="stats_port = 8061") + f"\n[schedule]\n{lines}\n")
    return str(path)


def schedules(group: str) -> dict[str, dict[str, Any]]:
    client = scheduler()
    names = [s["Name"] for s in client.list_schedules(GroupName=group)["Schedules"]]
    return {name: client.get_schedule(GroupName=group, Name=name) for name in names}


def future(hours: int = 2) -> datetime:
    return (datetime.now(timezone.utc) + timedelta(hours=hours)).replace(microsecond=0)


# --- send --at -------------------------------------------------------------------------------


def test_send_at_creates_a_one_time_schedule_that_deletes_itself(
    tmp_path: Path, aws: Aws, group: str, cli: Cli
) -> None:
    dlq_url = aws.sqs.create_queue(QueueName=f"{aws.queue_name}-dlq")["QueueUrl"]
    dlq_arn = aws.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    aws.sqs.set_queue_attributes(
        QueueUrl=aws.queue_url,
        Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
        },
    )
    at = future()
    result = cli(
        "send", "-c", conf(tmp_path, aws, group), "--command", "echo later",
        "--event-id", "nightly report", "--lock-id", "L", "--at", at.isoformat(),
        "--region", REGION,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    name = result.stdout.strip()
    assert re.fullmatch(rf"at\.nightly-report\.{at:%Y%m%dT%H%M%S}Z\.[0-9a-f]{{8}}", name)
    # The time as every output writes one; the cancel pastes with the send's own --region.
    assert f"the job runs at {local_time(at.timestamp())} (at(" in result.stderr
    cancel = f"sqsjkr send -c {tmp_path / 'config.toml'} --region {REGION} --cancel {name}"
    assert result.stderr.rstrip().endswith(f"cancel it with: {cancel}"), result.stderr
    (schedule,) = schedules(group).values()
    assert schedule["Name"] == name
    assert schedule["ScheduleExpression"] == f"at({at:%Y-%m-%dT%H:%M:%S})"
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    assert schedule["ActionAfterCompletion"] == "DELETE"
    assert schedule["FlexibleTimeWindow"] == {"Mode": "OFF"}
    target = schedule["Target"]
    queue_arn = aws.sqs.get_queue_attributes(QueueUrl=aws.queue_url, AttributeNames=["QueueArn"])
    assert target["Arn"] == queue_arn["Attributes"]["QueueArn"]
    assert target["RoleArn"] == ROLE_ARN
    assert target["DeadLetterConfig"] == {"Arn": dlq_arn}
    job = parse_job(fired(schedule, at), message_id="m", sent_at=0.0)
    assert (job.command, job.event_id, job.lock_id) == ("echo later", "nightly report", "L")
    assert job.firing is not None and job.firing.schedule == schedule["Arn"]
    assert aws.queue_counts() == (0, 0)  # nothing is sent now


def fired(schedule: dict[str, Any], due: datetime) -> str:
    """The schedule's input as the Scheduler sends it when due: its context attributes filled."""
    moment = f"{due.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%S}Z"
    return (
        str(schedule["Target"]["Input"])
        .replace(SCHEDULED_TIME, moment)
        .replace(SCHEDULE_ARN, schedule["Arn"])
    )


def test_send_at_a_local_time_keeps_it_in_its_zone(
    tmp_path: Path, aws: Aws, group: str, cli: Cli
) -> None:
    year = datetime.now(timezone.utc).year + 1
    args = ["send", "-c", conf(tmp_path, aws, group, timezone="Asia/Tokyo"), "--command", "true"]
    assert cli(*args, "--at", f"{year}-07-01 09:30").returncode == 0
    assert (
        cli(*args, "--at", f"{year}-07-01T09:30:15", "--timezone", "Europe/Berlin").returncode == 0
    )
    got = {
        (s["ScheduleExpression"], s["ScheduleExpressionTimezone"])
        for s in schedules(group).values()
    }
    assert got == {
        (f"at({year}-07-01T09:30:00)", "Asia/Tokyo"),
        (f"at({year}-07-01T09:30:15)", "Europe/Berlin"),
    }


def test_send_in_is_from_now_in_utc(tmp_path: Path, aws: Aws, group: str, cli: Cli) -> None:
    before = datetime.now(timezone.utc)
    result = cli(
        "send", "-c", conf(tmp_path, aws, group), "--body", '{"command":"x"}', "--in", "2h"
    )
    after = datetime.now(timezone.utc)
    assert result.returncode == 0, result.stderr
    (schedule,) = schedules(group).values()
    assert schedule["ScheduleExpressionTimezone"] == "UTC"
    at = datetime.strptime(schedule["ScheduleExpression"], "at(%Y-%m-%dT%H:%M:%S)")
    at = at.replace(tzinfo=timezone.utc)
    assert before + timedelta(hours=2) <= at <= after + timedelta(hours=2, seconds=1)
    sent = json.loads(schedule["Target"]["Input"])
    # Its firing, which the Scheduler fills in when it sends it (its context attributes).
    assert sent == {
        "command": "x",
        "origin": "send",
        "firing": {
            "time": SCHEDULED_TIME,
            "schedule": SCHEDULE_ARN,
            "expression": schedule["ScheduleExpression"],
            "timezone": "UTC",
        },
    }


def test_list_scheduled_and_cancel(tmp_path: Path, aws: Aws, group: str, cli: Cli) -> None:
    path = conf(tmp_path, aws, group)
    later, sooner = future(5), future(1)
    names = []
    for when, event in ((later, "late"), (sooner, "soon")):
        result = cli(
            "send", "-c", path, "--command", f"run-{event}", "--event-id", event,
            "--env", "PASSWORD=hunter2", "--at", when.isoformat(),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        names.append(result.stdout.strip())
    # The module's own schedules share the group; they are not sqsjkr send's to list or cancel.
    scheduler().create_schedule(
        Name="sqsjkr-nightly", GroupName=group, ScheduleExpression="cron(0 3 * * ? *)",
        FlexibleTimeWindow={"Mode": "OFF"}, Target={"Arn": "arn:aws:sqs:x", "RoleArn": ROLE_ARN},
    )  # fmt: skip
    listed = cli("send", "-c", path, "--list-scheduled")
    assert listed.returncode == 0, listed.stderr
    assert [line.split() for line in listed.stdout.splitlines()] == [
        ["NAME", "RUNS", "AT", "EVENT", "COMMAND"],
        [names[1], local_time(sooner.timestamp()), "soon", "run-soon"],
        [names[0], local_time(later.timestamp()), "late", "run-late"],
    ]
    # How to cancel one, with this config: the default config would be another.
    assert listed.stderr == f"sqsjkr: cancel one with: sqsjkr send -c {path} --cancel NAME\n"
    assert "hunter2" not in listed.stdout
    cancelled = cli("send", "-c", path, "--cancel", names[0])
    assert (cancelled.returncode, cancelled.stdout.strip()) == (0, f"cancelled {names[0]}")
    assert set(schedules(group)) == {names[1], "sqsjkr-nightly"}
    again = cli("send", "-c", path, "--cancel", names[0])
    assert again.returncode == 1
    assert f"no one-time job {names[0]!r} in schedule group" in again.stderr
    theirs = cli("send", "-c", path, "--cancel", "sqsjkr-nightly")
    assert theirs.returncode == 2
    assert "is not a one-time job of sqsjkr send" in theirs.stderr
    assert "sqsjkr-nightly" in schedules(group)


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--at", "2001-01-01T00:00:00Z"], 2, "is in the past"),
        (["--at", "tomorrow"], 2, "is not a time"),
        (
            ["--at", "2031-03-30 02:30", "--timezone", "Europe/Berlin"],
            2,
            "does not exist in Europe/Berlin",
        ),
        (["--at", "2031-10-26 02:30", "--timezone", "Europe/Berlin"], 2, "happens twice"),
        (["--at", "2031-01-01 02:30", "--timezone", "Mars/Olympus"], 2, "not a known IANA"),
        (["--in", "0s"], 2, "--in: '0s' must be longer than 0"),
        (["--in", "2 days"], 2, "--in:"),
        (["--in", "1h", "--delay", "5"], 2, "--delay is for jobs sent now"),
        (["--in", "1h", "--at", "2031-01-01T00:00Z"], 2, "give --at or --in, not both"),
        (["--timezone", "UTC"], 2, "--timezone is the zone of an --at time"),
        (["--list-scheduled", "--in", "1h"], 2, "take no other job option"),
    ],
)
def test_send_at_refuses_bad_times_and_creates_nothing(
    tmp_path: Path, aws: Aws, group: str, args: list[str], code: int, message: str, cli: Cli
) -> None:
    result = cli("send", "-c", conf(tmp_path, aws, group), "--command", "true", *args)
    assert result.returncode == code
    assert message in result.stderr
    assert result.stderr.count("\n") == 1
    assert schedules(group) == {}


def test_send_at_checks_the_job_and_the_config_first(
    tmp_path: Path, aws: Aws, group: str, cli: Cli
) -> None:
    invalid = cli(
        "send", "-c", conf(tmp_path, aws, group), "--body", '{"command": 1}', "--in", "1h"
    )
    assert invalid.returncode == 2
    assert "invalid job, nothing sent" in invalid.stderr
    no_role = tmp_path / "no-role.toml"
    no_role.write_text(
        config_text(aws, stats="stats_port = 8061") + f'\n[schedule]\ngroup = "{group}"\n'
    )
    refused = cli("send", "-c", str(no_role), "--command", "true", "--in", "1h")
    assert refused.returncode == 2
    assert "need [schedule] role_arn" in refused.stderr
    assert schedules(group) == {}


def test_a_missing_schedule_group_is_named() -> None:
    # moto answers a schedule in an unknown group with a 500, so AWS's answer is stubbed here.
    client = boto3.client(
        "scheduler", region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        stub.add_client_error("create_schedule", "ResourceNotFoundException", http_status_code=404)
        with pytest.raises(
            ResourceMissingError, match=r"no schedule group 'gone' \(check \[schedule\] group"
        ):
            create_one_time(
                client,
                group="gone",
                name="at.x",
                when=one_time_in("1h", NOW),
                queue=QueueTarget("arn:aws:sqs:us-east-1:123456789012:q", None),
                role_arn=ROLE_ARN,
                body='{"command":"x"}',
            )


def test_the_scheduler_endpoint_variable_is_honoured(
    tmp_path: Path, aws: Aws, group: str, cli: Cli
) -> None:
    moto = os.environ["AWS_ENDPOINT_URL"]
    dead = f"http://127.0.0.1:{free_port()}"
    env = {
        "AWS_ENDPOINT_URL": dead,
        "AWS_ENDPOINT_URL_SQS": moto,
        "AWS_ENDPOINT_URL_SCHEDULER": moto,
        # The audit item: who asked (STS), written to the table.
        "AWS_ENDPOINT_URL_STS": moto,
        "AWS_ENDPOINT_URL_DYNAMODB": moto,
        "AWS_MAX_ATTEMPTS": "1",
    }
    result = cli(
        "send", "-c", conf(tmp_path, aws, group), "--command", "true", "--in", "1h", env=env
    )
    assert result.returncode == 0, result.stderr
    assert len(schedules(group)) == 1
    env["AWS_ENDPOINT_URL_SCHEDULER"] = dead
    failed = cli("send", "-c", conf(tmp_path, aws, group), "--list-scheduled", env=env)
    assert failed.returncode == 1


def test_a_fired_schedule_runs_its_job_on_a_daemon(
    tmp_path: Path, aws: Aws, group: str, start_daemon: Callable[..., Daemon], cli: Cli
) -> None:
    marker = tmp_path / "ran"
    result = cli(
        "send", "-c", conf(tmp_path, aws, group), "--command", f"touch {marker}",
        "--event-id", "one-off", "--in", "10m",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (schedule,) = schedules(group).values()
    # What EventBridge Scheduler does at the time: fill in its context attributes and send the
    # input to the target queue, at least once: here twice, as it may.
    target = schedule["Target"]
    queue_name = target["Arn"].rsplit(":", 1)[1]
    url = aws.sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
    # Sent now, as if now were the schedule's time (a firing is never sent before it is due).
    body = fired(schedule, datetime.now(timezone.utc))
    for _ in range(2):
        aws.sqs.send_message(QueueUrl=url, MessageBody=body)
    (tmp_path / "run.toml").write_text(config_text(aws, stats="stats_port = 0"))
    daemon = start_daemon("run", "-c", str(tmp_path / "run.toml"))
    wait_until(counted(daemon.stats_port, succeeded=1, duplicates=1), what="run once")
    assert marker.exists()


# --- the times --at and --in accept ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "zone", "expression", "timezone_name", "instant"),
    [
        (
            "2030-06-01T09:30:00+09:00",
            "UTC",
            "at(2030-06-01T00:30:00)",
            "UTC",
            "2030-06-01T00:30:00",
        ),
        (
            "2030-06-01T00:30Z",
            "Asia/Tokyo",
            "at(2030-06-01T00:30:00)",
            "UTC",
            "2030-06-01T00:30:00",
        ),
        (
            "2030-06-01 09:30",
            "Asia/Tokyo",
            "at(2030-06-01T09:30:00)",
            "Asia/Tokyo",
            "2030-06-01T00:30:00",
        ),
        (
            "2030-06-01t09:30:45",
            "Europe/Berlin",
            "at(2030-06-01T09:30:45)",
            "Europe/Berlin",
            "2030-06-01T07:30:45",
        ),
        (
            "2030-01-15 09:30",
            "Europe/Berlin",
            "at(2030-01-15T09:30:00)",
            "Europe/Berlin",
            "2030-01-15T08:30:00",
        ),
    ],
)
def test_at_times(text: str, zone: str, expression: str, timezone_name: str, instant: str) -> None:
    when = one_time_at(text, zone, NOW)
    assert (when.expression, when.timezone) == (expression, timezone_name)
    assert when.instant == datetime.fromisoformat(instant).replace(tzinfo=timezone.utc)


def test_at_refuses_skipped_and_repeated_local_times_naming_the_choices() -> None:
    with pytest.raises(ValueError, match="does not exist in America/New_York"):
        one_time_at("2030-03-10 02:30", "America/New_York", NOW)
    with pytest.raises(ValueError) as caught:
        one_time_at("2030-11-03 01:30", "America/New_York", NOW)
    assert "2030-11-03T01:30:00-04:00 for the first or 2030-11-03T01:30:00-05:00" in str(
        caught.value
    )
    assert one_time_at("2030-11-03T01:30:00-05:00", "America/New_York", NOW).instant == datetime(
        2030, 11, 3, 6, 30, tzinfo=timezone.utc
    )


def test_in_rounds_up_to_a_whole_second() -> None:
    now = datetime(2030, 1, 1, 0, 0, 0, 250000, tzinfo=timezone.utc)
    when = one_time_in("1h30m", now)
    assert when.expression == "at(2030-01-01T01:30:01)"
    assert when.instant >= now + timedelta(minutes=90)


# --- [schedule] in the config -----------------------------------------------------------------

BASE = '[account]\nid = "123456789012"\nregion = "us-east-1"\n[sqs]\nqueue_name = "q"\n'


def test_schedule_section_defaults_match_the_module() -> None:
    config = parse_config(BASE)
    assert config.schedule == ScheduleConfig(role_arn=None, group="sqsjkr", timezone="UTC")
    full = parse_config(
        BASE
        + f'[schedule]\nrole_arn = "{ROLE_ARN}"\ngroup = "batch-jobs"\ntimezone = "Asia/Tokyo"\n'
    )
    assert full.schedule == ScheduleConfig(ROLE_ARN, "batch-jobs", "Asia/Tokyo")
    rules = parse_config(BASE + '[schedule]\nengine = "rules"\n')
    assert rules.schedule.engine == "rules"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('role_arn = "batch-jobs-scheduler"', "[schedule] role_arn must be an IAM role ARN"),
        ("role_arn = 12", "[schedule] role_arn must be a string"),
        ('group = "a/b"', "[schedule] group must be 1 to 64 letters"),
        ('group = ""', "[schedule] group must not be empty"),
        ('timezone = "JST+9"', "[schedule] timezone must be an IANA time zone"),
        ('engine = "cron"', '[schedule] engine must be "scheduler" or "rules", got "cron"'),
    ],
)
def test_bad_schedule_values_name_the_key(line: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(BASE + f"[schedule]\n{line}\n")
