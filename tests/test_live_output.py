"""Live output: a running job's output tail written by its daemon, and `sqsjkr history --follow`.

Real daemon subprocesses against moto; the follower is a real `sqsjkr` process too.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from botocore.exceptions import ClientError

from sqsjkr.backends.live import LIVE_TYPE_PREFIX, LiveOutput, MemoryLive
from sqsjkr.commands.follow import Printer, ctrl_c_noted
from sqsjkr.contract.config import load_config
from sqsjkr.contract.job import Job
from sqsjkr.daemon.live import LiveTails, LiveWriter
from sqsjkr.daemon.runner import ShellRunner, StopSwitch
from sqsjkr.errors import ConfigError
from sqsjkr.fleet.live import new_part

from .conftest import Aws, Start, config_text, counted, sqsjkr_argv, wait_until
from .faults import FaultProxy


def live_config(tmp_path: Path, aws: Aws, interval: str, **history: Any) -> Path:
    """A daemon's config with [history] live_output_interval = interval."""
    conf = tmp_path / f"live-{uuid.uuid4().hex[:6]}.toml"
    lines = "\n".join(f"{key} = {json.dumps(value)}" for key, value in history.items())
    text = config_text(aws, stats="stats_port = 0")
    conf.write_text(f'{text}\n[history]\nlive_output_interval = "{interval}"\n{lines}\n')
    return conf


def live_item(aws: Aws, event_id: str, message_id: str) -> dict[str, Any] | None:
    return aws.item(event_id, LIVE_TYPE_PREFIX + message_id)


def run_records(aws: Aws, event_id: str) -> list[dict[str, Any]]:
    response = aws.dynamodb.query(
        TableName=aws.table,
        KeyConditionExpression="Id = :id AND begins_with(#type, :run)",
        ExpressionAttributeNames={"#type": "Type"},
        ExpressionAttributeValues={":id": {"S": event_id}, ":run": {"S": "run#"}},
        ConsistentRead=True,
    )
    return [json.loads(item["Record"]["S"]) for item in response["Items"]]


#: A job that prints a line a second, then waits for the test's go-ahead (a file) to end.
GATED = (
    "for i in 1 2 3 4 5; do echo line $i; sleep 1; done; "
    "while [ ! -f release ]; do sleep 0.1; done; echo done"
)


def test_the_live_tail_grows_while_the_job_prints_and_goes_with_its_end(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon = start_daemon("run", "-c", str(live_config(tmp_path, aws, "1s")))
    port = daemon.stats_port
    message_id = aws.send({"command": GATED, "event_id": "printer", "envs": {"TOKEN": "s3cret"}})
    tails: list[str] = []

    def two_tails() -> bool:
        item = live_item(aws, "printer", message_id)
        if item is not None and item["Output"]["S"] not in tails:
            tails.append(item["Output"]["S"])
            assert int(item["Printed"]["N"]) == len(item["Output"]["S"].encode())
        return len(tails) >= 2

    wait_until(two_tails, timeout=30, what="two different live tails")
    assert not run_records(aws, "printer")  # still running: it waits for release
    assert tails[0].startswith("line 1\n") and tails[1].startswith(tails[0])
    item = live_item(aws, "printer", message_id)
    assert item is not None and item["Host"]["S"] and "s3cret" not in json.dumps(item)
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1), timeout=30, what="the job's end")
    # The run's final write deleted its live item.
    assert live_item(aws, "printer", message_id) is None
    [record] = run_records(aws, "printer")
    assert record["output"].endswith("line 5\ndone\n")
    assert record["output_bytes"] == len(record["output"].encode())
    assert daemon.stop() == 0


def test_a_job_shorter_than_the_interval_costs_no_call_and_a_longer_one_does(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon = start_daemon("run", "-c", str(live_config(tmp_path, aws, "2s")))
        port = daemon.stats_port
        short = aws.send({"command": "echo short", "event_id": "short"})
        wait_until(counted(port, succeeded=1), timeout=30, what="the short job")
        long = aws.send({"command": "for i in 1 2 3 4 5; do echo $i; sleep 1; done",
                         "event_id": "long"})  # fmt: skip
        wait_until(counted(port, succeeded=2), timeout=30, what="the long job")
        assert daemon.stop() == 0
    live_puts = [
        call.item_type()
        for call in proxy.calls
        if call.action == "PutItem" and (call.item_type() or "").startswith(LIVE_TYPE_PREFIX)
    ]
    assert LIVE_TYPE_PREFIX + short not in live_puts
    assert LIVE_TYPE_PREFIX + long in live_puts
    # Each item's removal rides on its run's final TransactWriteItems: no call of its own.
    assert not [call for call in proxy.calls if call.action == "DeleteItem"]
    deletes = [
        part["Delete"]["Key"]["Type"]["S"]
        for call in proxy.calls
        if call.action == "TransactWriteItems"
        for part in call.json["TransactItems"]
        if "Delete" in part
    ]
    assert deletes == [LIVE_TYPE_PREFIX + long]


class Follower:
    """`sqsjkr history EVENT_ID --follow` as a subprocess, its stdout read line by line."""

    def __init__(self, conf: Path, event_id: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            sqsjkr_argv("history", event_id, "--follow", "-c", str(conf), *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        self.lines: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines)),
            threading.Thread(target=self._read, args=(self.proc.stderr, self.err)),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for line in stream:
            into.append(line.rstrip("\n"))

    def told(self, text: str) -> None:
        """Wait until the follower says text on stderr: while it runs, for as long as a loaded
        machine makes its start take (a Python process, a boto3 client, its first reads); it
        fails at once if the follower ends without saying it."""

        def said() -> bool:
            if any(text in line for line in self.err):
                return True
            assert self.proc.poll() is None, f"the follower ended: {self.err}"
            return False

        wait_until(said, timeout=120, what=f"the follower to say {text!r}")

    def wait(self) -> int:
        try:
            code = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            status = Path(f"/proc/{self.proc.pid}/status").read_text().splitlines()
            signals = [line for line in status if line.startswith("Sig")]
            raise AssertionError(f"the follower goes on: {self.err}, {signals}") from None
        for reader in self._readers:
            reader.join()
        return code

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


@pytest.fixture
def followers() -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for follower in started:
        follower.close()


def test_follow_prints_the_output_as_it_grows_then_the_record(
    start_daemon: Start, tmp_path: Path, aws: Aws, followers: list[Follower]
) -> None:
    conf = live_config(tmp_path, aws, "1s")
    port = start_daemon("run", "-c", str(conf)).stats_port
    follower = Follower(conf, "printer")
    followers.append(follower)
    follower.told("waiting for the next one")
    job = GATED.replace("echo line $i", r"printf 'line %s \033[31mred\n' $i")
    message_id = aws.send({"command": job, "event_id": "printer"})
    wait_until(lambda: len(follower.lines) >= 2, timeout=30, what="two lines followed")
    assert not run_records(aws, "printer")  # printed while the job runs
    (tmp_path / "release").touch()
    assert follower.wait() == 0
    output = follower.lines[: follower.lines.index("done") + 1]
    assert output == [f"line {i} \\x1b[31mred" for i in range(1, 6)] + ["done"]
    header, row = follower.lines[len(output) :]
    assert header.startswith("ENDED") and "succeeded" in row and message_id in row
    assert any(f'following run "{message_id}"' in e for e in follower.err)
    wait_until(counted(port, succeeded=1), what="the daemon's count")


def test_follow_takes_a_next_run_that_starts_and_ends_between_two_polls(
    start_daemon: Start, tmp_path: Path, aws: Aws, followers: list[Follower]
) -> None:
    """A job of milliseconds is never seen running by a follower polling every 2 s: its end,
    after the follower began to wait, makes it the next run (not the run that ended before)."""
    conf = live_config(tmp_path, aws, "2s")
    port = start_daemon("run", "-c", str(conf)).stats_port
    aws.send({"command": "echo before", "event_id": "quick"})
    wait_until(counted(port, succeeded=1), timeout=30, what="the run before")
    follower = Follower(conf, "quick")
    followers.append(follower)
    wait_until(lambda: any("waiting for the next one" in e for e in follower.err),
               what="the follower waiting")  # fmt: skip
    message_id = aws.send({"command": "echo after", "event_id": "quick"})
    assert follower.wait() == 0
    assert follower.lines[0] == "after" and message_id in follower.lines[2], follower.lines


def test_follow_of_a_failed_run_by_message_id_exits_1(
    start_daemon: Start, tmp_path: Path, aws: Aws, followers: list[Follower]
) -> None:
    conf = live_config(tmp_path, aws, "1s")
    port = start_daemon("run", "-c", str(conf)).stats_port
    message_id = aws.send({"command": "echo oops; exit 3", "event_id": "failing"})
    wait_until(counted(port, errored=1), timeout=30, what="the failed run")
    follower = Follower(conf, "failing", "--message-id", message_id)
    followers.append(follower)
    assert follower.wait() == 1
    assert follower.lines[0] == "oops"
    assert "errored" in follower.lines[2] and message_id in follower.lines[2]


def test_ctrl_c_stops_a_waiting_follower_quietly_with_130(
    start_daemon: Start, tmp_path: Path, aws: Aws, followers: list[Follower]
) -> None:
    conf = live_config(tmp_path, aws, "1s")
    follower = Follower(conf, "never")
    followers.append(follower)
    follower.told("waiting for the next one")
    follower.proc.send_signal(signal.SIGINT)
    assert follower.wait() == 130
    assert follower.lines == [] and len(follower.err) == 1, follower.err


def test_follow_needs_an_event_id(tmp_path: Path, aws: Aws) -> None:
    conf = live_config(tmp_path, aws, "1s")
    done = subprocess.run(
        sqsjkr_argv("history", "--follow", "-c", str(conf)), capture_output=True, text=True
    )
    assert done.returncode == 2 and "--follow needs an EVENT_ID" in done.stderr


def test_new_part_prints_only_what_is_new_and_marks_what_the_window_missed() -> None:
    assert new_part("abc\n", 4, 0) == (0, b"abc\n")
    assert new_part("abc\ndef\n", 8, 4) == (0, b"def\n")
    assert new_part("abc\n", 4, 4) == (0, b"")
    # The tail is a window of its last bytes: 10 bytes were printed between two reads.
    assert new_part("ghij\n", 20, 10) == (5, b"ghij\n")
    shown: list[str] = []
    printer = Printer(shown.append)
    printer.show("one\ntw", 6)
    printer.show("one\ntwo\x1b[2J\r\n", 13)  # escaped as `history --output` does
    printer.show("ghij\n", 30)
    printer.show("ghij\né", 32)
    printer.end_line()
    assert "".join(shown) == "one\ntwo\\x1b[2J\n[... 12 bytes skipped ...]\nghij\né\n"


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ('"0s"', "at least 1s"),
        ('"2h"', "at most 1h"),
        ('"soon"', "invalid"),
        ("true", "live_output_interval"),
    ],
)
def test_live_output_interval_is_checked(tmp_path: Path, aws: Aws, value: str, error: str) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(
        config_text(aws, stats="stats_port = 0") + f"\n[history]\nlive_output_interval = {value}\n"
    )
    with pytest.raises(ConfigError, match="live_output_interval") as caught:
        load_config(str(conf))
    assert error in str(caught.value)


def test_live_output_interval_defaults_to_10s(tmp_path: Path, aws: Aws) -> None:
    conf = tmp_path / "plain.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    assert load_config(str(conf)).history.live_output_interval.seconds == 10


class CountedTails(LiveTails):
    """LiveTails that count the writer's passes, so that a test can let a few go by."""

    passes = 0

    def wait_due(self) -> Any:
        due = super().wait_due()
        self.passes += 1
        return due


class FailingOnce(MemoryLive):
    def __init__(self) -> None:
        super().__init__()
        self.failed = False

    def write(self, live: LiveOutput) -> None:
        if not self.failed:
            self.failed = True
            raise ClientError({"Error": {"Code": "InternalServerError"}}, "PutItem")
        super().write(live)


def test_the_writer_writes_a_tail_only_when_it_grew_and_retries_a_failed_write(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr")
    store = FailingOnce()
    tails = CountedTails(0.02)
    job = Job(command="x", message_id="m1", event_id="ev")
    with LiveWriter(store, tails), tails.watching(job, 8) as tail:
        passes = tails.passes
        wait_until(lambda: tails.passes >= passes + 3, what="passes over a silent job")
        assert not store.failed  # nothing printed: nothing to write
        tail.add(b"one\n")
        wait_until(lambda: store.read("ev", "m1"), what="the first tail")
        tail.add(b"two two\n")
        wait_until(lambda: (store.read("ev", "m1") or LiveOutput("", "", "", 0, 0, "")).printed == 12,
                   what="the grown tail")  # fmt: skip
        writes, passes = store.writes, tails.passes
        wait_until(lambda: tails.passes >= passes + 3, what="passes over an unchanged tail")
        assert store.writes == writes == 2
    found = store.read("ev", "m1")
    assert found is not None and found.output == "two two\n"  # the last 8 bytes
    warnings = [r for r in caplog.records if r.name == "sqsjkr.live"]
    assert "could not write its live output (InternalServerError" in warnings[0].getMessage()
    assert warnings[1].getMessage() == "live output is written again"


def test_a_shell_job_shorter_than_the_interval_is_never_written() -> None:
    store = MemoryLive()
    tails = LiveTails(3600)
    runner = ShellRunner(tail_bytes=64, live=tails)
    with LiveWriter(store, tails):
        result = runner.run(Job(command="echo hi", message_id="m", event_id="e"),
                            timeout=None, stop=StopSwitch())  # fmt: skip
    assert result.output.merged == "hi\n" and result.output.merged_bytes == 3
    assert store.writes == 0


def test_a_job_started_while_others_run_does_not_wake_the_writer() -> None:
    """The live writer sleeps until the soonest running job is due. A job that starts while
    others run is due later than they are (an interval after its start), so its start leaves
    the writer asleep: a burst of jobs costs the writer no wake-up per job. The first job after
    an idle spell wakes it, since it sleeps without a deadline then."""
    writer_looks: list[float] = []

    def clock() -> float:
        if threading.current_thread().name == "writer":
            writer_looks.append(0.0)
        return 100.0

    tails = LiveTails(60.0, monotonic=clock)
    woken: list[object] = []
    writer = threading.Thread(target=lambda: woken.append(tails.wait_due()), name="writer")
    writer.start()
    try:
        wait_until(lambda: len(writer_looks) == 1, what="the writer asleep with no job")
        with tails.watching(Job(command="true", message_id="first"), 100):
            wait_until(lambda: len(writer_looks) == 2, what="the writer woken by the first job")
            with tails.watching(Job(command="true", message_id="second"), 100):
                # Nothing to poll for: a woken writer would look within microseconds.
                quiet_until = time.monotonic() + 0.3
                while time.monotonic() < quiet_until:
                    assert len(writer_looks) == 2, "the second job's start woke the writer"
                    time.sleep(0.01)
    finally:
        tails.wake()
        writer.join()
    assert woken == [None]


def test_a_ctrl_c_that_a_finalizer_drops_still_stops_a_follower(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Python prints and drops a KeyboardInterrupt raised while a finalizer runs: the follower
    notes the Ctrl-C as well, and stops at its next poll."""
    dropped: list[BaseException | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda hook: dropped.append(hook.exc_value))

    class SignalledWhileFinalized:
        def __del__(self) -> None:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0)  # the handler runs here, inside the finalizer

    with ctrl_c_noted() as interrupted:
        assert not interrupted()
        SignalledWhileFinalized()
        assert dropped and isinstance(dropped[0], KeyboardInterrupt)  # Python dropped it
        assert interrupted()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
