"""Reporters, noticers and the webhook: horenso's format, real `sh -c` commands, a real HTTP server."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.contract.config import ReportConfig
from sqsjkr.contract.duration import Duration
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.observability.report import Reporter, horenso_notice, horenso_report, summary_line
from tests.conftest import free_port, wait_until

# The fields of horenso's report (Songmu/horenso v0.10, its Report struct), so that reporters
# written for horenso read sqsjkr's reports unchanged.
HORENSO_FIELDS = {
    "command",
    "commandArgs",
    "tag",
    "output",
    "stdout",
    "stderr",
    "exitCode",
    "signaled",
    "result",
    "hostname",
    "pid",
    "startAt",
    "endAt",
    "systemTime",
    "userTime",
}
# sqsjkr measures no CPU time of its commands.
NOT_GIVEN = {"systemTime", "userTime"}
SQSJKR_FIELDS = {
    "event_id",
    "message_id",
    "lock_id",
    "outcome",
    "attempt",
    "sent_at",
    "queue_delay",
}

SECRET = "/services/T000/B000/s3cr3t"

RECORD = RunRecord(
    event_id="nightly-report",
    message_id="m-1",
    host="host-a",
    owner="host-a:42:abcd",
    command="/usr/local/bin/nightly-report --full",
    sent_at=990.0,
    claimed_at=995.0,
    started_at=1000.0,
    ended_at=1002.1,
    outcome=RunOutcome.ERRORED,
    version="test",
    lock_id="nightly",
    exit_code=3,
    attempt=2,
    output="out\nerr\n",
    stdout="out\n",
    stderr="err\n",
    pid=4321,
)
START = RunStart(
    event_id="nightly-report",
    message_id="m-1",
    host="host-a",
    owner="host-a:42:abcd",
    started_at=1000.0,
    sent_at=990.0,
    command="/usr/local/bin/nightly-report --full",
)
SUCCESS = replace(RECORD, message_id="m-ok", outcome=RunOutcome.SUCCEEDED, exit_code=0)


def settings(**values: Any) -> ReportConfig:
    values.setdefault("timeout", 30)
    values["timeout"] = Duration.of_seconds(values["timeout"])
    for key in ("reporters", "noticers"):
        values[key] = tuple(values.get(key, ()))
    return ReportConfig(**values)


@pytest.fixture
def make_reporter() -> Iterator[Callable[..., Reporter]]:
    made: list[Reporter] = []

    def make(config: ReportConfig, *, start: bool = True, **options: Any) -> Reporter:
        reporter = Reporter(config, **options)
        made.append(reporter)
        if start:
            reporter.start()
        return reporter

    yield make
    for reporter in made:
        reporter.close(timeout=5)


@dataclass
class Hook:
    """A local webhook endpoint: what it received, and the status it answers."""

    url: str
    status: int = 200
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    endpoint = Hook(url=f"http://127.0.0.1:{server.server_address[1]}{SECRET}")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            endpoint.requests.append((self.path, dict(self.headers), body))
            self.send_response(endpoint.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server.RequestHandlerClass = Handler
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield endpoint
    server.shutdown()
    server.server_close()
    thread.join()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read_pid(path: Path) -> int | None:
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else None


def report_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def has_log(caplog: pytest.LogCaptureFixture, level: int, *parts: str) -> bool:
    return any(
        r.levelno == level and all(p in r.getMessage() for p in parts) for r in caplog.records
    )


# --- the format ---------------------------------------------------------------------------------


def test_report_has_horensos_fields_and_sqsjkrs() -> None:
    report = horenso_report(RECORD)

    assert set(report) == (HORENSO_FIELDS - NOT_GIVEN) | SQSJKR_FIELDS
    assert report["command"] == RECORD.command
    assert report["commandArgs"] == ["sh", "-c", RECORD.command]
    assert report["tag"] == "nightly-report"
    assert (report["output"], report["stdout"], report["stderr"]) == (
        "out\nerr\n",
        "out\n",
        "err\n",
    )
    assert (report["exitCode"], report["signaled"]) == (3, False)
    assert report["result"] == "command exited with code: 3"
    assert (report["hostname"], report["pid"]) == ("host-a", 4321)
    assert (report["event_id"], report["message_id"], report["lock_id"]) == (
        "nightly-report",
        "m-1",
        "nightly",
    )
    assert (report["outcome"], report["attempt"], report["queue_delay"]) == ("errored", 2, 10.0)
    for key, unix in (("startAt", 1000.0), ("endAt", 1002.1), ("sent_at", 990.0)):
        when = datetime.fromisoformat(report[key])
        assert when.tzinfo is not None and "." in report[key], key
        assert when.timestamp() == pytest.approx(unix)
    # A job's environment is never reported (a record has none to give).
    assert not {"env", "envs"} & set(report)


@pytest.mark.parametrize(
    ("changes", "exit_code", "signaled", "result"),
    [
        (
            {"exit_code": 0, "outcome": RunOutcome.SUCCEEDED},
            0,
            False,
            "command exited with code: 0",
        ),
        (
            {"exit_code": None, "signal": 15, "outcome": RunOutcome.TIMED_OUT},
            -1,
            True,
            "command died with signal: 15",
        ),
        (
            {
                "exit_code": None,
                "started_at": None,
                "pid": None,
                "outcome": RunOutcome.CANCELLED,
                "error": "older than its life_time",
            },
            -1,
            False,
            "failed to execute the command: cancelled: older than its life_time",
        ),
        (
            {"exit_code": None, "started_at": None, "pid": None, "outcome": RunOutcome.STOPPED},
            -1,
            False,
            "failed to execute the command: stopped",
        ),
    ],
)
def test_report_results_are_horensos_strings(
    changes: dict[str, Any], exit_code: int, signaled: bool, result: str
) -> None:
    record = replace(RECORD, **changes)
    report = horenso_report(record)

    assert (report["exitCode"], report["signaled"], report["result"]) == (
        exit_code,
        signaled,
        result,
    )
    assert ("pid" in report) is (record.pid is not None)
    # A run that never started dates from when a worker took it up.
    start = record.started_at or record.claimed_at
    assert datetime.fromisoformat(report["startAt"]).timestamp() == pytest.approx(start)


def test_notice_has_exit_code_minus_one_and_no_end() -> None:
    notice = horenso_notice(START)

    assert set(notice) == (HORENSO_FIELDS - NOT_GIVEN - {"pid", "endAt"}) | SQSJKR_FIELDS
    assert (notice["exitCode"], notice["signaled"], notice["outcome"]) == (-1, False, None)
    assert notice["commandArgs"] == ["sh", "-c", START.command]
    assert datetime.fromisoformat(notice["startAt"]).timestamp() == pytest.approx(1000.0)
    assert notice["queue_delay"] == 10.0


def test_summary_line_says_what_happened_in_one_line() -> None:
    assert summary_line(RECORD) == (
        ":x: nightly-report failed on host-a: command exited with code: 3 (2.1s)"
    )
    assert summary_line(SUCCESS) == (
        ":white_check_mark: nightly-report succeeded on host-a: command exited with code: 0 (2.1s)"
    )
    killed = replace(RECORD, outcome=RunOutcome.KILLED, exit_code=None, signal=15)
    assert summary_line(killed).startswith(":heavy_minus_sign: nightly-report was killed on")
    forged = replace(RECORD, event_id="a\nb", exit_code=None, started_at=None, error="why")
    assert summary_line(forged) == (
        ":x: a\\nb failed on host-a: failed to execute the command: errored: why"
    )


# --- reporters and noticers ----------------------------------------------------------------------


def test_reporter_gets_the_report_on_stdin_with_the_daemons_environment(
    tmp_path: Path, make_reporter: Callable[..., Reporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SQSJKR_REPORT_MARK", "from-the-daemon")
    out, mark = tmp_path / "out.json", tmp_path / "mark"
    reporter = make_reporter(
        settings(reporters=[f"cat > {out}", f'printf %s "$SQSJKR_REPORT_MARK" > {mark}'])
    )

    reporter.report(RECORD)

    got = wait_until(lambda: read_json(out), what="the reporter's report")
    assert got == json.loads(json.dumps(horenso_report(RECORD)))
    wait_until(lambda: mark.exists() and mark.read_text() == "from-the-daemon", what="the mark")


def test_noticers_hear_of_starts_and_reporters_do_not(
    tmp_path: Path, make_reporter: Callable[..., Reporter]
) -> None:
    noticed, reported = tmp_path / "noticed.json", tmp_path / "reported.json"
    reporter = make_reporter(
        settings(noticers=[f"cat > {noticed}"], reporters=[f"cat > {reported}"])
    )

    reporter.notice(START)
    reporter.close(timeout=10)

    got = read_json(noticed)
    assert got["exitCode"] == -1 and "endAt" not in got and got["message_id"] == "m-1"
    assert not reported.exists()


@pytest.mark.parametrize(
    ("report_on", "expected"),
    [
        ("always", ["m-ok", "m-stopped", "m-killed", "m-aborted", "m-retried", "m-late", "m-1"]),
        ("failure", ["m-late", "m-1"]),
    ],
)
def test_report_on_failure_hears_only_of_final_failures(
    tmp_path: Path, make_reporter: Callable[..., Reporter], report_on: str, expected: list[str]
) -> None:
    out = tmp_path / "reports"
    # One thread: the reports reach the file in the order they were made.
    reporter = make_reporter(
        settings(reporters=[f"cat >> {out}; echo >> {out}"], report_on=report_on, max_concurrent=1)
    )
    # A run stopped by a shutdown runs again: not its final run.
    stopped = replace(RECORD, message_id="m-stopped", outcome=RunOutcome.STOPPED, final=False)
    # Not failures (contract.run.FAILURES): a kill someone asked for, a skip by abort_if_locked,
    # and an errored run that will be retried; a life_time cancel is one.
    others = [
        replace(RECORD, message_id="m-killed", outcome=RunOutcome.KILLED),
        replace(RECORD, message_id="m-aborted", outcome=RunOutcome.ABORTED),
        replace(RECORD, message_id="m-retried", final=False),
        replace(RECORD, message_id="m-late", outcome=RunOutcome.CANCELLED, started_at=None),
    ]

    for record in (SUCCESS, stopped, *others, RECORD):
        reporter.report(record)
    reporter.close(timeout=10)

    assert [r["message_id"] for r in report_lines(out)] == expected


def test_reporter_output_and_failure_are_logged(
    tmp_path: Path, make_reporter: Callable[..., Reporter], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.report")
    reporter = make_reporter(settings(reporters=["echo to-stdout; echo to-stderr >&2; exit 4"]))

    reporter.report(RECORD)
    reporter.close(timeout=10)

    assert has_log(caplog, logging.INFO, "job m-1 (event nightly-report)", "| to-stdout")
    assert has_log(caplog, logging.INFO, "job m-1 (event nightly-report)", "| to-stderr")
    assert has_log(caplog, logging.WARNING, "job m-1", "exited with 4")


def test_hanging_reporter_is_stopped_at_its_timeout(
    tmp_path: Path, make_reporter: Callable[..., Reporter], caplog: pytest.LogCaptureFixture
) -> None:
    pids = {name: tmp_path / f"{name}.pid" for name in ("plain", "deaf")}
    reporter = make_reporter(
        settings(
            reporters=[
                f"echo $$ > {pids['plain']}; exec sleep 1000",
                # Deaf to SIGTERM (sleep inherits the ignored signal): it takes SIGKILL.
                f"trap '' TERM; echo $$ > {pids['deaf']}; sleep 1000",
            ],
            timeout=0.5,
            max_concurrent=2,
        )
    )

    reporter.report(RECORD)

    for name, path in pids.items():
        pid = wait_until(lambda path=path: read_pid(path), what=f"the {name} reporter's pid")
        wait_until(lambda pid=pid: not alive(pid), what=f"the {name} reporter to be stopped")
    assert has_log(caplog, logging.WARNING, "job m-1", "still running after 0.5s")


def test_hanging_reporter_neither_delays_another_nor_holds_up_close(
    tmp_path: Path, make_reporter: Callable[..., Reporter]
) -> None:
    hang_pid, out = tmp_path / "hang.pid", tmp_path / "out.json"
    reporter = make_reporter(
        settings(
            reporters=[f"echo $$ > {hang_pid}; exec sleep 1000", f"cat > {out}"],
            timeout=600,
            max_concurrent=2,
        )
    )

    reporter.report(RECORD)

    assert wait_until(lambda: read_json(out), what="the other reporter's report")
    pid = wait_until(lambda: read_pid(hang_pid), what="the hanging reporter's pid")
    assert alive(pid)
    reporter.close(timeout=0.5)
    # close() joined its threads, which reaped the killed reporter.
    assert not alive(pid)
    assert not [t for t in threading.enumerate() if t.name.startswith("sqsjkr-report")]


def test_close_drops_what_is_still_queued_at_its_deadline(
    tmp_path: Path, make_reporter: Callable[..., Reporter], caplog: pytest.LogCaptureFixture
) -> None:
    hang_pid, out = tmp_path / "hang.pid", tmp_path / "out.json"
    reporter = make_reporter(
        settings(
            reporters=[f"echo $$ > {hang_pid}; exec sleep 1000", f"cat > {out}"],
            timeout=600,
            max_concurrent=1,
        )
    )

    reporter.report(RECORD)
    wait_until(lambda: read_pid(hang_pid), what="the hanging reporter's pid")
    reporter.close(timeout=0.2)

    assert not out.exists()
    assert has_log(caplog, logging.WARNING, "job m-1", f"reporter 'cat > {out}'", "stopping")
    reporter.report(RECORD)  # after close: refused, not raised
    assert has_log(caplog, logging.WARNING, "job m-1", "reporting has stopped")


def test_a_full_queue_drops_with_a_warning(
    tmp_path: Path, make_reporter: Callable[..., Reporter], caplog: pytest.LogCaptureFixture
) -> None:
    out = tmp_path / "reports"
    # Not started yet, so nothing takes reports off the queue.
    reporter = make_reporter(
        settings(reporters=[f"cat >> {out}; echo >> {out}"], max_concurrent=1),
        start=False,
        queue_size=2,
    )

    for n in range(3):
        reporter.report(replace(RECORD, message_id=f"m-{n}"))
    reporter.start()
    reporter.close(timeout=10)

    assert [r["message_id"] for r in report_lines(out)] == ["m-0", "m-1"]
    assert has_log(caplog, logging.WARNING, "job m-2 (event nightly-report)", "2 reports already")


def test_nothing_configured_starts_no_thread(make_reporter: Callable[..., Reporter]) -> None:
    reporter = make_reporter(settings())

    reporter.notice(START)
    reporter.report(RECORD)

    assert not reporter.enabled
    assert not [t for t in threading.enumerate() if t.name.startswith("sqsjkr-report")]


# --- the webhook ----------------------------------------------------------------------------------


def test_webhook_gets_the_report_and_a_text(
    hook: Hook, make_reporter: Callable[..., Reporter]
) -> None:
    reporter = make_reporter(settings(webhook_url=hook.url, report_on="failure"))

    reporter.report(SUCCESS)  # filtered as the reporters' reports are
    reporter.report(RECORD)
    reporter.close(timeout=10)

    [(path, headers, body)] = hook.requests
    assert path == SECRET
    assert headers["Content-Type"] == "application/json"
    posted = json.loads(body)
    assert posted.pop("text") == (
        ":x: nightly-report failed on host-a: command exited with code: 3 (2.1s)"
    )
    assert posted == json.loads(json.dumps(horenso_report(RECORD)))


@pytest.mark.parametrize("failure", ["answers 500", "not listening"])
def test_webhook_failure_is_logged_without_the_secret(
    hook: Hook,
    make_reporter: Callable[..., Reporter],
    caplog: pytest.LogCaptureFixture,
    failure: str,
) -> None:
    hook.status = 500
    url = hook.url if failure == "answers 500" else f"http://127.0.0.1:{free_port()}{SECRET}"
    reporter = make_reporter(settings(webhook_url=url))

    reporter.report(RECORD)
    reporter.close(timeout=10)

    origin = url.removesuffix(SECRET)
    expected = "answered HTTP 500" if failure == "answers 500" else "failed"
    assert has_log(caplog, logging.WARNING, "job m-1", f"webhook {origin} {expected}")
    assert "s3cr3t" not in caplog.text
