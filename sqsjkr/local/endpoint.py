"""The embedded AWS endpoint of local mode (moto on 127.0.0.1), and the queue, table, schedule group and
sample schedules it creates on it, named as the terraform module names them.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any

from sqsjkr.backends.aws import make_client
from sqsjkr.errors import LocalModeError
from sqsjkr.local.demo import DEMO_QUEUE, SAMPLE_SCHEDULES
from sqsjkr.local.demo_scheduled import (
    LATE_EXPRESSION,
    LATE_SCHEDULE,
    PIPELINE_EXPRESSION,
    PIPELINE_SCHEDULE,
    DemoScheduled,
)

LOCAL_REGION = "us-east-1"
#: moto's default account id.
LOCAL_ACCOUNT = "123456789012"
LOCAL_QUEUE = DEMO_QUEUE
LOCAL_TABLE = "sqsjkr"
#: The EventBridge Scheduler group and role of `sqsjkr send --at`, named as the terraform
#: module names them for a deployment named after the queue.
LOCAL_SCHEDULE_GROUP = LOCAL_QUEUE
LOCAL_SCHEDULER_ROLE = f"{LOCAL_QUEUE}-scheduler"
#: Who may assume the scheduler role: EventBridge Scheduler, as in the module.
_SCHEDULER_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "scheduler.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


@contextmanager
def local_endpoint(port: int = 0) -> Iterator[str]:
    """A moto server on 127.0.0.1 for the lifetime of the block; yields its endpoint URL."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise LocalModeError("local mode needs moto: pip install 'sqsjkr[local]'") from exc
    from sqsjkr.local.queues import install_fair_queues
    from sqsjkr.local.transactions import install_fair_transactions

    if port:
        _check_port_free(port)
    install_fair_transactions()  # DynamoDB's transactions, and no 500 when requests race
    install_fair_queues()  # counting a queue's messages: one clock read, not one a message
    cache_moto_routing()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    try:
        server.start()
    except OSError as exc:
        raise LocalModeError(f"cannot start the local AWS endpoint on port {port}: {exc}") from exc
    host, bound = server.get_host_and_port()
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.stop()


def cache_moto_routing() -> None:
    """Make moto's server route each request without listing its own package's directories.

    For each request, its dispatcher asks whether the Host header names one of moto's modules,
    which it answers by listing and stat-ing moto's ~170 directories: a millisecond of CPU per
    request, every CLI command's and the daemon's, which a list made once saves (they do not
    change while it runs). Idempotent; for the whole process, as moto's server is.
    """
    from moto import backends

    if getattr(backends, "_sqsjkr_routing_cached", False):
        return
    modules = tuple(backends.list_of_moto_modules())

    def listed() -> Iterable[str]:
        return modules

    backends.list_of_moto_modules = listed
    backends._sqsjkr_routing_cached = True  # type: ignore[attr-defined]


def serialize_moto_writes() -> None:
    """Make moto's DynamoDB writes take turns, in this process.

    moto's TransactWriteItems deep-copies the table for a rollback without a lock, and fails
    with a 500 when another request changes the table meanwhile; DynamoDB has no such race. The
    daemon would only retry, but tests and benchmarks count calls and must not see it.
    """
    from moto.dynamodb.models import DynamoDBBackend

    if getattr(DynamoDBBackend, "_sqsjkr_serialized", False):
        return
    lock = threading.RLock()
    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        original = getattr(DynamoDBBackend, name)

        def serialized(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with lock:
                return _original(self, *args, **kwargs)

        setattr(DynamoDBBackend, name, serialized)
    DynamoDBBackend._sqsjkr_serialized = True  # type: ignore[attr-defined]


def _check_port_free(port: int) -> None:
    """LocalModeError if 127.0.0.1:port is taken.

    moto's server binds in its own thread, which exits on a taken port and leaves start()
    waiting for ever; a port taken in the instant between this check and that bind still hangs.
    """
    error = bind_error(port)
    if error is not None:
        raise LocalModeError(
            f"cannot start the local AWS endpoint on 127.0.0.1:{port}: {error.strerror}; "
            "pass another --port, or leave it out for any free port"
        ) from error


def bind_error(port: int) -> OSError | None:
    """Why 127.0.0.1:port cannot be bound now, or None. Probed as a server binds: a port in
    TIME_WAIT after a previous run is free."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            return exc
    return None


def use_endpoint(endpoint: str) -> None:
    """Point this process's boto3 clients (and its jobs) at endpoint, with dummy credentials."""
    # The embedded endpoint accepts any credentials, and real ones must never reach it.
    os.environ.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="local",
        AWS_SECRET_ACCESS_KEY="local",
        AWS_DEFAULT_REGION=LOCAL_REGION,
    )
    for name in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ):
        os.environ.pop(name, None)


def create_queue(sqs: Any, name: str, *, dead_letter: bool = False) -> str:
    """The queue's URL; with dead_letter, also a NAME-dlq queue that its RedrivePolicy points to."""
    attributes = {}
    if dead_letter:
        dlq_url = sqs.create_queue(QueueName=f"{name}-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
        redrive = {"deadLetterTargetArn": arn["Attributes"]["QueueArn"], "maxReceiveCount": "5"}
        attributes["RedrivePolicy"] = json.dumps(redrive)
    return str(sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])


def create_table(dynamodb: Any, name: str) -> None:
    """The Go daemon's table: Id/Type keys, Expired, GSI TypeExpiredIndex."""
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "Id", "AttributeType": "S"},
            {"AttributeName": "Type", "AttributeType": "S"},
            {"AttributeName": "Expired", "AttributeType": "N"},
        ],
        KeySchema=[
            {"AttributeName": "Id", "KeyType": "HASH"},
            {"AttributeName": "Type", "KeyType": "RANGE"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "TypeExpiredIndex",
                "KeySchema": [
                    {"AttributeName": "Type", "KeyType": "HASH"},
                    {"AttributeName": "Expired", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def create_schedule_group(session: Any) -> str:
    """The schedule group and the scheduler role `sqsjkr send --at` needs; the role's ARN.

    moto only keeps the schedules; local mode's scheduler (local/scheduler.py) fires them."""
    make_client(session, "scheduler").create_schedule_group(Name=LOCAL_SCHEDULE_GROUP)
    role = make_client(session, "iam").create_role(
        RoleName=LOCAL_SCHEDULER_ROLE, AssumeRolePolicyDocument=json.dumps(_SCHEDULER_TRUST)
    )
    return str(role["Role"]["Arn"])


def create_sample_schedules(session: Any, queue_arn: str, role_arn: str) -> None:
    """The demo's sample schedules in the local group, so that `sqsjkr schedules` and the next-run
    column of `sqsjkr status` show something real; local mode's scheduler fires them."""
    client = make_client(session, "scheduler")
    for sample in SAMPLE_SCHEDULES:
        client.create_schedule(
            Name=sample.name,
            GroupName=LOCAL_SCHEDULE_GROUP,
            ScheduleExpression=sample.expression,
            ScheduleExpressionTimezone=sample.timezone,
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": queue_arn, "RoleArn": role_arn, "Input": sample.body},
            State="ENABLED" if sample.enabled else "DISABLED",
        )


def create_demo_scheduled(
    session: Any,
    queue_arn: str,
    role_arn: str,
    scheduled: DemoScheduled,
    group: str = LOCAL_SCHEDULE_GROUP,
) -> None:
    """The demo's scheduled pipeline, from its first firing on, and its late schedule with
    catch_up, made (and last changed) an hour before its missed firing: as if it had fired then
    with no daemon to run it, which the daemon's catch-up sends at start."""
    client = make_client(session, "scheduler")
    for name, expression, start, body in (
        (PIPELINE_SCHEDULE, PIPELINE_EXPRESSION, scheduled.times.first, scheduled.pipeline_body),
        (LATE_SCHEDULE, LATE_EXPRESSION, scheduled.times.missed, scheduled.late_body),
    ):
        client.create_schedule(
            Name=name,
            GroupName=group,
            ScheduleExpression=expression,
            ScheduleExpressionTimezone="UTC",
            StartDate=datetime.fromtimestamp(start, timezone.utc),
            FlexibleTimeWindow={"Mode": "OFF"},
            Target={"Arn": queue_arn, "RoleArn": role_arn, "Input": body},
        )
    _backdate(group, LATE_SCHEDULE, scheduled.times.missed - 3600)


def _backdate(group_name: str, name: str, at: float) -> None:
    """Make the embedded endpoint's schedule made and last changed at `at`: moto (in this
    process) has no way to date them, and catch-up counts a schedule's firings from its change."""
    from moto.scheduler.models import scheduler_backends

    for regions in scheduler_backends.values():
        for backend in regions.values():
            group = backend.schedule_groups.get(group_name)
            if group is not None and name in group.schedules:
                group.schedules[name].creation_date = at
                group.schedules[name].last_modified_date = at
                return
    raise LocalModeError(f"no schedule {name} in the embedded endpoint to date")
