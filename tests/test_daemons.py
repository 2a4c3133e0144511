"""`sqsjkr daemons` and status --check --min-daemons, against real daemon subprocesses and moto.

Each daemon keeps an item about itself in the lock table: seen running, then stopped, or lost.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import EndpointConnectionError

from sqsjkr import __version__
from sqsjkr.backends.members import (
    LOST_AFTER_REFRESHES,
    MEMBER_KEEP_SECONDS,
    MEMBER_TYPE,
    DynamoRoster,
    Member,
    MemoryRoster,
    State,
)
from sqsjkr.daemon.presence import Presence, this_daemon
from sqsjkr.observability.stats import Stats

from .conftest import Aws, Start, config_text, run_daemon, wait_until
from .test_history_cli import sqsjkr

NOW = 1_750_000_000.0


@pytest.fixture
def conf(tmp_path: Path, aws: Aws) -> Path:
    """The config of a command run by hand (the daemons write their own)."""
    path = tmp_path / "config.toml"
    path.write_text(config_text(aws, stats="stats_port = 0"))
    return path


def listed(capsys: pytest.CaptureFixture[str], conf: Path) -> list[dict[str, Any]]:
    code, out, err = sqsjkr(capsys, "daemons", "-c", str(conf), "--json")
    assert (code, err) == (0, ""), err
    daemons: list[dict[str, Any]] = json.loads(out)["daemons"]
    return daemons


def member(**fields: Any) -> Member:
    values: dict[str, Any] = {
        "owner": "batch1:100:abc",
        "host": "batch1",
        "pid": 100,
        "version": "test",
        "queues": (("jobs", 4),),
        "started_at": NOW - 3600,
        "stats": "127.0.0.1:8061",
        "refresh": 60.0,
        "seen_at": NOW - 10,
    }
    return Member(**{**values, **fields})


# -- the item and its state ---------------------------------------------------------------------


def test_a_daemon_not_seen_for_three_refreshes_is_lost_and_a_stopped_one_stays_stopped() -> None:
    seen = member(seen_at=NOW - LOST_AFTER_REFRESHES * 60)
    assert seen.state(NOW) is State.RUNNING
    assert seen.state(NOW + 1) is State.LOST
    stopped = seen.seen(NOW - 300, 0, 4, stopped=True)
    assert stopped.state(NOW) is State.STOPPED


def test_presence_writes_at_start_and_marks_the_daemon_stopped_at_the_end() -> None:
    roster, stats = MemoryRoster(), Stats(4)
    daemon = this_daemon([("jobs", 4)], "127.0.0.1:1", 3600, NOW)
    with Presence(roster, daemon, stats):
        wait_until(roster.members, what="the first write")
        assert roster.members()[0].stopped_at is None
    (written,) = roster.members()
    assert written.state(written.seen_at) is State.STOPPED
    assert (written.version, written.queues, written.idle) == (__version__, (("jobs", 4),), 4)


class FlakyRoster(MemoryRoster):
    """A roster whose first writes fail as a table out of reach does."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def write(self, member: Member) -> None:
        if self.failures:
            self.failures -= 1
            raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9")
        super().write(member)


def test_a_write_that_fails_is_logged_once_and_left_to_the_next_refresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.presence")
    roster = FlakyRoster(failures=3)
    with Presence(roster, this_daemon([("jobs", 1)], "unix:/s", 0.01, NOW), Stats(1)):
        wait_until(roster.members, what="a write after the failures")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "could not write this daemon's item" in warnings[0].message
    assert "this daemon's item is written again" in caplog.text


def test_the_item_expires_a_week_after_it_was_last_seen(aws: Aws) -> None:
    DynamoRoster(aws.dynamodb, aws.table).write(member())
    item = aws.item("batch1:100:abc", MEMBER_TYPE)
    assert item is not None
    assert int(item["Expired"]["N"]) == int(NOW - 10 + MEMBER_KEEP_SECONDS)
    assert item["State"]["S"] == "running"
    assert DynamoRoster(aws.dynamodb, aws.table).members() == [member()]


# -- real daemons -------------------------------------------------------------------------------


def test_a_daemon_is_seen_with_its_counts_then_stopped_by_sigterm(
    start_daemon: Start, tmp_path: Path, aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Refreshes 3 s apart: a loaded machine may take longer than 3 s (three 1 s refreshes)
    # between a write and its reading, and the daemon would read as lost.
    daemon, port = run_daemon(start_daemon, tmp_path, aws, member_refresh="3s")
    (seen,) = wait_until(lambda: listed(capsys, conf), what="the daemon's item")
    assert seen["pid"] == daemon.proc.pid
    assert seen["version"] == __version__
    assert seen["queues"] == [{"name": aws.queue_name, "workers": 4}]
    assert seen["stats"] == f"127.0.0.1:{port}"
    assert seen["state"] == "running"
    # A refresh carries the workers' counts of its moment.
    aws.send({"command": "while [ ! -e go ]; do sleep 0.05; done"})
    wait_until(lambda: listed(capsys, conf)[0]["busy"] == 1, what="a refresh with a busy worker")
    (tmp_path / "go").touch()
    wait_until(lambda: listed(capsys, conf)[0]["busy"] == 0, what="a refresh with none busy")
    code, out, _ = sqsjkr(capsys, "daemons", "-c", str(conf))
    assert code == 0
    assert out.splitlines()[0].split() == [
        "HOST", "PID", "VERSION", "STATE", "UP", "SINCE", "LAST", "SEEN", "BUSY/IDLE", "QUEUES",
        "STATS",
    ]  # fmt: skip
    assert f" {daemon.proc.pid} " in out and " running " in out and f"{aws.queue_name} (4)" in out
    # Up since and last seen, in the reader's zone with its UTC offset.
    assert len(re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", out)) == 2

    assert daemon.stop(signal.SIGTERM) == 0
    (stopped,) = listed(capsys, conf)
    assert stopped["state"] == "stopped"
    assert stopped["stopped_at"] >= seen["started_at"]


def test_a_killed_daemon_is_lost_and_fails_the_min_daemons_check(
    start_daemon: Start, tmp_path: Path, aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, member_refresh="1s")
    wait_until(lambda: listed(capsys, conf), what="the daemon's item")
    check = ("status", "-c", str(conf), "--check", "--min-daemons")
    assert sqsjkr(capsys, *check, "1") == (0, "SQSJKR OK - 0 events\n", "")
    assert sqsjkr(capsys, *check, "2") == (
        2,
        "SQSJKR CRITICAL - daemons: 1 running, fewer than --min-daemons 2\n",
        "",
    )

    daemon.kill()  # SIGKILL: no stopped mark
    wait_until(lambda: listed(capsys, conf)[0]["state"] == "lost", what="the daemon shown lost")
    (lost,) = listed(capsys, conf)
    assert lost["stopped_at"] is None
    assert lost["last_seen_age"] > LOST_AFTER_REFRESHES * lost["refresh"]
    assert sqsjkr(capsys, *check, "1")[:2] == (
        2,
        "SQSJKR CRITICAL - daemons: 0 running, fewer than --min-daemons 1\n",
    )


# -- the command --------------------------------------------------------------------------------


def test_daemons_escapes_what_came_from_the_table(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    now = time.time()
    forged = member(host="evil\nbatch2  999  x  running", queues=(("q\x1b[31m", 1),), seen_at=now)
    DynamoRoster(aws.dynamodb, aws.table).write(forged)
    code, out, _ = sqsjkr(capsys, "daemons", "-c", str(conf))
    assert code == 0
    assert len(out.splitlines()) == 2
    assert "evil\\nbatch2" in out and "q\\x1b[31m (1)" in out and "\x1b" not in out


def test_a_damaged_item_is_named(aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]) -> None:
    DynamoRoster(aws.dynamodb, aws.table).write(member())
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key={"Id": {"S": "batch1:100:abc"}, "Type": {"S": MEMBER_TYPE}},
        UpdateExpression="SET Daemon = :bad",
        ExpressionAttributeValues={":bad": {"S": "{}"}},
    )
    code, out, err = sqsjkr(capsys, "daemons", "-c", str(conf))
    assert (code, out) == (1, "")
    assert 'the daemon item "batch1:100:abc"' in err and "damaged" in err


def test_no_daemons_says_so_and_min_daemons_needs_check(
    aws: Aws, conf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sqsjkr(capsys, "daemons", "-c", str(conf)) == (
        0,
        "",
        f"sqsjkr: no daemons recorded in table {aws.table!r} (Go daemons write none)\n",
    )
    code, _, err = sqsjkr(capsys, "status", "-c", str(conf), "--min-daemons", "1")
    assert code == 2 and "--min-daemons only applies with --check" in err
