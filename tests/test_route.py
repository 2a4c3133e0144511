"""Routes: the store (in memory and in DynamoDB, in the item the pauses use), `sqsjkr route`, and a
real daemon on two queues that forwards a routed event's messages to its route's queue and runs them
only there, until the route is cleared; a forward that fails loses nothing.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from sqsjkr.backends.controls import CONTROLS_ID, CONTROLS_TYPE
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.members import DynamoRoster, Member
from sqsjkr.backends.pause import DynamoPauses, Pause
from sqsjkr.backends.routes import (
    DynamoRoutes,
    MemoryRoutes,
    Route,
    RouteStore,
    as_forwarded,
    job_id,
)
from sqsjkr.backends.sqs import Message, QueueForwarder
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import StoreError
from sqsjkr.fleet.audit import os_user
from sqsjkr.local.endpoint import create_queue

from .conftest import Aws, Daemon, Start, config_text, run_on, wait_until
from .faults import Fault, FaultProxy
from .test_audit import failing_audit as failing_audit  # noqa: F401 - the fixture
from .test_crash import lines
from .test_queues import get, second_queue
from .test_schedules import finished, queue_arn, sqsjkr, write_conf
from .test_schedules import group as group  # noqa: F401 - the fixture
from .test_trigger import BODY, received, schedule


def route_of(event_id: str, queue: str, reason: str = "") -> Route:
    return Route(event_id, queue, 1_750_000_000.0, reason, "alice@ops1")


@pytest.fixture(params=["memory", "dynamodb"])
def store(request: pytest.FixtureRequest) -> RouteStore:
    if request.param == "memory":
        return MemoryRoutes()
    aws: Aws = request.getfixturevalue("aws")
    return DynamoRoutes(aws.dynamodb, aws.table)


def test_a_route_store_keeps_replaces_and_clears_routes(store: RouteStore) -> None:
    assert store.routes() == [] and store.clear(["nightly"]) == []
    heavy, report = route_of("heavy", "slow"), route_of("report", "slow", "big")
    store.route(report)
    store.route(heavy)
    assert store.routes() == [heavy, report]
    moved = route_of("heavy", "slower")
    store.route(moved)
    assert store.routes() == [moved, report]
    assert store.clear(["report", "other"]) == [report]
    assert store.routes() == [moved]


def test_routes_share_the_pauses_item_and_resume_all_keeps_them(aws: Aws) -> None:
    routes, pauses = DynamoRoutes(aws.dynamodb, aws.table), DynamoPauses(aws.dynamodb, aws.table)
    pauses.pause(Pause(None, time.time(), None, "", "me"))
    routes.route(route_of("heavy", "slow"))
    item = aws.item(CONTROLS_ID, CONTROLS_TYPE) or {}
    assert sorted(item) == ["Id", "Pause:*", "Route:heavy", "Type"]
    assert json.loads(item["Route:heavy"]["S"])["queue"] == "slow"
    assert [p.event_id for p in pauses.resume(None)] == [None]
    assert routes.routes() == [route_of("heavy", "slow")]
    assert pauses.pauses() == []


def test_a_damaged_route_is_named_and_clear_removes_it(aws: Aws) -> None:
    routes = DynamoRoutes(aws.dynamodb, aws.table)
    routes.route(route_of("heavy", "slow"))
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key={"Id": {"S": CONTROLS_ID}, "Type": {"S": CONTROLS_TYPE}},
        UpdateExpression="SET #r = :bad",
        ExpressionAttributeNames={"#r": "Route:report"},
        ExpressionAttributeValues={":bad": {"S": '{"since": 1}'}},
    )
    with pytest.raises(StoreError, match="damaged attribute 'Route:report'.*--clear"):
        routes.routes()
    assert routes.clear(["report"]) == []
    assert routes.routes() == [route_of("heavy", "slow")]


def test_a_forward_to_a_fifo_queue_keeps_body_attributes_and_group(aws: Aws) -> None:
    name = f"{aws.queue_name}-slow.fifo"
    url = aws.sqs.create_queue(QueueName=name, Attributes={"FifoQueue": "true"})["QueueUrl"]
    attributes = {"sqsjkr_triggered_by": {"DataType": "String", "StringValue": "me@h"}}
    message = Message("m-1", "r", BODY, 0.0, attributes=attributes, group_id="backups")
    forwarder = QueueForwarder(aws.sqs, "123456789012")
    sent = forwarder.forward(message, name, "nightly")
    # A forward retried after a lost answer: kept once, by the source message's id.
    forwarder.forward(message, name, "nightly")
    [copy] = received(aws, url)
    assert (copy["MessageId"], copy["Body"]) == (sent, BODY)
    assert copy["Attributes"]["MessageGroupId"] == "backups"
    assert copy["MessageAttributes"]["sqsjkr_triggered_by"]["StringValue"] == "me@h"
    # From a standard queue, a message has no group: the event's.
    forwarder.forward(replace(message, message_id="m-2", group_id=None), name, "nightly")
    [copy] = received(aws, url)
    assert copy["Attributes"]["MessageGroupId"] == "nightly"


def two_queues(start: Start, tmp_path: Path, aws: Aws, slow: Aws) -> tuple[Daemon, int, str]:
    """A daemon on aws's queue and slow's, reading pauses and routes every second; its stats
    port and its config."""
    conf = tmp_path / "config.toml"
    text = config_text(aws, stats="stats_port = 0", pause_refresh="1s")
    text += f'\n[[queues]]\nname = "{slow.queue_name}"\nmax_concurrent_num = 1\n'
    conf.write_text(text + "wait_time_seconds = 1\n")
    daemon = start("run", "-c", str(conf))
    return daemon, daemon.stats_port, str(conf)


def ran_on(port: int, queue: str) -> int:
    figures = json.loads(get(port, "/stats/metrics/v2"))["queues"][queue]
    return int(figures["invocations"]["succeeded"])


def test_a_routed_event_runs_only_on_its_new_queue_until_cleared(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = second_queue(aws)
    daemon, port, conf = two_queues(start_daemon, tmp_path, aws, slow)
    code, out, err = sqsjkr(
        capsys, "route", "heavy", "--queue", slow.queue_name, "--reason", "too big", "-c", conf
    )
    assert code == 0, err
    assert out.startswith(f'routed event "heavy" to queue {slow.queue_name} since ')
    assert out.endswith(f", by {os_user()}: too big\n")
    assert "within 1.0s ([kicker] pause_refresh)" in err
    sent = aws.send({"command": "echo heavy >> ran", "event_id": "heavy"})
    aws.send({"command": "echo light >> ran", "event_id": "light"})
    wait_until(lambda: ran_on(port, slow.queue_name) == 1, what="the heavy job on the slow queue")
    wait_until(lambda: ran_on(port, aws.queue_name) == 1, what="the light job where it was sent")
    daemon.wait_for_log(
        f'message {sent} of event "heavy" forwarded from queue {aws.queue_name} to queue '
        f"{slow.queue_name} as message "
    )
    assert f"routed by {os_user()} (too big)" in daemon.log
    wait_until(lambda: aws.queue_counts() == (0, 0), what="the forwarded message deleted")
    # A message that arrives on the routed-to queue runs there.
    slow.send({"command": "echo heavy >> ran", "event_id": "heavy"})
    wait_until(lambda: ran_on(port, slow.queue_name) == 2, what="the heavy job sent to slow")

    code, out, err = sqsjkr(capsys, "route", "-c", conf)
    assert code == 0 and out.split()[:7] == [
        "EVENT",
        "QUEUE",
        "SINCE",
        "BY",
        "REASON",
        "heavy",
        slow.queue_name,
    ]
    code, out, err = sqsjkr(capsys, "route", "heavy", "--clear", "--reason", "fixed", "-c", conf)
    assert code == 0, err
    assert out.startswith(f'cleared the route of event "heavy" to queue {slow.queue_name} ')
    assert err == (
        "sqsjkr: daemons honour it within 1.0s ([kicker] pause_refresh) of their next messages; "
        "jobs already running go on\nsqsjkr: until then, a daemon that has not read the clear may "
        "still forward the event's messages to the queue it was routed to: wait that long before "
        "a `sqsjkr dlq redrive` of them\n"
    )
    # Honoured within pause_refresh (1s here) of the next message: this one comes after it.
    time.sleep(1.5)
    aws.send({"command": "echo heavy >> ran", "event_id": "heavy"})
    wait_until(lambda: ran_on(port, aws.queue_name) == 2, what="the heavy job where it was sent")
    assert ran_on(port, slow.queue_name) == 2
    assert daemon.log.count("forwarded from queue") == 1
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert [(i["action"], i["target"], i["reason"], i["detail"]) for i in json.loads(out)] == [
        ("route", "heavy", "fixed", "cleared"),
        ("route", "heavy", "too big", f"to queue {slow.queue_name}"),
    ]
    assert daemon.stop() == 0
    # A stopped daemon serves nothing.
    code, out, err = sqsjkr(capsys, "route", "heavy", "--queue", slow.queue_name, "-c", conf)
    assert (code, out) == (1, "")
    assert f'no live daemon serves queue "{slow.queue_name}" (no daemon is live;' in err


def test_a_message_whose_forward_fails_stays_on_its_queue_unrun(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    moto_endpoint: str,
    aws_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slow = second_queue(aws)
    DynamoRoutes(aws.dynamodb, aws.table).route(route_of("heavy", slow.queue_name))
    with FaultProxy(moto_endpoint) as proxy:
        proxy.add(Fault(lambda call: call.action == "SendMessage", error=(500, "InternalError")))
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port, _ = two_queues(start_daemon, tmp_path, aws, slow)
        sent = aws.send({"command": "echo heavy >> ran", "event_id": "heavy"})
        daemon.wait_for_log(f'message {sent} of event "heavy" could not be forwarded from queue')
        assert f"it stays on queue {aws.queue_name} for a later try" in daemon.log
        # Not deleted, not run: in flight until its visibility timeout ends.
        assert aws.queue_counts() == (0, 1)
        assert slow.queue_counts() == (0, 0)
        assert not (tmp_path / "ran").exists()
        assert daemon.stop() == 0


def test_route_refuses_a_queue_that_does_not_exist_or_is_the_route_already(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = write_conf(tmp_path, aws)
    code, out, err = sqsjkr(capsys, "route", "heavy", "--queue", "no-such-queue", "-c", conf)
    assert (code, out) == (1, "")
    assert err == (
        'sqsjkr: error: queue "no-such-queue" does not exist in account 123456789012 '
        "(us-east-1): not routed\n"
    )
    assert DynamoRoutes(aws.dynamodb, aws.table).routes() == []
    forced = ("route", "heavy", "--queue", aws.queue_name, "--force", "-c", conf)
    assert sqsjkr(capsys, *forced)[0] == 0
    code, out, err = sqsjkr(capsys, *forced)
    assert code == 1 and f'event "heavy" is routed to queue {aws.queue_name} already' in err
    code, out, err = sqsjkr(capsys, "route", "other", "--clear", "-c", conf)
    assert code == 1 and 'event "other" has no route: nothing cleared' in err
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert [i["target"] for i in json.loads(out)] == ["heavy"], "only what was done is audited"
    for wrong in (["heavy"], ["heavy", "--queue", "q", "--clear"], ["--queue", "q"]):
        assert sqsjkr(capsys, "route", *wrong, "-c", conf)[0] == 2
    assert sqsjkr(capsys, "route", "heavy", "--clear", "--force", "-c", conf)[0] == 2


def test_route_refuses_a_dead_letter_queue_or_one_no_live_daemon_serves_unless_forced(
    tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = f"{aws.queue_name}-r"
    create_queue(aws.sqs, jobs, dead_letter=True)  # and its dead-letter queue, jobs-...-r-dlq
    aws.sqs.create_queue(QueueName=f"{aws.queue_name}_deadletter")
    conf = write_conf(tmp_path, replace(aws, queue_name=jobs))
    # A daemon's item, as `sqsjkr daemons` lists it: alive, serving the config's queue.
    now = time.time()
    member = Member("ops1:1:a", "ops1", 1, "1", ((jobs, 4),), now, "unix:/s", 60.0, now)
    DynamoRoster(aws.dynamodb, aws.table).write(member)
    refusals = {
        f"{jobs}-dlq": f'queue "{jobs}-dlq" is the dead-letter queue of queue "{jobs}": no daemon '
        "runs what lands there",
        f"{aws.queue_name}_deadletter": f'queue "{aws.queue_name}_deadletter" is named as a '
        "dead-letter queue",
        aws.queue_name: f'no live daemon serves queue "{aws.queue_name}" (live daemons serve '
        f"{jobs}; `sqsjkr daemons` lists them): its jobs would wait there unrun",
    }
    for queue, refusal in refusals.items():
        code, out, err = sqsjkr(capsys, "route", "heavy", "--queue", queue, "-c", conf)
        assert (code, out) == (1, ""), queue
        assert err == f"sqsjkr: error: {refusal}: not routed (--force routes it all the same)\n"
    assert DynamoRoutes(aws.dynamodb, aws.table).routes() == []
    code, out, err = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert json.loads(out) == [], "nothing done, nothing audited"
    code, out, err = sqsjkr(
        capsys, "route", "heavy", "--queue", f"{jobs}-dlq", "--force", "-c", conf
    )
    assert code == 0, err
    assert out.splitlines()[1] == f"  warning: {refusals[f'{jobs}-dlq']}"
    assert [r.queue for r in DynamoRoutes(aws.dynamodb, aws.table).routes()] == [f"{jobs}-dlq"]
    code, out, _ = sqsjkr(capsys, "audit", "--json", "-c", conf)
    assert json.loads(out)[0]["detail"] == f"forced: to queue {jobs}-dlq"
    # The queue a live daemon serves is taken without --force.
    code, out, err = sqsjkr(capsys, "route", "heavy", "--queue", jobs, "-c", conf)
    assert code == 0, err
    assert "until then, a daemon that has not read the route runs the event's messages" in err


def test_a_route_whose_audit_item_cannot_be_written_is_refused(
    tmp_path: Path,
    aws: Aws,
    capsys: pytest.CaptureFixture[str],
    failing_audit: FaultProxy,  # noqa: F811
) -> None:
    conf = write_conf(tmp_path, aws)
    route = ("route", "heavy", "--queue", aws.queue_name, "--force", "-c", conf)
    code, out, err = sqsjkr(capsys, *route)
    assert (code, out) == (1, "")
    assert err.startswith('sqsjkr: error: route "heavy" not done: its audit item could not')
    assert DynamoRoutes(aws.dynamodb, aws.table).routes() == []


def test_schedules_status_and_trigger_follow_a_route(
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    slow = second_queue(aws)
    schedule(group, "sqsjkr-db-backup", queue_arn(aws), BODY)
    DynamoRoutes(aws.dynamodb, aws.table).route(route_of("nightly", slow.queue_name, "big"))
    conf = write_conf(tmp_path, aws, group=group)
    code, out, err = sqsjkr(capsys, "schedules", "-c", conf)
    assert code == 0 and f"ROUTED to queue {slow.queue_name}" in out
    code, out, _ = sqsjkr(capsys, "schedules", "--json", "-c", conf)
    assert json.loads(out)[0]["route"]["queue"] == slow.queue_name
    # The event's trigger goes where its jobs run now.
    code, out, err = sqsjkr(capsys, "trigger", "nightly", "-c", conf)
    assert code == 0, err
    assert (
        f"sent to queue {slow.queue_name}: the event is routed there from {aws.queue_name}" in err
    )
    assert [m["MessageId"] for m in received(aws, slow.queue_url)] == [out.strip()]
    finished(aws, "nightly", RunOutcome.SUCCEEDED, time.time() - 60)
    code, out, _ = sqsjkr(capsys, "status", "-c", conf)
    routed_line, _, event_line = out.splitlines()
    assert routed_line.startswith(f'ROUTED event "nightly" to queue {slow.queue_name} since ')
    assert routed_line.endswith(", by alice@ops1: big")
    assert f"  routed to queue {slow.queue_name}" in event_line
    code, out, _ = sqsjkr(capsys, "status", "--json", "-c", conf)
    assert json.loads(out)["routes"][0]["queue"] == slow.queue_name


SCHEDULE_KEY = "arn:aws:scheduler:us-east-1:123456789012:schedule/jobs/n@2026-01-15T02:00:00Z"


def test_a_copy_of_a_copy_keeps_the_id_of_the_first_message() -> None:
    # SQS's message ids are UUIDs: only such a one is honoured (never a firing's key).
    m1, m2, m3 = (str(uuid.uuid4()) for _ in range(3))
    first = Message(m1, "r", BODY, 0.0)
    copy = replace(as_forwarded(first), message_id=m2)
    again = replace(as_forwarded(copy), message_id=m3)
    assert [job_id(m) for m in (first, copy, again)] == [m1, m1, m1]
    assert again.attributes == {"sqsjkr_forwarded_from": {"DataType": "String", "StringValue": m1}}
    key = {"DataType": "String", "StringValue": f"{SCHEDULE_KEY}"}
    assert job_id(replace(first, attributes={"sqsjkr_forwarded_from": key})) == m1
    bad = {"sqsjkr_forwarded_from": {"DataType": "String", "StringValue": "two words"}}
    assert job_id(replace(first, attributes=bad)) == m1
    # SQS takes ten attributes: a message with ten is forwarded as it is.
    full = {f"a{i}": {"DataType": "String", "StringValue": "x"} for i in range(10)}
    assert as_forwarded(replace(first, attributes=full)).attributes == full


def test_a_daemon_killed_between_a_forward_and_its_delete_leaves_a_job_that_runs_once(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    moto_endpoint: str,
    aws_env: dict[str, str],
) -> None:
    slow = second_queue(aws)
    DynamoRoutes(aws.dynamodb, aws.table).route(route_of("heavy", slow.queue_name))
    # Receives only from aws's queue, and its original comes back 2 s after its receive.
    text = config_text(aws, stats="stats_port = 0", pause_refresh="1s")
    text = text.replace(
        "wait_time_seconds = 1\n", "wait_time_seconds = 1\nvisibility_timeout = 2\n"
    )
    text = text.replace("[lock]\n", '[lock]\nlease = "1s"\n')
    with FaultProxy(moto_endpoint) as proxy:
        # The copy is sent, and the daemon dies before the answer, so before its delete.
        to_slow = Fault(
            lambda call: (
                call.action == "SendMessage"
                and str(call.json.get("QueueUrl", "")).endswith("/" + slow.queue_name)
            ),
            hold=30,
        )
        proxy.add(to_slow)
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        first = run_on(start_daemon, tmp_path, text)
        sent = aws.send({"command": "echo heavy >> ran", "event_id": "heavy"})
        wait_until(lambda: slow.queue_counts() == (1, 0), what="the copy on the slow queue")
        first.kill()  # SIGKILL
        assert aws.queue_counts() == (0, 1), "the original is not deleted"
        assert "forwarded from queue" not in first.log
    aws_env["AWS_ENDPOINT_URL"] = moto_endpoint
    second, port, _ = two_queues(start_daemon, tmp_path, aws, slow)
    # The copy runs; the original comes back, is forwarded again, and that copy is a duplicate.
    second.wait_for_log(f'message {sent} of event "heavy" forwarded from queue', timeout=30)
    second.wait_for_log("duplicate message deleted: its job has run", timeout=30)
    wait_until(
        lambda: aws.queue_counts() == (0, 0) and slow.queue_counts() == (0, 0),
        what="both queues empty",
    )
    assert lines(tmp_path / "ran") == ["heavy"]
    [record] = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=3600).runs("heavy", 10)
    assert record.message_id == sent, "the job goes by the first message's id"
    assert second.stop() == 0
