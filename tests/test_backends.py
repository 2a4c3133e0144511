"""DynamoLocker, DynamoDedupe, SqsSource and the AWS helpers against a real moto server over HTTP.

Leases are tested with an injected clock: no test sleeps for a lease to pass.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from sqsjkr.backends.aws import error_code, is_transient, make_client, make_session
from sqsjkr.backends.dedupe import (
    Claim,
    ClaimState,
    DedupeStore,
    DynamoDedupe,
    MemoryDedupe,
    NoopDedupe,
    WantedLock,
)
from sqsjkr.backends.history import running_update
from sqsjkr.backends.lease import Lease, new_owner
from sqsjkr.backends.locks import DynamoLocker, Held, Locker, MemoryLocker, NoopLocker
from sqsjkr.backends.sqs import (
    REJECT_REASON_ATTRIBUTE,
    Message,
    SqsSource,
    dead_letter_queue_url,
    queue_settings,
    resolve_queue_url,
)
from sqsjkr.contract.run import RunStart
from sqsjkr.errors import ResourceMissingError, StoreError
from sqsjkr.local.endpoint import LOCAL_ACCOUNT

from .conftest import REGION, Aws, free_port, wait_until

T0 = 1_700_000_000.0
#: A time long after every lease and retention period of these tests (year 2286).
FAR_FUTURE = 9_999_999_999.0


def client(service: str) -> Any:
    """A client as the daemon makes it; one per service and endpoint setting, as making one is slow."""
    endpoints = (
        os.environ.get("AWS_ENDPOINT_URL"),
        os.environ.get(f"AWS_ENDPOINT_URL_{service.upper()}"),
    )
    return _client(service, endpoints)


@functools.cache
def _client(service: str, endpoints: tuple[str | None, str | None]) -> Any:
    del endpoints  # only part of the cache key: make_client reads them from the environment
    return make_client(make_session(region=REGION), service)


def test_clients_send_no_headers_the_services_do_not_need_and_keep_idempotency(aws: Aws) -> None:
    """The daemon's clients drop botocore's per-call handlers that do nothing for SQS and
    DynamoDB (backends.aws.IDLE_HANDLERS: the call id and attempt headers, a Lambda trace id),
    and keep the ones that matter: a transaction's ClientRequestToken, which makes botocore's
    retry of a write whose answer was lost the same transaction."""
    dynamodb = make_client(make_session(region=REGION), "dynamodb")
    sent: list[Any] = []
    dynamodb.meta.events.register("before-send", lambda request, **_: sent.append(request))
    item = {"Id": {"S": "idle-handlers"}, "Type": {"S": "probe"}}
    dynamodb.transact_write_items(TransactItems=[{"Put": {"TableName": aws.table, "Item": item}}])
    [request] = sent
    headers = {name.lower() for name in request.headers}
    assert not headers & {"amz-sdk-invocation-id", "amz-sdk-request", "x-amzn-trace-id"}
    assert "authorization" in headers and "user-agent" in headers
    assert json.loads(request.body)["ClientRequestToken"]


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class LostResponses:
    """A DynamoDB client whose writes are each sent twice with the same arguments, as botocore
    retries a request whose response was lost: the first attempt is applied, and the caller sees
    only the answer to the second."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.retry_errors: list[str] = []  # the error code of each failed second attempt

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def _twice(self, operation: str, request: dict[str, Any]) -> Any:
        getattr(self._real, operation)(**request)  # applied; its response is lost
        try:
            return getattr(self._real, operation)(**request)
        except ClientError as exc:
            self.retry_errors.append(error_code(exc))
            raise

    def put_item(self, **request: Any) -> Any:
        return self._twice("put_item", request)

    def delete_item(self, **request: Any) -> Any:
        return self._twice("delete_item", request)

    def update_item(self, **request: Any) -> Any:
        return self._twice("update_item", request)

    def transact_write_items(self, **request: Any) -> Any:
        return self._twice("transact_write_items", request)


def lock_item(aws: Aws, lock_id: str = "report") -> dict[str, Any] | None:
    return aws.item(lock_id, "lock")


def throttle_item(aws: Aws, message_id: str = "msg-1") -> dict[str, Any] | None:
    return aws.item(message_id, "throttle")


def put_go_item(aws: Aws, item: dict[str, str]) -> None:
    """An item as the Go daemon writes it: strings, and Expired as a number."""
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={k: {"N": v} if k == "Expired" else {"S": v} for k, v in item.items()},
    )


# --- leases ------------------------------------------------------------------------------------


def test_owner_ids_name_host_and_pid_and_differ_per_hold() -> None:
    first, second = new_owner(), new_owner()
    assert first.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert second.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert first != second


# --- DynamoLocker ------------------------------------------------------------------------------


def dynamo_locker(clock: Clock, table: str, lease_seconds: float = 60) -> DynamoLocker:
    return DynamoLocker(client("dynamodb"), table, lease_seconds=lease_seconds, clock=clock)


def test_try_lock_writes_the_go_lock_item_with_owner_and_lease(aws: Aws) -> None:
    locker = dynamo_locker(Clock(T0 + 0.75), aws.table, lease_seconds=60)
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    assert lease.key == "report"
    assert lease.owner.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    assert lock_item(aws) == {
        "Id": {"S": "report"},
        "Type": {"S": "lock"},
        "EventId": {"S": "ev-1"},
        "Owner": {"S": lease.owner},
        "LeaseUntil": {"N": "1700000060.75"},  # to the millisecond: a lease may be short
    }
    assert lease.until == T0 + 0.75 + 60


def test_a_live_lease_blocks_and_keeps_the_holder(aws: Aws) -> None:
    clock = Clock()
    locker = dynamo_locker(clock, aws.table, lease_seconds=60)
    assert isinstance(locker.try_lock("report", "ev-1"), Lease)
    held = lock_item(aws)
    for now in (T0, T0 + 59, T0 + 60):  # up to and including LeaseUntil
        clock.now = now
        assert isinstance(locker.try_lock("report", "ev-2"), Held)
    assert lock_item(aws) == held


def released_mark(owner: str, now: float = T0) -> dict[str, Any]:
    """What a released lock leaves: no EventId (free, to the Go daemon too), who released it."""
    return {
        "Id": {"S": "report"},
        "Type": {"S": "lock"},
        "ReleasedBy": {"S": owner},
        "Expired": {"N": str(int(now) + 86400)},
    }


def test_unlock_frees_the_lock_and_marks_who_released_it(aws: Aws) -> None:
    locker = dynamo_locker(Clock(), aws.table)
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    assert locker.unlock(lease) is True
    assert lock_item(aws) == released_mark(lease.owner)
    assert locker.unlock(lease) is True  # our own mark: a retried unlock is no loss
    again = locker.try_lock("report", "ev-2")
    assert isinstance(again, Lease) and again.owner != lease.owner
    assert lock_item(aws)["EventId"] == {"S": "ev-2"}  # type: ignore[index]


def test_a_go_lock_blocks_forever_and_is_never_deleted(aws: Aws) -> None:
    go_item = {"Id": "report", "Type": "lock", "EventId": "go-daemon"}
    put_go_item(aws, go_item)
    locker = dynamo_locker(Clock(FAR_FUTURE), aws.table)
    assert isinstance(locker.try_lock("report", "ev-1"), Held)
    # Nothing of ours can remove or extend it: a Go item has no Owner and no LeaseUntil.
    assert locker.renew(Lease("report", "")) is False
    assert locker.unlock(Lease("report", "")) is False
    assert lock_item(aws) == {k: {"S": v} for k, v in go_item.items()}


def test_a_released_lock_is_free_to_the_go_daemon(aws: Aws) -> None:
    locker = dynamo_locker(Clock(), aws.table)
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease) and locker.unlock(lease)
    # The Go daemon's own lock write: a PutItem on the condition that no EventId is there.
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "report"}, "Type": {"S": "lock"}, "EventId": {"S": "go"}},
        ConditionExpression="attribute_not_exists(EventId)",
    )
    assert isinstance(locker.try_lock("report", "ev-2"), Held)  # and the Go lock holds it


def test_an_expired_lease_is_taken_over_and_the_takeover_logged(
    aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sqsjkr.locks")
    clock = Clock()
    dead = dynamo_locker(clock, aws.table, lease_seconds=60)
    old = dead.try_lock("report", "ev-1")
    assert isinstance(old, Lease)
    assert not [r for r in caplog.records if r.name == "sqsjkr.locks"]  # a fresh lock: no takeover
    clock.now = T0 + 61
    lease = dynamo_locker(clock, aws.table, lease_seconds=60).try_lock("report", "ev-2")
    assert isinstance(lease, Lease) and lease.owner != old.owner
    assert lock_item(aws) == {
        "Id": {"S": "report"},
        "Type": {"S": "lock"},
        "EventId": {"S": "ev-2"},
        "Owner": {"S": lease.owner},
        "LeaseUntil": {"N": str(int(T0) + 61 + 60)},
    }
    [record] = [r for r in caplog.records if r.name == "sqsjkr.locks"]
    assert record.levelno == logging.WARNING
    assert "taken over" in record.getMessage()
    assert old.owner in record.getMessage()
    assert str(int(T0) + 60) in record.getMessage()  # when the old lease ended


def test_renew_extends_the_lease(aws: Aws) -> None:
    clock = Clock()
    locker = dynamo_locker(clock, aws.table, lease_seconds=60)
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    clock.now = T0 + 50
    assert locker.renew(lease) is True
    item = lock_item(aws)
    assert item is not None
    assert item["LeaseUntil"] == {"N": str(int(T0) + 110)}
    assert (item["Owner"], item["EventId"]) == ({"S": lease.owner}, {"S": "ev-1"})
    clock.now = T0 + 100  # past the first lease, within the renewed one
    assert isinstance(dynamo_locker(clock, aws.table).try_lock("report", "ev-2"), Held)


def test_a_stale_owner_can_neither_renew_nor_unlock(aws: Aws) -> None:
    clock = Clock()
    stale_locker = dynamo_locker(clock, aws.table, lease_seconds=60)
    stale = stale_locker.try_lock("report", "ev-1")
    assert isinstance(stale, Lease)
    clock.now = T0 + 100
    new_locker = dynamo_locker(clock, aws.table, lease_seconds=60)
    current = new_locker.try_lock("report", "ev-2")
    assert isinstance(current, Lease)
    held = lock_item(aws)
    assert held is not None and held["Owner"] == {"S": current.owner}
    clock.now = T0 + 110
    assert stale_locker.renew(stale) is False
    assert stale_locker.unlock(stale) is False
    assert lock_item(aws) == held
    assert new_locker.unlock(current) is True
    assert lock_item(aws) == released_mark(current.owner, T0 + 110)
    # Released by the new holder since: the stale holder's unlock still learns it lost it.
    assert stale_locker.unlock(stale) is False


def test_unlock_of_a_lock_that_is_gone_is_a_loss(aws: Aws) -> None:
    locker = dynamo_locker(Clock(), aws.table)
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    # A Go daemon or an operator removed it meanwhile: not our own release.
    key = {"Id": {"S": "report"}, "Type": {"S": "lock"}}
    aws.dynamodb.delete_item(TableName=aws.table, Key=key)
    assert locker.unlock(lease) is False


def test_unlock_releases_only_our_item(aws: Aws) -> None:
    locker = dynamo_locker(Clock(), aws.table)
    ours = locker.try_lock("a", "ev-a")
    theirs = locker.try_lock("b", "ev-b")
    assert isinstance(ours, Lease) and theirs is not None
    # Same key, another owner: refused.
    assert locker.unlock(Lease("a", theirs.owner)) is False
    assert lock_item(aws, "a") is not None
    b_item = lock_item(aws, "b")
    assert locker.unlock(ours) is True
    assert "EventId" not in lock_item(aws, "a")  # type: ignore[operator]
    assert lock_item(aws, "b") == b_item


def test_lock_and_throttle_items_with_the_same_id_do_not_collide(aws: Aws) -> None:
    dynamodb = client("dynamodb")
    dedupe = DynamoDedupe(dynamodb, aws.table, retention_seconds=60, lease_seconds=30)
    assert dedupe.claim("same-id").state is ClaimState.CLAIMED
    assert DynamoLocker(dynamodb, aws.table, lease_seconds=30).try_lock("same-id", "ev")
    assert aws.item("same-id", "throttle") is not None
    assert aws.item("same-id", "lock") is not None


def test_try_lock_survives_a_lost_response(aws: Aws) -> None:
    dynamodb = LostResponses(client("dynamodb"))
    clock = Clock()
    lease = DynamoLocker(dynamodb, aws.table, lease_seconds=60, clock=clock).try_lock(
        "report", "ev-1"
    )
    # The retry failed its condition on our own first write, and that still means "taken".
    assert dynamodb.retry_errors == ["ConditionalCheckFailedException"]
    assert isinstance(lease, Lease)
    assert lock_item(aws)["Owner"] == {"S": lease.owner}  # type: ignore[index]
    assert isinstance(dynamo_locker(clock, aws.table).try_lock("report", "ev-2"), Held)


def test_unlock_survives_a_lost_response(aws: Aws) -> None:
    lease = dynamo_locker(Clock(), aws.table).try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    dynamodb = LostResponses(client("dynamodb"))
    locker = DynamoLocker(dynamodb, aws.table, lease_seconds=60, clock=Clock())
    assert locker.unlock(lease) is True
    # The retry failed its condition on our own release, and knew it by the mark.
    assert dynamodb.retry_errors == ["ConditionalCheckFailedException"]
    assert lock_item(aws) == released_mark(lease.owner)


# --- DynamoDedupe ------------------------------------------------------------------------------


def dynamo_dedupe(
    clock: Clock, table: str, *, retention_seconds: int = 345_600, lease_seconds: float = 30
) -> DynamoDedupe:
    return DynamoDedupe(
        client("dynamodb"),
        table,
        retention_seconds=retention_seconds,
        lease_seconds=lease_seconds,
        clock=clock,
    )


def test_claim_writes_the_go_throttle_item_with_owner_and_lease(aws: Aws) -> None:
    dedupe = dynamo_dedupe(Clock(T0 + 0.75), aws.table, retention_seconds=345_600, lease_seconds=30)
    claim = dedupe.claim("msg-1")
    assert claim.state is ClaimState.CLAIMED
    assert claim.lease is not None and claim.lease.key == "msg-1"
    assert claim.held_until is None
    assert throttle_item(aws) == {
        "Id": {"S": "msg-1"},
        "Type": {"S": "throttle"},
        "Expired": {"N": str(int(T0) + 345_600)},  # now + the queue's retention
        "Owner": {"S": claim.lease.owner},
        "LeaseUntil": {"N": "1700000030.75"},
    }


def test_a_claim_in_progress_is_running_until_its_lease_ends(aws: Aws) -> None:
    clock = Clock()
    first = dynamo_dedupe(clock, aws.table, lease_seconds=30).claim("msg-1")
    assert first.state is ClaimState.CLAIMED
    held = throttle_item(aws)
    clock.now = T0 + 30  # LeaseUntil itself is still held
    second = dynamo_dedupe(clock, aws.table, lease_seconds=30).claim("msg-1")
    assert second.state is ClaimState.RUNNING
    assert second.lease is None
    assert second.held_until == T0 + 30
    assert throttle_item(aws) == held  # Expired and the lease are not rewritten


def test_a_finished_claim_stops_every_later_delivery(aws: Aws) -> None:
    clock = Clock()
    dedupe = dynamo_dedupe(clock, aws.table, retention_seconds=600, lease_seconds=30)
    claim = dedupe.claim("msg-1")
    assert claim.lease is not None
    clock.now = T0 + 10
    assert dedupe.finish(claim.lease) is True
    assert throttle_item(aws) == {
        "Id": {"S": "msg-1"},
        "Type": {"S": "throttle"},
        "Expired": {"N": str(int(T0) + 600)},
        "Owner": {"S": claim.lease.owner},
    }
    assert dedupe.renew(claim.lease) is False  # finished: nothing left to renew
    clock.now = T0 + 500  # long after the lease: a finished job still never runs again
    assert dedupe.claim("msg-1").state is ClaimState.FINISHED
    assert "LeaseUntil" not in throttle_item(aws)  # type: ignore[operator]


def test_an_expired_claim_is_taken_over(aws: Aws) -> None:
    clock = Clock()
    dead = dynamo_dedupe(clock, aws.table, retention_seconds=600, lease_seconds=30)
    stale = dead.claim("msg-1")
    assert stale.lease is not None
    clock.now = T0 + 31
    fresh = dynamo_dedupe(clock, aws.table, retention_seconds=600, lease_seconds=30).claim("msg-1")
    assert fresh.state is ClaimState.CLAIMED
    assert fresh.lease is not None and fresh.lease.owner != stale.lease.owner
    held = throttle_item(aws)
    assert held == {
        "Id": {"S": "msg-1"},
        "Type": {"S": "throttle"},
        "Expired": {"N": str(int(T0) + 31 + 600)},
        "Owner": {"S": fresh.lease.owner},
        "LeaseUntil": {"N": str(int(T0) + 31 + 30)},
    }
    # The dead daemon, come back, can no longer touch the new holder's claim.
    assert dead.renew(stale.lease) is False
    assert dead.finish(stale.lease) is False  # lost: the job may have run twice
    dead.release(stale.lease)
    assert throttle_item(aws) == held


def test_renew_extends_the_claim(aws: Aws) -> None:
    clock = Clock()
    dedupe = dynamo_dedupe(clock, aws.table, lease_seconds=30)
    claim = dedupe.claim("msg-1")
    assert claim.lease is not None
    clock.now = T0 + 20
    assert dedupe.renew(claim.lease) is True
    assert throttle_item(aws)["LeaseUntil"] == {"N": str(int(T0) + 50)}  # type: ignore[index]
    clock.now = T0 + 40  # past the first lease, within the renewed one
    other = dynamo_dedupe(clock, aws.table, lease_seconds=30).claim("msg-1")
    assert (other.state, other.held_until) == (ClaimState.RUNNING, T0 + 50)


def test_a_go_throttle_item_is_finished(aws: Aws) -> None:
    go_item = {"Id": "msg-go", "Type": "throttle", "Expired": "1999999999"}
    put_go_item(aws, go_item)
    dedupe = dynamo_dedupe(Clock(FAR_FUTURE), aws.table)
    assert dedupe.claim("msg-go").state is ClaimState.FINISHED
    assert aws.item("msg-go", "throttle") == {
        "Id": {"S": "msg-go"},
        "Type": {"S": "throttle"},
        "Expired": {"N": "1999999999"},
    }


def test_release_lets_the_next_claim_run(aws: Aws) -> None:
    clock = Clock()
    dedupe = dynamo_dedupe(clock, aws.table)
    first = dedupe.claim("msg-1")
    assert first.lease is not None
    dedupe.release(first.lease)
    assert throttle_item(aws) is None
    second = dedupe.claim("msg-1")  # at once, not after the lease
    assert second.state is ClaimState.CLAIMED
    assert second.lease is not None
    assert throttle_item(aws)["Owner"] == {"S": second.lease.owner}  # type: ignore[index]


def test_release_by_another_owner_keeps_the_claim(aws: Aws) -> None:
    dedupe = dynamo_dedupe(Clock(), aws.table)
    claim = dedupe.claim("msg-1")
    assert claim.lease is not None
    held = throttle_item(aws)
    dedupe.release(Lease("msg-1", new_owner()))
    assert dedupe.finish(Lease("msg-1", new_owner())) is False
    assert throttle_item(aws) == held


def test_finish_survives_a_lost_response(aws: Aws) -> None:
    claim = dynamo_dedupe(Clock(), aws.table).claim("msg-1")
    assert claim.lease is not None
    dynamodb = LostResponses(client("dynamodb"))
    dedupe = DynamoDedupe(dynamodb, aws.table, retention_seconds=600, lease_seconds=30)
    assert dedupe.finish(claim.lease) is True
    assert dynamodb.retry_errors == ["ConditionalCheckFailedException"]
    assert "LeaseUntil" not in throttle_item(aws)  # type: ignore[operator]


def test_claim_survives_a_lost_response(aws: Aws) -> None:
    dynamodb = LostResponses(client("dynamodb"))
    clock = Clock()
    claim = DynamoDedupe(
        dynamodb, aws.table, retention_seconds=600, lease_seconds=30, clock=clock
    ).claim("msg-1")
    assert dynamodb.retry_errors == ["TransactionCanceledException"]
    assert claim.state is ClaimState.CLAIMED
    assert claim.lease is not None
    assert throttle_item(aws)["Owner"] == {"S": claim.lease.owner}  # type: ignore[index]
    assert dynamo_dedupe(clock, aws.table).claim("msg-1").state is ClaimState.RUNNING


# --- the same protocols in memory and in DynamoDB ----------------------------------------------


@pytest.fixture(params=["memory", "dynamodb"])
def locker(request: pytest.FixtureRequest) -> Locker:
    if request.param == "memory":
        return MemoryLocker()
    aws: Aws = request.getfixturevalue("aws")
    return dynamo_locker(Clock(), aws.table)


@pytest.fixture(params=["memory", "dynamodb"])
def dedupe(request: pytest.FixtureRequest) -> DedupeStore:
    if request.param == "memory":
        return MemoryDedupe()
    aws: Aws = request.getfixturevalue("aws")
    return dynamo_dedupe(Clock(), aws.table)


def test_locker_protocol(locker: Locker) -> None:
    lease = locker.try_lock("report", "ev-1")
    assert isinstance(lease, Lease)
    assert isinstance(locker.try_lock("report", "ev-2"), Held)
    assert isinstance(locker.try_lock("other", "ev-3"), Lease)
    assert locker.renew(lease) is True
    assert locker.renew(Lease("report", "not-the-owner")) is False
    assert locker.unlock(Lease("report", "not-the-owner")) is False
    assert locker.unlock(lease) is True
    assert locker.unlock(lease) is True  # our own release, as after a retried one
    assert locker.renew(lease) is False
    assert isinstance(locker.try_lock("report", "ev-4"), Lease)


def test_dedupe_protocol(dedupe: DedupeStore) -> None:
    first = dedupe.claim("msg-1")
    assert first.state is ClaimState.CLAIMED and first.lease is not None
    assert dedupe.claim("msg-1").state is ClaimState.RUNNING
    assert dedupe.renew(first.lease) is True
    assert dedupe.renew(Lease("msg-1", "not-the-owner")) is False
    assert dedupe.finish(Lease("msg-1", "not-the-owner")) is False
    dedupe.release(Lease("msg-1", "not-the-owner"))
    assert dedupe.claim("msg-1").state is ClaimState.RUNNING  # still ours
    assert dedupe.renew(first.lease) is True
    assert dedupe.finish(first.lease) is True
    assert dedupe.finish(first.lease) is True  # our own, as after a retried one
    assert dedupe.claim("msg-1").state is ClaimState.FINISHED
    assert dedupe.renew(first.lease) is False
    second = dedupe.claim("msg-2")
    assert second.lease is not None
    dedupe.release(second.lease)
    assert dedupe.claim("msg-2").state is ClaimState.CLAIMED


def test_noop_backends_remember_nothing() -> None:
    locker, dedupe = NoopLocker(), NoopDedupe()
    first, second = locker.try_lock("report", "ev-1"), locker.try_lock("report", "ev-2")
    assert first is not None and second is not None
    assert locker.renew(first) and locker.unlock(first) and locker.unlock(second)
    claims = [dedupe.claim("msg-1") for _ in range(2)]
    assert [c.state for c in claims] == [ClaimState.CLAIMED, ClaimState.CLAIMED]
    lease = claims[0].lease
    assert isinstance(lease, Lease) and dedupe.renew(lease) is True
    dedupe.finish(lease)
    assert dedupe.claim("msg-1").state is ClaimState.CLAIMED


# --- missing table -----------------------------------------------------------------------------


def test_missing_table_is_named(aws_env: dict[str, str]) -> None:
    table = f"no-such-table-{uuid.uuid4().hex[:8]}"
    dynamodb = client("dynamodb")
    with pytest.raises(ResourceMissingError, match=table):
        DynamoLocker(dynamodb, table, lease_seconds=60).try_lock("report", "ev")
    with pytest.raises(ResourceMissingError, match=table):
        DynamoDedupe(dynamodb, table, retention_seconds=60, lease_seconds=30).claim("msg-1")


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
        assert m.attributes == {}


def test_receive_carries_message_attributes(aws: Aws) -> None:
    attributes = {
        "origin": {"DataType": "String", "StringValue": "scheduler"},
        "attempt": {"DataType": "Number", "StringValue": "3"},
    }
    aws.sqs.send_message(QueueUrl=aws.queue_url, MessageBody="{}", MessageAttributes=attributes)
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0)
    [message] = receive_all(source, 1)
    assert {k: dict(v) for k, v in message.attributes.items()} == attributes


def test_delete_removes_messages(aws: Aws) -> None:
    for i in range(3):
        aws.send(f"body-{i}")
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=30)
    got = receive_all(source, 3)
    assert aws.queue_counts() == (0, 3)
    source.delete(got)
    wait_until(lambda: aws.queue_counts() == (0, 0), what="an empty queue")


def test_set_visibility_zero_makes_messages_visible_at_once(aws: Aws) -> None:
    ids = {aws.send(f"body-{i}") for i in range(3)}
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=30)
    got = receive_all(source, 3)
    assert source.receive(max_messages=10) == []  # hidden for 30 s unless made visible
    source.set_visibility(got, 0)
    again = receive_all(source, 3)
    assert {m.message_id for m in again} == ids
    assert all(m.receive_count == 2 for m in again)


def test_set_visibility_hides_messages(aws: Aws) -> None:
    ids = {aws.send(f"body-{i}") for i in range(2)}
    # Received with no visibility timeout: visible again at once unless hidden.
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0, visibility_timeout=0)
    got = wait_until(lambda: source.receive(max_messages=10), what="a receive")
    assert {m.message_id for m in got} == ids
    assert aws.queue_counts() == (2, 0)
    source.set_visibility(got, 300)
    assert aws.queue_counts() == (0, 2)
    assert source.receive(max_messages=10) == []
    source.set_visibility(got, 0)
    assert {m.message_id for m in receive_all(source, 2)} == ids


# --- reject and the dead-letter queue ----------------------------------------------------------


def queue_with_dead_letter_queue(aws: Aws) -> tuple[str, str, str]:
    """A fresh queue whose RedrivePolicy names a fresh dead-letter queue: (url, DLQ url, DLQ ARN)."""
    suffix = uuid.uuid4().hex[:8]
    dlq_url = aws.sqs.create_queue(QueueName=f"dead-{suffix}")["QueueUrl"]
    dlq_arn = aws.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
    url = aws.sqs.create_queue(
        QueueName=f"jobs-dlq-{suffix}", Attributes={"RedrivePolicy": policy}
    )["QueueUrl"]
    return url, dlq_url, dlq_arn


def receive_raw(aws: Aws, url: str) -> list[dict[str, Any]]:
    return wait_until(
        lambda: aws.sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages"),
        what=f"a message on {url}",
    )


def counts(aws: Aws, url: str) -> tuple[int, int]:
    attrs = aws.sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attrs["ApproximateNumberOfMessages"]), int(
        attrs["ApproximateNumberOfMessagesNotVisible"]
    )


def test_reject_moves_the_message_to_the_dead_letter_queue(
    aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="sqsjkr.sqs")
    url, dlq_url, _ = queue_with_dead_letter_queue(aws)
    attributes = {
        "origin": {"DataType": "String", "StringValue": "scheduler"},
        "attempt": {"DataType": "Number", "StringValue": "3"},
        "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
    }
    body = '{"command": 42}'
    aws.sqs.send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
    source = SqsSource(client("sqs"), url, wait_time_seconds=0, dead_letter_url=dlq_url)
    [message] = receive_all(source, 1)

    source.reject(message, "command: not a string")

    [dead] = receive_raw(aws, dlq_url)
    assert dead["Body"] == body
    got = {
        k: {f: v[f] for f in ("DataType", "StringValue", "BinaryValue") if f in v}
        for k, v in dead["MessageAttributes"].items()
    }
    assert got == {
        **attributes,
        REJECT_REASON_ATTRIBUTE: {"DataType": "String", "StringValue": "command: not a string"},
        # To find the message in the daemon's log.
        "sqsjkr_message_id": {"DataType": "String", "StringValue": message.message_id},
        "sqsjkr_receive_count": {"DataType": "Number", "StringValue": "1"},
    }
    wait_until(lambda: counts(aws, url) == (0, 0), what="an empty source queue")
    assert message.message_id in caplog.text
    assert "dead-letter queue" in caplog.text


def test_reject_adds_what_room_allows_reason_first(aws: Aws) -> None:
    url, dlq_url, _ = queue_with_dead_letter_queue(aws)
    attributes = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(8)}
    aws.sqs.send_message(QueueUrl=url, MessageBody="not json", MessageAttributes=attributes)
    source = SqsSource(client("sqs"), url, wait_time_seconds=0, dead_letter_url=dlq_url)
    [message] = receive_all(source, 1)
    source.reject(message, "not JSON")
    [dead] = receive_raw(aws, dlq_url)
    assert {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()} == {
        **{k: v["StringValue"] for k, v in attributes.items()},
        REJECT_REASON_ATTRIBUTE: "not JSON",
        "sqsjkr_message_id": message.message_id,
    }


def test_reject_keeps_ten_attributes_without_adding_the_reason(aws: Aws) -> None:
    url, dlq_url, _ = queue_with_dead_letter_queue(aws)
    attributes = {f"a{i}": {"DataType": "String", "StringValue": str(i)} for i in range(10)}
    aws.sqs.send_message(QueueUrl=url, MessageBody="not json", MessageAttributes=attributes)
    source = SqsSource(client("sqs"), url, wait_time_seconds=0, dead_letter_url=dlq_url)
    [message] = receive_all(source, 1)
    source.reject(message, "not JSON")  # SQS allows ten attributes: no room for the reason
    [dead] = receive_raw(aws, dlq_url)
    assert dead["Body"] == "not json"
    assert {k: v["StringValue"] for k, v in dead["MessageAttributes"].items()} == {
        k: v["StringValue"] for k, v in attributes.items()
    }
    wait_until(lambda: counts(aws, url) == (0, 0), what="an empty source queue")


def test_reject_without_a_dead_letter_queue_logs_the_first_4_kib_and_deletes(
    aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="sqsjkr.sqs")
    body = "".join(f"{i:05d}," for i in range(1700))  # 10,200 bytes, every cut point distinct
    aws.send(body)
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0)
    [message] = receive_all(source, 1)

    source.reject(message, "not JSON")

    [record] = [r for r in caplog.records if r.name == "sqsjkr.sqs"]
    logged = record.getMessage()
    assert record.levelno == logging.ERROR
    assert message.message_id in logged and "not JSON" in logged
    assert f'"{body[:4096]}"' in logged  # the first 4096 bytes, quoted, and no more
    assert body[:4097] not in logged
    wait_until(lambda: aws.queue_counts() == (0, 0), what="an empty queue")


def test_reject_cuts_a_logged_body_at_a_whole_character(
    aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="sqsjkr.sqs")
    body = "a" + "é" * 5000  # the 4096-byte cut falls inside an é
    aws.send(body)
    source = SqsSource(client("sqs"), aws.queue_url, wait_time_seconds=0)
    [message] = receive_all(source, 1)
    source.reject(message, "not JSON")
    logged = caplog.records[-1].getMessage()
    assert f'"a{"é" * 2047}"' in logged
    assert "\ufffd" not in logged


def test_queue_settings_reads_retention_and_the_dead_letter_arn(aws: Aws) -> None:
    sqs = client("sqs")
    name = f"retention-{uuid.uuid4().hex[:8]}"
    url = aws.sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "12345"})[
        "QueueUrl"
    ]
    settings = queue_settings(sqs, url)
    assert (settings.retention_seconds, settings.dead_letter_arn) == (12345, None)
    redriven, _, dlq_arn = queue_with_dead_letter_queue(aws)
    settings = queue_settings(sqs, redriven)
    assert settings.retention_seconds == 345_600  # the SQS default, four days
    assert settings.dead_letter_arn == dlq_arn


def test_dead_letter_queue_url_resolves_the_arn(aws: Aws) -> None:
    sqs = client("sqs")
    _, dlq_url, dlq_arn = queue_with_dead_letter_queue(aws)
    assert dead_letter_queue_url(sqs, dlq_arn) == dlq_url


@pytest.mark.parametrize(
    "arn",
    ["not-an-arn", "arn:aws:sns:us-east-1:123456789012:topic", "arn:aws:sqs:us-east-1:queue"],
)
def test_dead_letter_queue_url_names_a_bad_arn(aws: Aws, arn: str) -> None:
    with pytest.raises(ResourceMissingError, match=f'RedrivePolicy names "{arn}"'):
        dead_letter_queue_url(client("sqs"), arn)


def test_dead_letter_queue_url_names_a_missing_queue(aws: Aws) -> None:
    missing = f"no-such-dlq-{uuid.uuid4().hex[:8]}"
    with pytest.raises(ResourceMissingError, match=missing):
        dead_letter_queue_url(client("sqs"), f"arn:aws:sqs:{REGION}:{LOCAL_ACCOUNT}:{missing}")


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


def test_a_failed_claim_without_the_item_that_failed_it_is_a_store_error() -> None:
    class Forgetful:
        """An endpoint that ignores ReturnValuesOnConditionCheckFailure."""

        def transact_write_items(self, **request: Any) -> None:
            error = {"Code": "TransactionCanceledException", "Message": "cancelled"}
            reasons = [{"Code": "ConditionalCheckFailed"}]
            raise ClientError(
                {"Error": error, "CancellationReasons": reasons},  # type: ignore[typeddict-unknown-key]
                "TransactWriteItems",
            )

    store = DynamoDedupe(Forgetful(), "t", retention_seconds=60, lease_seconds=60)
    with pytest.raises(StoreError, match="did not return the item"):
        store.claim("m1")


# -- a claim that takes the job's lock in its own write -----------------------------------------


class Counting:
    """A client that counts its calls by operation."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._real, name)

        def counted(**request: Any) -> Any:
            self.calls[name] = self.calls.get(name, 0) + 1
            return method(**request)

        return counted


def folding(dynamodb: Any, aws: Aws, clock: Callable[[], float] = time.time) -> DynamoDedupe:
    """A dedupe store that notes runs and takes free locks in the claim's write, as the daemon
    builds it with history on."""
    locker = DynamoLocker(dynamodb, aws.table, lease_seconds=60, clock=clock)
    return DynamoDedupe(
        dynamodb,
        aws.table,
        retention_seconds=600,
        lease_seconds=60,
        clock=clock,
        note_running=running_update,
        take_lock=locker.take_put,
    )


def claim_with_lock(dynamodb: Any, aws: Aws) -> Claim:
    """Claim message m1 of event ev for a run, with its lock L."""
    start = RunStart("ev", "m1", "host", "owner", time.time(), time.time(), "true")
    return folding(dynamodb, aws).claim("m1", running=start, lock=WantedLock("L", "ev"))


def assert_holds_lock(aws: Aws, claim: Claim) -> None:
    assert claim.state is ClaimState.CLAIMED and claim.lock is not None
    item = lock_item(aws, "L")
    assert item is not None and item["Owner"]["S"] == claim.lock.owner
    assert item["EventId"]["S"] == "ev"


def test_a_claim_takes_a_free_lock_in_its_own_write(aws: Aws) -> None:
    dynamodb = Counting(client("dynamodb"))
    claim = claim_with_lock(dynamodb, aws)
    assert_holds_lock(aws, claim)
    assert claim.lock is not None and dynamodb.calls == {"transact_write_items": 1}
    # The lock is held as try_lock's would be: released by its owner, refused to others.
    locker = DynamoLocker(client("dynamodb"), aws.table, lease_seconds=60)
    assert isinstance(locker.try_lock("L", "other"), Held)
    assert locker.unlock(claim.lock) is True and aws.lock_free("L")


@pytest.mark.parametrize("holder", ["go", "live", "expired"])
def test_a_lock_that_is_not_free_leaves_the_claim_to_go_alone(aws: Aws, holder: str) -> None:
    held: dict[str, Any] = {"Id": {"S": "L"}, "Type": {"S": "lock"}, "EventId": {"S": "theirs"}}
    if holder != "go":
        until = time.time() + (600 if holder == "live" else -600)
        held.update(Owner={"S": "other:1:x"}, LeaseUntil={"N": str(until)})
    aws.dynamodb.put_item(TableName=aws.table, Item=held)
    claim = claim_with_lock(client("dynamodb"), aws)
    # Claimed without the lock: the worker waits for it, or takes over an expired lease (and
    # logs it) with try_lock.
    assert claim.state is ClaimState.CLAIMED and claim.noted and claim.lock is None
    assert lock_item(aws, "L") == held
    assert aws.item("m1", "throttle") is not None


def test_a_duplicate_claim_takes_no_lock(aws: Aws) -> None:
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "m1"}, "Type": {"S": "throttle"}, "Expired": {"N": "9999999999"}},
    )
    claim = claim_with_lock(client("dynamodb"), aws)
    assert claim.state is ClaimState.FINISHED and claim.lock is None
    assert lock_item(aws, "L") is None


class LostTransactions(LostResponses):
    def transact_write_items(self, **request: Any) -> Any:
        return self._twice("transact_write_items", request)


def test_a_claim_with_its_lock_retried_after_a_lost_answer_has_both(aws: Aws) -> None:
    assert_holds_lock(aws, claim_with_lock(LostTransactions(client("dynamodb")), aws))
