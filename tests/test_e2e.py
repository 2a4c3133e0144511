"""End-to-end: `sqsjkr run` as a real subprocess against the moto server, real commands, real signals.

Each test checks what the commands wrote, the stats JSON and the DynamoDB items.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from sqsjkr.backends.dedupe import MemoryDedupe
from sqsjkr.backends.history import MemoryHistory
from sqsjkr.backends.locks import MemoryLocker
from sqsjkr.contract.config import load_config
from sqsjkr.daemon.service import serve

from .conftest import (
    REGION,
    Aws,
    Daemon,
    Start,
    config_text,
    counted,
    free_port,
    http_get_json,
    run_daemon,
    wait_until,
)


def v2(port: int) -> dict[str, Any]:
    return http_get_json(port, "/stats/metrics/v2")


def test_job_runs_with_its_env_and_leaves_a_throttle_item(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    before = time.time()
    message_id = aws.send(
        {"command": 'printf "%s" "$GREETING" > out.txt', "envs": {"GREETING": "hi there"}}
    )
    wait_until(counted(port, succeeded=1), what="job succeeded")
    assert (tmp_path / "out.txt").read_text() == "hi there"
    assert v2(port) == {
        "workers": {"busy": 0, "idle": 4},
        "invocations": {"succeeded": 1, "failed": 0, "errored": 0, "duplicates": 0, "timed_out": 0},
    }
    assert http_get_json(port, "/stats/metrics") == {"idle_worker": 4, "busy_worker": 0}
    item = aws.item(message_id, "throttle")
    assert item is not None
    assert "LeaseUntil" not in item  # finished: a redelivery is deleted unrun
    retention = 345600  # the queue's default MessageRetentionPeriod
    assert before + retention - 5 <= int(item["Expired"]["N"]) <= time.time() + retention + 5
    wait_until(lambda: aws.queue_counts() == (0, 0), what="message deleted")
    assert daemon.stop() == 0


def test_output_is_streamed_to_the_log_tagged_with_ids(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    message_id = aws.send({"command": "echo line-one; echo line-two >&2; exit 4", "event_id": "ev"})
    wait_until(counted(port, errored=1), what="job errored")
    assert f"job {message_id} (event ev) | line-one" in daemon.log
    assert f"job {message_id} (event ev) | line-two" in daemon.log
    assert "errored with exit code 4" in daemon.log
    assert daemon.stop() == 0


def test_lock_item_is_held_while_the_job_runs_and_removed_after(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send(
        {
            "command": "touch started; while [ ! -f release ]; do sleep 0.05; done",
            "lock_id": "nightly",
            "event_id": "nightly-report",
        }
    )
    wait_until(lambda: (tmp_path / "started").exists(), what="job started")
    item = aws.item("nightly", "lock")
    assert item is not None
    # The Go daemon's item, plus who holds it and until when.
    assert item.pop("Owner")["S"].startswith(f"{socket.gethostname()}:{daemon.proc.pid}:")
    assert time.time() + 50 < float(item.pop("LeaseUntil")["N"]) <= time.time() + 60
    assert item == {
        "Id": {"S": "nightly"},
        "Type": {"S": "lock"},
        "EventId": {"S": "nightly-report"},
    }
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1), what="job succeeded")
    assert aws.lock_free("nightly")


def test_jobs_sharing_a_lock_id_never_overlap(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    _, port = run_daemon(start_daemon, tmp_path, aws)
    for i in range(3):
        aws.send(
            {
                "command": f"echo start {i} >> trace; sleep 0.3; echo end {i} >> trace",
                "lock_id": "L",
            }
        )
    wait_until(counted(port, succeeded=3), timeout=30, what="three jobs")
    lines = (tmp_path / "trace").read_text().split()
    pairs = [lines[i : i + 4] for i in range(0, len(lines), 4)]
    assert len(pairs) == 3
    for start, n, end, m in pairs:
        assert (start, end, n) == ("start", "end", m)


def test_abort_if_locked_fails_at_once_and_waiting_job_runs_later(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "touch held; while [ ! -f release ]; do sleep 0.05; done", "lock_id": "L"})
    wait_until(lambda: (tmp_path / "held").exists(), what="lock holder running")
    aws.send({"command": "touch aborted-ran", "lock_id": "L", "abort_if_locked": True})
    aws.send({"command": "touch waiter-ran", "lock_id": "L"})
    wait_until(counted(port, failed=1), what="abort counted failed")
    wait_until(lambda: 'waits for lock "L"' in daemon.log, what="waiter waiting")
    assert not (tmp_path / "waiter-ran").exists()
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=2), what="holder and waiter done")
    assert (tmp_path / "waiter-ran").exists()
    assert not (tmp_path / "aborted-ran").exists()
    assert 'aborted: lock "L" is held' in daemon.log


def test_late_job_is_cancelled_and_the_trigger_gets_the_go_line(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    _, port = run_daemon(start_daemon, tmp_path, aws, life_time_trigger="cat >> trigger.txt")
    late = aws.send({"command": "touch late-ran", "event_id": "late", "life_time": "1s"}, delay=2)
    aws.send(
        {"command": "touch quiet-ran", "life_time": 1, "disable_life_time_trigger": True}, delay=2
    )
    aws.send({"command": "touch fresh-ran", "life_time": "1h"}, delay=2)
    wait_until(counted(port, failed=2, succeeded=1), what="two cancelled, one run")
    assert not (tmp_path / "late-ran").exists() and not (tmp_path / "quiet-ran").exists()
    assert (tmp_path / "fresh-ran").exists()
    line = (tmp_path / "trigger.txt").read_text()
    assert re.fullmatch(
        rf"job_id:{late}, event_id:late, command:touch late-ran, life_time:1s, "
        r"sent_timestamp:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? [+-]\d{4} \S+\n",
        line,
    ), line


def test_never_more_than_max_concurrent_jobs(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    _, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=2)
    (tmp_path / "running").mkdir()
    job = (
        "touch running/$$; ls running | wc -l >> counts; "
        "while [ ! -f release ]; do sleep 0.05; done; rm running/$$"
    )
    for _ in range(5):
        aws.send({"command": job})
    wait_until(lambda: v2(port)["workers"] == {"busy": 2, "idle": 0}, what="both workers busy")
    # All five in flight: two running, three prefetched (a two-worker host prefetches by
    # default), which wait for a worker rather than run.
    wait_until(lambda: aws.queue_counts() == (0, 5), what="five jobs in flight")
    # A busy worker may not have started its shell yet: release only once both jobs run.
    running = tmp_path / "running"
    wait_until(lambda: len(list(running.iterdir())) == 2, what="both jobs running")
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=5), timeout=30, what="all jobs")
    counts = [int(n) for n in (tmp_path / "counts").read_text().split()]
    assert max(counts) == 2


def test_sigterm_lets_the_running_job_finish_then_exits_0(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    aws.send(
        {"command": "touch started; while [ ! -f release ]; do sleep 0.05; done; touch finished"}
    )
    wait_until(lambda: (tmp_path / "started").exists(), what="job started")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.wait_for_log("stopping: no longer receiving; waiting for 1 in-flight job(s)")
    aws.send({"command": "touch should-not-run"})
    assert daemon.proc.poll() is None
    (tmp_path / "release").touch()
    assert daemon.stop(timeout=20) == 0
    assert (tmp_path / "finished").exists()
    assert not (tmp_path / "should-not-run").exists()
    assert aws.queue_counts()[0] == 1  # the late message stays queued for another host


def test_each_stop_signal_stops_the_daemon(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        daemon, _ = run_daemon(start_daemon, tmp_path, aws)
        assert daemon.stop(sig) == 0, daemon.log
        assert f"{sig.name} received: stopping" in daemon.log


def test_garbage_messages_are_counted_failed_deleted_and_logged(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    bad = {
        aws.send("not json at all"): "body is not JSON",
        aws.send("[1, 2]"): "body must be a JSON object, got array",
        aws.send({"command": 5}): 'field "command": must be a string, got number',
        aws.send({"envs": {"A": "b"}}): 'field "command": required',
        aws.send({"command": "true", "life_time": "1d"}): 'field "life_time"',
    }
    wait_until(counted(port, failed=5), what="five failed")
    aws.send({"command": "touch ok"})
    wait_until(counted(port, succeeded=1), what="a good job after the bad ones")
    for message_id, reason in bad.items():
        assert re.search(
            rf"invalid message {message_id} deleted \(the queue has no dead-letter queue\): "
            rf".*{re.escape(reason)}",
            daemon.log,
        )
    assert daemon.stop() == 0
    assert aws.queue_counts() == (0, 0)


def test_duplicate_message_is_skipped_and_counted(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    message_id = aws.send({"command": "touch ran"})
    # A throttle item for the message, as if another host had taken it already.
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": message_id}, "Type": {"S": "throttle"}, "Expired": {"N": "9999999999"}},
    )
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, duplicates=1), what="duplicate counted")
    assert not (tmp_path / "ran").exists()
    assert f"job {message_id} duplicate message deleted" in daemon.log


def test_stats_on_a_unix_socket(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    sock_path = tmp_path / "stats.sock"
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats=f'stats_socket = "{sock_path}"'))
    daemon = start_daemon("run", "-c", str(conf))

    class UnixConnection(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(sock_path))

    conn = UnixConnection("localhost", timeout=5)
    conn.request("GET", "/stats/metrics")
    assert json.loads(conn.getresponse().read()) == {"idle_worker": 4, "busy_worker": 0}
    conn.close()
    assert daemon.stop() == 0
    assert not sock_path.exists()


def test_go_style_flags_run_the_daemon_and_override_the_file(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    # The file names a table that does not exist; -lock-table must win.
    text = config_text(aws, stats="stats_port = 1").replace(aws.table, "no-such-table")
    conf.write_text(text)
    daemon = start_daemon(
        "-conf",
        str(conf),
        "-lock-table",
        aws.table,
        "-stats-port",
        "0",
        "-log-level",
        "debug",
    )
    assert daemon.stats_port != 1  # the flag's, not the file's
    message_id = aws.send({"command": "true", "lock_id": "go"})
    wait_until(counted(daemon.stats_port, succeeded=1), what="job via Go flags")
    assert aws.item(message_id, "throttle") is not None
    assert daemon.stop() == 0


def test_a_missing_table_fails_the_start_naming_it(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0").replace(aws.table, "no-such-table"))
    aws.send({"command": "true"})
    daemon = start_daemon("run", "-c", str(conf), wait_ready=False)
    assert daemon.proc.wait(20) == 1
    assert "DynamoDB table 'no-such-table' not found" in daemon.log
    assert "receiving with" not in daemon.log
    assert aws.queue_counts() == (1, 0)  # not received: the job waits for a daemon that can run it


def test_a_table_without_the_id_and_type_keys_fails_the_start(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    aws.dynamodb.create_table(
        TableName=f"{aws.table}-wrong",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    conf = tmp_path / "config.toml"
    conf.write_text(
        config_text(aws, stats="stats_port = 0").replace(aws.table, f"{aws.table}-wrong")
    )
    daemon = start_daemon("run", "-c", str(conf), wait_ready=False)
    assert daemon.proc.wait(20) == 1
    assert f"DynamoDB table '{aws.table}-wrong' does not have the keys sqsjkr needs" in daemon.log


def test_missing_queue_fails_fast_naming_it(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(
        config_text(aws, stats="stats_port = 0").replace(aws.queue_name, "no-such-queue")
    )
    daemon = start_daemon("run", "-c", str(conf), wait_ready=False)
    assert daemon.proc.wait(20) == 1
    assert "SQS queue 'no-such-queue'" in daemon.log


def test_none_backends_write_nothing_to_dynamodb(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    text = config_text(aws, stats="stats_port = 0").replace(
        "[lock]\n", '[lock]\nbackend = "none"\n'
    )
    conf.write_text(text + '\n[dedupe]\nbackend = "none"\n')
    port = start_daemon("run", "-c", str(conf)).stats_port
    message_id = aws.send(
        {"command": "touch started; while [ ! -f release ]; do sleep 0.05; done", "lock_id": "L"}
    )
    wait_until(lambda: (tmp_path / "started").exists(), what="job started")
    assert aws.lock_free("L")
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1), what="job done")
    assert aws.item(message_id, "throttle") is None


def test_unreachable_endpoint_at_start_is_retried_and_named_then_stops_cleanly(
    tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    closed = f"http://127.0.0.1:{free_port()}"
    # boto3's per-service variable wins over AWS_ENDPOINT_URL.
    daemon = Daemon(["run", "-c", str(conf)], {"AWS_ENDPOINT_URL_SQS": closed}, tmp_path)
    try:
        daemon.wait_for_log(
            f"looking up SQS queue '{aws.queue_name}' failed (EndpointConnectionError"
        )
        daemon.wait_for_log("retrying in")
        assert daemon.proc.poll() is None
        # Monitoring already sees the daemon, idle, while it waits for AWS.
        assert http_get_json(daemon.stats_port, "/stats/metrics") == {
            "idle_worker": 4,
            "busy_worker": 0,
        }
        assert daemon.stop() == 0
    finally:
        daemon.kill()


def test_command_line_options_override_the_file(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    sock_path = tmp_path / "s.sock"
    conf = tmp_path / "config.toml"
    # Wrong region and a TCP port in the file; --region and --stats-socket must win.
    text = config_text(aws, stats="stats_port = 0")
    conf.write_text(text.replace(f'region = "{REGION}"', 'region = "eu-west-1"'))
    daemon = start_daemon(
        "run", "-c", str(conf), "--region", REGION, "--stats-socket", str(sock_path)
    )
    aws.send({"command": "touch ran"})
    wait_until(lambda: (tmp_path / "ran").exists(), what="job run")
    assert sock_path.exists()
    assert f"serving stats on unix:{sock_path}" in daemon.log
    assert daemon.stop() == 0


def test_unknown_profile_exits_1_naming_it(tmp_path: Path, aws: Aws) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    daemon = Daemon(["run", "-c", str(conf), "--profile", "no-such-profile"], {}, tmp_path)
    try:
        assert daemon.proc.wait(30) == 1
        assert "no-such-profile" in daemon.log
    finally:
        daemon.kill()


def test_serve_takes_backends_injected_from_python(tmp_path: Path, aws: Aws) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    config = load_config(conf)
    locker, dedupe, history = MemoryLocker(), MemoryDedupe(), MemoryHistory()
    stop = threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(config, stop),
        kwargs={"locker": locker, "dedupe": dedupe, "history": history},
    )
    thread.start()
    try:
        marker = tmp_path / "ran"
        message_id = aws.send(
            {"command": f"touch {marker}; while [ ! -f {marker}.go ]; do sleep 0.05; done",
             "lock_id": "L"}
        )  # fmt: skip
        wait_until(marker.exists, what="job running")
        assert locker.held == {"L": message_id}  # event_id defaults to the message id
        assert message_id in dedupe.seen
        Path(f"{marker}.go").touch()
        wait_until(lambda: locker.held == {}, what="lock released")
    finally:
        stop.set()
        thread.join(20)
    assert not thread.is_alive()
    assert aws.dynamodb.scan(TableName=aws.table)["Items"] == []
    [record] = history.records
    assert (record.message_id, record.outcome.value) == (message_id, "succeeded")
