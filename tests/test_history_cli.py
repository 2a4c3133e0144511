"""`sqsjkr history`: its formats as plain functions, and the command end to end against the moto
server, on records written with DynamoHistory itself."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.history import DynamoHistory
from sqsjkr.commands.cli import main
from sqsjkr.commands.history import format_span, local_time
from sqsjkr.contract.run import RunOutcome, RunRecord

from .conftest import Aws, config_text

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


def sqsjkr(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`sqsjkr ARGS` in this process, by the entry point: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    captured = capsys.readouterr()
    return int(exited.value.code or 0), captured.out, captured.err


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
