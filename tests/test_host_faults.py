"""A host fault is never the job's fault: out of file descriptors, jobs wait; stats cannot starve them.

The daemon runs with systemd's default soft limit of 1024 descriptors, under a flood of held
stats connections; a real EMFILE reaches the runner and the worker.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sqsjkr.backends.dedupe import MemoryDedupe
from sqsjkr.backends.locks import MemoryLocker
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.runner import ShellRunner, StopSwitch, run_trigger
from sqsjkr.daemon.worker import PAUSE, Worker, WorkerSettings
from sqsjkr.errors import HostFault

from .conftest import Aws, Start, counted, http_get_text, invocations, run_daemon, wait_until

#: systemd's default soft limit of open files for a service.
SYSTEMD_SOFT_NOFILE = 1024


class HeldConnections:
    """Many clients of the stats port that keep their connections open, each sending a header
    line every 2 s from the moment it connects, so that no per-read timeout ends them."""

    def __init__(self, port: int, count: int) -> None:
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.sockets: list[socket.socket] = []
        self._thread = threading.Thread(target=self._drip, name="held-connections")
        self._thread.start()
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"GET /stats/metrics HTTP/1.1\r\n")
            with self._lock:
                self.sockets.append(sock)

    def _drip(self) -> None:
        while not self._stop.wait(2):
            with self._lock:
                sockets = list(self.sockets)
            for sock in sockets:
                # Refused or cut by the server, it is still held open on our side.
                with contextlib.suppress(OSError):
                    sock.sendall(b"X-Slow: 1\r\n")

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.sockets:
            sock.close()


def accept_queue(port: int) -> int:
    """Connections waiting for the listener on 127.0.0.1:port to accept them (/proc/net/tcp:
    for a listening socket, rx_queue is its accept queue)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state, queues = fields[1], fields[3], fields[4]
        if state == "0A" and int(local.split(":")[1], 16) == port:
            return int(queues.split(":")[1], 16)
    raise AssertionError(f"nothing listens on port {port}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def limit_nofile() -> None:
    """preexec_fn of the daemon: systemd's default soft limit of 1024 open files."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (SYSTEMD_SOFT_NOFILE, hard))


@pytest.fixture
def enough_descriptors() -> Iterator[None]:
    """This test process holds over a thousand connections: raise its own soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4096:
        pytest.skip(f"the hard limit of open files is {hard}; the test needs 4096")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_held_stats_connections_cannot_starve_jobs_of_descriptors(
    start_daemon: Start, tmp_path: Path, aws: Aws, enough_descriptors: None
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws, preexec_fn=limit_nofile)
    limits = Path(f"/proc/{daemon.proc.pid}/limits").read_text()
    assert f"Max open files            {SYSTEMD_SOFT_NOFILE}" in limits
    held = HeldConnections(port, SYSTEMD_SOFT_NOFILE + 6)
    try:
        # Every connection has reached the daemon, which took or refused each one (or, were
        # its descriptors not protected, the daemon ran out of them taking them).
        wait_until(
            lambda: accept_queue(port) == 0 or open_fds(daemon.proc.pid) > SYSTEMD_SOFT_NOFILE - 8,
            timeout=30,
            what="the flood taken in",
        )
        for i in range(8):
            aws.send({"command": f"echo ran-{i} >> ran", "event_id": f"job-{i}"})
        wait_until(lambda: (tmp_path / "ran").exists() and len((tmp_path / "ran").read_text().split()) == 8,
                   timeout=60, what="all 8 jobs run")  # fmt: skip
        in_use = open_fds(daemon.proc.pid)
    finally:
        held.close()
    assert in_use < 100  # the flood holds at most a handful of the daemon's descriptors
    wait_until(counted(port, succeeded=8), what="8 jobs counted succeeded")
    assert invocations(port)["errored"] == 0
    wait_until(lambda: aws.queue_counts() == (0, 0), what="all messages deleted")
    assert "could not start sh" not in daemon.log
    assert daemon.stop() == 0


def test_held_stats_connections_do_not_lock_monitoring_out(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    _, port = run_daemon(start_daemon, tmp_path, aws)
    # Twice the connection cap, each sending a header line every 2 s and never ending it.
    held = HeldConnections(port, 32)
    try:

        def scraped() -> bool:
            with contextlib.suppress(OSError, http.client.HTTPException):
                return "sqsjkr_" in http_get_text(port, "/metrics")
            return False

        wait_until(scraped, timeout=4, what="a scrape of /metrics answered")
    finally:
        held.close()


@contextmanager
def descriptors_exhausted() -> Iterator[None]:
    """This process out of file descriptors, for real: a low soft limit, filled up."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds: list[int] = []
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 8, hard))
    try:
        while True:
            try:
                fds.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        yield
    finally:
        for fd in fds:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_emfile_at_start_is_a_host_fault_not_an_exit_code() -> None:
    job = Job(message_id="m1", command="echo never")
    with descriptors_exhausted(), pytest.raises(HostFault, match="could not start sh"):
        ShellRunner().run(job, timeout=None, stop=StopSwitch())
    with descriptors_exhausted(), pytest.raises(HostFault):
        run_trigger("cat", job)


def test_a_job_the_host_cannot_start_gives_back_its_claim_and_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dedupe, locker = MemoryDedupe(), MemoryLocker()
    worker = Worker(
        dedupe=dedupe,
        locker=locker,
        runner=ShellRunner(),
        stopping=threading.Event(),
        settings=WorkerSettings(),
        trigger=run_trigger,
    )
    job = Job(message_id="m1", command=f"touch {tmp_path}/ran", lock_id="L", sent_at=time.time())
    entry = InFlight(Message("m1", "rh", "{}", job.sent_at), job)
    with descriptors_exhausted():
        ending = worker.handle(entry)
    # Not run, not counted, not deleted; receiving pauses as for a store outage.
    assert (ending.settle, ending.counts) == (PAUSE, ())
    assert not (tmp_path / "ran").exists()
    assert dedupe.running == {} and dedupe.finished == set()  # the claim is given back
    assert locker.held == {}
    assert "job m1 not started: could not start sh: Too many open files" in caplog.text
    # With descriptors again, the same message runs.
    assert worker.handle(InFlight(entry.message, job)).settle.delete
    assert (tmp_path / "ran").exists()


def test_a_command_too_long_for_execve_is_the_jobs_own_failure(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # One argument over Linux's 128 KiB: E2BIG wherever it runs, so it is not run again.
    message_id = aws.send({"command": "echo " + "x" * 200_000, "event_id": "too-long"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, failed=1), what="the job counted failed")
    assert invocations(port)["errored"] == 0
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    daemon.wait_for_log(
        f"job {message_id} (event too-long) failed: it cannot be started (Argument list too long)"
    )
    assert daemon.stop() == 0
