"""The daemon's log: one line per record whatever a message holds, job ids on every job line, and
the decisions that --log-level debug shows.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from pathlib import Path

import boto3
import pytest

from sqsjkr.contract.job import Job
from sqsjkr.local.endpoint import LOCAL_QUEUE
from sqsjkr.observability.logs import (
    MAX_LOGGED_COMMAND,
    Moment,
    escape,
    job_label,
    moment,
    shorten_command,
)

from .conftest import (
    Aws,
    Start,
    config_text,
    counted,
    run_daemon,
    sqsjkr_argv,
    wait_until,
)

#: How every line of the daemon's text log starts.
LINE_START = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) "
)


@pytest.mark.parametrize(
    ("text", "escaped"),
    [
        ("plain text, ünïcödé", "plain text, ünïcödé"),
        ("a\nb\r\nc\td", "a\\nb\\r\\nc\\td"),
        ("\x1b[31mred\x00\x7f", "\\x1b[31mred\\x00\\x7f"),
        ("line\u2028separator\x85", "line\\x2028separator\\x85"),
    ],
)
def test_escape_leaves_no_control_character(text: str, escaped: str) -> None:
    assert escape(text) == escaped


def test_commands_are_shortened_to_a_documented_length() -> None:
    assert shorten_command("x" * MAX_LOGGED_COMMAND) == "x" * MAX_LOGGED_COMMAND
    long = shorten_command("y" * (MAX_LOGGED_COMMAND + 1000))
    assert long == "y" * MAX_LOGGED_COMMAND + "... (1000 more characters)"


def test_a_job_is_named_once_when_it_has_no_event_id_of_its_own() -> None:
    assert job_label(Job(message_id="m1", command="x")) == "job m1"
    assert job_label(Job(message_id="m1", command="x", event_id="nightly")) == (
        "job m1 (event nightly)"
    )


def test_no_field_of_a_message_can_forge_a_log_line(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    forged = "2026-01-01 00:00:00,000 INFO sqsjkr.worker: job forged succeeded"
    message_id = aws.send(
        {
            "event_id": f"ev\n{forged}",
            "lock_id": f"L\r\n{forged}",
            "command": f"printf 'out\\n\\033[31mred\\r{forged}\\n'\n# {forged}\n#" + "y" * 120_000,
        }
    )
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=1), what="the job run")
    assert daemon.stop() == 0
    lines = daemon.log.splitlines()
    assert [line for line in lines if not LINE_START.match(line)] == []
    assert not [line for line in lines if line.startswith(forged)]
    assert f"job {message_id} (event ev\\n{forged})" in daemon.log
    assert f'waits for lock "L\\r\\n{forged}"' not in daemon.log  # no one held it
    assert "| \\x1b[31mred\\r" + forged in daemon.log
    # The 120 KB command is shown cut, with its length said.
    [ended] = [line for line in lines if " succeeded in " in line]
    assert ended.endswith("more characters)") and len(ended) < 600


def test_every_job_line_names_the_job_and_debug_shows_the_decisions(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    first = aws.send({"command": "echo one", "lock_id": "L"})
    second = aws.send({"command": "echo two; exit 3", "event_id": "nightly"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=1, errored=1), what="both jobs run")
    assert daemon.stop() == 0
    job_lines = [line for line in daemon.log.splitlines() if " sqsjkr.worker: " in line]
    job_lines += [line for line in daemon.log.splitlines() if " sqsjkr.output: " in line]
    assert job_lines
    for line in job_lines:
        assert f"job {first} " in line or f"job {second} (event nightly) " in line, line
    assert f"(event {first})" not in daemon.log  # no event_id: its id is not shown twice


def test_a_job_logs_one_info_line_its_end_naming_its_command(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    ok = aws.send({"command": "echo fine", "event_id": "ok"})
    bad = aws.send({"command": "exit 3", "event_id": "bad"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=1, errored=1), what="both jobs run")
    assert daemon.stop() == 0
    lines = daemon.log.splitlines()
    # The job's own output is its output, not a line about it.
    [ok_line] = [line for line in lines if f"job {ok} " in line and " | " not in line]
    assert re.search(r" INFO sqsjkr\.worker: .* succeeded in \d+\.\ds: echo fine$", ok_line)
    [bad_line] = [line for line in lines if f"job {bad} " in line]
    assert re.search(r" WARNING .* errored with exit code 3 after \d+\.\ds: exit 3$", bad_line)
    assert " started: " not in daemon.log  # at DEBUG


def test_debug_shows_receives_claims_lock_tries_and_deletes(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    daemon = start_daemon("run", "-c", str(conf), "--log-level", "debug")
    message_id = aws.send({"command": "true", "lock_id": "L"})
    wait_until(counted(daemon.stats_port, succeeded=1), what="the job run")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    assert daemon.stop() == 0
    for decision in (
        "received 1 message(s), asked for at most 4",
        f"job {message_id} claimed its message (lease until ",
        f"job {message_id} started: true",
        f'job {message_id} took lock "L" (lease until ',
        f"deleting 1 message(s): {message_id}",
    ):
        assert decision in daemon.log, decision
    # Moments with their UTC offset, not unix seconds.
    lease = r"\(lease until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d\)"
    assert re.search(f"claimed its message {lease}", daemon.log), daemon.log
    assert re.search(f'took lock "L" {lease}', daemon.log), daemon.log
    assert "botocore" not in daemon.log  # its debug lines would show job environments


def test_sigusr1_writes_every_threads_stack_to_the_log(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    import signal

    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    daemon.proc.send_signal(signal.SIGUSR1)
    daemon.wait_for_log('daemon/receiving.py", line')  # the receiver thread's stack, among others
    assert daemon.proc.poll() is None  # and it goes on
    assert daemon.stop() == 0


def test_a_lock_wait_is_logged_once_naming_the_holder(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    go_lock = {"Id": {"S": "G"}, "Type": {"S": "lock"}, "EventId": {"S": "go-job"}}
    aws.dynamodb.put_item(TableName=aws.table, Item=go_lock)
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "touch held; while [ ! -f release ]; do sleep 0.05; done",
              "lock_id": "L", "event_id": "holder"})  # fmt: skip
    wait_until((tmp_path / "held").exists, what="the holder running")
    waiting = aws.send({"command": "true", "lock_id": "L", "event_id": "waiter"})
    go_waiting = aws.send({"command": "true", "lock_id": "G", "event_id": "go-waiter"})
    host_pid = f"{socket.gethostname()}:{daemon.proc.pid}"
    daemon.wait_for_log(
        f'job {waiting} (event waiter) waits for lock "L", held by {host_pid} for event "holder", '
    )
    daemon.wait_for_log(
        f'job {go_waiting} (event go-waiter) waits for lock "G", held by a Go daemon for event '
        '"go-job" (no lease: held until its holder releases it)'
    )
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=2), what="holder and waiter done")
    # Tried every 0.1 s meanwhile: still one line each at INFO.
    assert daemon.log.count(f"job {waiting} (event waiter) waits") == 1
    assert daemon.log.count(f"job {go_waiting} (event go-waiter) waits") == 1
    assert daemon.stop() == 0


def test_json_lines_carry_the_job_fields_as_keys(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0") + '\n[log]\nformat = "json"\n')
    daemon = start_daemon("run", "-c", str(conf))
    message_id = aws.send({"command": "echo 'out\\nput'", "event_id": "ev\n1", "lock_id": "L"})
    wait_until(counted(daemon.stats_port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    records = [json.loads(line) for line in daemon.log.splitlines()]  # every line is JSON
    assert {"time", "level", "logger", "message"} <= set(records[0])
    job = [r for r in records if r.get("message_id") == message_id]
    assert {r["logger"] for r in job} >= {"sqsjkr.worker", "sqsjkr.output"}
    assert all(r["event_id"] == "ev\n1" and r["lock_id"] == "L" for r in job)
    assert any(r["message"].endswith("| out") for r in job)
    assert records[0]["time"].endswith("+00:00")


def test_the_log_format_option_overrides_the_file(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    daemon = start_daemon("run", "-c", str(conf), "--log-format", "json")
    assert daemon.stop() == 0
    assert json.loads(daemon.log.splitlines()[-1])["message"] == "stopped"


def test_under_journald_text_lines_carry_the_priority_and_no_time(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str]
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    # systemd names the journal's stream by device and inode: here, the daemon's log file.
    log_file = tmp_path / "journal.log"
    log_file.touch()
    st = log_file.stat()
    aws_env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    with open(log_file, "ab") as journal:
        proc = subprocess.Popen(
            sqsjkr_argv("run", "-c", str(conf)),
            env={**os.environ, **aws_env},
            stderr=journal,
            stdout=journal,
        )
    try:
        wait_until(lambda: "receiving with" in log_file.read_text(), what="receiving")
        [port] = re.findall(r"serving stats on 127\.0\.0\.1:(\d+)", log_file.read_text())
        aws.send({"command": "exit 3", "event_id": "failing"})
        wait_until(counted(int(port), errored=1), what="the job")
    finally:
        proc.terminate()
        assert proc.wait(20) == 0
    lines = log_file.read_text().splitlines()
    pattern = re.compile(r"<[2-7]>(DEBUG|INFO|WARNING|ERROR|CRITICAL) sqsjkr")
    assert lines and all(pattern.match(line) for line in lines), lines
    assert any(line.startswith("<6>INFO sqsjkr.daemon: receiving with") for line in lines)
    assert any(
        line.startswith("<4>WARNING sqsjkr.worker: job ") and "errored" in line for line in lines
    )


def local_debug_log(start_daemon: Start, *flags: str) -> list[str]:
    """The log lines of `sqsjkr local --log-level debug FLAGS` that ran a job with a lock."""
    daemon = start_daemon(
        "local", "--stats-port", "0", "--log-level", "debug", *flags, wait_ready=False
    )
    daemon.wait_for_log("receiving with")
    endpoint = re.search(r"AWS endpoint (http://\S+) ", daemon.log)
    assert endpoint, daemon.log
    sqs = boto3.client(
        "sqs",
        endpoint_url=endpoint[1],
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    url = sqs.get_queue_url(QueueName=LOCAL_QUEUE)["QueueUrl"]
    sent = sqs.send_message(QueueUrl=url, MessageBody='{"command": "echo hi", "lock_id": "L"}')
    daemon.wait_for_log(f"job {sent['MessageId']} | hi")
    daemon.wait_for_log(f"deleting 1 message(s): {sent['MessageId']}")
    assert daemon.stop(signal.SIGINT) == 0
    return [line for line in daemon.log.splitlines() if LINE_START.match(line)]


def logger_of(line: str) -> str:
    return line.split(" ")[3].rstrip(":")


@pytest.mark.slow
def test_debug_in_local_mode_is_sqsjkrs_own_unless_all_is_asked_for(start_daemon: Start) -> None:
    lines = local_debug_log(start_daemon)
    assert [line for line in lines if " DEBUG sqsjkr." in line]
    quiet = (" DEBUG ", " INFO ")
    others = [line for line in lines if not logger_of(line).startswith("sqsjkr")]
    assert [line for line in others if any(level in line for level in quiet)] == []
    everything = local_debug_log(start_daemon, "--log-all")
    others = {logger_of(line) for line in everything if not logger_of(line).startswith("sqsjkr")}
    assert others  # moto's and werkzeug's, among others
    assert not [name for name in others if name.split(".")[0] in ("botocore", "boto3")]


def test_a_moment_has_its_utc_offset_and_a_lease_that_never_ends_is_said_so() -> None:
    assert re.fullmatch(r"2023-11-1\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", moment(1_700_000_000))
    assert re.fullmatch(
        r".*T\d\d:\d\d:\d\d\.250[+-]\d\d:\d\d", moment(1_700_000_000.25, "milliseconds")
    )
    # The "none" backends' leases last for ever; a damaged item may hold any number.
    assert moment(float("inf")) == "never"
    assert moment(1e300) == "1e+300 (unix seconds)"
    assert str(Moment(float("inf"))) == "never"
