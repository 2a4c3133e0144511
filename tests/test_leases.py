"""Leases under attack: a lock write answered late, renewals that fail, a holder frozen past its lease.

A job starts only on a fresh lease, and a holder that lost its lock says so (LOST) and counts it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.catchup import LEASE_TYPE
from sqsjkr.backends.dedupe import MemoryDedupe
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import Held, MemoryLocker
from sqsjkr.backends.members import MEMBER_TYPE
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.runner import RunResult, StopSwitch
from sqsjkr.daemon.worker import DELETE, Worker, WorkerSettings

from .conftest import (
    Aws,
    Start,
    config_text,
    counted,
    http_get_text,
    run_daemon,
    wait_until,
)
from .faults import Call, Fault, FaultProxy


def lock_write(call: Call) -> bool:
    """A write that takes a lock: try_lock's PutItem, or a claim's transaction that takes it."""
    if call.action == "TransactWriteItems":
        puts = [w["Put"]["Item"] for w in call.json.get("TransactItems", []) if "Put" in w]
        return any(item.get("Type") == {"S": "lock"} for item in puts)
    return call.action == "PutItem" and call.item_type() == "lock"


class FailingFrom:
    """Matches the calls of one action once a file exists, for some seconds from then."""

    def __init__(self, action: str, path: Path, seconds: float) -> None:
        self._action, self._path, self._seconds = action, path, seconds
        self._since: float | None = None

    def __call__(self, call: Call) -> bool:
        if call.action != self._action or not self._path.exists():
            return False
        if self._since is None:
            self._since = time.monotonic()
        return time.monotonic() < self._since + self._seconds


def test_a_lock_answered_late_is_renewed_before_its_job_starts_and_never_shared(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    aws_env: dict[str, str],
    moto_endpoint: str,
) -> None:
    """The recipe of the defect: A's lock write takes effect but its answer is held past the
    read timeout (3 s), so botocore sends it again and A learns that it holds the lock with
    most of its 4.5 s lease gone; then A's renewals fail for 2 s while B waits for the lock.
    Started on that lease, A's job would outlive it and B would take the lock over."""
    with FaultProxy(moto_endpoint) as proxy:
        proxy.add(Fault(lock_write, hold=5.5, times=1))
        proxy.add(Fault(FailingFrom("UpdateItem", tmp_path / "a.running", 2.0),
                        error=(500, "InternalServerError")))  # fmt: skip
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        # One worker, busy with A, no prefetch: B's message can only go to the second daemon.
        first, _ = run_daemon(
            start_daemon, tmp_path, aws, lease="4.5s", max_concurrent_num=1, prefetch=0
        )
        aws.send(
            {"command": "touch a.running; sleep 6; rm a.running; echo a >> ran", "lock_id": "L"}
        )
        wait_until((tmp_path / "a.running").exists, timeout=30, what="job A running")
        aws_env["AWS_ENDPOINT_URL"] = moto_endpoint
        second, port = run_daemon(start_daemon, tmp_path, aws, lease="4.5s")
        aws.send({"command": "[ -f a.running ] && echo OVERLAP >> ran; echo b >> ran",
                  "lock_id": "L"})  # fmt: skip
        wait_until(counted(port, succeeded=1), timeout=30, what="job B run")
    assert (tmp_path / "ran").read_text().split() == ["a", "b"]  # never at once
    assert "of its lease left: renewing it first" in first.log
    assert "LOST" not in first.log
    assert first.stop() == 0 and second.stop() == 0


def test_a_holder_frozen_past_its_lease_learns_that_it_lost_its_lock(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "frozen.toml"
    # Its message stays hidden while it is frozen: only the lock lapses.
    # One worker, busy with A, no prefetch: B's message can only go to the second daemon.
    text = config_text(aws, stats="stats_port = 0", max_concurrent_num=1, prefetch=0)
    conf.write_text(
        text.replace("[lock]\n", '[lock]\nlease = "2s"\n').replace(
            "wait_time_seconds = 1", "wait_time_seconds = 1\nvisibility_timeout = 60"
        )
    )
    frozen = start_daemon("run", "-c", str(conf))
    frozen_port = frozen.stats_port
    aws.send(
        {"command": "touch a.started; while [ ! -f release ]; do sleep 0.05; done", "lock_id": "L"}
    )
    wait_until((tmp_path / "a.started").exists, what="job A running")
    frozen.proc.send_signal(signal.SIGSTOP)  # a frozen host: its job runs on, its beats stop
    try:
        other, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
        aws.send({"command": "echo b >> ran", "lock_id": "L"})
        wait_until(counted(port, succeeded=1), timeout=30, what="B took the lapsed lock and ran")
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
    (tmp_path / "release").touch()
    # Found by its next renewal or by its unlock, whichever comes first; said once.
    frozen.wait_for_log('LOST its lock "L": its lease')
    assert frozen.log.count("LOST its lock") == 1
    metrics = http_get_text(frozen_port, "/metrics")
    assert "\nsqsjkr_leases_lost_total 1.0\n" in metrics  # counted
    assert frozen.stop() == 0 and other.stop() == 0


# --- the worker, unit by unit ---------------------------------------------------------------


class StaleLocker(MemoryLocker):
    """Hands out leases with little left, as a write answered late would; renewals on request."""

    def __init__(self, clock: Callable[[], float], left: float, renew_ok: bool = True) -> None:
        super().__init__()
        self._clock = clock
        self._left = left
        self._renew_ok = renew_ok
        self.renewals = 0

    def try_lock(self, lock_id: str, event_id: str) -> Lease | Held:
        lease = super().try_lock(lock_id, event_id)
        if lease is None:
            return None
        return Lease(lease.key, lease.owner, until=self._clock() + self._left)

    def renew(self, lease: Lease) -> bool:
        self.renewals += 1
        if not self._renew_ok:
            self.unlock(lease)  # another daemon took it over meanwhile
            return False
        return super().renew(lease)


class Recorder:
    def __init__(self) -> None:
        self.ran = 0

    def run(
        self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
    ) -> RunResult:
        self.ran += 1
        return RunResult(0, 0.0)


def worker_with(locker: MemoryLocker, runner: Recorder, lost: list[int]) -> Worker:
    return Worker(
        dedupe=MemoryDedupe(),
        locker=locker,
        runner=runner,
        stopping=threading.Event(),
        settings=WorkerSettings(lease=60.0, lock_retry_interval=0.01),
        trigger=lambda *args: RunResult(0, 0.0),
        lease_lost=lambda: lost.append(1),
    )


def locked_entry() -> InFlight:
    job = Job(message_id="m1", command="x", lock_id="L", sent_at=time.time())
    return InFlight(Message("m1", "rh", "{}", job.sent_at), job)


@pytest.mark.parametrize(("left", "renewals"), [(59.0, 0), (41.0, 0), (39.0, 1), (0.5, 1)])
def test_a_job_starts_only_with_two_thirds_of_its_lease_left(left: float, renewals: int) -> None:
    lost: list[int] = []
    locker, runner = StaleLocker(time.time, left), Recorder()
    assert worker_with(locker, runner, lost).handle(locked_entry()).settle is DELETE
    assert (runner.ran, locker.renewals, lost) == (1, renewals, [])


def test_a_lock_lost_while_taking_it_is_counted_and_taken_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost: list[int] = []
    locker, runner = StaleLocker(time.time, 1.0, renew_ok=False), Recorder()
    worker = worker_with(locker, runner, lost)
    done = threading.Thread(target=worker.handle, args=(locked_entry(),))
    done.start()
    wait_until(lambda: locker.renewals >= 2, what="a second try at the lock")
    assert runner.ran == 0  # never started on a lost lock
    assert lost and 'job m1 LOST its lock "L"' in caplog.text
    locker._renew_ok = True
    done.join(10)
    assert runner.ran == 1


def test_an_unlock_that_finds_the_lock_taken_over_is_lost_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost: list[int] = []
    locker = MemoryLocker()

    class TakenOverWhileRunning(Recorder):
        def run(
            self, job: Job, *, timeout: float | None, stop: StopSwitch, context: Any = None
        ) -> RunResult:
            # Its lease passed, and another daemon took it over.
            locker._owners["L"], locker.held["L"] = "other-host:1:1", "other"
            return super().run(job, timeout=timeout, stop=stop, context=context)

    worker = worker_with(locker, TakenOverWhileRunning(), lost)
    assert worker.handle(locked_entry()).settle is DELETE
    assert lost == [1]
    assert 'job m1 LOST its lock "L": its lease had passed' in caplog.text
    assert locker.held == {"L": "other"}  # the other holder's lock is left alone


def test_a_job_takes_its_free_lock_in_its_claims_write_and_releases_it_with_its_record(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    out = tmp_path / "ran"
    aws.send({"command": f"echo ran >> {out}", "lock_id": "nightly", "event_id": "nightly"})
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws)
        wait_until(counted(port, succeeded=1), what="the job")
        writes = job_writes(proxy)
        # The claim (with the lock and the "running now" note), then the end (record, summary,
        # claim finished, lock released): no PutItem of the lock's own.
        assert writes == ["TransactWriteItems", "TransactWriteItems"]
        assert out.read_text() == "ran\n" and aws.lock_free("nightly")
        assert daemon.stop() == 0


DYNAMODB_WRITES = {"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"}


def job_writes(proxy: FaultProxy) -> list[str]:
    """The DynamoDB writes the daemon made for its jobs: not those of its own item (`daemons`)
    nor of the lease of catch-up's look for missed firings."""
    return [
        c.action
        for c in proxy.calls
        if c.action in DYNAMODB_WRITES and c.item_type() not in (MEMBER_TYPE, LEASE_TYPE)
    ]


def test_a_job_whose_lock_another_job_here_wants_does_not_try_it_in_its_claim(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    hold = f"touch {tmp_path}/a; while [ ! -f {tmp_path}/go ]; do sleep 0.05; done"
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=2)
        aws.send({"command": hold, "lock_id": "L", "event_id": "a"})
        wait_until((tmp_path / "a").exists, what="job a holding L")
        aws.send({"command": "true", "lock_id": "L", "event_id": "b"})
        wait_until(lambda: 'waits for lock "L"' in daemon.log, what="job b waiting for L")
        # Only a's claim tried the lock: b's went without it, then b tried it on its own.
        tries = [c.action for c in proxy.calls if lock_write(c)]
        assert tries == ["TransactWriteItems", "PutItem"]
        (tmp_path / "go").touch()
        wait_until(counted(port, succeeded=2), what="both jobs, one after the other")
        assert daemon.stop() == 0
