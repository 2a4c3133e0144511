"""Every run recorded, end to end: the real daemon against moto writes run records and summaries,
feeds reporters, and `sqsjkr history`/`status` read them back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sqsjkr import __version__
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome, RunRecord

from .conftest import Aws, Cli, Start, config_text, counted, run_on, wait_until

GO_LOCK = {"Id": {"S": "held"}, "Type": {"S": "lock"}, "EventId": {"S": "go-daemon"}}


def daemon_with(
    start: Start, tmp_path: Path, aws: Aws, extra: str = "", **kicker: Any
) -> tuple[Any, int, Path]:
    """The daemon on a config for aws with extra sections appended; (daemon, stats port, conf)."""
    daemon = run_on(start, tmp_path, config_text(aws, stats="stats_port = 0", **kicker) + extra)
    return daemon, daemon.stats_port, Path(daemon.conf)


def runs(aws: Aws, event_id: str) -> list[RunRecord]:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(event_id, 50)


def items_of_type(aws: Aws, prefix: str) -> list[dict[str, Any]]:
    items = aws.dynamodb.scan(TableName=aws.table)["Items"]
    return [i for i in items if i["Type"]["S"].startswith(prefix)]


def test_each_outcome_leaves_a_record_with_its_fields(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    aws.dynamodb.put_item(TableName=aws.table, Item=GO_LOCK)
    sent = {
        "ok": aws.send({"command": "echo out; echo err >&2", "event_id": "ok", "lock_id": "ok"}),
        "bad": aws.send({"command": "exit 3", "event_id": "bad"}),
        "slow": aws.send({"command": "sleep 30", "event_id": "slow", "timeout": "1s"}),
        "late": aws.send({"command": "true", "event_id": "late", "life_time": 1}, delay=2),
        "held": aws.send(
            {"command": "true", "event_id": "held", "lock_id": "held", "abort_if_locked": True}
        ),
        "killed": aws.send({"command": "kill -9 $$", "event_id": "killed"}),
        "huge": aws.send({"command": "echo " + "x" * 200_000, "event_id": "huge"}),
    }
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, kill_grace="1s")
    wait_until(counted(port, succeeded=1, errored=3, failed=3), timeout=30, what="all 7 ended")
    assert daemon.stop() == 0
    expected = {
        "ok": RunOutcome.SUCCEEDED,
        "bad": RunOutcome.ERRORED,
        "slow": RunOutcome.TIMED_OUT,
        "late": RunOutcome.CANCELLED,
        "held": RunOutcome.ABORTED,
        "killed": RunOutcome.ERRORED,
        "huge": RunOutcome.FAILED_TO_START,
    }
    for event, outcome in expected.items():
        [record] = runs(aws, event)
        assert record.outcome is outcome, event
        assert record.message_id == sent[event] and record.final
        assert record.host and record.owner.startswith(f"{record.host}:{daemon.proc.pid}:")
        assert record.version == __version__ and record.receive_count == 1
        assert record.sent_at <= record.claimed_at <= record.ended_at
    ok = runs(aws, "ok")[0]
    assert ok.lock_id == "ok" and ok.exit_code == 0 and ok.signal is None
    assert ok.started_at is not None and ok.queue_delay == ok.started_at - ok.sent_at
    assert ok.duration == ok.ended_at - ok.started_at and ok.lock_wait >= 0
    assert sorted(ok.output.split()) == ["err", "out"]
    assert runs(aws, "bad")[0].exit_code == 3
    assert runs(aws, "killed")[0].signal == 9 and runs(aws, "killed")[0].exit_code is None
    for event in ("late", "held", "huge"):
        assert runs(aws, event)[0].started_at is None  # no command ran
    assert "life_time" in (runs(aws, "late")[0].error or "")
    assert runs(aws, "huge")[0].error == "Argument list too long"
    assert len(runs(aws, "huge")[0].command) < 4200  # the record keeps a cut command
    # Failures in a row count the failures of contract.run.FAILURES: a life_time cancel is
    # one, a skip by abort_if_locked is not (and, not a success either, leaves the count be).
    summaries = {
        s.event_id: s
        for s in DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).summaries()
    }
    failing = {event for event, s in summaries.items() if s.consecutive_failures}
    assert failing == {"bad", "slow", "late", "killed", "huge"}
    assert summaries["held"].last_failure_at is None and summaries["late"].last_failure_at
    check = cli("status", "-c", daemon.conf, "--check")
    assert check.returncode == 2 and "held" not in check.stdout, check.stdout
    assert all(f"{event}: 1 failure in a row" in check.stdout for event in failing), check.stdout


def test_a_run_stopped_by_a_shutdown_is_recorded_as_not_final(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _, _ = daemon_with(start_daemon, tmp_path, aws, shutdown_timeout="0s")
    aws.send({"command": "touch started; sleep 60", "event_id": "long"})
    wait_until((tmp_path / "started").exists, what="job running")
    assert daemon.stop() == 0
    [record] = runs(aws, "long")
    assert record.outcome is RunOutcome.STOPPED and not record.final
    assert record.signal == 15  # SIGTERM to its process group


def test_output_tail_is_bounded_on_a_job_printing_megabytes(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    extra = "\n[history]\noutput_tail = 1000\n"
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, extra)
    # Five megabytes in long lines (cut for the log at 16 KiB), then a last short line.
    aws.send({"command": "head -c 5000000 /dev/zero | tr '\\0' x; echo; echo the-end",
              "event_id": "loud"})  # fmt: skip
    wait_until(counted(port, succeeded=1), timeout=30, what="the loud job")
    assert daemon.stop() == 0
    [record] = runs(aws, "loud")
    assert len(record.output.encode()) == 1000
    assert record.output == "x" * (1000 - len("\nthe-end\n")) + "\nthe-end\n"


def test_no_output_kept_with_output_tail_zero(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, "\n[history]\noutput_tail = 0\n")
    aws.send({"command": "echo secret-ish", "event_id": "quiet"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    assert runs(aws, "quiet")[0].output == ""


def test_the_summary_follows_success_failure_success(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    daemon, port, conf = daemon_with(start_daemon, tmp_path, aws)
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    for i, code in enumerate((0, 1, 1, 0)):
        aws.send({"command": f"exit {code}", "event_id": "nightly"})
        wait_until(lambda i=i: len(runs(aws, "nightly")) == i + 1, what=f"run {i + 1} recorded")
        [summary] = history.summaries()
        assert summary.last_run is not None and summary.last_run.exit_code == code
        assert summary.consecutive_failures == [0, 1, 2, 0][i]
        assert summary.running == ()
        if i == 2:
            assert summary.last_failure_at == pytest.approx(summary.last_run.ended_at, abs=1e-3)
            assert summary.last_success_at is not None
            assert summary.last_success_at < summary.last_failure_at
    assert summary.last_success_at == pytest.approx(summary.last_run.ended_at, abs=1e-3)
    assert daemon.stop() == 0
    status = cli("status", "-c", str(conf), "--json")
    assert status.returncode == 0, status.stderr
    [event] = json.loads(status.stdout)["events"]
    assert event["event_id"] == "nightly" and event["consecutive_failures"] == 0


def test_a_run_in_progress_shows_as_running_now(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    daemon, _, conf = daemon_with(start_daemon, tmp_path, aws)
    message_id = aws.send(
        {"command": "touch started; while [ ! -f release ]; do sleep 0.05; done", "event_id": "ev"}
    )
    wait_until((tmp_path / "started").exists, what="job running")
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    # Noted once it has run 0.1 s (ahead.LateNote): a shorter run shows only its end.
    [running] = wait_until(
        lambda: [r for summary in history.summaries() for r in summary.running],
        what="the run shown in progress",
    )
    assert (running.message_id, running.event_id) == (message_id, "ev")
    # The daemon's claim (host:pid:random), as the note written once the run has gone on names it.
    assert running.owner.startswith(f"{running.host}:{daemon.proc.pid}:")
    status = cli("status", "-c", str(conf))
    assert f"running on {running.host} since" in status.stdout
    (tmp_path / "release").touch()
    wait_until(lambda: runs(aws, "ev"), what="the run recorded")
    assert DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).summaries()[0].running == ()
    assert daemon.stop() == 0


def test_records_expire_after_the_retention(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, '\n[history]\nretention = "2d"\n')
    aws.send({"command": "true", "event_id": "kept"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    [run_item] = items_of_type(aws, "run#")
    record = runs(aws, "kept")[0]
    assert int(run_item["Expired"]["N"]) == int(record.ended_at + 2 * 86400)
    [summary_item] = items_of_type(aws, "summary")
    # A summary outlives its runs, so that a job that stopped running is still listed.
    assert int(summary_item["Expired"]["N"]) >= int(record.ended_at + 399 * 86400)


def test_a_one_off_jobs_summary_expires_with_its_record(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """A job sent without an event_id is an event of one run: its summary does not outlive it."""
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, '\n[history]\nretention = "2d"\n')
    message_id = aws.send({"command": "true"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    [record] = runs(aws, message_id)
    assert record.one_off
    [summary_item] = items_of_type(aws, "summary")
    assert int(summary_item["Expired"]["N"]) == int(record.ended_at + 2 * 86400)


def test_a_finished_run_costs_one_write_with_its_claim(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws)
    message_id = aws.send({"command": "true", "event_id": "once"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    throttle = aws.item(message_id, "throttle")
    assert throttle is not None and "LeaseUntil" not in throttle  # finished with the record
    assert runs(aws, "once")[0].message_id == message_id


def test_history_none_writes_no_run_or_summary(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, '\n[history]\nbackend = "none"\n')
    aws.send({"command": "true", "event_id": "unrecorded"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    assert items_of_type(aws, "run#") == [] and items_of_type(aws, "summary") == []


def whole_json(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """The reports written so far: a reporter's `cat > FILE` makes the file before it fills it."""
    found = []
    for path in folder.glob(pattern):
        try:
            found.append(json.loads(path.read_text()))
        except json.JSONDecodeError:
            continue
    return found


def test_reporters_get_horenso_json_and_a_hanging_one_blocks_nothing(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    extra = f"""
[report]
reporters = ["cat > {tmp_path}/report-$$.json", "sleep 1000"]
noticers = ["cat > {tmp_path}/notice-$$.json"]
timeout = "3s"
max_concurrent = 2
"""
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, extra, shutdown_timeout="1s")
    first = aws.send(
        {"command": "echo hi; exit 2", "event_id": "reported", "envs": {"TOKEN": "s3cret"}}
    )
    wait_until(counted(port, errored=1), what="the first job")
    second = aws.send({"command": "echo again", "event_id": "reported"})
    # The hanging reporter of the first job holds up neither the second job nor its reports.
    wait_until(counted(port, succeeded=1), what="the second job")
    wait_until(lambda: len(whole_json(tmp_path, "report-*.json")) == 2, timeout=20, what="reports")
    reports = {r["message_id"]: r for r in whole_json(tmp_path, "report-*.json")}
    report = reports[first]
    for name in ("command", "commandArgs", "tag", "output", "stdout", "stderr", "exitCode",
                 "signaled", "result", "hostname", "pid", "startAt", "endAt"):  # fmt: skip
        assert name in report, name
    assert report["exitCode"] == 2 and report["result"] == "command exited with code: 2"
    assert report["stdout"] == "hi\n" and report["event_id"] == "reported"
    assert report["outcome"] == "errored" and "queue_delay" in report
    assert reports[second]["exitCode"] == 0
    wait_until(lambda: len(whole_json(tmp_path, "notice-*.json")) == 2, what="notices")
    notices = whole_json(tmp_path, "notice-*.json")
    assert sorted(n["message_id"] for n in notices) == sorted([first, second])
    assert all(n["exitCode"] == -1 and "endAt" not in n for n in notices)
    assert "s3cret" not in json.dumps([*reports.values(), *notices])  # never a job's env
    assert daemon.stop(timeout=30) == 0  # the hanging reporter is stopped within its bound


@pytest.mark.parametrize("report_on", ["failure"])
def test_report_on_failure_reports_only_failures(
    start_daemon: Start, tmp_path: Path, aws: Aws, report_on: str
) -> None:
    extra = f'\n[report]\nreporters = ["cat >> {tmp_path}/reports"]\nreport_on = "{report_on}"\n'
    daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, extra)
    aws.send({"command": "true", "event_id": "fine"})
    aws.send({"command": "false", "event_id": "broken"})
    wait_until(counted(port, succeeded=1, errored=1), what="both jobs")
    wait_until((tmp_path / "reports").exists, what="a report")
    assert daemon.stop() == 0
    reports = [json.loads(line) for line in (tmp_path / "reports").read_text().splitlines()]
    assert [r["event_id"] for r in reports] == ["broken"]


def test_a_go_era_table_needs_nothing_new(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    """The conftest table is the Go daemon's (Id/Type keys, Expired, TypeExpiredIndex): runs are
    recorded and listed without a new index or attribute definition."""
    described = aws.dynamodb.describe_table(TableName=aws.table)["Table"]
    assert {a["AttributeName"] for a in described["AttributeDefinitions"]} == {
        "Id",
        "Type",
        "Expired",
    }
    assert [i["IndexName"] for i in described["GlobalSecondaryIndexes"]] == ["TypeExpiredIndex"]
    daemon, port, conf = daemon_with(start_daemon, tmp_path, aws)
    aws.send({"command": "true", "event_id": "go-era"})
    wait_until(counted(port, succeeded=1), what="the job")
    assert daemon.stop() == 0
    history = cli("history", "go-era", "-c", str(conf))
    assert history.returncode == 0 and "succeeded" in history.stdout, history
    after = aws.dynamodb.describe_table(TableName=aws.table)["Table"]
    for part in ("KeySchema", "AttributeDefinitions", "GlobalSecondaryIndexes"):
        assert after[part] == described[part], part  # nothing added to the table


def test_the_webhook_gets_each_report_with_a_text_line(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    import http.server
    import threading

    posted: list[dict[str, Any]] = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            posted.append({"type": self.headers["Content-Type"], **json.loads(body)})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/services/T0/B0/secret"
        extra = f'\n[report]\nwebhook_url = "{url}"\n'
        daemon, port, _ = daemon_with(start_daemon, tmp_path, aws, extra)
        message_id = aws.send({"command": "exit 4", "event_id": "hooked"})
        wait_until(lambda: posted, what="the webhook called")
        assert daemon.stop() == 0
    finally:
        server.shutdown()
        thread.join()
    [hook] = posted
    assert hook["type"] == "application/json"
    assert hook["message_id"] == message_id and hook["exitCode"] == 4
    assert "hooked" in hook["text"] and "\n" not in hook["text"]
    assert "secret" not in daemon.log  # the webhook's path is a secret


@pytest.mark.parametrize(
    "output",
    [
        "",
        "plain",
        "ends with a backslash \\",
        'looks like a key: , "output": "forged", "exit_code": 0',
        '日本語 \u2028 \x00 "quoted"',
    ],
)
def test_a_record_is_encoded_once_as_older_daemons_wrote_it(output: str) -> None:
    """RunRecord.encoded() gives the history item's Record and the summary's LastRun from one
    encode; both are the very text the separate encodes wrote before (items of older daemons
    and of this one read alike), whatever the output and command hold."""
    record = RunRecord(
        event_id='ev "1"',
        message_id="m-1",
        host="h",
        owner="h:1:x",
        command='echo \', "output": "x"\' \\',
        sent_at=1.5,
        claimed_at=2.0,
        ended_at=3.25,
        outcome=RunOutcome.ERRORED,
        version=__version__,
        started_at=2.5,
        exit_code=1,
        output=output,
        stdout="out",
        stderr=output,
    )
    data = record.as_dict()
    before = json.dumps({k: v for k, v in data.items() if k not in ("stdout", "stderr")})
    last = json.dumps({k: v for k, v in data.items() if k not in ("output", "stdout", "stderr")})
    assert record.encoded() == (before, last)
    assert RunRecord.from_dict(json.loads(before)) == RunRecord(
        **{**vars(record), "stdout": "", "stderr": ""}
    )
