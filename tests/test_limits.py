"""The largest value every duration accepts, end to end: it must never break a wait or a stop.

Go's largest duration (about 292 years) goes beyond what Python's timers accept.
"""

from __future__ import annotations

import signal
from pathlib import Path

from .conftest import Aws, Start, config_text, counted, run_daemon, wait_until

#: Go's largest time.Duration, which the parser accepts for every duration field.
GO_MAX = "2562047h47m16.854775807s"
WAIT_FOR_RELEASE = "while [ ! -f release ]; do sleep 0.05; done"


def test_a_job_with_the_largest_timeout_is_stopped_at_the_shutdown_timeout(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, shutdown_timeout="1s", kill_grace="1s")
    message_id = aws.send(
        {"command": f"touch started; {WAIT_FOR_RELEASE}; echo done >> out", "timeout": GO_MAX}
    )
    wait_until((tmp_path / "started").exists, what="job running")
    assert daemon.stop(timeout=30) == 0  # the job would run for ever: only a stop ends it
    assert "Traceback" not in daemon.log
    assert f"job {message_id} cancelled: stopping process group" in daemon.log
    assert f"job {message_id} stopped after" in daemon.log
    assert not (tmp_path / "out").exists()
    assert aws.queue_counts() == (1, 0)  # given back: it runs again elsewhere


def test_a_job_with_the_largest_timeout_yields_to_a_second_signal(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, kill_grace="1s")  # no shutdown_timeout
    aws.send({"command": "touch started; exec sleep infinity", "timeout": GO_MAX})
    wait_until((tmp_path / "started").exists, what="job running")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_for_log("waiting for 1 in-flight job(s)")
    assert daemon.stop(signal.SIGTERM, timeout=30) == 0
    assert "a second signal: stopping 1 running job(s)" in daemon.log
    assert "Traceback" not in daemon.log
    assert aws.queue_counts() == (1, 0)


def test_every_duration_at_its_largest_keeps_the_daemon_working(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    go_lock = {"Id": {"S": "held"}, "Type": {"S": "lock"}, "EventId": {"S": "go-daemon"}}
    aws.dynamodb.put_item(TableName=aws.table, Item=go_lock)  # held for ever
    conf = tmp_path / "config.toml"
    text = config_text(
        aws,
        stats="stats_port = 0",
        job_timeout=GO_MAX,
        kill_grace=GO_MAX,
        shutdown_timeout=GO_MAX,
    )
    # The largest lease the config accepts (1h), and the largest wait between lock tries.
    text = text.replace('retry_interval = "0.1s"', f'retry_interval = "{GO_MAX}"\nlease = "1h"')
    conf.write_text(text)
    daemon = start_daemon("run", "-c", str(conf))
    port = daemon.stats_port
    for field in ("life_time", "timeout"):
        aws.send({"command": f"echo {field} >> ran", "life_time": GO_MAX, field: GO_MAX})
    wait_until(counted(port, succeeded=2), what="both jobs run")
    # A job waiting for a held lock between tries of the largest interval: a stop still ends it.
    aws.send({"command": "echo never >> ran", "lock_id": "held"})
    daemon.wait_for_log('waits for lock "held"')
    assert daemon.stop(timeout=30) == 0
    assert "Traceback" not in daemon.log and "unexpectedly" not in daemon.log
    assert sorted((tmp_path / "ran").read_text().split()) == ["life_time", "timeout"]
    assert aws.queue_counts() == (1, 0)  # the waiting job's message is given back
