"""FIFO queues: the daemon's group order (unit), and FIFO queues as a daemon's source, their
dead-letter queue and `sqsjkr send`'s FIFO options against moto over HTTP."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import boto3
import pytest

from sqsjkr.backends.sqs import Message
from sqsjkr.commands.cli import main
from sqsjkr.daemon.fifo import GroupOrder, behind_held

from .conftest import (
    REGION,
    Aws,
    Daemon,
    Start,
    config_text,
    counted,
    run_on,
    sqsjkr,
    wait_until,
)


@dataclass(frozen=True)
class Entry:
    message: Message


def entry(message_id: str, group_id: str | None) -> Entry:
    return Entry(Message(message_id, f"rh-{message_id}", "{}", 0.0, group_id=group_id))


def ids(entries: list[Entry]) -> list[str]:
    return [e.message.message_id for e in entries]


# -- GroupOrder -----------------------------------------------------------------------------------


def test_one_message_of_a_group_starts_and_the_rest_wait_in_order() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, b1, a2, a3 = entry("a1", "A"), entry("b1", "B"), entry("a2", "A"), entry("a3", "A")
    assert order.admit([a1, b1, a2, a3]) == [a1, b1]
    assert order.waiting() == 2
    assert order.finished(a1) is a2
    assert order.finished(a2) is a3
    assert order.finished(a3) is None
    assert order.waiting() == 0


def test_messages_without_a_group_always_start() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    batch = [entry("m1", None), entry("m2", None)]
    assert order.admit(batch) == batch
    assert order.finished(batch[0]) is None
    assert order.given_back(batch[1]) == []


def test_a_later_receive_waits_behind_the_message_the_daemon_holds() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    assert order.admit([a1]) == [a1]
    assert order.admit([a2]) == []
    assert order.finished(a1) is a2


def test_a_group_is_free_again_once_its_last_message_ends() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    order.admit([a1])
    assert order.finished(a1) is None
    assert order.admit([a2]) == [a2]


def test_a_message_given_back_takes_the_messages_behind_it_back_too() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, a3, b1 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A"), entry("b1", "B")
    order.admit([a1, a2, a3, b1])
    assert ids(order.given_back(a1)) == ["a2", "a3"]
    assert order.waiting() == 0
    # They never start here: the group is forgotten, and what comes back later starts afresh.
    assert order.finished(a1) is None
    assert order.admit([entry("a1", "A")]) != []


def test_a_message_given_back_after_the_first_of_its_group_ended() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, a3 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A")
    order.admit([a1, a2, a3])
    assert order.finished(a1) is a2
    assert order.given_back(a2) == [a3]


def test_only_the_holder_of_a_group_releases_it() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    order.admit([a1, a2])
    # a2 has not started: its end (it cannot have one) moves nothing.
    assert order.finished(a2) is None
    assert order.given_back(a2) == []
    assert order.finished(a1) is a2


def test_drain_hands_every_waiting_message_back() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, b1, b2 = entry("a1", "A"), entry("a2", "A"), entry("b1", "B"), entry("b2", "B")
    order.admit([a1, a2, b1, b2])
    assert sorted(ids(order.drain())) == ["a2", "b2"]
    assert order.waiting() == 0
    assert order.finished(a1) is None


def test_messages_behind_a_held_one_of_their_group_are_given_back() -> None:
    a1, a2, a3 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A")
    b1, c1 = entry("b1", "B"), entry("c1", None)
    keep, give_back = behind_held([a1, a2, b1, a3, c1], held={"a2", "c1"})
    # a1 came before the held a2 and may run; a3 must not run before a2.
    assert (ids(keep), ids(give_back)) == (["a1", "b1"], ["a3"])


# -- FIFO queues on moto --------------------------------------------------------------------------


@dataclass(frozen=True)
class Fifo:
    """A FIFO job queue (NAME.fifo) with a FIFO dead-letter queue (NAME-dlq.fifo)."""

    site: Aws  # the conftest Aws, pointing at the FIFO queue
    dlq_url: str

    def send(self, body: str | dict[str, Any], group: str, dedupe: str | None = None) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        response = self.site.sqs.send_message(
            QueueUrl=self.site.queue_url,
            MessageBody=text,
            MessageGroupId=group,
            MessageDeduplicationId=dedupe or uuid.uuid4().hex,
        )
        return str(response["MessageId"])


def make_fifo(aws: Aws, *, content_dedupe: bool = False, max_receive_count: int = 5) -> Fifo:
    name = f"{aws.queue_name}-f"
    fifo = {"FifoQueue": "true", "ContentBasedDeduplication": str(content_dedupe).lower()}
    dlq_url = aws.sqs.create_queue(QueueName=f"{name}-dlq.fifo", Attributes=fifo)["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    policy = {
        "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
        "maxReceiveCount": str(max_receive_count),
    }
    url = aws.sqs.create_queue(
        QueueName=f"{name}.fifo", Attributes={**fifo, "RedrivePolicy": json.dumps(policy)}
    )["QueueUrl"]
    return Fifo(replace(aws, queue_name=f"{name}.fifo", queue_url=url), dlq_url)


@pytest.fixture
def fifo(aws: Aws) -> Fifo:
    return make_fifo(aws)


def start_fifo_daemon(
    start: Start, tmp_path: Path, fifo: Fifo, **kicker: Any
) -> tuple[Daemon, int]:
    text = config_text(fifo.site, stats="stats_port = 0", **kicker)
    daemon = run_on(start, tmp_path, text, "--log-level", "debug")
    return daemon, daemon.stats_port


def hold_lock(aws: Aws, lock_id: str) -> None:
    """Hold lock_id as a Go daemon would: an item with an EventId and no lease, held until
    deleted."""
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": lock_id}, "Type": {"S": "lock"}, "EventId": {"S": "elsewhere"}},
    )


def free_lock(aws: Aws, lock_id: str) -> None:
    aws.dynamodb.delete_item(TableName=aws.table, Key={"Id": {"S": lock_id}, "Type": {"S": "lock"}})


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_fifo_queue_is_a_daemons_source(fifo: Fifo, start_daemon: Start, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for group in ("A", "B"):
        fifo.send({"command": f"echo {group} >> {out}", "event_id": f"job-{group}"}, group)
    daemon, port = start_fifo_daemon(start_daemon, tmp_path, fifo)
    wait_until(counted(port, succeeded=2), what="both jobs")
    assert sorted(lines(out)) == ["A", "B"]
    wait_until(lambda: fifo.site.queue_counts() == (0, 0), what="both messages deleted")
    assert daemon.stop() == 0


def two_empty_receives(daemon: Daemon) -> None:
    """Wait until the daemon has made two whole receives from now on that brought nothing."""
    seen = daemon.log.count("received 0 message(s)")
    wait_until(lambda: daemon.log.count("received 0 message(s)") >= seen + 2, what="receives")


def test_a_group_waits_behind_its_message_that_waits_for_a_lock(
    fifo: Fifo, start_daemon: Start, tmp_path: Path
) -> None:
    """The later message of the group is held back by SQS while the first is in flight waiting
    for a lock; once the lock is free both run, in order, and nothing deadlocks."""
    out = tmp_path / "out"
    hold_lock(fifo.site, "L")
    daemon, port = start_fifo_daemon(start_daemon, tmp_path, fifo)
    fifo.send({"command": f"echo first >> {out}", "lock_id": "L"}, "G")
    daemon.wait_for_log('waits for lock "L"')
    fifo.send({"command": f"echo second >> {out}"}, "G")
    # Two whole receives after the send, neither of which brought the second message.
    two_empty_receives(daemon)
    assert lines(out) == []
    assert fifo.site.queue_counts() == (1, 1)  # the second waits, visible, behind the first
    free_lock(fifo.site, "L")
    wait_until(counted(port, succeeded=2), what="both jobs")
    assert lines(out) == ["first", "second"]
    assert daemon.stop() == 0


def test_a_group_received_in_one_batch_runs_in_order(
    fifo: Fifo, start_daemon: Start, tmp_path: Path
) -> None:
    """One receive brings both messages of the group: the second waits inside the daemon behind
    the first, which waits for a lock."""
    out = tmp_path / "out"
    hold_lock(fifo.site, "L")
    fifo.send({"command": f"echo first >> {out}", "lock_id": "L"}, "G")
    fifo.send({"command": f"echo second >> {out}"}, "G")
    daemon, port = start_fifo_daemon(start_daemon, tmp_path, fifo)
    daemon.wait_for_log("received 2 message(s)")
    daemon.wait_for_log('waits for lock "L"')
    two_empty_receives(daemon)
    assert lines(out) == []
    free_lock(fifo.site, "L")
    wait_until(counted(port, succeeded=2), what="both jobs")
    assert lines(out) == ["first", "second"]
    assert daemon.stop() == 0


def test_a_group_waits_behind_its_message_hidden_for_a_retry(
    fifo: Fifo, start_daemon: Start, tmp_path: Path
) -> None:
    """The first message fails and is hidden for its retry delay: the second, received with it,
    goes back to the queue behind it and runs only after the retry."""
    out, marker = tmp_path / "out", tmp_path / "failed-once"
    first = f"if [ -e {marker} ]; then echo first >> {out}; else touch {marker}; exit 1; fi"
    fifo.send({"command": first, "retries": 1, "retry_delay": "1s"}, "G")
    fifo.send({"command": f"echo second >> {out}"}, "G")
    daemon, port = start_fifo_daemon(start_daemon, tmp_path, fifo)
    daemon.wait_for_log("received 2 message(s)")
    wait_until(counted(port, errored=1, succeeded=2), what="the retry and the second job")
    assert lines(out) == ["first", "second"]
    assert daemon.stop() == 0


def test_a_malformed_message_goes_to_the_fifo_dead_letter_queue_in_its_group(
    fifo: Fifo, start_daemon: Start, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    bad = fifo.send("not json", "G")
    fifo.send({"command": f"echo after >> {out}"}, "G")
    daemon, port = start_fifo_daemon(start_daemon, tmp_path, fifo)
    wait_until(counted(port, failed=1, succeeded=1), what="the bad and the good message")
    assert lines(out) == ["after"]
    [dead] = fifo.site.sqs.receive_message(
        QueueUrl=fifo.dlq_url,
        MaxNumberOfMessages=10,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
    )["Messages"]
    assert dead["Body"] == "not json"
    assert dead["Attributes"]["MessageGroupId"] == "G"
    assert dead["Attributes"]["MessageDeduplicationId"] == bad
    assert dead["MessageAttributes"]["sqsjkr_message_id"]["StringValue"] == bad
    assert daemon.stop() == 0
    fifo.site.sqs.change_message_visibility(
        QueueUrl=fifo.dlq_url, ReceiptHandle=dead["ReceiptHandle"], VisibilityTimeout=0
    )
    # Sent back into its group, deduplicated by its original id.
    conf = tmp_path / "dlq.toml"
    conf.write_text(config_text(fifo.site, stats="stats_port = 0"))
    with pytest.raises(SystemExit) as exited:
        main(["dlq", "redrive", "--all", "--yes", "--force", "-c", str(conf)])
    assert exited.value.code == 0
    [back] = fifo.site.sqs.receive_message(QueueUrl=fifo.site.queue_url, AttributeNames=["All"])[
        "Messages"
    ]
    assert back["Body"] == "not json"
    assert back["Attributes"]["MessageGroupId"] == "G"
    assert back["Attributes"]["MessageDeduplicationId"] == bad


# -- sqsjkr send ----------------------------------------------------------------------------------

ROLE_ARN = "arn:aws:iam::123456789012:role/sqsjkr-scheduler"


def conf_of(site: Aws, tmp_path: Path, schedule_group: str | None = None) -> str:
    path = tmp_path / f"config-{uuid.uuid4().hex[:6]}.toml"
    text = config_text(site, stats="stats_port = 0")
    if schedule_group is not None:
        text += f'\n[schedule]\nrole_arn = "{ROLE_ARN}"\ngroup = "{schedule_group}"\n'
    path.write_text(text)
    return str(path)


def received(site: Aws) -> list[dict[str, Any]]:
    return list(
        site.sqs.receive_message(
            QueueUrl=site.queue_url, MaxNumberOfMessages=10, AttributeNames=["All"]
        ).get("Messages", [])
    )


def test_send_to_a_fifo_queue_groups_by_event_id(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = make_fifo(aws, content_dedupe=True).site
    conf = conf_of(site, tmp_path)
    sent = [
        sqsjkr(capsys, "send", "-c", conf, "--command", "a", "--event-id", "nightly report"),
        sqsjkr(capsys, "send", "-c", conf, "--command", "b"),
        sqsjkr(capsys, "send", "-c", conf, "--command", "c", "--group-id", "tenant-7"),
    ]
    assert [code for code, _, _ in sent] == [0, 0, 0], sent
    groups = {
        json.loads(m["Body"])["command"]: m["Attributes"]["MessageGroupId"] for m in received(site)
    }
    # A space is no character of a group id: replaced.
    assert groups == {"a": "nightly_report", "b": "sqsjkr", "c": "tenant-7"}


def test_send_dedupe_id_is_the_messages_deduplication_id(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = make_fifo(aws).site
    conf = conf_of(site, tmp_path)
    for _ in range(2):
        code, _, err = sqsjkr(capsys, "send", "-c", conf, "--command", "a", "--dedupe-id", "run-1")
        assert code == 0, err
    [message] = received(site)  # SQS dropped the second send
    assert message["Attributes"]["MessageDeduplicationId"] == "run-1"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            [],
            "is a FIFO queue without content-based deduplication: give --dedupe-id ID",
        ),
        (
            ["--dedupe-id", "d", "--delay", "5"],
            "--delay: queue {queue} is a FIFO queue, and SQS takes no per-message delay",
        ),
        (["--group-id", "a b"], '--group-id: "a b" is not a valid FIFO id'),
        (["--dedupe-id", "x" * 129], "--dedupe-id: "),
    ],
)
def test_send_refuses_what_a_fifo_queue_cannot_take(
    aws: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    error: str,
) -> None:
    site = make_fifo(aws).site
    code, out, err = sqsjkr(capsys, "send", "-c", conf_of(site, tmp_path), "--command", "a", *args)
    assert (code, out) == (2, "")
    assert error.format(queue=site.queue_name) in err
    assert site.queue_counts() == (0, 0)


def test_send_refuses_fifo_options_for_a_standard_queue(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for option in ("--group-id", "--dedupe-id"):
        code, _, err = sqsjkr(
            capsys, "send", "-c", conf_of(aws, tmp_path), "--command", "a", option, "g"
        )
        assert code == 2
        assert f"{option} is for FIFO queues; queue {aws.queue_name} is a standard queue" in err
    assert aws.queue_counts() == (0, 0)


def test_send_at_to_a_fifo_queue_sets_the_schedules_message_group(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = boto3.client("scheduler", region_name=REGION)
    group = f"sqsjkr-{uuid.uuid4().hex[:8]}"
    client.create_schedule_group(Name=group)
    site = make_fifo(aws, content_dedupe=True).site
    conf = conf_of(site, tmp_path, group)
    code, out, err = sqsjkr(
        capsys, "send", "-c", conf, "--command", "a", "--event-id", "report", "--in", "2h"
    )
    assert code == 0, err
    schedule = client.get_schedule(GroupName=group, Name=out.strip())
    assert schedule["Target"]["SqsParameters"] == {"MessageGroupId": "report"}
    code, _, err = sqsjkr(
        capsys, "send", "-c", conf, "--command", "a", "--in", "2h", "--dedupe-id", "d"
    )
    assert code == 2
    assert "--dedupe-id is for jobs sent now" in err
    # Without content-based deduplication the scheduler cannot send to it: refused.
    plain = make_fifo(replace(aws, queue_name=f"{aws.queue_name}-p")).site
    code, _, err = sqsjkr(
        capsys, "send", "-c", conf_of(plain, tmp_path, group), "--command", "a", "--in", "2h"
    )
    assert code == 2
    assert "EventBridge Scheduler can only send to a FIFO queue that has it" in err


def test_send_warns_when_retries_can_reach_the_dead_letter_queue(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    site = make_fifo(aws, content_dedupe=True, max_receive_count=3).site
    conf = conf_of(site, tmp_path)
    code, _, err = sqsjkr(capsys, "send", "-c", conf, "--command", "a", "--retries", "2")
    assert code == 0, err
    assert (
        f"warning: queue {site.queue_name} moves a message to its dead-letter queue after 3 "
        "receives (RedrivePolicy maxReceiveCount), and a job with 2 retries"
    ) in err
    code, _, err = sqsjkr(capsys, "send", "-c", conf, "--command", "b", "--retries", "1")
    assert (code, err) == (0, "")
