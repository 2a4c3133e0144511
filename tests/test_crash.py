"""Crash safety end to end: kill -9, stop signals, timeouts and an endpoint outage, against real processes.

Leases are short here (2-10 s) so that what a crash leaves behind expires within a test.
"""

from __future__ import annotations

import os
import signal
import socket
import time
import uuid
from pathlib import Path

import boto3

from sqsjkr.local.endpoint import create_table

from .conftest import (
    REGION,
    Aws,
    Outage,
    Start,
    counted,
    run_daemon,
    wait_until,
)

WAIT_FOR_RELEASE = "while [ ! -f release ]; do sleep 0.05; done"


def alive(pid: int) -> bool:
    """Whether pid runs; a zombie that nobody reaped (PID 1 in a container may not) is dead."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_group(pid_file: Path) -> None:
    """Kill a job's whole process group, as losing its host would."""
    pgid = int(pid_file.read_text().split()[0])
    os.killpg(pgid, signal.SIGKILL)
    wait_until(lambda: not alive(pgid), what="job killed")


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def test_a_job_whose_daemon_is_killed_runs_again_on_another_daemon(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    first, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    message_id = aws.send({"command": f"echo $$ >> pids; echo run >> runs; {WAIT_FOR_RELEASE}"})
    wait_until(lambda: lines(tmp_path / "runs") == ["run"], what="job running")
    first.kill()
    kill_group(tmp_path / "pids")
    assert aws.queue_counts() == (0, 1)  # not deleted: in flight until its visibility ends
    (tmp_path / "release").touch()

    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    wait_until(counted(port, succeeded=1), what="job run again")
    assert lines(tmp_path / "runs") == ["run", "run"]
    assert f"message {message_id} delivered again (receive 2)" in second.log
    item = aws.item(message_id, "throttle")
    assert item is not None and "LeaseUntil" not in item
    assert item["Owner"]["S"].startswith(f"{socket.gethostname()}:{second.proc.pid}:")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="message deleted")
    assert second.stop() == 0


def test_a_lock_held_by_a_killed_daemon_is_taken_over_after_its_lease(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # Deleted on receive, so that only the lock is left behind by the crash.
    first, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s", delete_message="on_receive")
    aws.send({"command": f"echo $$ > pids; {WAIT_FOR_RELEASE}", "lock_id": "L"})
    wait_until((tmp_path / "pids").exists, what="the job running, holding its lock")
    # Due once the first daemon is gone: sent later, the killed daemon's abandoned long poll
    # (1 s) could still take it.
    aws.send({"command": "touch ran", "lock_id": "L"}, delay=3)
    first.kill()
    kill_group(tmp_path / "pids")
    lock = aws.item("L", "lock")
    assert lock is not None and lock["Owner"]["S"].startswith(
        f"{socket.gethostname()}:{first.proc.pid}:"
    )

    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    wait_until(counted(port, succeeded=1), what="the next job of the lock ran")
    assert (tmp_path / "ran").exists()
    assert f'lock "L" taken over from {lock["Owner"]["S"]}' in second.log
    assert aws.lock_free("L")
    assert second.stop() == 0


def test_a_lock_of_the_go_daemon_is_respected_however_old(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # The Go daemon's lock item has no lease: only its own unlock frees it.
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "L"}, "Type": {"S": "lock"}, "EventId": {"S": "go-job"}},
    )
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="1s")
    aws.send({"command": "touch ran", "lock_id": "L", "abort_if_locked": True})
    wait_until(counted(port, failed=1), what="aborted")
    aws.send({"command": "touch ran", "lock_id": "L"})
    daemon.wait_for_log('waits for lock "L"')
    time.sleep(2)  # well past the lease: what is checked is that nothing happens
    assert not (tmp_path / "ran").exists()
    aws.dynamodb.delete_item(TableName=aws.table, Key={"Id": {"S": "L"}, "Type": {"S": "lock"}})
    wait_until(counted(port, succeeded=1), what="ran once the Go daemon unlocked")
    assert daemon.stop() == 0


def test_sigterm_does_not_sit_out_a_long_poll_and_leaves_new_messages_queued(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    conf = next(tmp_path.glob("config-*.toml"))
    conf.write_text(conf.read_text().replace("wait_time_seconds = 1", "wait_time_seconds = 20"))
    daemon.stop()
    daemon = start_daemon("run", "-c", str(conf))
    daemon.wait_for_log("receiving with")
    # A 20 s long poll is under way; stopping must not sit it out.
    assert daemon.stop(timeout=10) == 0
    # The abandoned poll may still take a message that arrives now: it is not run, and it
    # reappears when its visibility timeout ends.
    aws.send({"command": "touch ran"})
    wait_until(lambda: aws.queue_counts() == (1, 0), timeout=30, what="message visible")
    assert not (tmp_path / "ran").exists()


def test_shutdown_timeout_stops_a_long_job_and_keeps_its_message(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(
        start_daemon, tmp_path, aws, lease="2s", shutdown_timeout="1s", kill_grace="5s"
    )
    message_id = aws.send(
        {"command": f"echo $$ > pids; touch started; {WAIT_FOR_RELEASE}", "lock_id": "L"}
    )
    wait_until(lambda: (tmp_path / "started").exists(), what="job running")
    job = int((tmp_path / "pids").read_text())
    assert daemon.stop(timeout=20) == 0
    assert not alive(job)
    assert "shutdown_timeout (1s): stopping 1 running job(s)" in daemon.log
    assert "by the shutdown; its message is given back to run again" in daemon.log
    # Visible again at once, for another daemon; nothing left held.
    assert aws.queue_counts() == (1, 0)
    assert aws.lock_free("L")
    assert aws.item(message_id, "throttle") is None
    assert not (tmp_path / "release").exists()

    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1), what="re-run elsewhere")
    assert second.stop() == 0


def test_a_second_signal_stops_running_jobs_without_waiting(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")  # no shutdown_timeout: no limit
    aws.send({"command": f"touch started; {WAIT_FOR_RELEASE}"})
    wait_until(lambda: (tmp_path / "started").exists(), what="job running")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_for_log("waiting for 1 in-flight job(s)")
    assert daemon.stop(signal.SIGTERM, timeout=20) == 0
    assert "a second signal: stopping 1 running job(s)" in daemon.log
    assert aws.queue_counts() == (1, 0)


def test_a_job_timeout_stops_the_whole_process_group(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(
        start_daemon, tmp_path, aws, lease="2s", job_timeout="1s", kill_grace="1s"
    )
    # One job with its own timeout field, one under [kicker] job_timeout; each leaves a grandchild.
    aws.send({"command": "sleep 300 & echo $! > own.pid; wait", "timeout": "500ms", "lock_id": "L"})
    aws.send({"command": "sleep 300 & echo $! > default.pid; wait"})
    wait_until(counted(port, errored=2, timed_out=2), what="two jobs timed out")
    for name in ("own.pid", "default.pid"):
        grandchild = int((tmp_path / name).read_text())
        wait_until(lambda pid=grandchild: not alive(pid), what=f"grandchild of {name} gone")
    assert aws.lock_free("L")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="timed-out jobs' messages deleted")
    assert "timed out after" in daemon.log
    assert daemon.stop() == 0


def test_an_endpoint_outage_under_running_jobs_loses_none_and_runs_none_twice(
    own_endpoint: Outage, start_daemon: Start, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=own_endpoint.url)
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=own_endpoint.url)
    queue_url = sqs.create_queue(QueueName=f"outage-{suffix}")["QueueUrl"]
    create_table(dynamodb, f"outage-{suffix}")
    aws = Aws(sqs, dynamodb, f"outage-{suffix}", queue_url, f"outage-{suffix}")
    # The outage is shorter than the lease: nothing may expire or run twice.
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="20s", max_concurrent_num=3)
    jobs = [f"j{i}" for i in range(6)]
    for job in jobs:
        aws.send(
            {
                "command": f"echo start-{job} >> trace; {WAIT_FOR_RELEASE}; echo end-{job} >> trace",
                "lock_id": job,
            }
        )
    wait_until(lambda: len(lines(tmp_path / "trace")) == 3, what="three jobs in flight")
    own_endpoint.down()
    daemon.wait_for_log("EndpointConnectionError", timeout=30)
    (tmp_path / "release").touch()  # the jobs end while the endpoint is away
    wait_until(lambda: len(lines(tmp_path / "trace")) == 6, what="running jobs ended")
    own_endpoint.up()
    wait_until(counted(port, succeeded=6), timeout=60, what="every job ran")
    trace = lines(tmp_path / "trace")
    for job in jobs:
        assert trace.count(f"start-{job}") == 1 and trace.count(f"end-{job}") == 1, trace
    wait_until(lambda: aws.queue_counts() == (0, 0), timeout=30, what="queue empty")
    assert daemon.proc.poll() is None
    assert daemon.stop() == 0
    for job in jobs:
        assert aws.lock_free(job)
