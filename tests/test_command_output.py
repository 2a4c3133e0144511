"""What the commands print: what came from a message escaped (no forged row, no terminal control),
times with their UTC offset, tables that stay narrow.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.sqs import ORIGINAL_ID_ATTRIBUTE, REJECT_REASON_ATTRIBUTE
from sqsjkr.commands.dlq import ERROR_EXCERPT
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.fleet.wording import local_time
from sqsjkr.local.endpoint import create_queue

from .conftest import Aws, config_text
from .test_history_cli import record, sqsjkr, write

#: A row that an id with a newline in it would forge, and a terminal control sequence.
FORGED = "nightly  succeeded 2026-01-01T00:00:00+00:00 on batch1"
CLEAR_SCREEN = "\x1b[2J"
HOSTILE_ID = f"ev\n{FORGED}{CLEAR_SCREEN}"


@pytest.fixture
def conf(tmp_path: Path, aws: Aws) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(aws, stats="stats_port = 0"))
    return path


def finished(aws: Aws, event_id: str, ended_at: float, **fields: Any) -> RunRecord:
    """A run of event_id that ended at ended_at, written as the daemon writes it."""
    run = record(event_id, ended_at - 3, duration=2.0, **fields)
    write(aws, run)
    return run


def assert_not_forged(out: str) -> None:
    assert CLEAR_SCREEN not in out
    assert not [line for line in out.splitlines() if line.startswith(FORGED)], out


def test_status_history_and_the_check_escape_event_ids_and_output(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    finished(
        aws,
        HOSTILE_ID,
        time.time() - 60,
        outcome=RunOutcome.ERRORED,
        exit_code=1,
        error=f"boom\n{FORGED}",
        output=f"out {CLEAR_SCREEN}red\r{FORGED}\n",
    )
    code, out, _ = sqsjkr(capsys, "status", "-c", str(conf))
    assert code == 0
    assert_not_forged(out)
    header, line = out.splitlines()
    assert header.split()[:3] == ["EVENT", "LAST", "RUN"]
    assert line.startswith("ev\\nnightly  succeeded ")
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), HOSTILE_ID, "--output")
    assert code == 0
    assert_not_forged(out)
    assert f"    error: boom\\n{FORGED}" in out.splitlines()
    # The output's lines (a carriage return ends one too), each indented under its run.
    assert out.splitlines()[-2:] == ["    out \\x1b[2Jred", f"    {FORGED}"]
    code, out, _ = sqsjkr(capsys, "status", "-c", str(conf), "--check")
    assert code == 2
    [line] = out.splitlines()
    assert line.startswith("SQSJKR CRITICAL - ev\\nnightly ")
    assert CLEAR_SCREEN not in line


def test_dlq_list_and_show_escape_ids_that_came_with_a_message(
    aws: Aws, conf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{aws.queue_name}-r"
    create_queue(aws.sqs, name, dead_letter=True)
    conf.write_text(conf.read_text().replace(aws.queue_name, name))
    dlq = aws.sqs.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
    # Anyone who can send to the queue can set the attribute the daemon sets when it moves one.
    forged = {"StringValue": HOSTILE_ID, "DataType": "String"}
    aws.sqs.send_message(
        QueueUrl=dlq, MessageBody="{}", MessageAttributes={ORIGINAL_ID_ATTRIBUTE: forged}
    )
    code, out, _ = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert code == 0
    assert_not_forged(out)
    assert len(out.splitlines()) == 2
    code, out, _ = sqsjkr(capsys, "dlq", "show", "-c", str(conf), HOSTILE_ID)
    assert code == 0
    assert_not_forged(out)
    assert f"original id:   ev\\n{FORGED}\\x1b[2J" in out.splitlines()


#: A moment as the commands print it: ISO 8601 to the second, with its UTC offset.
MOMENT = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d"


@pytest.fixture
def in_tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process in a zone other than UTC, so that an offset shows."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_times_are_printed_with_their_utc_offset(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str], in_tokyo: None
) -> None:
    run = finished(aws, "nightly", time.time() - 60)
    ended = datetime.fromtimestamp(run.ended_at, timezone(timedelta(hours=9)))
    shown = ended.replace(microsecond=0).isoformat()
    assert shown.endswith("+09:00")
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "nightly")
    assert code == 0 and out.splitlines()[1].startswith(f"{shown}  succeeded")
    code, out, _ = sqsjkr(capsys, "status", "-c", str(conf))
    assert code == 0 and f"succeeded {shown} on batch1" in out
    code, out, err = sqsjkr(capsys, "pause", "-c", str(conf), "nightly", "--until", "1h")
    assert code == 0 and re.search(rf"since {MOMENT} until {MOMENT} \(1h left\)", out), out


def test_dlq_list_cuts_long_errors_and_shows_when_each_was_sent(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{aws.queue_name}-r"
    create_queue(aws.sqs, name, dead_letter=True)
    conf.write_text(conf.read_text().replace(aws.queue_name, name))
    dlq = aws.sqs.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
    long_error = 'field "command": ' + "much too long " * 40
    for error in ("short", long_error):
        reason = {"StringValue": error, "DataType": "String"}
        aws.sqs.send_message(
            QueueUrl=dlq, MessageBody="{}", MessageAttributes={REJECT_REASON_ATTRIBUTE: reason}
        )
    code, out, _ = sqsjkr(capsys, "dlq", "list", "-c", str(conf))
    assert code == 0
    header, *rows = out.splitlines()
    assert len(rows) == 2 and all(re.search(f"  {MOMENT}  ", row) for row in rows), out
    assert max(map(len, out.splitlines())) < 250
    assert f"{long_error[:ERROR_EXCERPT]}...  {{}}" in out
    code, out, _ = sqsjkr(capsys, "dlq", "show", "-c", str(conf), rows[1].split()[0])
    assert code == 0 and long_error in out  # whole in `show`


def no_scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Make the commands' DynamoDB clients refuse a Scan; the operations they call, in order."""
    calls: list[str] = []

    def watched(session: Any, service: str, **kwargs: Any) -> Any:
        client = make_client(session, service, **kwargs)

        def seen(model: Any, **_: Any) -> None:
            assert model.name != "Scan", "a Scan of the whole table"
            calls.append(model.name)

        client.meta.events.register("before-call", seen)
        return client

    monkeypatch.setattr("sqsjkr.fleet.history.make_client", watched)
    return calls


def test_history_without_an_event_lists_the_last_runs_of_every_event(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    now = time.time()
    old = finished(aws, "weekly", now - 7 * 86400)
    nightly = [finished(aws, "nightly", now - days * 86400) for days in (3, 2, 1)]
    failed = finished(aws, "hourly", now - 600, outcome=RunOutcome.ERRORED, exit_code=2)
    latest = finished(aws, "hourly", now - 60)
    calls = no_scans(monkeypatch)
    code, out, err = sqsjkr(capsys, "history", "-c", str(conf), "--limit", "4")
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["EVENT", "ENDED", "OUTCOME"]
    shown = [latest, failed, nightly[2], nightly[1]]
    assert [row.split()[:2] for row in rows] == [
        [run.event_id, local_time(run.ended_at)] for run in shown
    ]
    # The weekly event's last run is older than the four found: it is not read at all.
    assert calls.count("Query") == 1 + 2  # the summaries' index, hourly's and nightly's runs
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "--failed")
    assert code == 0
    assert [row.split()[:3] for row in out.splitlines()[1:]] == [
        ["hourly", local_time(failed.ended_at), "errored"]
    ]
    code, out, _ = sqsjkr(capsys, "history", "-c", str(conf), "--json")
    assert [run["message_id"] for run in json.loads(out)] == [
        run.message_id for run in (latest, failed, *reversed(nightly), old)
    ]
    code, _, err = sqsjkr(capsys, "history", "-c", str(conf), "nightly", "--failed")
    assert code == 1 and err.startswith('sqsjkr: no failed runs of event "nightly"')
