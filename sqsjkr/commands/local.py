"""Local mode: an embedded moto server on 127.0.0.1 holding the queue and the table, and the daemon on it.

For a first look, demos and tests; moto comes with the `sqsjkr[local]` extra.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.contract.config import load_config
from sqsjkr.contract.job import build_body
from sqsjkr.daemon.service import serve
from sqsjkr.errors import LocalModeError

log = logging.getLogger("sqsjkr.local")

LOCAL_REGION = "us-east-1"
#: moto's default account id.
LOCAL_ACCOUNT = "123456789012"
LOCAL_QUEUE = "sqsjkr-local"
LOCAL_TABLE = "sqsjkr"

#: (what it shows, body, DelaySeconds). The lock jobs share lock_id "report": the delays make sure
#: report 1 holds it (for 5 s) before report 2 waits for it and the abort job gives up on it. The
#: late job is delayed past its life_time, so it is cancelled and the trigger prints an alert.
DEMO_JOBS = [
    (
        "a plain job with an env",
        build_body('echo "hello, $WHO"', envs={"WHO": "newcomer"}, event_id="demo-hello"),
        0,
    ),
    (
        "a job holding lock 'report' for 5s",
        build_body(
            'echo "report 1: started, holding the lock for 5s"; sleep 5; echo "report 1: done"',
            event_id="demo-report-1",
            lock_id="report",
        ),
        0,
    ),
    (
        "a job waiting for lock 'report'",
        build_body(
            'echo "report 2: ran once report 1 released the lock"',
            event_id="demo-report-2",
            lock_id="report",
        ),
        1,
    ),
    (
        "a job giving up because 'report' is locked",
        build_body(
            'echo "never printed"', event_id="demo-abort", lock_id="report", abort_if_locked=True
        ),
        2,
    ),
    (
        "a job arriving after its 1s life_time",
        build_body('echo "never printed"', event_id="demo-late", life_time="1s"),
        3,
    ),
    ("a job that fails", build_body('echo "about to fail" >&2; exit 3', event_id="demo-fail"), 0),
    (
        "a job stopped by its 2s timeout",
        build_body(
            'echo "sleeping 60s under a 2s timeout"; sleep 60',
            event_id="demo-timeout",
            timeout="2s",
        ),
        0,
    ),
    ("a message that is not a job (moved to the dead-letter queue)", "this is not JSON", 0),
]


@contextmanager
def local_endpoint(port: int = 0) -> Iterator[str]:
    """A moto server on 127.0.0.1 for the lifetime of the block; yields its endpoint URL."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise LocalModeError("local mode needs moto: pip install 'sqsjkr[local]'") from exc
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


def write_config(directory: Path, *, stats_port: int, workers: int) -> Path:
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
"""
    )
    return path


def run_local(
    stop: threading.Event,
    force: threading.Event,
    *,
    demo: bool,
    port: int,
    stats_port: int,
    workers: int,
) -> None:
    """Start the endpoint, create the queue and table, optionally send the demo, serve until stop."""
    with local_endpoint(port) as endpoint, tempfile.TemporaryDirectory(prefix="sqsjkr-") as tmp:
        use_endpoint(endpoint)
        session = make_session(region=LOCAL_REGION)
        sqs = make_client(session, "sqs")
        queue_url = create_queue(sqs, LOCAL_QUEUE, dead_letter=True)
        create_table(make_client(session, "dynamodb"), LOCAL_TABLE)
        conf = write_config(Path(tmp), stats_port=stats_port, workers=workers)
        config = load_config(conf)
        click.echo(
            f"sqsjkr local: AWS endpoint {endpoint} (moto), queue {LOCAL_QUEUE}, "
            f"table {LOCAL_TABLE}\n"
            "Send a job from another shell:\n"
            f"  AWS_ENDPOINT_URL={endpoint} AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \\\n"
            f"    sqsjkr send -c {conf} --command 'echo hello'\n"
            f"Stats: curl http://127.0.0.1:{stats_port}/stats/metrics/v2\n"
            "Stop: Ctrl-C",
        )
        if demo:
            for what, body, delay in DEMO_JOBS:
                sent = sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay)
                log.info("demo: sent %s as message %s", what, sent["MessageId"])
        serve(config, stop, force=force)
