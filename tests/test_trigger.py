"""`sqsjkr trigger` against moto over HTTP: the schedule's message sent now marked triggered (FIFO
group kept), or as one of its firings (--firing, refused once it ran), found by its event_id under
either engine, --wait following a real daemon's run to its record, which
says who triggered it and why, and an event with no schedule named with where it was looked for.
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import sqsjkr as sqsjkr_api
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing, Origin
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.fleet.audit import os_user

from .conftest import Aws, Daemon, Start, run_daemon
from .faults import Fault, FaultProxy
from .test_audit import failing_audit as failing_audit  # noqa: F401 - the fixture
from .test_local import paste, pasteable_commands
from .test_schedules import backdate, events, queue_arn, scheduler, sqsjkr, write_conf
from .test_schedules import group as group  # noqa: F401 - the fixture

ROLE_ARN = "arn:aws:iam::123456789012:role/sqsjkr-scheduler"
#: A schedule's input as terraform or a person wrote it: spacing and order of its own, and envs.
BODY = '{"event_id": "nightly",   "envs": {"TOKEN": "s3cret"}, "command": "echo ran >> out"}'


def schedule(group: str, name: str, target_arn: str, body: str, **sqs: str) -> None:
    """A schedule named otherwise than its event, sending body as it is."""
    target: dict[str, Any] = {"Arn": target_arn, "RoleArn": ROLE_ARN, "Input": body}
    if sqs:
        target["SqsParameters"] = sqs
    scheduler().create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression="cron(0 3 * * ? *)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )


def received(aws: Aws, url: str) -> list[dict[str, Any]]:
    """Every message on the queue, each received once and deleted."""
    found = []
    while True:
        messages = aws.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not messages:
            return found
        for message in messages:
            aws.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        found += messages


def test_trigger_waits_for_the_run_whose_record_says_who_and_why(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    conf = write_conf(tmp_path, aws, group=group)
    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--reason", "rerun after the fix", "--wait", "-c", conf
    )
    assert code == 0, err
    message_id, header, row, triggered, *output = out.splitlines()
    assert header.split()[:2] == ["ENDED", "OUTCOME"]
    assert " succeeded (triggered) " in row and message_id in row
    assert triggered == f"    triggered by {os_user()}: rerun after the fix"
    assert (tmp_path / "out").read_text() == "ran\n"
    assert f"sent to queue {aws.queue_name}: schedule sqsjkr-db-backup's target" in err

    code, out, _ = sqsjkr(capsys, "history", "nightly", "--json", "-c", conf)
    [record] = json.loads(out)
    assert (record["message_id"], record["outcome"]) == (message_id, "succeeded")
    assert (record["triggered_by"], record["trigger_reason"]) == (os_user(), "rerun after the fix")
    code, out, _ = sqsjkr(capsys, "status", "-c", conf)
    assert f" (triggered by {os_user()}: rerun after the fix) " in out
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    [item] = json.loads(out)
    assert (item["action"], item["target"], item["reason"]) == (
        "trigger",
        "nightly",
        "rerun after the fix",
    )
    # Amended once sent: the trail names the event and the message it sent.
    assert item["detail"] == (
        f"schedule sqsjkr-db-backup to queue {aws.queue_name}, message {message_id}"
    )
    assert "s3cret" not in out
    assert daemon.stop() == 0


def test_trigger_wait_exits_1_when_the_run_fails(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    schedule(group, "sqsjkr-x", queue_arn(aws), '{"event_id": "broken", "command": "exit 3"}')
    conf = write_conf(tmp_path, aws, group=group)
    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    code, out, err = sqsjkr(capsys, "trigger", "broken", "--wait", "-c", conf)
    assert code == 1, err
    _, _, row, triggered, *_ = out.splitlines()
    assert " errored (triggered) " in row and triggered == f"    triggered by {os_user()}"
    assert daemon.stop() == 0


def test_trigger_sends_the_input_marked_triggered_in_the_schedules_fifo_group(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"{aws.queue_name}.fifo"
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    url = aws.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    arn = f"arn:aws:sqs:us-east-1:123456789012:{name}"
    schedule(group, "sqsjkr-db-backup", arn, BODY, MessageGroupId="backups")
    # The schedule fired a moment ago: content-based deduplication would drop an equal body.
    aws.sqs.send_message(QueueUrl=url, MessageBody=BODY, MessageGroupId="backups")
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "-c", write_conf(tmp_path, aws, group=group)
    )
    assert code == 0, err
    message_id = out.strip()
    by_id = {m["MessageId"]: m for m in received(aws, url)}
    assert len(by_id) == 2, "the trigger was not taken for a repeat of the schedule's message"
    sent = by_id[message_id]
    assert json.loads(sent["Body"]) == {**json.loads(BODY), "origin": "trigger"}
    assert sent["Attributes"]["MessageGroupId"] == "backups"
    assert sent["MessageAttributes"]["sqsjkr_triggered_by"]["StringValue"] == os_user()
    assert "sqsjkr_reason" not in sent["MessageAttributes"]  # no --reason given
    assert "s3cret" not in out + err


def test_trigger_finds_the_event_among_the_rules_on_the_queue(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    events().put_rule(Name=rule, ScheduleExpression="rate(1 day)", State="ENABLED")
    events().put_targets(Rule=rule, Targets=[{"Id": "j", "Arn": queue_arn(aws), "Input": BODY}])
    conf = write_conf(tmp_path, aws, engine="rules")
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "--reason", "now", "-c", conf)
    assert code == 0, err
    [sent] = received(aws, aws.queue_url)
    assert sent["MessageId"] == out.strip()
    assert json.loads(sent["Body"]) == {**json.loads(BODY), "origin": "trigger"}
    assert sent["MessageAttributes"]["sqsjkr_reason"]["StringValue"] == "now"


#: A schedule's input as the terraform module writes it: its firing's placeholders, which
#: EventBridge fills in when it fires, and never a trigger.
PLACEHOLDERS = {
    "scheduler": {"time": SCHEDULED_TIME, "schedule": SCHEDULE_ARN},
    "rules": {"time": "<time>", "schedule": "<rule>"},
}


def module_input(engine: str, expression: str, zone: str) -> str:
    firing = {**PLACEHOLDERS[engine], "expression": expression, "timezone": zone}
    return json.dumps(
        {"command": "echo ran", "event_id": "nightly", "firing": firing, "origin": "schedule"}
    )


def test_trigger_firing_of_a_rule_names_the_rule_as_its_schedule(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    rule = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    arn = events().put_rule(Name=rule, ScheduleExpression="cron(0 3 * * ? *)")["RuleArn"]
    template = module_input("rules", "cron(0 3 * * ? *)", "UTC")
    transformer = {
        "InputPathsMap": {"time": "$.time", "rule": "$.resources[0]"},
        "InputTemplate": template,
    }
    target = {"Id": "j", "Arn": queue_arn(aws), "InputTransformer": transformer}
    events().put_targets(Rule=rule, Targets=[target])
    conf = write_conf(tmp_path, aws, engine="rules")
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-15T03:00:00Z", "-c", conf
    )
    assert code == 0, err
    [sent] = received(aws, aws.queue_url)
    job = parse_job(sent["Body"], message_id="m", sent_at=0)
    at = datetime(2026, 1, 15, 3, tzinfo=timezone.utc).timestamp()
    assert job.firing == Firing(at, arn, "cron(0 3 * * ? *)", "UTC")


def test_trigger_firing_sends_it_as_that_firing_and_refuses_one_that_ran(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    expression, zone = "cron(0 2 * * ? *)", "Europe/Berlin"
    scheduler().create_schedule(
        Name="sqsjkr-nightly",
        GroupName=group,
        ScheduleExpression=expression,
        ScheduleExpressionTimezone=zone,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": queue_arn(aws),
            "RoleArn": ROLE_ARN,
            "Input": module_input("scheduler", expression, zone),
        },
    )
    arn = scheduler().get_schedule(Name="sqsjkr-nightly", GroupName=group)["Arn"]
    backdate(group, "sqsjkr-nightly", 5 * 365 * 86400)  # made years ago
    conf = write_conf(tmp_path, aws, group=group)
    # Run now: no firing (the placeholders are never sent unfilled), marked triggered.
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "-c", conf)
    assert code == 0, err
    [now] = received(aws, aws.queue_url)
    job = parse_job(now["Body"], message_id="m", sent_at=0)
    assert (job.firing, job.origin) == (None, Origin.TRIGGER)

    # The 02:00 Berlin firing of 15 January 2026 (01:00 UTC), a wall time in the schedule's zone.
    at = datetime(2026, 1, 15, 1, tzinfo=timezone.utc).timestamp()
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-15T02:00:00", "-c", conf
    )
    assert code == 0, err
    assert "as its firing of 2026-01-15T01:00:00Z" in err
    [sent] = received(aws, aws.queue_url)
    job = parse_job(sent["Body"], message_id="m", sent_at=0)
    assert (job.firing, job.origin) == (Firing(at, arn, expression, zone), Origin.TRIGGER)
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert json.loads(out)[0]["detail"].endswith(
        f"as its firing of 2026-01-15T01:00:00Z, message {sent['MessageId']}"
    )

    # Once a run of that firing is recorded, another is refused, unless --force.
    ran = RunRecord(
        event_id="nightly", message_id=sent["MessageId"], host="batch1", owner="o",
        command="echo ran", sent_at=at + 5, claimed_at=at + 6, started_at=at + 6,
        ended_at=at + 9, outcome=RunOutcome.SUCCEEDED, version="test", exit_code=0,
        firing_at=at, firing_schedule=arn,
    )  # fmt: skip
    DynamoHistory(aws.dynamodb, aws.table, retention_seconds=86400).finished(ran)
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-15T01:00:00Z", "-c", conf
    )
    assert code == 1 and "already ran" in err and "--force" in err, err
    assert received(aws, aws.queue_url) == []
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-15T01:00:00Z", "--force", "-c", conf
    )
    assert code == 0, err
    [again] = received(aws, aws.queue_url)
    forced = parse_job(again["Body"], message_id="m", sent_at=0).firing
    # A re-run of that firing, which its claim does not drop as a duplicate.
    assert forced is not None and forced.rerun and len(forced.rerun) == 32
    assert replace(forced, rerun=None) == Firing(at, arn, expression, zone)
    assert forced.claim_key == f"{forced.key}#rerun-{forced.rerun}"
    # Another firing of the same day is not refused; --force alone is a usage error.
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-16T02:00:00+01:00", "-c", conf
    )
    assert code == 0, err
    assert len(received(aws, aws.queue_url)) == 1
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "--force", "-c", conf)
    assert code == 2 and "--force is for --firing" in err
    # A time the schedule does not fire at, or one not yet come, is refused; nothing is sent.
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-15T02:30:00", "-c", conf
    )
    assert code != 0 and "does not fire at 2026-01-15T01:30:00Z" in err, err
    assert "its next firing after it is 2026-01-16" in err
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2999-01-15T02:00:00", "-c", conf
    )
    assert code != 0 and "has not come yet" in err, err
    # Nor is one before the schedule was created: it was no firing.
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2000-01-15T02:00:00", "-c", conf
    )
    assert code == 2 and 'is before schedule "sqsjkr-nightly" was created' in err, err
    assert received(aws, aws.queue_url) == []


NIGHTLY = "cron(0 2 * * ? *)"


def nightly_schedule(aws: Aws, group: str, body: dict[str, Any]) -> None:
    """Schedule "sqsjkr-nightly" at 02:00 UTC sending body to aws's queue, made years ago."""
    scheduler().create_schedule(
        Name="sqsjkr-nightly",
        GroupName=group,
        ScheduleExpression=NIGHTLY,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue_arn(aws), "RoleArn": ROLE_ARN, "Input": json.dumps(body)},
    )
    backdate(group, "sqsjkr-nightly", 5 * 365 * 86400)


def test_a_forced_rerun_of_a_firing_runs_once_and_a_cancelled_firing_runs_without_force(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = json.loads(module_input("scheduler", NIGHTLY, "UTC"))
    body["command"] = "echo ran >> runs"
    nightly_schedule(aws, group, body)
    conf = write_conf(tmp_path, aws, group=group)
    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=86400)
    firing = ["--firing", "2026-01-15T02:00:00Z", "-c", conf]

    code, out, err = sqsjkr(capsys, "trigger", "nightly", *firing, "--wait")
    assert code == 0, err  # the missed firing, filled
    code, out, err = sqsjkr(capsys, "trigger", "nightly", *firing)
    assert code == 1 and "already ran" in err, err
    code, out, err = sqsjkr(capsys, "trigger", "nightly", *firing, "--force", "--wait")
    assert code == 0, err
    assert (tmp_path / "runs").read_text() == "ran\nran\n"  # forced: it ran again, once
    first, second = sorted(history.runs("nightly", 10), key=lambda r: r.ended_at)
    assert first.firing_at == second.firing_at
    assert first.firing_rerun is None and second.firing_rerun
    assert second.triggered_by == os_user() and second.outcome is RunOutcome.SUCCEEDED
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    detail = json.loads(out)[0]["detail"]
    assert detail.startswith("forced") and f"a re-run {second.firing_rerun}" in detail

    # A firing cancelled for its life_time never ran: its claim is finished, and its record
    # says so. Run this firing runs it without --force, as a re-run its claim does not drop.
    at = datetime(2026, 1, 16, 2, tzinfo=timezone.utc).timestamp()
    arn = scheduler().get_schedule(Name="sqsjkr-nightly", GroupName=group)["Arn"]
    history.finished(
        RunRecord(
            event_id="nightly",
            message_id="m-cancelled",
            host="batch1",
            owner="o",
            command="echo ran >> runs",
            sent_at=at,
            claimed_at=at + 600,
            ended_at=at + 600,
            outcome=RunOutcome.CANCELLED,
            version="test",
            firing_at=at,
            firing_schedule=arn,
        )  # fmt: skip
    )
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={
            "Id": {"S": Firing(at, arn).key},
            "Type": {"S": "throttle"},
            "Expired": {"N": "9999999999"},
        },
    )
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--firing", "2026-01-16T02:00:00Z", "--wait", "-c", conf
    )
    assert code == 0, err
    assert (tmp_path / "runs").read_text() == "ran\nran\nran\n"
    assert daemon.stop() == 0


def test_trigger_of_an_event_with_no_schedule_says_where_it_looked(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    conf = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "trigger", "nightyl", "-c", conf)
    assert (code, out) == (1, "")
    assert err == (
        f'sqsjkr: error: no schedule sends event "nightyl": looked in EventBridge Scheduler '
        f'group "{group}" in region us-east-1 (events with schedules there include "nightly")\n'
    )
    conf = write_conf(tmp_path, aws, engine="rules")
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "-c", conf)
    assert (code, out) == (1, "")
    assert err == (
        'sqsjkr: error: no schedule sends event "nightly": looked in the EventBridge rules that '
        f'target queue "{aws.queue_name}" in region us-east-1\n'
    )
    assert aws.queue_counts() == (0, 0)
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert json.loads(out) == [], "nothing done, nothing audited"


def test_an_event_with_schedules_that_differ_needs_the_one_to_send(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    schedule(group, "sqsjkr-nightly-a", queue_arn(aws), BODY)
    other = BODY.replace("echo ran", "echo other")
    schedule(group, "sqsjkr-nightly-b", queue_arn(aws), other)
    conf = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "-c", conf)
    assert (code, out) == (2, "")
    assert '("sqsjkr-nightly-a", "sqsjkr-nightly-b"): name one with --schedule NAME' in err
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "--schedule", "sqsjkr-nightly-b", "-c", conf
    )
    assert code == 0, err
    [sent] = received(aws, aws.queue_url)
    assert json.loads(sent["Body"]) == {**json.loads(other), "origin": "trigger"}


def test_a_record_written_before_triggers_loads_as_not_triggered() -> None:
    old = {
        "event_id": "e",
        "message_id": "m",
        "host": "h",
        "owner": "o",
        "command": "c",
        "sent_at": 1.0,
        "claimed_at": 2.0,
        "ended_at": 3.0,
        "outcome": "succeeded",
        "version": "0.9",
    }
    record = RunRecord.from_dict(old)
    assert (record.triggered_by, record.trigger_reason) == (None, None)


@pytest.mark.slow
def test_trigger_runs_a_sample_schedule_of_local_mode(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = start_daemon("local", "--stats-port", "0", wait_ready=False)
    daemon.wait_for_log("receiving with")
    [send] = pasteable_commands(daemon.log)
    command = send.replace(" send -c ", " trigger -c ").replace(
        " --command 'echo hello'", " demo-hello --reason 'try it' --wait"
    )
    ran = paste(command, tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert " succeeded (triggered) " in ran.stdout
    assert ": try it" in ran.stdout
    assert daemon.stop(signal.SIGINT) == 0


def test_a_trigger_whose_audit_item_cannot_be_written_sends_nothing(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    failing_audit: FaultProxy,  # noqa: F811
) -> None:
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    code, out, err = sqsjkr(
        capsys, "trigger", "nightly", "-c", write_conf(tmp_path, aws, group=group)
    )
    assert (code, out) == (1, "")
    assert err.startswith('sqsjkr: error: trigger "nightly" not done: its audit item could not')
    assert aws.queue_counts() == (0, 0)


def test_a_trigger_whose_audit_item_cannot_name_its_message_is_sent_and_warns(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    moto_endpoint: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    conf = write_conf(tmp_path, aws, group=group)
    with FaultProxy(moto_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        # Only the amend (a put of an audit item that exists) fails: the first write is kept.
        proxy.add(
            Fault(
                lambda call: (
                    call.item_type() == "audit"
                    and call.json.get("ConditionExpression") == "attribute_exists(Id)"
                ),
                error=(400, "AccessDeniedException"),
            )
        )
        code, out, err = sqsjkr(capsys, "trigger", "nightly", "-c", conf)
        assert code == 0, err
        message_id = out.strip()
        assert 'sqsjkr: warning: the audit item of trigger "nightly" does not say ' in err
        assert f"message {message_id}" in err and "AccessDeniedException" in err
        assert aws.queue_counts() == (1, 0)
        code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
        [item] = json.loads(out)
    assert item["detail"] == f"schedule sqsjkr-db-backup to queue {aws.queue_name}"


def test_trigger_wait_gives_up_after_its_timeout_with_exit_124(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    # No daemon reads the queue: the run never comes.
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    conf = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "--wait", "--timeout", "1s", "-c", conf)
    assert code == 124, err
    message_id = out.strip()
    assert err.endswith(
        f"sqsjkr: gave up waiting for the run of message {message_id} after 1s (--wait-timeout): the "
        'message stays queued or runs; `sqsjkr history "nightly"` shows it\n'
    )
    assert aws.queue_counts() == (1, 0)


def test_send_and_fleet_send_mark_their_messages_sent_by_hand(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_conf(tmp_path, aws)
    code, out, err = sqsjkr(capsys, "send", "--command", "echo hi", "--event-id", "e", "-c", conf)
    assert code == 0, err
    # A body given whole is marked too, whatever origin it says.
    body = json.dumps({"command": "echo hi", "origin": "schedule"})
    code, out, err = sqsjkr(capsys, "send", "--body", body, "-c", conf)
    assert code == 0, err
    sqsjkr_api.Fleet(conf).send({"command": "echo from a program"})
    origins = [
        parse_job(m["Body"], message_id="m", sent_at=0).origin for m in received(aws, aws.queue_url)
    ]
    assert origins == [Origin.SEND] * 3
