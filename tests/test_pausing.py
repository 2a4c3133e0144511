"""Pauses in the running daemon: paused events' messages held back and run after a resume, a pause
of all that stops receiving, life_time still applied, and no pause read while idle."""

from __future__ import annotations

import time
from pathlib import Path

from sqsjkr.backends.pause import DynamoPauses, Pause

from .conftest import Aws, Start, counted, invocations, run_daemon, wait_until
from .faults import FaultProxy


def pauses(aws: Aws) -> DynamoPauses:
    return DynamoPauses(aws.dynamodb, aws.table)


def pause(aws: Aws, event_id: str | None, until: float | None = None) -> None:
    pauses(aws).pause(Pause(event_id, time.time(), until, "maintenance", "ops@laptop"))


def ran(tmp_path: Path) -> list[str]:
    path = tmp_path / "ran"
    return path.read_text().split() if path.exists() else []


def test_a_paused_events_messages_wait_and_run_after_the_resume(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    pause(aws, "nightly")
    daemon, port = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
    held = aws.send({"command": "echo nightly >> ran", "event_id": "nightly"})
    aws.send({"command": "echo other >> ran", "event_id": "other"})
    wait_until(counted(port, succeeded=1), what="the other event's job")
    daemon.wait_for_log(f'message {held} of event "nightly" held back for ')
    assert ran(tmp_path) == ["other"]
    wait_until(lambda: aws.queue_counts() == (0, 1), what="kept on the queue, hidden")
    assert "its event is paused until resumed by ops@laptop (maintenance)" in daemon.log
    pauses(aws).resume(["nightly"])
    wait_until(counted(port, succeeded=2), what="the held job, once resumed")
    assert ran(tmp_path) == ["other", "nightly"]
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    assert daemon.stop() == 0


def test_a_pause_of_all_stops_receiving_until_resumed(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    pause(aws, None)
    daemon, port = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
    # The daemon learns of it when messages arrive: these are held back, then it stops receiving.
    for i in range(3):
        aws.send({"command": f"echo held-{i} >> ran", "event_id": f"e{i}"})
    daemon.wait_for_log("not receiving: all events paused until resumed by ops@laptop")
    held = daemon.log.count("held back for ")
    assert 1 <= held <= 3  # those of the receive that found the pause
    later = aws.send({"command": "echo later >> ran"})
    # While all is paused it receives nothing more: what comes now stays visible, untouched.
    wait_until(lambda: aws.queue_counts() == (4 - held, held), what="the rest left visible")
    assert later not in daemon.log and ran(tmp_path) == []
    assert "receiving again" not in daemon.log
    pauses(aws).resume(None)
    daemon.wait_for_log("receiving again: the pause of all events is over (all events paused")
    wait_until(counted(port, succeeded=4), timeout=30, what="all that accumulated")
    assert sorted(ran(tmp_path)) == ["held-0", "held-1", "held-2", "later"]
    assert daemon.stop() == 0


def test_a_pause_with_an_end_ends_by_itself(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    pause(
        aws, "brief", until=time.time() + 8
    )  # room for a slow start: the pause must still hold at the send
    daemon, port = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
    aws.send({"command": "echo brief >> ran", "event_id": "brief"})
    daemon.wait_for_log("held back for ")
    wait_until(counted(port, succeeded=1), timeout=40, what="the job, once the pause ended")
    assert daemon.stop() == 0


def test_life_time_still_cancels_what_went_stale(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    pause(aws, "hourly")
    daemon, port = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
    aws.send({"command": "echo stale >> ran", "event_id": "hourly", "life_time": 2})
    daemon.wait_for_log("held back for ")
    time.sleep(2.5)  # the job outlives its life_time while paused: the point of this test
    pauses(aws).resume(["hourly"])
    wait_until(counted(port, failed=1), timeout=30, what="the stale job cancelled")
    assert ran(tmp_path) == [] and invocations(port)["succeeded"] == 0
    assert daemon.stop() == 0


def test_held_messages_are_given_back_at_a_stop(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    pause(aws, "nightly")
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
    aws.send({"command": "true", "event_id": "nightly"})
    daemon.wait_for_log("held back for ")
    assert daemon.stop() == 0
    wait_until(lambda: aws.queue_counts() == (1, 0), what="visible again, for another daemon")


def test_an_idle_daemon_reads_no_pauses(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, _ = run_daemon(start_daemon, tmp_path, aws, pause_refresh="1s")
        # Several long polls (1 s each here) and many refresh intervals go by, idle.
        wait_until(
            lambda: sum(c.action == "ReceiveMessage" for c in proxy.calls) >= 5,
            what="five idle receives",
        )
        gets = [c for c in proxy.calls if c.action == "GetItem"]
        assert len(gets) == 1 and gets[0].item_type() == "probe"  # the start-up table check
        assert daemon.stop() == 0
