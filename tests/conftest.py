"""Fixtures: a real moto server over HTTP, a fresh queue and table per test, and a daemon subprocess.

Everything talks to moto through boto3's own AWS_ENDPOINT_URL variable, as users of ElasticMQ or LocalStack would.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import io
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from moto.server import ThreadedMotoServer

from sqsjkr.commands.cli import main
from sqsjkr.daemon.arenas import THREAD_CACHE_OFF
from sqsjkr.local.endpoint import LOCAL_ACCOUNT, cache_moto_routing, create_table
from sqsjkr.local.queues import install_fair_queues
from sqsjkr.local.transactions import install_fair_transactions

from .forked import ForkedCommand

REGION = "us-east-1"

# Every process the tests start runs with glibc's per-thread caches off, as `sqsjkr run` execs
# itself to: a daemon that a test execs need not exec itself again (a second interpreter's start,
# 0.3 s of CPU, for each of them), and a forked one has them off as a deployed daemon does.
# test_arenas.py starts its daemons without it, to test that exec.
os.environ.setdefault("GLIBC_TUNABLES", THREAD_CACHE_OFF)

#: The `sqsjkr` command that `pip install` put beside this interpreter.
SQSJKR_COMMAND = shutil.which("sqsjkr", path=str(Path(sys.executable).parent))


def sqsjkr_argv(*args: str) -> list[str]:
    """The command line of `sqsjkr ARGS` (python -m sqsjkr when the command is not installed;
    test_cli checks that it is)."""
    base = [SQSJKR_COMMAND] if SQSJKR_COMMAND else [sys.executable, "-m", "sqsjkr"]
    return [*base, *args]


def wait_until(predicate: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    """Poll predicate until it returns something truthy; fail the test after timeout.

    The polls start 20 ms apart and slow to one every quarter second: most conditions hold
    within a few polls, and a wait of seconds (a lease, a delay) need not ask the daemon or the
    endpoint, each poll a millisecond or more of CPU, twenty times a second."""
    deadline = time.monotonic() + timeout
    pause = 0.02
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


def wait_for_count(
    count: Callable[[], int], target: int, *, stall: float = 30.0, what: str = "items"
) -> None:
    """Poll count() until it reaches target; fail only after stall seconds in which it did not
    grow. A loaded machine slows a batch of work down, it does not stop it: a fixed budget for
    the whole batch fails a test that was only slow."""
    best, since = -1, time.monotonic()
    pause = 0.02
    while True:
        now = count()
        if now >= target:
            return
        if now > best:
            best, since = now, time.monotonic()
        elif time.monotonic() - since > stall:
            raise AssertionError(f"{what}: stuck at {now} of {target} for {stall:.0f}s")
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)


@dataclass
class Result:
    """A command's exit code and output, as subprocess.run gives them."""

    returncode: int
    stdout: str
    stderr: str


def sqsjkr(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`sqsjkr ARGS` in this process, by the entry point: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


def run_main(*args: str) -> Result:
    """`sqsjkr ARGS` in this process, its output captured without pytest's capsys."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exited:
            return Result(int(exited.code or 0), out.getvalue(), err.getvalue())
    raise AssertionError(f"sqsjkr {' '.join(args)} returned without an exit code")


Cli = Callable[..., Result]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Cli:
    """cli(ARGS, env=..., stdin=...): `sqsjkr ARGS` in this process as a Result, with these
    variables set and stdin (bytes or text) as its standard input. A command's work needs no
    process of its own; the daemon's does, and the installed command's few tests have theirs."""

    def run(*args: str, env: dict[str, str] | None = None, stdin: str | bytes = "") -> Result:
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        data = stdin.encode() if isinstance(stdin, str) else stdin
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        return Result(*sqsjkr(capsys, *args))

    return run


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    # DynamoDB's transactions, as local mode has them: stock moto's copy the whole table for each
    # item of a transaction, slower as the table fills (a combined claim and end writes several),
    # until botocore's read timeout; and they race other requests into 500s.
    install_fair_transactions()
    # Queues that count their messages on one clock read, not one a message, as local mode's.
    install_fair_queues()
    # And each request routed without moto listing its ~170 directories, a millisecond of CPU each.
    cache_moto_routing()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of this process and of every daemon started by the test."""
    values = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    for key in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL_SQS",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ):
        monkeypatch.delenv(key, raising=False)
    return values


@dataclass
class Aws:
    """A queue and a table of this test's own on the moto server."""

    sqs: Any
    dynamodb: Any
    queue_name: str
    queue_url: str
    table: str

    def send(self, body: str | dict[str, Any], delay: int = 0) -> str:
        text = body if isinstance(body, str) else json.dumps(body)
        response = self.sqs.send_message(
            QueueUrl=self.queue_url, MessageBody=text, DelaySeconds=delay
        )
        return str(response["MessageId"])

    def item(self, id_: str, type_: str) -> dict[str, Any] | None:
        response = self.dynamodb.get_item(
            TableName=self.table, Key={"Id": {"S": id_}, "Type": {"S": type_}}, ConsistentRead=True
        )
        return response.get("Item")

    def lock_free(self, lock_id: str) -> bool:
        """No one holds lock_id: its item is gone, or released (no EventId, to Go either)."""
        item = self.item(lock_id, "lock")
        return item is None or "EventId" not in item

    def queue_counts(self) -> tuple[int, int]:
        """(visible, in flight) messages."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return (
            int(attrs["ApproximateNumberOfMessages"]),
            int(attrs["ApproximateNumberOfMessagesNotVisible"]),
        )


@pytest.fixture
def aws(aws_env: dict[str, str]) -> Aws:
    return new_aws()


#: What a client takes from the environment as it is made: its clients are made again when one changes.
_CLIENT_ENVIRONMENT = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_SQS",
    "AWS_ENDPOINT_URL_DYNAMODB",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
)


@functools.cache
def _clients(*environment: str | None) -> tuple[Any, Any]:
    """The tests' SQS and DynamoDB clients for an environment (its values, _CLIENT_ENVIRONMENT):
    made once per worker, not per test (12 ms of CPU each time, for some 900 tests)."""
    del environment  # only the cache's key: boto3 reads the environment itself
    return boto3.client("sqs", region_name=REGION), boto3.client("dynamodb", region_name=REGION)


def new_aws() -> Aws:
    """A queue and a table of their own, in the AWS environment set (aws_env, or a module's)."""
    suffix = uuid.uuid4().hex[:10]
    sqs, dynamodb = _clients(*(os.environ.get(name) for name in _CLIENT_ENVIRONMENT))
    queue_name = f"jobs-{suffix}"
    queue_url = sqs.create_queue(QueueName=queue_name)["QueueUrl"]
    table = f"sqsjkr-{suffix}"
    create_table(dynamodb, table)
    return Aws(sqs, dynamodb, queue_name, queue_url, table)


def config_text(aws: Aws, *, stats: str, **kicker: Any) -> str:
    """A config file for aws; stats is a `stats_port = N` or `stats_socket = "..."` line."""
    kicker.setdefault("max_concurrent_num", 4)
    kicker_lines = "\n".join(f"{k} = {json.dumps(v)}" for k, v in kicker.items())
    return f"""
[account]
id = "{LOCAL_ACCOUNT}"
region = "{REGION}"

[sqs]
queue_name = "{aws.queue_name}"
wait_time_seconds = 1

[kicker]
{kicker_lines}
{stats}

[lock]
table = "{aws.table}"
retry_interval = "0.1s"
"""


class Daemon:
    """`sqsjkr ARGS` started as a real process (forked from a server that has imported the daemon,
    tests/forked.py); its log goes to a file the test can poll."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        workdir: Path,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.args = args
        self.log_path = workdir / f"daemon-{uuid.uuid4().hex[:6]}.log"
        self.log_path.touch()
        self.proc = ForkedCommand(args, {**os.environ, **env}, workdir, self.log_path, preexec_fn)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def conf(self) -> str:
        """The config file it was started with (-c)."""
        return self.args[self.args.index("-c") + 1]

    @property
    def stats_port(self) -> int:
        """The port its stats listen on, from its log. The tests' configs ask for any free port
        (stats_port = 0): a port found free here could be taken before the daemon binds it."""
        match = re.search(r"serving stats on 127\.0\.0\.1:(\d+)", self.log)
        assert match, f"no stats port in the log:\n{self.log}"
        return int(match.group(1))

    def wait_for_log(self, text: str, timeout: float = 15.0) -> None:
        def seen() -> bool:
            if self.proc.poll() is not None and text not in self.log:
                raise AssertionError(
                    f"daemon exited ({self.proc.returncode}) before logging {text!r}:\n{self.log}"
                )
            return text in self.log

        try:
            wait_until(seen, timeout, f"log line {text!r}")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- daemon log ---\n{self.log}") from None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            # Where it is stuck: the daemon writes its threads' stacks on SIGUSR1.
            self.proc.send_signal(signal.SIGUSR1)
            time.sleep(1)
            raise AssertionError(f"daemon did not stop within {timeout}s:\n{self.log}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def start_daemon(tmp_path: Path, aws_env: dict[str, str]) -> Iterator[Callable[..., Daemon]]:
    started: list[Daemon] = []

    def start(
        *args: str, wait_ready: bool = True, preexec_fn: Callable[[], None] | None = None
    ) -> Daemon:
        daemon = Daemon(list(args), aws_env, tmp_path, preexec_fn)
        started.append(daemon)
        if wait_ready:
            daemon.wait_for_log("receiving with")
        return daemon

    yield start
    for daemon in started:
        daemon.kill()


def http_get_text(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200, response.status
        return response.read().decode()
    finally:
        conn.close()


def http_get_json(port: int, path: str) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        assert response.status == 200, response.status
        return json.loads(response.read())
    finally:
        conn.close()


Start = Callable[..., Daemon]


def run_daemon(
    start: Start,
    tmp_path: Path,
    aws: Aws,
    *,
    lease: str | None = None,
    preexec_fn: Callable[[], None] | None = None,
    **kicker: Any,
) -> tuple[Daemon, int]:
    """`sqsjkr run` on a config for aws with these [kicker] keys (and [lock] lease); returns
    the daemon, once receiving, and its stats port."""
    text = config_text(aws, stats="stats_port = 0", **kicker)
    if lease is not None:
        text = text.replace("[lock]\n", f'[lock]\nlease = "{lease}"\n')
    daemon = run_on(start, tmp_path, text, preexec_fn=preexec_fn)
    return daemon, daemon.stats_port


def run_on(start: Start, tmp_path: Path, text: str, *args: str, **kwargs: Any) -> Daemon:
    """`sqsjkr run ARGS` on a config file of this text, named apart from the others a test
    may start."""
    conf = tmp_path / f"config-{uuid.uuid4().hex[:6]}.toml"
    conf.write_text(text)
    return start("run", "-c", str(conf), *args, **kwargs)


def invocations(port: int) -> dict[str, int]:
    """The invocation counters of the daemon whose stats listen on port."""
    return dict(http_get_json(port, "/stats/metrics/v2")["invocations"])


def counted(port: int, **expected: int) -> Callable[[], bool]:
    """A wait_until predicate: the daemon's counters have these values."""
    return lambda: all(invocations(port)[k] == n for k, n in expected.items())


@pytest.fixture
def own_endpoint(aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Outage]:
    """A moto server of this test's own, which the test can take down and bring back."""
    outage = Outage()
    monkeypatch.setenv("AWS_ENDPOINT_URL", outage.url)
    aws_env["AWS_ENDPOINT_URL"] = outage.url
    yield outage
    outage.server.stop()


class Outage:
    """A moto server on a fixed port; its state lives in this process, so a restart keeps it."""

    def __init__(self) -> None:
        self.port = 0  # any free port at first; the same one when it comes back
        self.server = self._start()
        self.port = self.server.get_host_and_port()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def _start(self) -> ThreadedMotoServer:
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        server.start()
        return server

    def down(self) -> None:
        self.server.stop()

    def up(self) -> None:
        self.server = self._start()


# -- moto enforcing IAM ---------------------------------------------------------------------------


def set_moto_auth(endpoint: str, free_actions: str) -> None:
    """Make moto enforce IAM after this many more requests ("inf": never)."""
    parts = urlsplit(endpoint)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/moto-api/reset-auth",
            body=free_actions,
            headers={"Content-Type": "text/plain"},
        )
        assert conn.getresponse().status == 200
    finally:
        conn.close()


#: What AWS allows everyone, and what moto asks for that AWS does not have (AWS authorises a
#: transaction by the actions of its parts).
MOTO_EXTRAS = frozenset({"sts:GetCallerIdentity", "dynamodb:TransactWriteItems"})


@pytest.fixture
def host_user(
    aws_env: dict[str, str], moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[set[str]], None]]:
    """Become, in this process and in the daemons the test starts after, an IAM user allowed
    these actions, with moto enforcing IAM until the test ends."""

    def become(actions: set[str]) -> None:
        iam = boto3.client("iam", region_name=REGION)
        user = f"host-{uuid.uuid4().hex[:8]}"
        iam.create_user(UserName=user)
        statement = {"Effect": "Allow", "Action": sorted(actions), "Resource": "*"}
        iam.put_user_policy(
            UserName=user,
            PolicyName="host",
            PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [statement]}),
        )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        for name, value in (
            ("AWS_ACCESS_KEY_ID", key["AccessKeyId"]),
            ("AWS_SECRET_ACCESS_KEY", key["SecretAccessKey"]),
        ):
            monkeypatch.setenv(name, value)
            aws_env[name] = value
        set_moto_auth(moto_endpoint, "0")

    try:
        yield become
    finally:
        set_moto_auth(moto_endpoint, "inf")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (a stable sort keeps the rest in order): xdist hands tests out in
    this order, and a minute-long test handed out last would leave the other workers idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
