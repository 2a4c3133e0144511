"""DynamoLocker, DynamoDedupe, SqsSource and the AWS helpers against a real moto server over HTTP."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from sqsjkr.aws import is_transient, make_client, make_session
from sqsjkr.dedupe import DynamoDedupe
from sqsjkr.errors import ResourceMissingError
from sqsjkr.local import LOCAL_ACCOUNT
from sqsjkr.locks import DynamoLocker
from sqsjkr.sqs import Message, SqsSource, resolve_queue_url

from .conftest import REGION, Aws, free_port, wait_until


def client(service: str) -> Any:
    return make_client(make_session(region=REGION), service)


# --- DynamoLocker ------------------------------------------------------------------------------


def test_try_lock_writes_the_go_lock_item(aws: Aws) -> None:
    locker = DynamoLocker(client("dynamodb"), aws.table)
    assert locker.try_lock("report", "ev-1") is True
    assert aws.item("report", "lock") == {
        "Id": {"S": "report"},
        "Type": {"S": "lock"},
        "EventId": {"S": "ev-1"},
    }


def test_second_try_lock_fails_and_keeps_the_holder(aws: Aws) -> None:
    locker = DynamoLocker(client("dynamodb"), aws.table)
    assert locker.try_lock("report", "ev-1") is True
    assert locker.try_lock("report", "ev-2") is False
    assert aws.item("report", "lock") == {
        "Id": {"S": "report"},
        "Type": {"S": "lock"},
        "EventId": {"S": "ev-1"},
    }


def test_unlock_deletes_the_item_and_frees_the_lock(aws: Aws) -> None:
    locker = DynamoLocker(client("dynamodb"), aws.table)
    assert locker.try_lock("report", "ev-1")
    locker.unlock("report")
    assert aws.item("report", "lock") is None
    assert locker.try_lock("report", "ev-2") is True
    assert aws.item("report", "lock")["EventId"] == {"S": "ev-2"}  # type: ignore[index]


def test_lock_held_by_another_daemon_blocks(aws: Aws) -> None:
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "report"}, "Type": {"S": "lock"}, "EventId": {"S": "go-daemon"}},
    )
    locker = DynamoLocker(client("dynamodb"), aws.table)
    assert locker.try_lock("report", "ev-1") is False
    assert aws.item("report", "lock")["EventId"] == {"S": "go-daemon"}  # type: ignore[index]


def test_lock_ids_are_independent(aws: Aws) -> None:
    locker = DynamoLocker(client("dynamodb"), aws.table)
    assert locker.try_lock("a", "ev-a") is True
    assert locker.try_lock("b", "ev-b") is True
    locker.unlock("a")
    assert aws.item("a", "lock") is None
    assert aws.item("b", "lock") == {
        "Id": {"S": "b"},
        "Type": {"S": "lock"},
        "EventId": {"S": "ev-b"},
    }


def test_lock_and_throttle_items_with_the_same_id_do_not_collide(aws: Aws) -> None:
    dynamodb = client("dynamodb")
    assert DynamoDedupe(dynamodb, aws.table, retention_seconds=60).claim("same-id") is True
    assert DynamoLocker(dynamodb, aws.table).try_lock("same-id", "ev") is True


# --- DynamoDedupe ------------------------------------------------------------------------------


def test_claim_writes_the_go_throttle_item(aws: Aws) -> None:
    dedupe = DynamoDedupe(
        client("dynamodb"), aws.table, retention_seconds=345_600, clock=lambda: 1_700_000_000.75
    )
    assert dedupe.claim("msg-1") is True
    assert aws.item("msg-1", "throttle") == {
        "Id": {"S": "msg-1"},
        "Type": {"S": "throttle"},
        "Expired": {"N": str(1_700_000_000 + 345_600)},
    }


def test_second_claim_is_a_duplicate(aws: Aws) -> None:
    times = iter([1_000.0, 2_000.0])
    dedupe = DynamoDedupe(
        client("dynamodb"), aws.table, retention_seconds=60, clock=lambda: next(times)
    )
    assert dedupe.claim("msg-1") is True
    assert dedupe.claim("msg-1") is False
    assert aws.item("msg-1", "throttle")["Expired"] == {"N": "1060"}  # type: ignore[index]


def test_go_throttle_item_makes_claim_a_duplicate(aws: Aws) -> None:
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "msg-go"}, "Type": {"S": "throttle"}, "Expired": {"N": "1999999999"}},
    )
    dedupe = DynamoDedupe(client("dynamodb"), aws.table, retention_seconds=60)
    assert dedupe.claim("msg-go") is False
    assert aws.item("msg-go", "throttle")["Expired"] == {"N": "1999999999"}  # type: ignore[index]


# --- missing table -----------------------------------------------------------------------------


def test_missing_table_is_named(aws_env: dict[str, str]) -> None:
    table = f"no-such-table-{uuid.uuid4().hex[:8]}"
    dynamodb = client("dynamodb")
    with pytest.raises(ResourceMissingError, match=table):
        DynamoLocker(dynamodb, table).try_lock("report", "ev")
    with pytest.raises(ResourceMissingError, match=table):
        DynamoDedupe(dynamodb, table, retention_seconds=60).claim("msg-1")


# --- SqsSource ---------------------------------------------------------------------------------


def receive_all(source: SqsSource, count: int) -> list[Message]:
    got: list[Message] = []

    def done() -> bool:
        got.extend(source.receive(max_messages=10))
        return len(got) >= count

    wait_until(done, what=f"{count} messages")
    return got


def test_receive_honours_max_messages_and_reads_attributes(aws: Aws) -> None:
    sent = {aws.send(f"body-{i}"): f"body-{i}" for i in range(3)}
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=30)

    first = wait_until(lambda: source.receive(max_messages=2), what="a receive")
    assert 1 <= len(first) <= 2
    rest = receive_all(source, 3 - len(first))
    got = first + rest
    assert sorted(m.message_id for m in got) == sorted(sent)
    now = time.time()
    for m in got:
        assert m.body == sent[m.message_id]
        assert m.receipt_handle
        assert abs(m.sent_at - now) < 60
        assert m.receive_count == 1


def test_delete_removes_messages(aws: Aws) -> None:
    for i in range(3):
        aws.send(f"body-{i}")
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=30)
    got = receive_all(source, 3)
    assert aws.queue_counts() == (0, 3)
    source.delete(got)
    wait_until(lambda: aws.queue_counts() == (0, 0), what="an empty queue")


def test_release_makes_messages_visible_at_once(aws: Aws) -> None:
    ids = {aws.send(f"body-{i}") for i in range(3)}
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=30)
    got = receive_all(source, 3)
    assert source.receive(max_messages=10) == []  # hidden for 30 s unless released
    source.release(got)
    again = receive_all(source, 3)
    assert {m.message_id for m in again} == ids
    assert all(m.receive_count == 2 for m in again)


def test_retention_seconds_reads_the_queue(aws: Aws) -> None:
    name = f"retention-{uuid.uuid4().hex[:8]}"
    url = aws.sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "12345"})[
        "QueueUrl"
    ]
    assert SqsSource(client("sqs"), url, wait_time_seconds=0).retention_seconds() == 12345


def test_resolve_queue_url(aws: Aws) -> None:
    sqs = client("sqs")
    assert resolve_queue_url(sqs, aws.queue_name, LOCAL_ACCOUNT) == aws.queue_url
    missing = f"no-such-queue-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ResourceMissingError, match=missing):
        resolve_queue_url(sqs, missing, LOCAL_ACCOUNT)


# --- endpoints from the environment ------------------------------------------------------------


def test_global_endpoint_env_is_honoured(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> None:
    assert aws.queue_url in client("sqs").list_queues().get("QueueUrls", [])
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    # botocore's standard retries back off for up to 1 + 2 + 4 s; the retries themselves stay.
    monkeypatch.setattr(
        "botocore.retries.standard.ExponentialBackoff.delay_amount", lambda self, context: 0.0
    )
    with pytest.raises(EndpointConnectionError) as caught:
        client("sqs").list_queues()
    assert is_transient(caught.value)


def test_service_endpoint_env_overrides_the_global_one(
    aws: Aws, aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", aws_env["AWS_ENDPOINT_URL"])
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", aws_env["AWS_ENDPOINT_URL"])
    assert aws.queue_url in client("sqs").list_queues().get("QueueUrls", [])
    assert aws.table in client("dynamodb").list_tables()["TableNames"]


# --- is_transient ------------------------------------------------------------------------------


def client_error(code: str, status: int) -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "x"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "AnyOperation",
    )


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (client_error("Throttling", 400), True),
        (client_error("ProvisionedThroughputExceededException", 400), True),
        (client_error("SomethingBroke", 500), True),
        (client_error("ServiceUnavailable", 503), True),
        (client_error("ConditionalCheckFailedException", 400), False),
        (client_error("AccessDeniedException", 400), False),
        (NoCredentialsError(), False),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), True),
        (ValueError("not aws"), False),
    ],
)
def test_is_transient(exc: BaseException, transient: bool) -> None:
    assert is_transient(exc) is transient
