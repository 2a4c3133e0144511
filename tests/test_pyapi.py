"""The Python API's surface without AWS: its top-level names typed for mypy --strict (the docs'
examples checked too), its errors' kinds and exit codes, trigger_firing's times, the wait limit's name.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import sqsjkr
from sqsjkr.commands.cli import refusal_exit
from sqsjkr.errors import AlreadyDone, NothingToDo, RequestError, WaitTimedOut
from sqsjkr.fleet import client_actions
from sqsjkr.fleet.firings import FiringRow, FiringStatus
from sqsjkr.fleet.jobs import JobPhase, JobState
from sqsjkr.fleet.waiting import Deadline

from .conftest import Aws, config_text
from .conftest import sqsjkr as run_sqsjkr

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "python-api.md"

#: Lines a type checker must refuse when sqsjkr's names are typed (each would pass as Any).
WRONG = """\
import sqsjkr

fleet: int = sqsjkr.Fleet("/etc/sqsjkr/config.toml")
phase: int = sqsjkr.JobPhase.ENDED
outcome: int = sqsjkr.RunOutcome.SUCCEEDED
timed_out: int = sqsjkr.WaitTimedOut("x")
row: int = sqsjkr.FiringRow
"""


def _mypy(*files: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--follow-imports=silent",
            "--no-error-summary",
            "--cache-dir",
            str(cache),
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_the_top_level_names_and_the_docs_examples_are_typed_for_mypy_strict(
    tmp_path: Path,
) -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    examples = tmp_path / "examples.py"
    examples.write_text("\n".join(blocks))
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG)
    result = _mypy(examples, wrong, cache=tmp_path / "cache")
    errors = result.stdout.splitlines()
    assert [e for e in errors if e.startswith(str(examples))] == [], result.stdout
    refused = {int(e.split(":")[1]) for e in errors if e.startswith(str(wrong))}
    assert refused == {3, 4, 5, 6, 7}, result.stdout + result.stderr


def test_the_stub_names_every_name_the_package_gives() -> None:
    stub = ast.parse((ROOT / "sqsjkr" / "__init__.pyi").read_text())
    [names] = [
        ast.literal_eval(node.value)
        for node in stub.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "__all__"
    ]
    assert sorted(names) == sorted(sqsjkr.__all__)
    for name in sqsjkr.__all__:
        assert getattr(sqsjkr, name) is not None, name
    assert sqsjkr.RunOutcome.SUCCEEDED.value == "succeeded"


def test_a_timed_out_wait_is_a_timeout_error_and_a_nan_limit_is_refused() -> None:
    assert issubclass(WaitTimedOut, TimeoutError)
    with pytest.raises(TimeoutError, match=r"after 0s \(--wait-timeout\)"):
        Deadline(0.0).pause(1.0, "the run", "it runs on")
    for bad in (float("nan"), -1.0):
        with pytest.raises(RequestError, match="timeout"):
            Deadline(bad)


def test_each_kind_of_refusal_has_one_exit_code() -> None:
    # "Already ran" is nothing to do, as a kill of nothing is: 1; a malformed request 2.
    assert refusal_exit(AlreadyDone("the firing already ran")) == 1
    assert isinstance(AlreadyDone("x"), RequestError)  # what programs caught before
    assert refusal_exit(NothingToDo("nothing runs")) == 1
    assert refusal_exit(RequestError("a bad time")) == 2
    assert refusal_exit(WaitTimedOut("gave up")) == 124


def test_trigger_firing_takes_a_datetime_or_a_ledger_row(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []

    def trigger_firing(*args: Any, schedule_name: str | None, force: bool) -> str:
        asked.append((args[3], args[4], schedule_name, force))
        return "sent"

    monkeypatch.setattr(client_actions, "trigger_firing", trigger_firing)
    fleet = client_actions.Actions.__new__(client_actions.Actions)
    for name in ("config", "store", "auditor"):
        monkeypatch.setattr(client_actions.Actions, name, None, raising=False)
    nine = datetime(2030, 1, 31, 9, 30, tzinfo=timezone(timedelta(hours=9)))
    fleet.trigger_firing("nightly", nine)
    row = FiringRow("report", nine.timestamp() + 0.25, "sqsjkr-report", FiringStatus.MISSED)
    fleet.trigger_firing(row, force=True)
    assert asked == [
        ("nightly", "2030-01-31T00:30:00Z", None, False),
        ("report", "2030-01-31T00:30:00.250000Z", "sqsjkr-report", True),
    ]
    with pytest.raises(RequestError, match="no time zone"):
        fleet.trigger_firing("nightly", datetime(2030, 1, 31, 9, 30))
    with pytest.raises(RequestError, match="its own time"):
        fleet.trigger_firing(row, "2030-01-31T00:30:00Z")


def test_every_waiting_command_names_its_limit_wait_timeout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for command in ("send", "trigger", "kill", "history"):
        code, out, _ = run_sqsjkr(capsys, command, "--help")
        assert code == 0 and "--wait-timeout" in out, (command, out)
        assert not re.search(r"^\s+--timeout DURATION", out, re.M), (command, out)


def test_every_note_of_an_empty_table_has_the_one_prefix(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    for command in ("history", "route", "audit", "locks", "daemons"):
        code, _, err = run_sqsjkr(capsys, command, "-c", str(conf))
        assert code == 0 and err.startswith("sqsjkr: no "), (command, err)


def test_job_json_writes_every_time_as_unix_seconds_as_its_record_does() -> None:
    running = JobState("m-1", "nightly", JobPhase.RUNNING, host="batch1", started_at=1750000000.5)
    shown = running.as_json()
    assert (shown["state"], shown["started_at"]) == ("running", 1750000000.5)
