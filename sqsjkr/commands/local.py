"""Local mode: an embedded moto server on 127.0.0.1 holding the queue and the table, and the daemon on it.

For a first look, demos and tests; moto comes with the `sqsjkr[local]` extra.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import socket
import sys
import tempfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.contract.config import load_config
from sqsjkr.contract.job import build_body
from sqsjkr.daemon.service import serve
from sqsjkr.errors import LocalModeError, StatsServerError

log = logging.getLogger("sqsjkr.local")

LOCAL_REGION = "us-east-1"
#: moto's default account id.
LOCAL_ACCOUNT = "123456789012"
LOCAL_QUEUE = "sqsjkr-local"
LOCAL_TABLE = "sqsjkr"


@dataclass(frozen=True)
class DemoJob:
    """One message of the demo: what it shows, its body, its DelaySeconds and how it should end."""

    what: str
    body: str
    delay: int
    outcome: str  # the invocations counter it should add to


#: The lock jobs share lock_id "report": the delays make sure report 1 holds it (for 5 s) before
#: report 2 waits for it and the abort job gives up on it. The late job is delayed past its
#: life_time, so it is cancelled and the trigger prints an alert.
DEMO_JOBS = [
    DemoJob(
        "a plain job with an env",
        build_body('echo "hello, $WHO"', envs={"WHO": "newcomer"}, event_id="demo-hello"),
        0,
        "succeeded",
    ),
    DemoJob(
        "a job holding lock 'report' for 5s",
        build_body(
            'echo "report 1: started, holding the lock for 5s"; sleep 5; echo "report 1: done"',
            event_id="demo-report-1",
            lock_id="report",
        ),
        0,
        "succeeded",
    ),
    DemoJob(
        "a job waiting for lock 'report'",
        build_body(
            'echo "report 2: ran once report 1 released the lock"',
            event_id="demo-report-2",
            lock_id="report",
        ),
        1,
        "succeeded",
    ),
    DemoJob(
        "a job giving up because 'report' is locked",
        build_body(
            'echo "never printed"', event_id="demo-abort", lock_id="report", abort_if_locked=True
        ),
        2,
        "failed",
    ),
    DemoJob(
        "a job arriving after its 1s life_time",
        build_body('echo "never printed"', event_id="demo-late", life_time="1s"),
        3,
        "failed",
    ),
    DemoJob(
        "a job that fails",
        build_body('echo "about to fail" >&2; exit 3', event_id="demo-fail"),
        0,
        "errored",
    ),
    DemoJob(
        "a job stopped by its 2s timeout",
        build_body(
            'echo "sleeping 60s under a 2s timeout"; sleep 60',
            event_id="demo-timeout",
            timeout="2s",
        ),
        0,
        "errored",
    ),
    DemoJob(
        "a message that is not a job (moved to the dead-letter queue)",
        "this is not JSON",
        0,
        "failed",
    ),
]


#: How often the demo reads the stats endpoint while its jobs run.
_DEMO_POLL_SECONDS = 0.25
#: The invocation counters of which each message adds to exactly one; timed_out is part of errored.
_OUTCOMES = ("succeeded", "errored", "failed", "duplicates")


@contextmanager
def local_endpoint(port: int = 0) -> Iterator[str]:
    """A moto server on 127.0.0.1 for the lifetime of the block; yields its endpoint URL."""
    try:
        from moto.server import ThreadedMotoServer
    except ImportError as exc:
        raise LocalModeError("local mode needs moto: pip install 'sqsjkr[local]'") from exc
    if port:
        _check_port_free(port)
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


@dataclass(frozen=True)
class LocalSite:
    """What `sqsjkr local` set up, for the lines it prints."""

    endpoint: str
    queue_url: str
    dead_letter_url: str
    conf: Path


def sqsjkr_command() -> str:
    """This sqsjkr's own command, by absolute path: its virtualenv need not be on PATH."""
    beside = shutil.which("sqsjkr", path=os.path.dirname(sys.executable))
    if beside is not None:
        return shlex.quote(os.path.abspath(beside))
    return shlex.join([sys.executable, "-m", "sqsjkr"])


def banner(site: LocalSite, stats_address: str) -> str:
    """What local mode prints once it listens: where everything is, and how to send a job."""
    return (
        f"sqsjkr local: AWS endpoint {site.endpoint} (moto), queue {LOCAL_QUEUE} "
        f"(dead letters: {LOCAL_QUEUE}-dlq), table {LOCAL_TABLE}\n"
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2\n"
        "Send a job from another shell:\n"
        f"  AWS_ENDPOINT_URL={site.endpoint} AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local \\\n"
        f"    {sqsjkr_command()} send -c {shlex.quote(str(site.conf))} --command 'echo hello'\n"
        "Stop: Ctrl-C"
    )


def run_local(
    stop: threading.Event,
    force: threading.Event,
    *,
    demo: bool,
    port: int,
    stats_port: int,
    workers: int,
) -> None:
    """Start the endpoint, create the queue and table, serve until stop.

    The banner (and the demo) wait for the stats server to listen, so a taken stats port fails
    before anything is printed or sent.
    """
    with local_endpoint(port) as endpoint, tempfile.TemporaryDirectory(prefix="sqsjkr-") as tmp:
        use_endpoint(endpoint)
        session = make_session(region=LOCAL_REGION)
        sqs = make_client(session, "sqs")
        queue_url = create_queue(sqs, LOCAL_QUEUE, dead_letter=True)
        dead_letter_url = str(sqs.get_queue_url(QueueName=f"{LOCAL_QUEUE}-dlq")["QueueUrl"])
        create_table(make_client(session, "dynamodb"), LOCAL_TABLE)
        conf = write_config(Path(tmp), stats_port=stats_port, workers=workers)
        site = LocalSite(endpoint, queue_url, dead_letter_url, conf)
        watch = DemoWatch(sqs, site)

        def listening(stats_address: str) -> None:
            click.echo(banner(site, stats_address))
            if demo:
                send_demo(sqs, queue_url)
                watch.start(stats_address)

        try:
            serve(load_config(conf), stop, force=force, on_listening=listening)
        except StatsServerError as exc:
            raise LocalModeError(
                f"{exc}; pass another --stats-port, or --stats-port 0 for any free port"
            ) from exc
        finally:
            watch.close()


def send_demo(sqs: Any, queue_url: str) -> None:
    for job in DEMO_JOBS:
        sent = sqs.send_message(QueueUrl=queue_url, MessageBody=job.body, DelaySeconds=job.delay)
        log.info("demo: sent %s as message %s", job.what, sent["MessageId"])


class DemoWatch:
    """Polls the stats endpoint until every demo message has an outcome, then prints a summary.

    Its thread is started by start() and joined by close(), both called by run_local.
    """

    def __init__(self, sqs: Any, site: LocalSite) -> None:
        self._sqs = sqs
        self._site = site
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, stats_address: str) -> None:
        self._thread = threading.Thread(
            target=self._watch, args=(stats_address,), name="sqsjkr-demo-watch"
        )
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self, stats_address: str) -> None:
        url = f"http://{stats_address}/stats/metrics/v2"
        while not self._done.wait(_DEMO_POLL_SECONDS):
            counts = _invocations(url)
            if counts is not None and sum(counts[k] for k in _OUTCOMES) >= len(DEMO_JOBS):
                dead = _peek_dead_letters(self._sqs, self._site.dead_letter_url)
                click.echo(demo_summary(counts, self._site, stats_address, dead))
                return


def _invocations(url: str) -> dict[str, int] | None:
    """The invocation counters at the stats url; None while it cannot be read."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return dict(json.load(response)["invocations"])
    except (OSError, ValueError, KeyError):
        return None


def _peek_dead_letters(sqs: Any, url: str) -> list[tuple[str, str]]:
    """(body, sqsjkr_error) of the messages in the dead-letter queue, leaving them there."""
    try:
        # The failed counter goes up just before the message is moved: wait for it a little.
        response = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
            WaitTimeSeconds=2,
        )
    except (BotoCoreError, ClientError) as exc:
        log.warning("demo: cannot read the dead-letter queue: %s", describe(exc))
        return []
    return [
        (
            message["Body"],
            message.get("MessageAttributes", {}).get("sqsjkr_error", {}).get("StringValue", ""),
        )
        for message in response.get("Messages", [])
    ]


def demo_summary(
    counts: dict[str, int], site: LocalSite, stats_address: str, dead: list[tuple[str, str]]
) -> str:
    """What the demo did: the counters with the demo jobs behind each, and where to look next."""
    lines = [f"Demo done: all {len(DEMO_JOBS)} messages have an outcome. Invocations counted:"]
    for outcome in _OUTCOMES:
        whats = [job.what for job in DEMO_JOBS if job.outcome == outcome]
        count = f"{counts[outcome]}"
        if outcome == "errored":
            count += f" (timed_out {counts.get('timed_out', 0)})"
        lines.append(f"  {outcome:<10} {count}")
        lines.extend(f"      - {what}" for what in whats)
    lines.append(f"Dead-letter queue {LOCAL_QUEUE}-dlq ({site.dead_letter_url}):")
    if not dead:
        lines.append("  (no message there yet)")
    lines.extend(f"  body {body!r}, sqsjkr_error {error!r}" for body, error in dead)
    lines += [
        "Each job's output is in the log above, tagged [event_id message_id].",
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2",
        "The daemon keeps running: send it jobs as shown above; stop it with Ctrl-C.",
    ]
    return "\n".join(lines)
