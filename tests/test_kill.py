"""`sqsjkr kill` end to end: a running job, one waiting for its lock, a finished run, a kill racing
the job's own end, and one whose daemon died first; and the claim's kill mark in the store.

Leases are short (2-3 s) so that the heartbeat that sees the mark comes within a second.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from sqsjkr.backends.dedupe import ClaimState, DynamoDedupe, claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.kills import KillAnswer, KillRequested, request_kill
from sqsjkr.contract.run import KillMark, RunOutcome, RunRecord, RunStart
from sqsjkr.daemon.http_runner import HttpRunner
from sqsjkr.daemon.runner import StopReason

from .conftest import (
    Aws,
    Start,
    config_text,
    counted,
    http_get_text,
    run_daemon,
    sqsjkr_argv,
    wait_until,
)
from .faults import FaultProxy
from .test_audit import Run, audit_items
from .test_audit import cli as cli  # noqa: F401 - the fixture
from .test_audit import failing_audit as failing_audit  # noqa: F401 - the fixture
from .test_crash import WAIT_FOR_RELEASE, alive, kill_group, lines
from .test_dlq import site as site  # noqa: F401 - the fixture
from .test_dlq import sqsjkr
from .test_http_jobs import Service, call_threads, stopped_while_waiting
from .test_http_jobs import runner as runner  # noqa: F401 - the fixture
from .test_http_jobs import service as service  # noqa: F401 - the fixture

#: A job that leaves a grandchild in its process group, and says when it runs.
LONG_JOB = f"sleep 300 & echo $! > child.pid; echo $$ > pids; touch started; {WAIT_FOR_RELEASE}"


def history(aws: Aws) -> DynamoHistory:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=3600)


def records(aws: Aws, event_id: str) -> list[RunRecord]:
    return history(aws).runs(event_id, 50)


def lines_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def noted(aws: Aws, event_id: str) -> bool:
    """Whether a run of event_id shows in progress in its summary, where `kill EVENT` finds it:
    a run without a lock or a group once it has gone on 0.1 s (ahead.LateNote)."""
    summary = history(aws).summary(event_id)
    return summary is not None and bool(summary.running)


def kill(capsys: pytest.CaptureFixture[str], conf: str, *args: str) -> tuple[int, str, str]:
    return sqsjkr(capsys, "kill", *args, "-c", conf)


def test_kill_stops_a_running_job_s_process_group_and_records_it_killed_for_good(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "config.toml"
    text = config_text(aws, stats="stats_port = 0", kill_grace="1s")
    reporting = '\n[report]\nreporters = ["cat >> reports"]\nreport_on = "always"\n'
    conf.write_text(text.replace("[lock]\n", '[lock]\nlease = "3s"\n') + reporting)
    daemon = start_daemon("run", "-c", str(conf))
    port = daemon.stats_port
    job = {"command": LONG_JOB, "event_id": "nightly", "retries": 2, "retry_delay": "0s"}
    message_id = aws.send(job)
    wait_until(lambda: (tmp_path / "started").exists(), what="job running")
    wait_until(lambda: noted(aws, "nightly"), what="the run noted in progress")
    shell, child = (int((tmp_path / name).read_text()) for name in ("pids", "child.pid"))

    code, out, err = kill(capsys, str(conf), "nightly", "--reason", "hung", "--wait")

    assert code == 0, err
    assert out.startswith(f'kill requested: the run of event "nightly" (message "{message_id}")')
    assert "within 1.0s (a third of [lock] lease)" in out
    assert out.rstrip().endswith(": hung") and "killed by " in out
    assert not alive(shell) and not alive(child)  # the whole group
    [record] = records(aws, "nightly")
    assert (record.outcome, record.final, record.signal) == (RunOutcome.KILLED, True, 15)
    assert record.error is not None and record.error.endswith(": hung")
    assert "kill requested (killed by" in daemon.log and "stopping process group" in daemon.log
    # Deleted and never retried: its claim is finished, with no retry kept.
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    claim = aws.item(message_id, "throttle")
    assert claim is not None and not {"LeaseUntil", "RetryAt", "Attempts"} & set(claim)
    wait_until(counted(port, failed=1, errored=0), what="counted failed")
    # Reporters hear of it (not with report_on = "failure": a kill is no failure, FAILURES).
    report = wait_until(lambda: lines_of(tmp_path / "reports"), what="its report")
    assert json.loads(report[0])["outcome"] == "killed"
    assert json.loads(report[0])["result"] == "command died with signal: 15"
    assert 'sqsjkr_jobs_total{outcome="killed"} 1.0' in http_get_text(port, "/metrics")
    [summary] = history(aws).summaries()
    assert summary.running == () and summary.consecutive_failures == 0  # asked for, audited
    # The daemon runs on.
    aws.send({"command": "true", "event_id": "after"})
    wait_until(counted(port, succeeded=1), what="the next job")
    assert [r.outcome for r in records(aws, "nightly")] == [RunOutcome.KILLED]
    assert daemon.stop() == 0


def test_kill_of_a_job_waiting_for_its_lock_ends_it_killed_without_running(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    aws.send({"command": f"touch started; {WAIT_FOR_RELEASE}", "event_id": "a", "lock_id": "L"})
    wait_until(lambda: (tmp_path / "started").exists(), what="the lock's holder running")
    waiter = aws.send({"command": "touch ran", "event_id": "b", "lock_id": "L"})

    def waiting() -> bool:
        summary = history(aws).summary("b")
        return summary is not None and any(run.waiting_for for run in summary.running)

    wait_until(waiting, what="b waiting for its lock")

    code, out, err = kill(capsys, daemon.conf, waiter, "--wait")

    assert code == 0, err
    assert ', waiting for its lock "L"' in out
    [record] = records(aws, "b")
    assert (record.outcome, record.started_at, record.exit_code) == (RunOutcome.KILLED, None, None)
    assert "not started: killed by" in daemon.log and 'while it waited for lock "L"' in daemon.log
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1, failed=1), what="the holder done")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="both messages deleted")
    assert not (tmp_path / "ran").exists()
    assert daemon.stop() == 0


def test_kill_of_a_finished_run_or_an_idle_event_says_so_and_changes_nothing(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    message_id = aws.send({"command": "true", "event_id": "done"})
    wait_until(counted(port, succeeded=1), what="the job done")
    wait_until(lambda: records(aws, "done"), what="its record")
    claim = aws.item(message_id, "throttle")
    conf = daemon.conf

    code, out, err = kill(capsys, conf, message_id)
    assert (code, out) == (1, "")
    assert err == (
        f'sqsjkr: the run of message "{message_id}" is not in progress (it has ended, or never '
        "ran): nothing changed\n"
    )
    code, out, err = kill(capsys, conf, "done")
    assert (code, out) == (1, "")
    assert err.startswith('sqsjkr: event "done" has nothing running (its last run succeeded at')
    assert err.endswith("): nothing changed\n")
    code, out, err = kill(capsys, conf, "nothing-of-that-name", "--wait")
    assert code == 1 and "is not in progress" in err

    assert aws.item(message_id, "throttle") == claim
    audit = aws.dynamodb.scan(
        TableName=aws.table,
        FilterExpression="#type = :audit",
        ExpressionAttributeNames={"#type": "Type"},
        ExpressionAttributeValues={":audit": {"S": "audit"}},
    )
    assert audit["Items"] == []  # nothing done, nothing audited
    assert daemon.stop() == 0


def test_a_kill_racing_the_job_s_own_end_leaves_the_job_s_own_record(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # A long lease: its first renewal, which would see the mark, is 20 s away.
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="60s")
    message_id = aws.send({"command": f"touch started; {WAIT_FOR_RELEASE}", "event_id": "race"})
    wait_until(lambda: (tmp_path / "started").exists(), what="job running")
    wait_until(lambda: noted(aws, "race"), what="the run noted in progress")
    waiting = subprocess.Popen(
        sqsjkr_argv("kill", "race", "--wait", "-c", daemon.conf),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )

    def marked() -> bool:
        return "KillAt" in (aws.item(message_id, "throttle") or {})

    wait_until(marked, what="the kill mark")
    (tmp_path / "release").touch()  # the job ends before its daemon sees the mark
    out, err = waiting.communicate(timeout=30)

    assert waiting.returncode == 1, err
    assert out.splitlines()[-1] == "ended on its own (succeeded) before the kill reached it"
    assert [r.outcome for r in records(aws, "race")] == [RunOutcome.SUCCEEDED]
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    assert "LeaseUntil" not in (aws.item(message_id, "throttle") or {})
    assert daemon.stop() == 0


def test_a_kill_whose_daemon_died_is_recorded_by_the_next_receiver_without_running(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    first, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    message_id = aws.send(
        {"command": f"echo $$ >> pids; echo run >> runs; {WAIT_FOR_RELEASE}", "event_id": "gone"}
    )
    wait_until(lambda: lines(tmp_path / "runs") == ["run"], what="job running")
    wait_until(lambda: noted(aws, "gone"), what="the run noted in progress")
    first.kill()
    kill_group(tmp_path / "pids")

    code, out, err = kill(capsys, first.conf, "gone", "--reason", "host lost")
    assert code == 0, err
    assert out.startswith(f'kill requested: the run of event "gone" (message "{message_id}")')

    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    wait_until(lambda: records(aws, "gone"), timeout=30, what="the kill recorded")
    [record] = records(aws, "gone")
    assert (record.outcome, record.started_at, record.final) == (RunOutcome.KILLED, None, True)
    assert record.error is not None and record.error.endswith(": host lost")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted")
    assert lines(tmp_path / "runs") == ["run"]  # not run again
    assert history(aws).summary("gone").running == ()  # type: ignore[union-attr]
    assert second.stop() == 0


def test_a_kill_abandons_an_http_job_s_call_at_once(service: Service, runner: HttpRunner) -> None:
    result = stopped_while_waiting(runner, service, StopReason.KILLED)
    assert result.stopped is StopReason.KILLED and not result.ok
    assert call_threads() == []


# --- the mark on the claim --------------------------------------------------------------------


def dedupe(aws: Aws, clock: list[float]) -> DynamoDedupe:
    return DynamoDedupe(
        aws.dynamodb, aws.table, retention_seconds=3600, lease_seconds=10, clock=lambda: clock[0]
    )


MARK = KillMark("alice@ops1", "hung", 1_700_000_000.5)


def test_a_marked_claim_s_renewal_is_kept_and_says_so_once_per_beat(aws: Aws) -> None:
    clock = [time.time()]
    store = dedupe(aws, clock)
    claim = store.claim("m1")
    assert claim.lease is not None
    assert store.renew(claim.lease)
    result = request_kill(aws.dynamodb, aws.table, claim_key("m1"), MARK)
    assert result.answer is KillAnswer.MARKED
    again = request_kill(aws.dynamodb, aws.table, claim_key("m1"), KillMark("bob@x", "", 1.0))
    assert (again.answer, again.mark) == (KillAnswer.ALREADY, MARK)
    clock[0] += 5
    with pytest.raises(KillRequested) as requested:
        store.renew(claim.lease)
    assert requested.value.mark == MARK
    item = aws.item("m1", "throttle")
    assert item is not None and float(item["LeaseUntil"]["N"]) == pytest.approx(clock[0] + 10)
    assert store.finish(claim.lease)
    ended = request_kill(aws.dynamodb, aws.table, claim_key("m1"), MARK)
    assert ended.answer is KillAnswer.ENDED
    assert store.claim("m1").state is ClaimState.FINISHED


def test_a_marked_claim_given_back_or_left_is_taken_once_as_killed(aws: Aws) -> None:
    clock = [time.time()]
    store = dedupe(aws, clock)
    for message_id in ("given-back", "left"):
        claim = store.claim(message_id)
        assert claim.lease is not None
        request_kill(aws.dynamodb, aws.table, claim_key(message_id), MARK)
        if message_id == "given-back":
            store.release(claim.lease)  # a shutdown: the mark stays for the next receiver
        clock[0] += 11  # "left": its holder died, and its lease passed
        taken = store.claim(message_id)
        assert (taken.state, taken.kill, taken.attempt) == (ClaimState.KILLED, MARK, 1)
        assert store.claim(message_id).state is ClaimState.FINISHED


# --- the audit trail ----------------------------------------------------------------------------


def running(site: Aws, event_id: str, message_id: str = "m-running") -> str:
    """A run of event_id in progress, as a daemon leaves it: its claim and its summary's note."""
    clock = [time.time()]
    claim = dedupe(site, clock).claim(message_id)
    assert claim.lease is not None
    now = time.time()
    start = RunStart(event_id, message_id, "batch-1", claim.lease.owner, now, now, "sleep 600")
    history(site).started(start)
    return message_id


def test_kill_of_an_event_marks_each_of_its_runs_and_a_second_kill_changes_nothing(
    site: Aws,
    cli: Run,  # noqa: F811
) -> None:
    first, second = running(site, "nightly", "m-1"), running(site, "nightly", "m-2")
    code, out, err = cli("kill", "--", "nightly", "--reason", "hung")
    assert code == 0, err
    asked = out.splitlines()
    assert [line.split("(message ")[1][:5] for line in asked] == ['"m-1"', '"m-2"']
    assert all(line.startswith("kill requested: the run of event") for line in asked)
    marks = [(site.item(m, "throttle") or {}).get("KillReason") for m in (first, second)]
    assert marks == [{"S": "hung"}, {"S": "hung"}]
    code, out, err = cli("kill", "--", first, "--reason", "again")
    assert code == 0, err
    assert out.startswith("kill already requested by ") and "(hung)" in out
    assert out.rstrip().endswith("nothing changed")
    assert (site.item(first, "throttle") or {})["KillReason"] == {"S": "hung"}


def test_kill_is_audited_before_it_marks_the_claim(site: Aws, cli: Run) -> None:  # noqa: F811
    message_id = running(site, "nightly")
    code, out, err = cli("kill", "--", "nightly", "--reason", "hung")
    assert code == 0, err
    [item] = audit_items(cli)
    assert (item["action"], item["target"], item["reason"]) == ("kill", "nightly", "hung")
    assert item["detail"] == f"message {message_id}"
    assert "KillAt" in (site.item(message_id, "throttle") or {})


def test_kill_is_refused_when_its_audit_item_cannot_be_written(
    site: Aws,
    cli: Run,
    failing_audit: FaultProxy,  # noqa: F811
) -> None:
    message_id = running(site, "nightly")
    code, out, err = cli("kill", "--", "nightly", "--reason", "hung")
    assert code == 1 and out == ""
    assert err.startswith('sqsjkr: error: kill "nightly" not done: its audit item could not')
    assert "KillAt" not in (site.item(message_id, "throttle") or {})


def test_kill_wait_gives_up_after_its_timeout_with_exit_124_and_the_kill_asked(
    site: Aws,
    cli: Run,  # noqa: F811
) -> None:
    # No daemon holds the claim: nothing ends the run, as when its daemon cannot act.
    message_id = running(site, "nightly")
    started = time.monotonic()
    code, out, err = cli("kill", "--wait", "--timeout", "1s", "--", "nightly")
    assert code == 124, err
    assert time.monotonic() - started < 10
    assert out.startswith("kill requested: the run of event")
    assert err.endswith(
        "after 1s (--wait-timeout): the kill request stays on the run's claim, for its daemon's next "
        "heartbeat\n"
    )
    assert "KillAt" in (site.item(message_id, "throttle") or {})
    assert cli("kill", "--wait", "--timeout", "soon", "--", "nightly")[0] == 2
