"""Local mode: an embedded moto server on 127.0.0.1 holding the queue and the table, and the daemon on it.

For a first look, demos and tests; moto comes with the `sqsjkr[local]` extra.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.scheduler import queue_target
from sqsjkr.commands.dashboard import INSTALL_HINT, listening, preload, web_available
from sqsjkr.commands.demo import (
    DEMO_QUEUE,
    DEMO_REPORTER,
    SAMPLE_SCHEDULES,
    DemoWatch,
    send_demo,
)
from sqsjkr.commands.local_site import LocalSite
from sqsjkr.contract.config import load_config
from sqsjkr.daemon.service import serve
from sqsjkr.errors import LocalModeError, StatsServerError
from sqsjkr.observability.notify import NullNotifier

log = logging.getLogger("sqsjkr.local")

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
    if port:
        _check_port_free(port)
    serialize_moto_writes()
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
    with socket.socket() as probe:
        # As the server will: a port in TIME_WAIT after a previous run is free.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise LocalModeError(
                f"cannot start the local AWS endpoint on 127.0.0.1:{port}: {exc.strerror}; "
                "pass another --port, or leave it out for any free port"
            ) from exc


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

    moto never runs the schedules: `send --at` and `--list-scheduled` can be tried, no more."""
    make_client(session, "scheduler").create_schedule_group(Name=LOCAL_SCHEDULE_GROUP)
    role = make_client(session, "iam").create_role(
        RoleName=LOCAL_SCHEDULER_ROLE, AssumeRolePolicyDocument=json.dumps(_SCHEDULER_TRUST)
    )
    return str(role["Role"]["Arn"])


def create_sample_schedules(session: Any, queue_arn: str, role_arn: str) -> None:
    """The demo's sample schedules in the local group, so that `sqsjkr schedules` and the next-run
    column of `sqsjkr status` show something real; moto never fires them."""
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


def write_config(directory: Path, *, stats_port: int, workers: int, role_arn: str) -> Path:
    path = directory / "config.toml"
    path.write_text(
        f"""# Written by `sqsjkr local` for its embedded AWS endpoint.
[account]
id = "{LOCAL_ACCOUNT}"
region = "{LOCAL_REGION}"

[sqs]
queue_name = "{LOCAL_QUEUE}"
wait_time_seconds = 2

[kicker]
max_concurrent_num = {workers}
life_time_trigger = "sed 's/^/ALERT life_time exceeded: /'"
stats_port = {stats_port}

[lock]
table = "{LOCAL_TABLE}"
retry_interval = "1s"

[schedule]
# For `sqsjkr send --at`: moto keeps the schedule, but never runs it.
role_arn = "{role_arn}"
group = "{LOCAL_SCHEDULE_GROUP}"

[report]
# Prints each run's report (horenso's JSON) into the log, as sqsjkr.report lines.
reporters = ["{DEMO_REPORTER}"]
"""
    )
    return path


def banner(site: LocalSite, stats_address: str, dashboard: str = "") -> str:
    """What local mode prints once it listens: where everything is, and how to send a job."""
    return (
        f"sqsjkr local: AWS endpoint {site.endpoint} (moto), queue {LOCAL_QUEUE} "
        f"(dead letters: {LOCAL_QUEUE}-dlq), table {LOCAL_TABLE}, "
        f"schedule group {LOCAL_SCHEDULE_GROUP}\n"
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2\n"
        + (f"Dashboard: {dashboard}\n" if dashboard else "")
        + "Send a job from another shell:\n"
        f"{site.pasteable('send', '--command', 'echo hello')}\n"
        "Stop: Ctrl-C"
    )


def import_dashboard() -> threading.Thread:
    """Import the dashboard (Flask and the rest, a second or so) while moto starts, so that the
    banner is not late for it."""

    thread = threading.Thread(target=preload, name="sqsjkr-web-import", daemon=True)
    thread.start()
    return thread


def start_dashboard(conf: Path, port: int) -> tuple[str, Callable[[], None]]:
    """The web dashboard of local mode's fleet, on 127.0.0.1:port with its actions (this host's
    own user only): its URL, or why it is not served, and how to close it."""
    if not web_available():
        return f"not served ({INSTALL_HINT})", lambda: None
    try:
        served = listening(load_config(conf), port=port, enable_actions=True)
    except OSError as exc:
        return f"not served ({exc.strerror}: pass another --web-port, or 0)", lambda: None
    served.start()
    return served.url, served.close


def run_local(
    stop: threading.Event,
    force: threading.Event,
    *,
    demo: bool,
    port: int,
    stats_port: int,
    workers: int,
    web_port: int | None = None,
) -> None:
    """Start the endpoint, create the queue and table, serve until stop.

    The banner (and the demo) wait for the stats server to listen, so a taken stats port fails
    before anything is printed or sent.
    """
    importing = None if web_port is None else import_dashboard()
    with local_endpoint(port) as endpoint, tempfile.TemporaryDirectory(prefix="sqsjkr-") as tmp:
        use_endpoint(endpoint)
        session = make_session(region=LOCAL_REGION)
        sqs = make_client(session, "sqs")
        queue_url = create_queue(sqs, LOCAL_QUEUE, dead_letter=True)
        dead_letter_url = str(sqs.get_queue_url(QueueName=f"{LOCAL_QUEUE}-dlq")["QueueUrl"])
        create_table(make_client(session, "dynamodb"), LOCAL_TABLE)
        role_arn = create_schedule_group(session)
        create_sample_schedules(session, queue_target(sqs, queue_url).arn, role_arn)
        conf = write_config(Path(tmp), stats_port=stats_port, workers=workers, role_arn=role_arn)
        site = LocalSite(endpoint, queue_url, dead_letter_url, conf)
        watch = DemoWatch(sqs, site)

        class Receiving(NullNotifier):
            """Sends the demo once the daemon receives: the demo's delays are counted from then."""

            def ready(self) -> None:
                if demo:
                    send_demo(sqs, queue_url)
                    watch.start(*listening_at)

        #: The stats address, then what the banner said of the dashboard: the summary repeats both.
        listening_at: list[str] = []
        closing: list[Callable[[], None]] = []

        def listening(stats_address: str) -> None:
            shown = ""
            if web_port is not None:
                if importing is not None:
                    importing.join()
                shown, close = start_dashboard(conf, web_port)
                closing.append(close)
            click.echo(banner(site, stats_address, shown))
            listening_at.extend((stats_address, shown))

        try:
            serve(
                load_config(conf), stop, force=force, on_listening=listening, notifier=Receiving()
            )
        except StatsServerError as exc:
            raise LocalModeError(
                f"{exc}; pass another --stats-port, or --stats-port 0 for any free port"
            ) from exc
        finally:
            watch.close()
            for close in closing:
                close()
