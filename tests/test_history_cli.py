"""`sqsjkr history` and `sqsjkr status` (with --check): the judging as plain functions, and the
commands end to end against the moto server, on records written with DynamoHistory itself."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.dedupe import DynamoDedupe
from sqsjkr.backends.history import DynamoHistory, MemoryHistory
from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.status import parse_max_ages
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.fleet.running import claim_is_live
from sqsjkr.fleet.status import (
    CheckPolicy,
    Finding,
    Level,
    check_line,
    judge,
    judge_all,
    learned_interval,
)
from sqsjkr.fleet.wording import format_span, local_time

from .conftest import Aws, config_text, sqsjkr, sqsjkr_argv

HOUR = 3600.0
NOW = 1_750_000_000.0  # the injected "now" of the unit tests


def record(
    event_id: str,
    sent_at: float,
    outcome: RunOutcome = RunOutcome.SUCCEEDED,
    *,
    duration: float = 2.0,
    **fields: Any,
) -> RunRecord:
    """A run fired at sent_at that started a second later and took duration."""
    started = sent_at + 1.0
    values: dict[str, Any] = {
        "event_id": event_id,
        "message_id": str(uuid.uuid4()),
        "host": "batch1",
        "owner": "batch1:100:abc",
        "command": "run-it",
        "sent_at": sent_at,
        "claimed_at": sent_at + 0.5,
        "started_at": started,
        "ended_at": started + duration,
        "outcome": outcome,
        "version": "test",
        "exit_code": 0 if outcome is RunOutcome.SUCCEEDED else 1,
    }
    return RunRecord(**{**values, **fields})


def hourly(event_id: str, count: int, last_fired: float, *failed: int) -> list[RunRecord]:
    """count hourly runs, the last fired at last_fired; the runs at the indexes failed failed."""
    first = last_fired - (count - 1) * HOUR
    return [
        record(
            event_id,
            first + i * HOUR,
            RunOutcome.ERRORED if i in failed else RunOutcome.SUCCEEDED,
        )
        for i in range(count)
    ]


def memory(*records: RunRecord) -> MemoryHistory:
    history = MemoryHistory()
    for run in records:
        history.finished(run)
    return history


def judged(history: MemoryHistory, policy: CheckPolicy | None = None, now: float = NOW) -> Finding:
    (summary,) = history.summaries()
    return judge(summary, lambda: history.runs(summary.event_id, 20), policy or CheckPolicy(), now)


# -- the plain functions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-5, "0s"),
        (45.9, "45s"),
        (60, "1m"),
        (90, "1m30s"),
        (3 * HOUR, "3h"),
        (3 * HOUR + 61, "3h1m"),
        (2 * 86400 + 3 * HOUR + 59, "2d3h"),
        (86400, "1d"),
    ],
)
def test_spans_show_their_two_largest_units(seconds: float, text: str) -> None:
    assert format_span(seconds) == text


def test_the_usual_interval_is_the_median_gap_between_final_runs() -> None:
    runs = hourly("ev", 6, NOW)
    # A manual send half way between two firings, and a run that a shutdown stopped (it runs
    # again with the same firing time): neither moves the interval.
    manual = record("ev", NOW - 1.5 * HOUR)
    stopped = record("ev", NOW - 4 * HOUR, RunOutcome.STOPPED, final=False)
    assert learned_interval([*runs, manual, stopped]) == HOUR
    assert learned_interval(hourly("ev", 3, NOW)) == HOUR


def test_runs_sent_by_hand_within_a_minute_teach_no_interval() -> None:
    # Three sends by hand within a second: no interval of 0s, and no CRITICAL a second later.
    burst = [record("ev", NOW - 10 + offset) for offset in (0.0, 0.4, 0.9)]
    assert learned_interval(burst) is None
    history = memory(*burst)
    assert judged(history, now=NOW).level is Level.OK
    # Between hourly firings, a burst of sends by hand leaves the hour as it was.
    burst = [record("ev", NOW - 4.5 * HOUR + s) for s in (0.0, 0.5, 1.0, 1.5)]
    assert learned_interval(hourly("ev", 6, NOW) + burst) == HOUR
    # A schedule of every minute is still learned.
    assert learned_interval([record("ev", NOW - s) for s in (120.0, 60.0, 0.0)]) == 60.0


def test_no_interval_is_learned_from_fewer_than_three_runs() -> None:
    assert learned_interval(hourly("ev", 2, NOW)) is None
    # Two final runs and a non-final one are still two firings.
    runs = [*hourly("ev", 2, NOW), record("ev", NOW - 5 * HOUR, final=False)]
    assert learned_interval(runs) is None


def test_no_success_for_twice_the_learned_interval_is_critical() -> None:
    history = memory(*hourly("ev", 6, NOW - 3 * HOUR))
    finding = judged(history)
    assert finding.level is Level.CRITICAL
    assert finding.reasons == ("no success for 2h59m (usual interval 1h)",)
    assert judged(history, now=NOW - 1.5 * HOUR).level is Level.OK


def test_an_event_without_a_learned_interval_is_not_judged_by_age() -> None:
    history = memory(*hourly("ev", 2, NOW - 30 * 86400))
    assert judged(history).level is Level.OK


def test_one_final_failure_is_critical_by_default() -> None:
    finding = judged(memory(*hourly("ev", 4, NOW, 3)))
    assert finding == Finding("ev", Level.CRITICAL, ("1 failure in a row",))


def test_fewer_failures_in_a_row_than_max_failures_is_a_warning() -> None:
    # (A day's --max-age, so that the hours without a success do not count here.)
    policy = CheckPolicy(max_failures=3, max_ages={"ev": 86400.0})
    two = judged(memory(*hourly("ev", 5, NOW, 3, 4)), policy)
    assert two == Finding("ev", Level.WARNING, ("2 failures in a row (critical at 3)",))
    three = judged(memory(*hourly("ev", 5, NOW, 2, 3, 4)), policy)
    assert three == Finding("ev", Level.CRITICAL, ("3 failures in a row",))
    # A success in between starts the count again.
    assert judged(memory(*hourly("ev", 5, NOW, 1, 2, 4)), policy).level is Level.WARNING


def test_a_kill_or_a_lock_abort_is_no_failure_and_mends_none() -> None:
    """contract.run.FAILURES: a life_time cancel counts; a kill someone asked for and a skip by
    abort_if_locked neither count nor start the count again."""
    policy = CheckPolicy(max_failures=3, max_ages={"ev": 86400.0})
    runs = hourly("ev", 5, NOW, 2)
    runs[1] = replace(runs[1], outcome=RunOutcome.CANCELLED, started_at=None)
    runs[3] = replace(runs[3], outcome=RunOutcome.KILLED, signal=15)
    runs[4] = replace(runs[4], outcome=RunOutcome.ABORTED, started_at=None)
    finding = judged(memory(*runs), policy)
    assert finding == Finding("ev", Level.WARNING, ("2 failures in a row (critical at 3)",))
    assert judged(memory(*runs[3:]), policy).level is Level.OK


def test_a_failure_that_is_not_final_is_not_counted() -> None:
    stopped = record("ev", NOW + 60, RunOutcome.STOPPED, final=False)
    assert judged(memory(*hourly("ev", 4, NOW), stopped)).level is Level.OK


def test_an_explicit_max_age_overrides_the_learned_interval() -> None:
    history = memory(*hourly("ev", 6, NOW - 3 * HOUR))
    lenient = CheckPolicy(max_ages={"ev": 86400.0})
    assert judged(history, lenient).level is Level.OK
    strict = CheckPolicy(max_ages={"ev": 30 * 60.0})
    # Applies without a learned interval too.
    one_run = memory(record("ev", NOW - 45 * 60))
    finding = judged(one_run, strict)
    assert finding.level is Level.CRITICAL
    assert finding.reasons[0].startswith("no success for 44m")
    assert finding.reasons[0].endswith("(max age 30m)")


def test_an_event_that_never_succeeded_is_judged_from_its_first_run() -> None:
    failing = memory(*hourly("ev", 3, NOW - 10 * 60, 0, 1, 2))  # the first fired 2h10m ago
    patient = CheckPolicy(max_failures=5)
    finding = judged(failing, patient)
    assert finding.level is Level.CRITICAL
    assert finding.reasons == ("never succeeded, first run 2h9m ago (usual interval 1h)",)
    # Within its --max-age of its first run: only a warning for the failures so far.
    lenient = replace(patient, max_ages={"ev": 86400.0})
    assert judged(failing, lenient).level is Level.WARNING
    strict = replace(patient, max_ages={"ev": 2 * HOUR})
    assert judged(failing, strict).reasons == ("never succeeded, first run 2h9m ago (max age 2h)",)
    # As many failures as max_failures is critical whatever the age.
    assert judged(failing, replace(lenient, max_failures=3)).reasons == ("3 failures in a row",)


def test_max_age_naming_an_event_without_runs_is_a_warning() -> None:
    history = memory(*hourly("ev", 3, NOW))
    policy = CheckPolicy(max_ages={"typo": 86400.0})
    findings = judge_all(history.summaries(), lambda e: history.runs(e, 20), policy, NOW)
    assert findings[-1] == Finding(
        "typo", Level.WARNING, ("no runs recorded (named by --max-age)",)
    )
    assert check_line(findings, 1) == (
        Level.WARNING,
        "SQSJKR WARNING - typo: no runs recorded (named by --max-age)",
    )


def test_the_check_line_puts_the_worst_first() -> None:
    findings = [
        Finding("a", Level.OK),
        Finding("b", Level.WARNING, ("1 failure in a row (critical at 2)",)),
        Finding("c", Level.CRITICAL, ("3 failures in a row", "no success for 2d3h (max age 1d)")),
    ]
    assert check_line(findings, 3) == (
        Level.CRITICAL,
        "SQSJKR CRITICAL - c: 3 failures in a row, no success for 2d3h (max age 1d); "
        "b: 1 failure in a row (critical at 2)",
    )
    assert check_line(findings[:1], 1) == (Level.OK, "SQSJKR OK - 1 event")
    assert check_line([], 0) == (Level.OK, "SQSJKR OK - 0 events")


def test_max_ages_parse_with_days() -> None:
    assert parse_max_ages(["nightly=2d", "a=b=90m"]) == {"nightly": 2 * 86400.0, "a=b": 5400.0}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("nightly", "expected EVENT=DURATION"),
        ("=1h", "expected EVENT=DURATION"),
        ("nightly=2x", 'unknown unit "x"'),
        ("nightly=0s", "must be positive"),
    ],
)
def test_bad_max_ages_are_usage_errors_naming_the_option(value: str, message: str) -> None:
    with pytest.raises(UsageFailure, match=f"--max-age .*{message}"):
        parse_max_ages([value])


def test_a_claim_is_live_only_while_leased() -> None:
    assert claim_is_live({"LeaseUntil": {"N": str(NOW + 1)}}, NOW)
    assert not claim_is_live({"LeaseUntil": {"N": str(NOW - 1)}}, NOW)
    assert not claim_is_live({"Owner": {"S": "x"}}, NOW)  # finished
    assert not claim_is_live(None, NOW)  # gone


# -- the commands, against the moto server ------------------------------------------------------


@pytest.fixture
def conf(tmp_path: Path, aws: Aws) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(aws, stats="stats_port = 0"))
    return path


def store(aws: Aws) -> DynamoHistory:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=30 * 86400)


def write(aws: Aws, *records: RunRecord) -> None:
    history = store(aws)
    for run in records:
        history.finished(run)


def table_items(aws: Aws) -> list[dict[str, Any]]:
    return sorted(
        aws.dynamodb.scan(TableName=aws.table, ConsistentRead=True)["Items"],
        key=lambda item: (item["Id"]["S"], item["Type"]["S"]),
    )


def test_history_lists_runs_newest_first(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    runs = hourly("nightly", 3, now - HOUR, 1)
    killed = record("nightly", now - 10, RunOutcome.TIMED_OUT, exit_code=None, signal=15)
    killed = replace(killed, lock_wait=75.0, attempt=2, host="batch2")
    write(aws, *runs, killed)
    code, out, err = sqsjkr(capsys, "history", "-c", str(conf), "nightly")
    assert (code, err) == (0, "")
    header, *lines = out.splitlines()
    assert header.split() == [
        *["ENDED", "OUTCOME", "EXIT", "DURATION", "QUEUE", "DELAY", "LOCK", "WAIT"],
        *["HOST", "MESSAGE", "ID", "ATTEMPT"],
    ]
    assert [line.split()[0] for line in lines] == [
        local_time(r.ended_at) for r in (killed, *reversed(runs))
    ]
    assert lines[0].split()[1:] == [
        *["timed_out", "SIGTERM", "2.0s", "1.0s", "1m15s", "batch2", killed.message_id, "2"]
    ]
    assert lines[2].split()[1:3] == ["errored", "1"]
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "nightly", "--limit", "2")
    assert len(out.splitlines()) == 3


def test_history_shows_output_tails_on_request(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    quiet = record("report", now - 100)
    loud = record("report", now - 50, RunOutcome.ERRORED, output="line one\nboom\n")
    write(aws, quiet, loud)
    _, plain, _ = sqsjkr(capsys, "history", "-c", str(conf), "report")
    assert "boom" not in plain
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "report", "--output")
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith(local_time(loud.ended_at))
    assert lines[2:4] == ["    line one", "    boom"]
    assert lines[4].startswith(local_time(quiet.ended_at))
    assert lines[5:] == ["    (no output kept)"]


def test_history_json_is_an_array_of_records(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loud = record("report", time.time() - 50, RunOutcome.ERRORED, output="boom\n")
    write(aws, loud)
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "report", "--json")
    assert code == 0
    expected = loud.as_dict()
    for name in ("output", "stdout", "stderr"):
        del expected[name]
    assert json.loads(out) == [expected]
    _, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "report", "--json", "--output")
    assert json.loads(out)[0]["output"] == "boom\n"
    assert RunRecord.from_dict(json.loads(out)[0]) == replace(loud, stdout="", stderr="")


def test_history_of_an_unknown_event_fails(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(aws, record("nightly", time.time() - 50))
    code, out, err = sqsjkr(capsys, "history", "-c", str(conf), "nighty")
    assert (code, out) == (1, "")
    assert err == f'sqsjkr: no runs of event "nighty" in table {aws.table!r}\n'


def test_status_shows_each_event_and_what_runs_now(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    write(aws, *hourly("hourly", 4, now - 3 * HOUR - 30), *hourly("nightly", 2, now - HOUR, 0, 1))
    dedupe = DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=86400, lease_seconds=60)
    live = dedupe.claim("m-live").lease
    assert live is not None
    dead = DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=86400, lease_seconds=-60)
    dead.claim("m-expired")
    history = store(aws)
    for message_id, host in [("m-live", "b1"), ("m-expired", "b2"), ("m-gone", "b3")]:
        start = RunStart("hourly", message_id, host, "o", now - 60, now - 61, "run-it")
        history.started(start)
    code, out, err = sqsjkr(capsys, "status", "-c", str(conf))
    assert (code, err) == (0, "")
    header, hourly_line, nightly_line = out.splitlines()
    # A header row, as history's, over the cells it names.
    assert header.split() == [
        "EVENT",
        "LAST",
        "RUN",
        "LAST",
        "SUCCESS",
        "FAILURES",
        "NEXT",
        "RUN",
        "NOW",
    ]
    assert header.index("LAST SUCCESS") == hourly_line.index("last success")
    since = local_time(now - 60)
    assert hourly_line.split()[0] == "hourly"
    assert f"running on b1 since {since}" in hourly_line
    assert f"running on b1 since {since} (stale)" not in hourly_line
    assert f"running on b2 since {since} (stale)" in hourly_line
    assert f"running on b3 since {since} (stale)" in hourly_line
    assert " succeeded " in hourly_line
    assert "last success 3h ago" in hourly_line
    assert "0 failures in a row" in hourly_line
    assert nightly_line.startswith("nightly ")
    assert " errored " in nightly_line and " on batch1 " in nightly_line
    assert "never succeeded" in nightly_line and "2 failures in a row" in nightly_line
    assert "running" not in nightly_line


def test_status_json_has_an_object_per_event(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    runs = hourly("hourly", 2, now - HOUR)
    write(aws, *runs)
    start = RunStart("hourly", "m-gone", "b3", "o", now - 60, now - 61, "run-it", attempt=2)
    store(aws).started(start)
    code, out, _ = sqsjkr(capsys, "status", "-c", str(conf), "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["pauses"] == []
    (event,) = shown["events"]
    age = event.pop("last_success_age")
    assert now - runs[-1].ended_at <= age < time.time() - runs[-1].ended_at + 1
    last = runs[-1].as_dict()
    for name in ("output", "stdout", "stderr"):
        del last[name]
    assert event == {
        "event_id": "hourly",
        "last_run": last,
        "last_success_at": pytest.approx(runs[-1].ended_at, abs=1e-3),
        "last_failure_at": None,
        "consecutive_failures": 0,
        "one_off": False,
        "running": [
            {
                "event_id": "hourly",
                "message_id": "m-gone",
                "host": "b3",
                "owner": "o",
                "started_at": now - 60,
                "sent_at": now - 61,
                "command": "run-it",
                "lock_id": None,
                "receive_count": 1,
                "attempt": 2,
                "waiting_for": None,
                "waiting_key": None,
                "held_by": None,
                "claim_id": None,  # its message id: it is no schedule's firing
                "stale": True,
            }
        ],
        "next_run": None,  # no schedule sends the event
        "schedule_disabled": False,
        "routed_to": None,  # no route moves it to another queue
    }


def test_status_of_an_empty_table(aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sqsjkr(capsys, "status", "-c", str(conf)) == (
        0,
        "",
        f"sqsjkr: no runs recorded in table {aws.table!r}\n",
    )
    code, out, err = sqsjkr(capsys, "status", "-c", str(conf), "--json")
    assert (code, json.loads(out), err) == (0, {"pauses": [], "routes": [], "events": []}, "")
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check") == (0, "SQSJKR OK - 0 events\n", "")


def check(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed `sqsjkr status --check ARGS`, as a monitoring agent runs it."""
    return subprocess.run(
        sqsjkr_argv("status", "--check", *args),
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
    )


def test_check_learns_each_events_interval(aws: Aws, conf: Path) -> None:
    now = time.time()
    # Half a minute off the hour, so the ages shown do not move while the test runs.
    late, fine = hourly("late", 6, now - 3 * HOUR - 30), hourly("fine", 6, now - 1.5 * HOUR - 30)
    write(aws, *late, *fine)
    result = check("-c", str(conf))
    assert (result.returncode, result.stderr) == (2, "")
    assert result.stdout == "SQSJKR CRITICAL - late: no success for 3h (usual interval 1h)\n"
    result = check("-c", str(conf), "--max-age", "late=4h", "--max-age", "fine=1h")
    assert (result.returncode, result.stderr) == (2, "")
    assert result.stdout == "SQSJKR CRITICAL - fine: no success for 1h30m (max age 1h)\n"
    result = check("-c", str(conf), "--max-age", "late=4h")
    assert (result.returncode, result.stdout) == (0, "SQSJKR OK - 2 events\n")


def test_check_counts_failures_in_a_row(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    # The usual interval is 1h10m (the median gap), and the last success 1h30m ago is within
    # twice that: only the failures count.
    fired = [now - 3 * HOUR, now - 1.5 * HOUR, now - 20 * 60, now - 10 * 60]
    outcomes = [RunOutcome.SUCCEEDED] * 2 + [RunOutcome.ERRORED] * 2
    write(aws, *(record("flaky", t, o) for t, o in zip(fired, outcomes, strict=True)))
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check") == (
        2,
        "SQSJKR CRITICAL - flaky: 2 failures in a row\n",
        "",
    )
    args = ["status", "-c", str(conf), "--check", "--max-failures", "3", "--max-age", "nope=1d"]
    assert sqsjkr(capsys, *args) == (
        1,
        "SQSJKR WARNING - flaky: 2 failures in a row (critical at 3); "
        "nope: no runs recorded (named by --max-age)\n",
        "",
    )


def test_an_aws_error_is_unknown_to_the_check_and_one_line_to_the_rest(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0").replace(aws.table, "no-such-table"))
    missing = "DynamoDB table 'no-such-table' not found (check [lock] table or --lock-table"
    result = check("-c", str(conf))
    assert (result.returncode, result.stderr) == (3, "")
    assert result.stdout.startswith(f"SQSJKR UNKNOWN - {missing}")
    assert result.stdout.count("\n") == 1
    for args in (["status"], ["history", "nightly"]):
        code, out, err = sqsjkr(capsys, *args, "-c", str(conf))
        assert (code, out) == (1, "")
        assert err.startswith(f"sqsjkr: error: {missing}") and err.count("\n") == 1


def history_off(aws: Aws, tmp_path: Path) -> tuple[Path, str]:
    """A config with [history] backend = "none", and what the commands say of it."""
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0") + '\n[history]\nbackend = "none"\n')
    return conf, f'history is off in {conf} ([history] backend = "none"): no runs to show'


def test_commands_refuse_a_config_with_history_off(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf, off = history_off(aws, tmp_path)
    for args in (["status"], ["history", "nightly"]):
        code, out, err = sqsjkr(capsys, *args, "-c", str(conf))
        assert (code, out, err) == (2, "", f"sqsjkr: {off}\n")


def test_a_check_that_cannot_judge_is_unknown(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """History off, or a config that does not load: the plugin's UNKNOWN, not CRITICAL."""
    conf, off = history_off(aws, tmp_path)
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check") == (
        3,
        f"SQSJKR UNKNOWN - {off}\n",
        "",
    )
    broken = tmp_path / "broken.toml"
    broken.write_text("[sqs\nqueue_name = 'x'\n")
    code, out, err = sqsjkr(capsys, "status", "-c", str(broken), "--check")
    assert (code, err) == (3, "")
    assert out.startswith("SQSJKR UNKNOWN - ") and out.count("\n") == 1 and "broken.toml" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-age", "a=1h"], "--max-age and --include-one-off only apply with --check"),
        (["--max-failures", "2"], "--max-age and --include-one-off only apply with --check"),
        (["--include-one-off"], "--max-age and --include-one-off only apply with --check"),
        (["--check", "--json"], "give --check or --json, not both"),
        (["--forget", "a", "--check"], "--forget changes the history"),
        (["--forget", "a", "--json"], "--forget changes the history"),
        (["--check", "--max-age", "a"], '--max-age "a": expected EVENT=DURATION'),
    ],
)
def test_status_refuses_options_that_do_not_go_together(
    conf: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    code, out, err = sqsjkr(capsys, "status", "-c", str(conf), *args)
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1


def test_the_commands_only_read(aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    now = time.time()
    write(aws, *hourly("hourly", 4, now - 3 * HOUR, 3))
    store(aws).started(RunStart("hourly", "m-gone", "b3", "o", now - 60, now - 61, "run-it"))
    before = table_items(aws)
    for args in (
        ["history", "hourly", "--output"],
        ["status"],
        ["status", "--json"],
        ["status", "--check"],
    ):
        sqsjkr(capsys, *args, "-c", str(conf))
    assert table_items(aws) == before


def test_a_paused_event_is_not_judged_by_age() -> None:
    from sqsjkr.backends.pause import Pause

    runs = hourly("paused", 6, NOW - 5 * HOUR)  # no success for 5 hours, usually hourly
    history = memory(*runs)
    policy = CheckPolicy(max_failures=1, max_ages={})
    [finding] = judge_all(history.summaries(), lambda e: history.runs(e, 20), policy, NOW)
    assert finding.level is Level.CRITICAL
    held = Pause("paused", NOW - 6 * HOUR, None, "migration", "ops@host")
    [finding] = judge_all(history.summaries(), lambda e: history.runs(e, 20), policy, NOW, [held])
    assert finding.level is Level.OK


def one_off(sent_at: float, outcome: RunOutcome = RunOutcome.SUCCEEDED) -> RunRecord:
    """The run of a job sent without an event_id: its message id is its event."""
    message_id = str(uuid.uuid4())
    return record(message_id, sent_at, outcome, message_id=message_id)


def test_the_check_leaves_one_off_jobs_out_unless_asked() -> None:
    failed = one_off(NOW - 86400, RunOutcome.ERRORED)
    history = memory(failed, *hourly("hourly", 4, NOW))
    policy = CheckPolicy()
    [finding] = judge_all(history.summaries(), lambda e: history.runs(e, 20), policy, NOW)
    assert (finding.event_id, finding.level) == ("hourly", Level.OK)
    policy = CheckPolicy(include_one_off=True)
    findings = judge_all(history.summaries(), lambda e: history.runs(e, 20), policy, NOW)
    assert {(f.event_id, f.level) for f in findings} == {
        ("hourly", Level.OK),
        (failed.event_id, Level.CRITICAL),
    }


def test_one_off_jobs_are_shown_but_not_checked(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    failed = one_off(now - 60, RunOutcome.ERRORED)
    write(aws, failed, *hourly("hourly", 3, now - 60))
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check") == (0, "SQSJKR OK - 1 event\n", "")
    code, out, _ = sqsjkr(capsys, "status", "-c", str(conf), "--check", "--include-one-off")
    assert (code, out) == (2, f"SQSJKR CRITICAL - {failed.event_id}: 1 failure in a row\n")
    _, out, _ = sqsjkr(capsys, "status", "-c", str(conf))
    [line] = [line for line in out.splitlines() if line.startswith(failed.event_id)]
    assert line.endswith("one-off (no event_id)")
    _, out, _ = sqsjkr(capsys, "status", "-c", str(conf), "--json")
    assert {e["event_id"]: e["one_off"] for e in json.loads(out)["events"]} == {
        failed.event_id: True,
        "hourly": False,
    }


def test_forget_drops_an_event_from_status_and_keeps_its_runs(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    write(aws, *hourly("retired", 3, now - 86400, 2), *hourly("hourly", 3, now - 60))
    store(aws).started(RunStart("hourly", "m-live", "b1", "o", now - 5, now - 6, "run-it"))
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check")[0] == 2  # retired failed
    code, out, err = sqsjkr(capsys, "status", "-c", str(conf), "--forget", "retired")
    assert (code, out, err) == (0, 'forgot event "retired"; its run records expire as before\n', "")
    assert sqsjkr(capsys, "status", "-c", str(conf), "--check") == (0, "SQSJKR OK - 1 event\n", "")
    _, out, _ = sqsjkr(capsys, "status", "-c", str(conf))
    assert [line.split()[0] for line in out.splitlines()] == ["EVENT", "hourly"]
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "retired")
    assert (code, len(out.splitlines())) == (0, 4)  # a header and the three runs
    code, out, err = sqsjkr(
        capsys, "status", "-c", str(conf), "--forget", "hourly", "--forget", "x\ny"
    )
    assert code == 1
    assert out == (
        'forgot event "hourly"; its run records expire as before\n'
        "  it had 1 run(s) in progress: each lists it again when it ends\n"
    )
    assert err == f'sqsjkr: no event "x\\ny" in table {aws.table!r}\n'


def test_follow_gives_up_after_its_timeout_with_exit_124(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, out, err = sqsjkr(
        capsys, "history", "nightly", "--follow", "--timeout", "1s", "-c", str(conf)
    )
    assert (code, out) == (124, "")
    assert time.monotonic() - started < 10
    assert err.endswith(
        'sqsjkr: gave up waiting for a run of event "nightly" after 1s (--wait-timeout): the run '
        "goes on\n"
    )
    assert "waiting for the next one to start" in err
    code, _, err = sqsjkr(capsys, "history", "nightly", "-f", "--timeout", "-1s", "-c", str(conf))
    assert code == 2 and "--wait-timeout" in err


def test_history_failed_lists_each_failed_run_once_not_its_dropped_copies(
    conf: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    failed = record("nightly", now - 600, RunOutcome.ERRORED)
    # A second copy of its message, dropped as a duplicate of the run: not a failed run.
    copy = record(
        "nightly", now - 600, RunOutcome.DUPLICATE, message_id=failed.message_id, duration=3.0
    )
    write(aws, failed, copy)
    for args in ((), ("nightly",)):
        code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "--failed", *args)
        [row] = out.splitlines()[1:]
        assert code == 0 and local_time(failed.ended_at) in row and " errored " in row, out
