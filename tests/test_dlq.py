"""Tests of `sqsjkr dlq list | show | redrive` against moto over HTTP.

Dead letters come from the real daemon, or from SqsSource.reject, the daemon's own way of moving them.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.sqs import SqsSource
from sqsjkr.commands.options import load
from sqsjkr.contract.job import parse_job
from sqsjkr.errors import InvalidJobError
from sqsjkr.local.endpoint import create_queue
from sqsjkr.web.fleet import Fleet

from .conftest import (
    Aws,
    Start,
    config_text,
    counted,
    http_get_json,
    run_daemon,
    sqsjkr,
    wait_until,
)

JOB = '{"command": "echo hi", "event_id": "nightly"}'
OURS = {"sqsjkr_error", "sqsjkr_message_id", "sqsjkr_receive_count"}


@pytest.fixture
def site(aws: Aws) -> Aws:
    """aws with a queue whose RedrivePolicy names a dead-letter queue, QUEUE-dlq."""
    name = f"{aws.queue_name}-r"
    return replace(aws, queue_name=name, queue_url=create_queue(aws.sqs, name, dead_letter=True))


@pytest.fixture
def conf(site: Aws, tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(site, stats="stats_port = 0"))
    return path


def dlq_url(site: Aws) -> str:
    return str(site.sqs.get_queue_url(QueueName=f"{site.queue_name}-dlq")["QueueUrl"])


def dead_letter(site: Aws, body: str, attributes: dict[str, Any] | None = None) -> str:
    """Send body to the queue and dead-letter it as the daemon does; its id on the queue."""
    sent = site.sqs.send_message(
        QueueUrl=site.queue_url, MessageBody=body, MessageAttributes=attributes or {}
    )["MessageId"]
    source = SqsSource(site.sqs, site.queue_url, wait_time_seconds=0, dead_letter_url=dlq_url(site))
    [message] = wait_until(lambda: source.receive(1), what="the message")
    try:
        parse_job(message.body, message_id=message.message_id, sent_at=message.sent_at)
        reason = 'field "command": not allowed here'  # a parser of another version
    except InvalidJobError as exc:
        reason = str(exc)
    source.reject(message, reason)
    return str(sent)


def listed(capsys: pytest.CaptureFixture[str], conf: Path) -> list[dict[str, Any]]:
    code, out, err = sqsjkr(capsys, "dlq", "list", "--json", "-c", str(conf))
    assert (code, err) == (0, "")
    return list(json.loads(out))


def visible(site: Aws, url: str) -> list[dict[str, Any]]:
    """Every message of url that can be received now (hidden again for a while)."""
    messages: dict[str, dict[str, Any]] = {}
    while True:
        response = site.sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=60,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        new = [m for m in response.get("Messages", []) if m["MessageId"] not in messages]
        if not new:
            return list(messages.values())
        messages.update((m["MessageId"], m) for m in new)


def test_list_shows_what_the_daemon_dead_lettered_and_leaves_it_there(
    site: Aws,
    conf: Path,
    tmp_path: Path,
    start_daemon: Start,
    capsys: pytest.CaptureFixture[str],
) -> None:
    original = site.send("not json\x1b[2J")
    daemon, _ = run_daemon(start_daemon, tmp_path, site)
    daemon.wait_for_log(f"invalid message {original} moved to the dead-letter queue")
    daemon.stop()

    code, out, err = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split() == [
        *["DLQ", "MESSAGE", "ID", "ORIGINAL", "ID", "RECEIVES", "SENT", "ERROR", "BODY"]
    ]
    dlq_id, original_id, receives, _sent, *rest = row.split()
    assert (original_id, receives) == (original, "1")
    assert dlq_id != original
    assert " ".join(rest) == (
        "body is not JSON: Expecting value at line 1 column 1 not json\\x1b[2J"
    )
    # Left in the dead-letter queue, and visible again at once.
    [message] = visible(site, dlq_url(site))
    assert message["MessageId"] == dlq_id


def test_list_json_has_every_field(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long_body = "x" * 200
    originals = [dead_letter(site, long_body), dead_letter(site, "[1]")]
    entries = listed(capsys, conf)
    assert [e["original_id"] for e in entries] == originals
    first = entries[0]
    assert first["body"] == long_body
    assert first["error"] == "body is not JSON: Expecting value at line 1 column 1"
    assert first["receive_count"] == 1
    assert set(first["message_attributes"]) == OURS
    assert entries[1]["error"] == "body must be a JSON object, got array"
    # Listing again finds the same messages: the first listing made them visible again.
    assert [e["message_id"] for e in listed(capsys, conf)] == [e["message_id"] for e in entries]


def test_list_of_an_empty_dead_letter_queue(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert (code, out) == (0, "")
    assert err == f"sqsjkr: no messages in dead-letter queue {site.queue_name}-dlq\n"


def test_show_prints_the_whole_message_by_either_id(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = '{"command": ' + '"' + "y" * 150 + "\n"
    original = dead_letter(
        site, body, {"origin": {"DataType": "String", "StringValue": "scheduler"}}
    )
    [entry] = listed(capsys, conf)
    for wanted in (original, entry["message_id"]):
        code, out, err = sqsjkr(capsys, "dlq", "show", "-c", str(conf), wanted)
        assert (code, err) == (0, "")
        lines = out.splitlines()
        assert lines[:2] == [
            f"message id:    {entry['message_id']} (in the dead-letter queue)",
            f"original id:   {original}",
        ]
        assert lines[4].startswith("error:         body is not JSON: ")
        assert "  origin (String): scheduler" in lines
        assert f"  sqsjkr_message_id (String): {original}" in lines
        assert any(line.startswith("  SentTimestamp: ") for line in lines)
        assert lines[lines.index("body:") + 1 :] == ['{"command": "' + "y" * 150, ""]


def test_show_of_an_unknown_id_fails(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_letter(site, "not json")
    code, out, err = sqsjkr(capsys, "dlq", "show", "-c", str(conf), "no-such-id")
    assert (code, out) == (1, "")
    assert (
        err
        == f'sqsjkr: error: no message "no-such-id" in dead-letter queue {site.queue_name}-dlq\n'
    )


def test_redrive_sends_a_message_back_without_the_daemons_attributes(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    attributes = {
        "origin": {"DataType": "String", "StringValue": "scheduler"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    original = dead_letter(site, JOB, attributes)
    other = dead_letter(site, "[2]")
    [entry, _] = listed(capsys, conf)
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "-c", str(conf), original)
    assert code == 0, err
    [moved] = out.splitlines()
    assert moved.startswith(
        f"moved {entry['message_id']} (original {original}) to queue {site.queue_name} as "
    )
    [back] = visible(site, site.queue_url)
    assert back["MessageId"] == moved.rsplit(" ", 1)[1]
    assert back["Body"] == JOB
    assert back["MessageAttributes"] == {
        "origin": {"DataType": "String", "StringValue": "scheduler"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    # Only the named message left the dead-letter queue.
    assert [e["original_id"] for e in listed(capsys, conf)] == [other]


def test_redrive_all_moves_every_valid_message_and_warns_of_malformed_ones(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = [f'{{"command": "echo {i}"}}' for i in range(3)]
    for body in jobs:
        dead_letter(site, body)
    malformed = dead_letter(site, "not json")
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--all", "--yes", "-c", str(conf))
    assert code == 0, err
    assert len(out.splitlines()) == 3
    assert f"(original {malformed}) not moved: its body would be dead-lettered again" in err
    assert err.endswith("3 moved, 1 left as malformed, 0 failed\n")
    assert sorted(m["Body"] for m in visible(site, site.queue_url)) == jobs
    assert [e["original_id"] for e in listed(capsys, conf)] == [malformed]

    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--all", "--yes", "--force", "-c", str(conf))
    assert code == 0, err
    assert f"(original {malformed}) to queue {site.queue_name}" in out
    assert listed(capsys, conf) == []


def test_redrive_all_asks_first(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_letter(site, JOB)
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--all", "-c", str(conf))
    assert code == 1
    assert f"Send every message of dead-letter queue {site.queue_name}-dlq back" in err
    assert len(listed(capsys, conf)) == 1
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--all", "-c", str(conf))
    assert code == 0, err
    assert listed(capsys, conf) == []


def test_redrive_of_a_named_malformed_message_or_unknown_id_exits_1(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    malformed = dead_letter(site, "not json")
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "-c", str(conf), malformed, "no-such-id")
    assert (code, out) == (1, "")
    assert "pass --force to send it anyway" in err
    assert f'no message "no-such-id" in dead-letter queue {site.queue_name}-dlq' in err
    assert [e["original_id"] for e in listed(capsys, conf)] == [malformed]


def test_redrive_needs_ids_or_all(conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = sqsjkr(capsys, "dlq", "redrive", "-c", str(conf))
    assert code == 2
    assert "redrive takes message ids or --all" in err


def test_a_queue_without_a_dead_letter_queue_is_named(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    code, out, err = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert (code, out) == (1, "")
    assert err.startswith(
        f"sqsjkr: error: queue {aws.queue_name!r} has no RedrivePolicy, so no dead-letter queue"
    )


def test_redrive_to_a_fifo_queue_keeps_the_message_group(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"jobs-{uuid.uuid4().hex[:8]}"
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": "false"}
    dlq = aws.sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes=fifo)["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])
    policy = {"deadLetterTargetArn": arn["Attributes"]["QueueArn"], "maxReceiveCount": "5"}
    url = aws.sqs.create_queue(
        QueueName=f"{name}.fifo", Attributes={**fifo, "RedrivePolicy": json.dumps(policy)}
    )["QueueUrl"]
    site = replace(aws, queue_name=f"{name}.fifo", queue_url=url)
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(site, stats="stats_port = 0"))
    aws.sqs.send_message(
        QueueUrl=dlq, MessageBody=JOB, MessageGroupId="nightly", MessageDeduplicationId="d1"
    )
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--all", "--yes", "-c", str(conf))
    assert code == 0, err
    [back] = visible(site, url)
    assert (back["Body"], back["Attributes"]["MessageGroupId"]) == (JOB, "nightly")


#: Messages that the contract refuses for a field that becomes a DynamoDB key or reaches the job's
#: environment, and the reason each is dead-lettered with.
BROKEN_KEYS = [
    (
        {"command": "echo x", "event_id": "E" * 5000},
        'field "event_id": must be at most 2048 bytes, got 5000',
    ),
    ({"command": "true", "event_id": "ev\0x"}, 'field "event_id": must not contain a NUL'),
    ({"command": "true", "lock_id": "lk\0x"}, 'field "lock_id": must not contain a NUL'),
    (
        {"command": "true", "envs": {"A": "b"}, "life_time": "1" + "h" * 200_000},
        'field "life_time": invalid duration "1hhh',
    ),
]


def test_the_daemon_dead_letters_a_job_that_breaks_a_key_limit_with_the_reason(
    site: Aws,
    conf: Path,
    tmp_path: Path,
    start_daemon: Start,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before, a 5000-byte event_id failed its claim's write at every delivery (the daemon not
    ready, the message looping until SQS dead-lettered it with no reason), and a NUL made
    Popen raise in the worker at every delivery."""
    sent = {site.send(body): reason for body, reason in BROKEN_KEYS}
    daemon, port = run_daemon(start_daemon, tmp_path, site)
    for message_id in sent:
        daemon.wait_for_log(f"invalid message {message_id} moved to the dead-letter queue")
    site.send({"command": "true", "event_id": "fine"})
    wait_until(counted(port, succeeded=1), what="the valid job after them")
    assert http_get_json(port, "/readyz")["status"] == "ok"
    assert daemon.stop() == 0
    assert "Traceback" not in daemon.log and "unexpectedly" not in daemon.log
    errors = {entry["original_id"]: entry["error"] for entry in listed(capsys, conf)}
    assert errors.keys() == sent.keys()
    for message_id, reason in sent.items():
        assert errors[message_id].startswith(reason)
        assert len(errors[message_id]) < 1000  # the reason never repeats a whole value
    assert site.queue_counts() == (0, 0)


def test_redrive_refuses_a_message_that_breaks_a_key_limit_with_the_reason(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As SQS moves it after maxReceiveCount, with no reason of the daemon's."""
    body = json.dumps({"command": "echo x", "event_id": "E" * 5000})
    site.sqs.send_message(QueueUrl=dlq_url(site), MessageBody=body)
    [entry] = listed(capsys, conf)
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "-c", str(conf), entry["message_id"])
    assert (code, out) == (1, "")
    assert 'its body would be dead-lettered again (field "event_id": must be at most 2048' in err
    assert [e["message_id"] for e in listed(capsys, conf)] == [entry["message_id"]]
    assert site.queue_counts() == (0, 0)


#: A firing the Scheduler could not deliver: its target's input with the context attributes
#: substituted, and the attributes its dead-letter event carries (the Scheduler guide's
#: "Configuring a schedule's dead-letter queue").
SCHEDULE = "arn:aws:scheduler:us-east-1:123456789012:schedule/sqsjkr/sqsjkr-nightly"
FIRING_BODY = json.dumps(
    {
        "command": "echo hi",
        "event_id": "nightly",
        "origin": "schedule",
        "firing": {
            "time": "2030-01-15T01:00:00Z",
            "schedule": SCHEDULE,
            "expression": "cron(0 2 * * ? *)",
            "timezone": "Europe/Berlin",
        },
    }
)
SCHEDULER_EVENT = {
    name: {"DataType": "String", "StringValue": value}
    for name, value in {
        "ERROR_CODE": "AWS.SDK.SQS.AccessDenied",
        "ERROR_MESSAGE": "User is not authorized to perform: kms:GenerateDataKey",
        "EXHAUSTED_RETRY_CONDITION": "MaximumRetryAttempts",
        "RETRY_ATTEMPTS": "185",
        "SCHEDULE_ARN": SCHEDULE,
        "TARGET_ARN": "arn:aws:sqs:us-east-1:123456789012:sqsjkr",
    }.items()
}


def test_a_firing_the_scheduler_could_not_deliver_is_named_and_redriven_as_that_firing(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The schedules' own standard queue, as a FIFO queue's schedules have (read with --dlq).
    name = f"{site.queue_name}-scheduler-dlq"
    url = site.sqs.create_queue(QueueName=name)["QueueUrl"]
    sent = site.sqs.send_message(
        QueueUrl=url, MessageBody=FIRING_BODY, MessageAttributes=SCHEDULER_EVENT
    )["MessageId"]
    code, out, err = sqsjkr(capsys, "dlq", "list", "--json", "--dlq", name, "-c", str(conf))
    assert code == 0, err
    [entry] = json.loads(out)
    assert entry["undelivered"] == {
        "schedule": SCHEDULE,
        "firing_at": "2030-01-15T01:00:00Z",
        "error_code": "AWS.SDK.SQS.AccessDenied",
        "error_message": "User is not authorized to perform: kms:GenerateDataKey",
        "retry_attempts": "185",
        "exhausted_retry_condition": "MaximumRetryAttempts",
    }
    assert entry["error"].startswith(
        f"the scheduler could not deliver the 2030-01-15T01:00:00Z firing of {SCHEDULE} "
        "(AWS.SDK.SQS.AccessDenied: "
    )
    code, out, err = sqsjkr(capsys, "dlq", "list", "--dlq", name, "-c", str(conf))
    assert "the scheduler could not deliver" in out
    code, out, err = sqsjkr(capsys, "dlq", "show", "--dlq", name, "-c", str(conf), sent)
    assert code == 0, err
    assert "undelivered:   a firing EventBridge Scheduler could not put on the queue" in out
    assert f"  schedule:    {SCHEDULE}" in out
    assert "  firing:      2030-01-15T01:00:00Z" in out
    assert "  retries:     185 (MaximumRetryAttempts)" in out
    # Redriven to the job queue as that firing, without the Scheduler's attributes.
    code, out, err = sqsjkr(capsys, "dlq", "redrive", "--dlq", name, "-c", str(conf), sent)
    assert code == 0, err
    [back] = visible(site, site.queue_url)
    assert back.get("MessageAttributes", {}) == {}
    job = parse_job(back["Body"], message_id="m", sent_at=0)
    assert job.firing is not None and (job.firing.iso, job.firing.schedule) == (
        "2030-01-15T01:00:00Z",
        SCHEDULE,
    )
    assert visible(site, url) == []


# -- issue 30, item 20: a scheduler's error whole, and a page's read that does not wait ---------

SCHEDULER_ERROR = (
    "The scheduler's role cannot send to the queue: it is not authorized to perform "
    "sqs:SendMessage on resource arn:aws:sqs:us-east-1:123456789012:jobs because no policy "
    "allows it"
)


def test_list_shows_a_schedulers_error_whole(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    attributes = {
        "SCHEDULE_ARN": "arn:aws:scheduler:us-east-1:123456789012:schedule/g/sqsjkr-nightly",
        "ERROR_CODE": "AWS.SQS.AccessDenied",
        "ERROR_MESSAGE": SCHEDULER_ERROR,
    }
    site.sqs.send_message(
        QueueUrl=dlq_url(site),
        MessageBody=JOB,
        MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
        },
    )
    dead_letter(site, "x" * 200)  # the daemon's reason stays cut in the listing
    code, out, err = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert (code, err) == (0, "")
    scheduler_row, daemon_row = sorted(out.splitlines()[1:], key=lambda row: "AWS.SQS" not in row)
    assert (
        f"the scheduler could not deliver it: AWS.SQS.AccessDenied: {SCHEDULER_ERROR}"
        in scheduler_row
    )
    assert "body is not JSON: Expecting value at line 1 column 1" in daemon_row


def test_a_pages_read_of_the_letters_waits_for_no_empty_receive(site: Aws, conf: Path) -> None:
    fleet = Fleet(load(str(conf)))
    receives: list[int] = []

    def count(parsed: dict[str, Any], **_: Any) -> None:
        receives.append(len(parsed.get("Messages", [])))

    fleet.sqs.meta.events.register("after-call.sqs.ReceiveMessage", count)
    [empty] = fleet.dead_letters()
    assert (empty.count, receives) == (0, [])  # counted empty: no receive at all
    originals = {dead_letter(site, JOB) for _ in range(3)}
    fleet.cache.forget()
    [read] = fleet.dead_letters()
    assert {letter.original_id for letter in read.letters} == originals
    assert 0 not in receives  # no receive that found nothing (a 1 s wait each view)


def test_a_scheduler_letter_with_a_firing_past_the_dates_is_shown_with_why(
    site: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = json.loads(JOB)
    body["firing"] = {"time": "9999-12-31T23:59:59-01:00", "schedule": "sqsjkr-nightly"}
    attributes = {"SCHEDULE_ARN": "arn:aws:scheduler:us-east-1:1:schedule/g/sqsjkr-nightly"}
    attributes["ERROR_CODE"] = "AWS.SQS.AccessDenied"
    sent = site.sqs.send_message(
        QueueUrl=dlq_url(site),
        MessageBody=json.dumps(body),
        MessageAttributes={
            k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()
        },
    )["MessageId"]
    code, out, err = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert (code, err) == (0, "") and "the scheduler could not deliver it" in out
    code, out, err = sqsjkr(capsys, "dlq", "show", sent, "-c", str(conf))
    assert (code, err) == (0, "")
    assert '  firing:      unreadable: field "firing.time": is 9999-12-31T23:59:59-01:00' in out
