"""Close behind (a run's end written off its worker's path): a stop waits for an end still on the
wire and gives back the prefetched jobs, and a lock's next job on one worker finds it given back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqsjkr.backends.dedupe import THROTTLE_TYPE

from .conftest import Aws, Start, counted, run_daemon, wait_until
from .faults import Call, Fault, FaultProxy


def finishes_a_claim(call: Call) -> bool:
    """A TransactWriteItems that finishes a dedupe claim (a run's end, folded)."""
    if call.action != "TransactWriteItems":
        return False
    items: list[dict[str, Any]] = call.json.get("TransactItems", [])
    return any(
        w.get("Update", {}).get("Key", {}).get("Type") == {"S": THROTTLE_TYPE}
        and "REMOVE LeaseUntil" in w.get("Update", {}).get("UpdateExpression", "")
        for w in items
    )


def test_a_stop_waits_for_an_end_written_behind_and_gives_back_the_prefetched(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        # One worker and the default prefetch: the first job's end is written behind it.
        daemon, _ = run_daemon(
            start_daemon, tmp_path, aws, max_concurrent_num=1, shutdown_timeout="1s"
        )
        first = aws.send(
            {"command": "touch first; while [ ! -e go ]; do sleep 0.05; done", "event_id": "first"}
        )
        wait_until((tmp_path / "first").exists, what="the first job running")
        for i in range(3):
            aws.send({"command": f"touch later-{i}; sleep 30", "event_id": f"later-{i}"})
        wait_until(lambda: aws.queue_counts() == (0, 4), what="the later jobs prefetched")
        # The first run's end stays on the wire for 3 s after it took effect.
        held = proxy.add(Fault(finishes_a_claim, hold=3.0, times=1))
        (tmp_path / "go").touch()
        wait_until(lambda: held.hits == 1, what="the first run's end on the wire")
        assert daemon.stop() == 0
    claim = aws.item(first, THROTTLE_TYPE)
    assert claim is not None and "LeaseUntil" not in claim  # its end written
    # Its message deleted; the later ones back on the queue (cancelled, or never started).
    wait_until(lambda: aws.queue_counts() == (3, 0), timeout=20, what="the later ones back")
    started = [i for i in range(3) if (tmp_path / f"later-{i}").exists()]
    assert len(started) <= 1, started


def test_jobs_of_one_lock_prefetched_by_one_worker_each_run_once_and_leave_it_free(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # One worker, the default prefetch: each run's end, written behind the worker, gives the
    # lock back while the next job of that lock already claims.
    for i in range(4):
        aws.send({"command": f"echo {i} >> ran", "event_id": f"ev-{i}", "lock_id": "L"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=1)
    wait_until(counted(port, succeeded=4), timeout=60, what="the four runs")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="every message deleted")
    assert sorted((tmp_path / "ran").read_text().split()) == ["0", "1", "2", "3"]
    assert aws.lock_free("L")
    assert "LOST" not in daemon.log and " ERROR " not in daemon.log
    assert daemon.stop() == 0
