"""`sqsjkr locks` and `sqsjkr unlock` against the moto server, on locks written by DynamoLocker
itself and by hand as the Go daemon writes them."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from sqsjkr.backends.groups import DynamoGroups
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import DynamoLocker
from sqsjkr.fleet.locks import Table, held

from .conftest import Aws, Start, config_text, counted, run_daemon, sqsjkr_argv, wait_until
from .test_history_cli import sqsjkr

Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def conf(tmp_path: Path, aws: Aws) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(aws, stats="stats_port = 0"))
    return path


@pytest.fixture
def cli(conf: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    """`sqsjkr COMMAND -c CONF ARGS` in this process: (exit code, stdout, stderr)."""
    return lambda command, *args: sqsjkr(capsys, command, "-c", str(conf), *args)


def take(aws: Aws, lock_id: str, event_id: str, lease_seconds: float) -> Lease:
    """A sqsjkr lock, as a daemon takes it; a negative lease_seconds makes it expired already."""
    lease = DynamoLocker(aws.dynamodb, aws.table, lease_seconds=lease_seconds).try_lock(
        lock_id, event_id
    )
    assert isinstance(lease, Lease)
    return lease


def go_lock(aws: Aws, lock_id: str, event_id: str) -> None:
    """A lock as the Go daemon writes it: no owner, no lease."""
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": lock_id}, "Type": {"S": "lock"}, "EventId": {"S": event_id}},
    )


def released(aws: Aws, lock_id: str) -> None:
    """A lock taken and given back: its item keeps only a release mark."""
    locker = DynamoLocker(aws.dynamodb, aws.table, lease_seconds=60)
    lease = locker.try_lock(lock_id, "old-event")
    assert isinstance(lease, Lease) and locker.unlock(lease)
    item = aws.item(lock_id, "lock")
    assert item is not None and "ReleasedBy" in item


@pytest.fixture
def four_locks(aws: Aws) -> dict[str, Lease]:
    """A live lock, an expired one, a Go daemon's, a released one, and a job's dedupe claim."""
    live = take(aws, "b-live", "report", 60)
    expired = take(aws, "c-expired", "backup", -180)
    go_lock(aws, "a-go", "legacy")
    released(aws, "d-released")
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "msg-1"}, "Type": {"S": "throttle"}, "EventId": {"S": "x"}},
    )
    return {"live": live, "expired": expired}


def test_locks_lists_the_held_locks_by_lock_id(
    aws: Aws, cli: Run, four_locks: dict[str, Lease]
) -> None:
    code, out, err = cli("locks")
    assert (code, err) == (0, "")
    header, go, live, expired = out.splitlines()
    assert header.split() == ["LOCK", "EVENT", "OWNER", "LEASE"]
    assert go.split() == ["a-go", "legacy", "-", "Go-style:", "no", "lease"]
    assert live.split()[:3] == ["b-live", "report", four_locks["live"].owner]
    # A lease of 60s, read a moment after it was taken (seconds, on a loaded machine).
    assert live.split()[3] in ("1m", *(f"{n}s" for n in range(50, 61)))
    assert expired.split()[:3] == ["c-expired", "backup", four_locks["expired"].owner]
    assert " ".join(expired.split()[3:]) in (
        "expired 3m ago: free to take",
        "expired 3m1s ago: free to take",
    )
    assert "d-released" not in out and "msg-1" not in out


def test_locks_json_has_an_object_per_held_lock_under_locks(
    aws: Aws, cli: Run, four_locks: dict[str, Lease]
) -> None:
    before = time.time()
    code, out, _ = cli("locks", "--json")
    assert code == 0
    listed = json.loads(out)
    assert listed["groups"] == []
    go, live, expired = listed["locks"]
    assert go == {
        "lock_id": "a-go",
        "event_id": "legacy",
        "owner": None,
        "lease_until": None,
        "lease_left": None,
        "state": "go",
    }
    assert (live["lock_id"], live["owner"], live["state"]) == (
        "b-live",
        four_locks["live"].owner,
        "live",
    )
    assert live["lease_until"] == pytest.approx(four_locks["live"].until, abs=1e-3)
    assert 0 < live["lease_left"] <= four_locks["live"].until - before + 1e-3
    assert (expired["state"], expired["event_id"]) == ("expired", "backup")
    assert expired["lease_left"] < -179


def test_locks_reads_every_page_of_the_scan(aws: Aws) -> None:
    for i in range(7):
        go_lock(aws, f"lock-{i}", f"event-{i}")
        released(aws, f"free-{i}")
    listed = held(Table(aws.dynamodb, aws.table), page_size=2).locks
    assert [lock.lock_id for lock in listed] == [f"lock-{i}" for i in range(7)]


def test_locks_of_a_table_without_locks(aws: Aws, cli: Run) -> None:
    released(aws, "free")
    assert cli("locks") == (0, "", f"sqsjkr: no locks held in table {aws.table!r}\n")
    code, out, err = cli("locks", "--json")
    assert (code, json.loads(out), err) == (0, {"locks": [], "groups": [], "waiting": []}, "")


def test_unlock_removes_an_expired_lock_and_a_go_lock(
    aws: Aws, cli: Run, four_locks: dict[str, Lease]
) -> None:
    code, out, err = cli("unlock", "c-expired")
    assert (code, err) == (0, "")
    owner = four_locks["expired"].owner
    assert out.startswith(f'removed lock "c-expired" of event "backup", owner {owner} (expired 3m')
    assert out.endswith(" ago: free to take)\n")
    assert aws.item("c-expired", "lock") is None
    code, out, err = cli("unlock", "a-go")
    assert (code, err) == (0, "")
    assert (
        out == 'removed lock "a-go" of event "legacy", a Go daemon\'s lock (no owner, no lease)\n'
    )
    assert aws.item("a-go", "lock") is None


def test_unlock_refuses_a_live_lease_unless_forced(
    aws: Aws, cli: Run, four_locks: dict[str, Lease]
) -> None:
    live = four_locks["live"]
    code, out, err = cli("unlock", "b-live")
    assert (code, out) == (1, "")
    assert err.startswith(f'sqsjkr: lock "b-live" is held by {live.owner} with ')
    assert "of its lease left: not removed (--force removes it; " in err
    assert aws.item("b-live", "lock") is not None
    code, out, err = cli("unlock", "b-live", "--force")
    assert code == 0
    assert out.startswith(f'removed lock "b-live" of event "report", owner {live.owner} (a live ')
    assert out.endswith(" left, removed by --force)\n")
    assert err.startswith("sqsjkr: warning: the holder's job may still be running")
    assert aws.item("b-live", "lock") is None
    # The holder finds its lock gone: it logs LOST, as --help warns.
    locker = DynamoLocker(aws.dynamodb, aws.table, lease_seconds=60)
    assert locker.renew(live) is False
    assert locker.unlock(live) is False


def test_unlock_of_a_lock_no_one_holds_fails(
    aws: Aws, cli: Run, four_locks: dict[str, Lease]
) -> None:
    for lock_id in ("d-released", "nope"):
        for force in ([], ["--force"]):
            code, out, err = cli("unlock", lock_id, *force)
            assert (code, out) == (1, "")
            assert err == (
                f'sqsjkr: no lock "{lock_id}" is held in table {aws.table!r}: nothing removed\n'
            )
    item = aws.item("d-released", "lock")
    assert item is not None and "ReleasedBy" in item, "a release mark stays"


def test_the_installed_commands_and_their_help(aws: Aws, conf: Path) -> None:
    go_lock(aws, "stuck", "legacy")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(sqsjkr_argv(*args), capture_output=True, text=True, timeout=60)

    listed = run("locks", "-c", str(conf))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:2] == ["stuck", "legacy"]
    removed = run("unlock", "stuck", "-c", str(conf))
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.startswith('removed lock "stuck"')
    assert "reads the whole table" in " ".join(run("locks", "--help").stdout.split())
    assert "logs LOST" in " ".join(run("unlock", "--help").stdout.split())


def test_a_job_waiting_for_a_lock_or_a_group_shows_as_waiting_and_for_whom(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Run
) -> None:
    """In `status`, `status --json` and `locks`: waiting, for what, held by whom; running once
    it has what it waited for."""
    lock = take(aws, "L", "holder-event", 60)
    groups = DynamoGroups(aws.dynamodb, aws.table, lease_seconds=60)
    slot = groups.try_enter("db", 1, "group-holder")
    assert isinstance(slot, Lease)
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "true", "event_id": "locked", "lock_id": "L"})
    aws.send({"command": "true", "event_id": "grouped", "concurrency_key": "db"})
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)

    def waiting() -> dict[str, str | None]:
        return {
            s.event_id: run.held_by
            for s in history.summaries()
            for run in s.running
            if run.waiting_for
        }

    wait_until(lambda: len(waiting()) == 2, what="both jobs noted waiting")
    assert waiting() == {"locked": lock.owner, "grouped": slot.owner}
    holder, group_holder = (":".join(o.split(":")[:2]) for o in (lock.owner, slot.owner))
    code, out, _ = cli("status")
    assert code == 0
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert f'for lock "L", held by {holder}' in rows["locked"]
    assert "waiting on " in rows["locked"] and "running" not in rows["locked"]
    assert (
        f'for concurrency group "db", full; the first slot to end held by {group_holder}'
        in rows["grouped"]
    )
    code, out, _ = cli("status", "--json")
    events = {e["event_id"]: e["running"] for e in json.loads(out)["events"]}
    [locked] = events["locked"]
    assert (locked["waiting_for"], locked["waiting_key"], locked["held_by"]) == (
        "lock",
        "L",
        lock.owner,
    )
    code, out, _ = cli("locks")
    assert code == 0
    lines = out.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("WAITING FOR"))) :]
    assert [line.split()[:2] for line in table[1:]] == [["concurrency", "group"], ["lock", '"L",']]
    code, out, _ = cli("locks", "--json")
    listed = json.loads(out)["waiting"]
    assert [(w["for"], w["key"], w["event_id"], w["held_by"]) for w in listed] == [
        ("concurrency group", "db", "grouped", slot.owner),
        ("lock", "L", "locked", lock.owner),
    ]
    # Once free, the lock is taken: the job runs, and no longer shows as waiting.
    DynamoLocker(aws.dynamodb, aws.table, lease_seconds=60).unlock(lock)
    groups.leave(slot)
    wait_until(counted(port, succeeded=2), what="both jobs run")
    assert waiting() == {}
    assert daemon.stop() == 0
