"""Concurrency groups: DynamoGroups against the moto server over HTTP, MemoryGroups and NoGroups,
`sqsjkr locks` / `sqsjkr unlock --slot` on groups, and groups end to end across real daemons.

Leases are tested with an injected clock, except end to end, where they are a few seconds long.
"""

from __future__ import annotations

import json
import logging
import random
import re
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.groups import (
    DynamoGroups,
    GroupFull,
    Groups,
    MemoryGroups,
    NoGroups,
    SlotLease,
    parse_slot,
    slot_key,
)
from sqsjkr.backends.lease import Lease
from sqsjkr.backends.locks import DynamoLocker

from .conftest import Aws, Daemon, Start, config_text, counted, invocations, run_daemon, wait_until
from .test_backends import T0, Clock, LostResponses, client
from .test_crash import WAIT_FOR_RELEASE, kill_group, lines
from .test_history_cli import sqsjkr

Run = Callable[..., tuple[int, str, str]]


def groups(clock: Clock, table: str, lease_seconds: float = 60, **kwargs: Any) -> DynamoGroups:
    return DynamoGroups(
        client("dynamodb"), table, lease_seconds=lease_seconds, clock=clock, **kwargs
    )


def enter(store: Groups, key: str, limit: int, event_id: str) -> SlotLease:
    lease = store.try_enter(key, limit, event_id)
    assert isinstance(lease, SlotLease), lease
    return lease


def slot_item(aws: Aws, key: str, slot: int) -> dict[str, Any] | None:
    return aws.item(key, f"slot#{slot}")


def held_slots(aws: Aws, key: str) -> dict[int, dict[str, Any]]:
    """slot -> item of every held slot of group key (released ones have no EventId), read
    afresh from the table."""
    items = aws.dynamodb.query(
        TableName=aws.table,
        KeyConditionExpression="Id = :key",
        ExpressionAttributeValues={":key": {"S": key}},
        ConsistentRead=True,
    )["Items"]
    return {int(i["Type"]["S"].removeprefix("slot#")): i for i in items if "EventId" in i}


def live_holders(aws: Aws, key: str, now: float) -> dict[int, str]:
    """slot -> owner of every live slot of group key."""
    return {
        slot: item["Owner"]["S"]
        for slot, item in held_slots(aws, key).items()
        if float(item["LeaseUntil"]["N"]) >= now
    }


# --- DynamoGroups ------------------------------------------------------------------------------


def test_enter_takes_up_to_the_limit_then_names_the_first_holder_to_end(aws: Aws) -> None:
    clock = Clock()
    store = groups(clock, aws.table, lease_seconds=60)
    leases = []
    for i in range(3):
        clock.now = T0 + i  # leases end at T0+60, T0+61, T0+62
        leases.append(enter(store, "db", 3, f"ev-{i}"))
    assert sorted(lease.slot for lease in leases) == [0, 1, 2]
    assert {lease.key for lease in leases} == {"db"}
    first = leases[0]
    assert slot_item(aws, "db", first.slot) == {
        "Id": {"S": "db"},
        "Type": {"S": f"slot#{first.slot}"},
        "EventId": {"S": "ev-0"},
        "Owner": {"S": first.owner},
        "LeaseUntil": {"N": str(int(T0) + 60)},
        "Limit": {"N": "3"},
    }
    full = store.try_enter("db", 3, "ev-3")
    assert full == GroupFull(first.owner, "ev-0", T0 + 60, holders=3, limit=3)
    host_pid = ":".join(first.owner.split(":")[:2])
    assert full.describe(T0 + 12) == (
        f'full (3 held, limit 3): the first to end is held by {host_pid} for event "ev-0", '
        "48s of its lease left"
    )
    assert live_holders(aws, "db", T0 + 2) == {lease.slot: lease.owner for lease in leases}


def test_groups_and_locks_of_the_same_name_are_apart(aws: Aws) -> None:
    store = groups(Clock(), aws.table)
    enter(store, "db", 1, "ev-1")
    assert isinstance(store.try_enter("db", 1, "ev-2"), GroupFull)
    other = enter(store, "db2", 1, "ev-3")  # a key that only starts the same
    assert other.slot == 0
    assert isinstance(
        DynamoLocker(client("dynamodb"), aws.table, lease_seconds=60).try_lock("db", "ev-4"), Lease
    )


def test_leave_frees_the_slot_and_marks_who_left(aws: Aws) -> None:
    clock = Clock()
    store = groups(clock, aws.table)
    first, second = enter(store, "db", 2, "ev-1"), enter(store, "db", 2, "ev-2")
    assert isinstance(store.try_enter("db", 2, "ev-3"), GroupFull)
    assert store.leave(first) is True
    assert slot_item(aws, "db", first.slot) == {
        "Id": {"S": "db"},
        "Type": {"S": f"slot#{first.slot}"},
        "ReleasedBy": {"S": first.owner},
        "Expired": {"N": str(int(T0) + 86400)},
    }
    assert store.leave(first) is True  # our own mark: a retried leave is no loss
    third = enter(store, "db", 2, "ev-3")
    assert third.slot == first.slot  # the only free one
    assert store.renew(first) is False  # the slot is someone else's now
    assert store.leave(first) is False
    assert live_holders(aws, "db", T0) == {first.slot: third.owner, second.slot: second.owner}


def test_an_expired_slot_is_taken_over_and_the_takeover_logged(
    aws: Aws, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sqsjkr.groups")
    clock = Clock()
    dead = groups(clock, aws.table, lease_seconds=60)
    old = enter(dead, "db", 1, "ev-1")
    clock.now = T0 + 60  # up to and including LeaseUntil, it is held
    assert isinstance(groups(clock, aws.table).try_enter("db", 1, "ev-2"), GroupFull)
    assert not caplog.records
    clock.now = T0 + 61
    store = groups(clock, aws.table, lease_seconds=60)
    lease = enter(store, "db", 1, "ev-2")
    assert (lease.slot, lease.until) == (0, T0 + 121)
    assert lease.owner != old.owner
    [record] = caplog.records
    assert record.getMessage() == (
        f'concurrency group "db": slot 0 taken over from {old.owner}, '
        f"whose lease ended at {int(T0) + 60}"
    )
    # The dead holder, back to life, finds the slot lost; the new holder keeps it.
    assert dead.renew(old) is False
    assert dead.leave(old) is False
    assert live_holders(aws, "db", clock.now) == {0: lease.owner}


def test_renew_extends_the_slot_and_a_lost_slot_is_not_renewed(aws: Aws) -> None:
    clock = Clock()
    store = groups(clock, aws.table, lease_seconds=60)
    lease = enter(store, "db", 1, "ev-1")
    clock.now = T0 + 50
    assert store.renew(lease) is True
    assert slot_item(aws, "db", 0)["LeaseUntil"] == {"N": str(int(T0) + 110)}  # type: ignore[index]
    clock.now = T0 + 100  # past the first lease, within the renewed one
    assert isinstance(store.try_enter("db", 1, "ev-2"), GroupFull)
    # Removed by an operator meanwhile (sqsjkr unlock --slot --force): lost.
    aws.dynamodb.delete_item(TableName=aws.table, Key=slot_key("db", 0))
    assert store.renew(lease) is False
    assert store.leave(lease) is False
    assert slot_item(aws, "db", 0) is None


def test_a_lease_of_another_store_is_refused(aws: Aws) -> None:
    store = groups(Clock(), aws.table)
    with pytest.raises(TypeError, match="not a concurrency group's lease"):
        store.renew(Lease("db", "someone"))
    with pytest.raises(TypeError, match="not a concurrency group's lease"):
        store.leave(Lease("db", "someone"))
    with pytest.raises(ValueError, match='concurrency group "db" must be at least 1'):
        store.try_enter("db", 0, "ev-1")


def test_holders_above_a_lowered_limit_count_until_they_leave(aws: Aws) -> None:
    store = groups(Clock(), aws.table)
    old = [enter(store, "db", 4, f"ev-{i}") for i in range(4)]
    lowered = store.try_enter("db", 2, "ev-new")
    assert isinstance(lowered, GroupFull) and (lowered.holders, lowered.limit) == (4, 2)
    by_slot = {lease.slot: lease for lease in old}
    assert store.leave(by_slot[0]) and store.leave(by_slot[3])
    # Slots 1 and 2 are still held: 2 live holders, at the new limit.
    assert isinstance(store.try_enter("db", 2, "ev-new"), GroupFull)
    assert store.leave(by_slot[1])
    # One live holder, in slot 2, above the new limit: the new job gets slot 0 or 1, never 3.
    entered = enter(store, "db", 2, "ev-new")
    assert entered.slot in (0, 1)
    assert isinstance(store.try_enter("db", 2, "ev-newer"), GroupFull)
    assert set(live_holders(aws, "db", T0)) == {2, entered.slot}


def test_an_item_without_a_lease_holds_its_slot_for_ever(aws: Aws) -> None:
    aws.dynamodb.put_item(
        TableName=aws.table, Item={**slot_key("db", 0), "EventId": {"S": "by-hand"}}
    )
    store = groups(Clock(9_999_999_999.0), aws.table)
    full = store.try_enter("db", 1, "ev-1")
    assert isinstance(full, GroupFull)
    assert (full.owner, full.event_id, full.until, full.holders) == (None, "by-hand", None, 1)
    # It also counts against a larger limit, and the leased holder ends first.
    lease = enter(store, "db", 2, "ev-1")
    assert lease.slot == 1
    full = store.try_enter("db", 2, "ev-2")
    assert isinstance(full, GroupFull) and full.owner == lease.owner


def test_enter_survives_a_lost_response(aws: Aws) -> None:
    dynamodb = LostResponses(client("dynamodb"))
    store = DynamoGroups(dynamodb, aws.table, lease_seconds=60, clock=Clock())
    lease = enter(store, "db", 2, "ev-1")
    # The retry failed its condition on our own first write, and that still means "entered".
    assert dynamodb.retry_errors == ["ConditionalCheckFailedException"]
    assert live_holders(aws, "db", T0) == {lease.slot: lease.owner}


def test_leave_survives_a_lost_response(aws: Aws) -> None:
    lease = enter(groups(Clock(), aws.table), "db", 2, "ev-1")
    dynamodb = LostResponses(client("dynamodb"))
    store = DynamoGroups(dynamodb, aws.table, lease_seconds=60, clock=Clock())
    assert store.leave(lease) is True
    # The retry failed its condition on our own release, and knew it by the mark.
    assert dynamodb.retry_errors == ["ConditionalCheckFailedException"]
    assert slot_item(aws, "db", lease.slot)["ReleasedBy"] == {"S": lease.owner}  # type: ignore[index]


def test_leave_update_gives_the_slot_back_in_a_transaction(aws: Aws) -> None:
    store = groups(Clock(), aws.table)
    lease = enter(store, "db", 1, "ev-1")
    update = store.leave_update(lease)
    aws.dynamodb.transact_write_items(
        TransactItems=[{"Update": {**update, "TableName": aws.table}}]
    )
    item = slot_item(aws, "db", 0)
    assert item is not None and "EventId" not in item
    assert store.left_by(item, lease) is True
    assert store.left_by(item, SlotLease("db", "another", slot=0)) is False
    enter(store, "db", 1, "ev-2")


class CountingClient:
    """A DynamoDB client that counts the calls made through it."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self._real, name)

        def counting(**request: Any) -> Any:
            self.calls[name] += 1
            return call(**request)

        return counting


@pytest.mark.parametrize("round_", range(3))
def test_eight_jobs_entering_a_group_of_three_at_once(aws: Aws, round_: int) -> None:
    key = f"db-{round_}"
    barrier = threading.Barrier(8)
    results: list[SlotLease | GroupFull] = [GroupFull()] * 8
    clients = [CountingClient(client("dynamodb")) for _ in range(8)]

    def job(i: int) -> None:
        store = DynamoGroups(clients[i], aws.table, lease_seconds=60, rng=random.Random(i))
        barrier.wait(timeout=30)
        results[i] = store.try_enter(key, 3, f"ev-{i}")

    threads = [threading.Thread(target=job, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    entered = [result for result in results if isinstance(result, SlotLease)]
    assert len(entered) == 3
    assert sum(isinstance(result, GroupFull) and result.holders == 3 for result in results) == 5
    assert live_holders(aws, key, 0) == {lease.slot: lease.owner for lease in entered}
    for calls in clients:
        # One Query, then a PutItem per free slot at most: bounded by the limit.
        assert calls.calls["query"] == 1
        assert calls.calls["put_item"] <= 3
        assert set(calls.calls) <= {"query", "put_item"}


# --- MemoryGroups and NoGroups -----------------------------------------------------------------


def test_memory_groups_enter_up_to_the_limit_and_leave() -> None:
    store = MemoryGroups()
    first, second = enter(store, "db", 2, "ev-1"), enter(store, "db", 2, "ev-2")
    assert (first.slot, second.slot) == (0, 1)
    full = store.try_enter("db", 2, "ev-3")
    assert isinstance(full, GroupFull)
    assert (full.owner, full.event_id, full.holders, full.limit) == (first.owner, "ev-1", 2, 2)
    assert store.renew(first) is True
    assert store.leave(first) is True
    assert store.leave(first) is True  # a retried leave of our own
    assert store.renew(first) is False
    third = enter(store, "db", 2, "ev-3")
    assert third.slot == 0
    assert store.leave(first) is False  # slot 0 is third's now
    assert store.held == {"db": {0: (third.owner, "ev-3"), 1: (second.owner, "ev-2")}}


def test_no_groups_always_lets_in() -> None:
    store = NoGroups()
    leases = [enter(store, "db", 1, f"ev-{i}") for i in range(3)]
    assert all(store.renew(lease) and store.leave(lease) for lease in leases)


def test_parse_slot() -> None:
    assert [parse_slot(t) for t in ("slot#0", "slot#12", "slot#", "slot#x", "lock", "slot#²")] == [
        0,
        12,
        None,
        None,
        None,
        None,
    ]


# --- sqsjkr locks and unlock --slot ------------------------------------------------------------


@pytest.fixture
def cli(tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]) -> Run:
    """`sqsjkr COMMAND -c CONF ARGS` in this process: (exit code, stdout, stderr)."""
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    return lambda command, *args: sqsjkr(capsys, command, "-c", str(conf), *args)


def entered(aws: Aws, key: str, limit: int, event_id: str, lease_seconds: float) -> SlotLease:
    """A slot taken as a daemon takes it; a negative lease_seconds makes it expired already."""
    store = DynamoGroups(aws.dynamodb, aws.table, lease_seconds=lease_seconds)
    return enter(store, key, limit, event_id)


@pytest.fixture
def two_groups(aws: Aws) -> dict[str, SlotLease]:
    """Group "db" (limit 3): two live holders and an expired one; group "api" (limit 1): one
    holder; a released slot of group "old"; a lock "b-live"."""
    leases = {
        "db-1": entered(aws, "db", 3, "ev-1", 60),
        "db-2": entered(aws, "db", 3, "ev-2", 60),
        "db-3": entered(aws, "db", 3, "ev-3", -180),
        "api": entered(aws, "api", 1, "ev-api", 60),
    }
    old = DynamoGroups(aws.dynamodb, aws.table, lease_seconds=60)
    assert old.leave(enter(old, "old", 2, "ev-old"))
    lock = DynamoLocker(aws.dynamodb, aws.table, lease_seconds=60).try_lock("b-live", "report")
    assert isinstance(lock, Lease)
    return leases


def test_locks_shows_groups_with_their_holders_after_the_locks(
    cli: Run, two_groups: dict[str, SlotLease]
) -> None:
    code, out, err = cli("locks")
    assert (code, err) == (0, "")
    lock_header, lock, blank, header, api, *db = out.splitlines()
    assert lock_header.split() == ["LOCK", "EVENT", "OWNER", "LEASE"]
    assert lock.split()[:2] == ["b-live", "report"]
    assert blank == ""
    assert header.split() == ["GROUP", "HELD", "SLOT", "EVENT", "OWNER", "LEASE"]
    assert api.split()[:7] == ["api", "1", "of", "1", "0", "ev-api", two_groups["api"].owner]
    by_slot = sorted(
        (lease.slot, event, lease.owner)
        for event, lease in (("ev-1", two_groups["db-1"]), ("ev-2", two_groups["db-2"]))
        + (("ev-3", two_groups["db-3"]),)
    )
    assert [row.split()[:7] for row in db] == [
        ["db", "2", "of", "3", str(slot), event, owner] for slot, event, owner in by_slot
    ]
    leases = {row.split()[5]: " ".join(row.split()[7:]) for row in db}
    # A live lease's whole seconds left, however slow the moto server was meanwhile.
    assert re.fullmatch(r"[1-5]?[0-9]s|1m", leases["ev-1"]), leases["ev-1"]
    # Expired 3 minutes before the fixture's write, and as many seconds more as the test took.
    assert re.fullmatch(r"expired 3m(\d{1,2}s)? ago: free to take", leases["ev-3"]), leases["ev-3"]
    assert "old" not in out


def test_locks_shows_groups_alone_when_no_lock_is_held(aws: Aws, cli: Run) -> None:
    lease = entered(aws, "db", 2, "ev-1", 60)
    code, out, err = cli("locks")
    assert (code, err) == (0, "")
    header, row = out.splitlines()
    assert header.split()[0] == "GROUP"
    assert row.split()[:7] == ["db", "1", "of", "2", str(lease.slot), "ev-1", lease.owner]


def test_locks_json_has_the_groups(cli: Run, two_groups: dict[str, SlotLease]) -> None:
    code, out, _ = cli("locks", "--json")
    assert code == 0
    listed = json.loads(out)
    assert [lock["lock_id"] for lock in listed["locks"]] == ["b-live"]
    api, db = listed["groups"]
    holder = two_groups["api"]
    assert {k: v for k, v in api.items() if k != "slots"} == {
        "key": "api",
        "holders": 1,
        "limit": 1,
    }
    [slot] = api["slots"]
    assert slot == {
        "slot": 0,
        "event_id": "ev-api",
        "owner": holder.owner,
        "lease_until": pytest.approx(holder.until, abs=1e-3),
        "lease_left": slot["lease_left"],
        "state": "live",
        "limit": 1,
    }
    assert 0 < slot["lease_left"] <= 60
    assert (db["key"], db["holders"], db["limit"]) == ("db", 2, 3)
    states = {slot["event_id"]: slot["state"] for slot in db["slots"]}
    assert states == {"ev-1": "live", "ev-2": "live", "ev-3": "expired"}
    assert [slot["slot"] for slot in db["slots"]] == sorted(slot["slot"] for slot in db["slots"])


def test_unlock_slot_removes_an_expired_slot_and_refuses_a_live_one_unless_forced(
    aws: Aws, cli: Run, two_groups: dict[str, SlotLease]
) -> None:
    expired = two_groups["db-3"]
    code, out, err = cli("unlock", "db", "--slot", str(expired.slot))
    assert (code, err) == (0, "")
    assert out.startswith(
        f'removed slot {expired.slot} of group "db" of event "ev-3", owner {expired.owner} '
        "(expired 3m"
    )
    assert slot_item(aws, "db", expired.slot) is None
    live = two_groups["db-1"]
    code, out, err = cli("unlock", "db", "--slot", str(live.slot))
    assert (code, out) == (1, "")
    assert err.startswith(f'sqsjkr: slot {live.slot} of group "db" is held by {live.owner} with ')
    assert slot_item(aws, "db", live.slot) is not None
    code, out, err = cli("unlock", "db", "--slot", str(live.slot), "--force")
    assert code == 0
    assert out.startswith(f'removed slot {live.slot} of group "db" of event "ev-1", owner ')
    assert err.startswith("sqsjkr: warning: the holder's job may still be running")
    # The holder finds its slot gone: it logs LOST, as --help warns.
    store = DynamoGroups(aws.dynamodb, aws.table, lease_seconds=60)
    assert store.renew(live) is False
    assert store.leave(live) is False
    # Two slots are free again; the third holder kept its own.
    assert isinstance(store.try_enter("db", 3, "ev-4"), SlotLease)
    assert isinstance(store.try_enter("db", 3, "ev-5"), SlotLease)
    full = store.try_enter("db", 3, "ev-6")
    assert isinstance(full, GroupFull) and full.holders == 3
    assert store.renew(two_groups["db-2"]) is True


def test_unlock_slot_of_a_slot_no_one_holds_and_of_an_unleased_slot(aws: Aws, cli: Run) -> None:
    store = DynamoGroups(aws.dynamodb, aws.table, lease_seconds=60)
    assert store.leave(enter(store, "db", 1, "ev-1"))
    for slot in ("0", "7"):
        code, out, err = cli("unlock", "db", "--slot", slot)
        assert (code, out) == (1, "")
        assert err == (
            f'sqsjkr: no slot {slot} of group "db" is held in table {aws.table!r}: nothing removed\n'
        )
    aws.dynamodb.put_item(
        TableName=aws.table, Item={**slot_key("db", 1), "EventId": {"S": "by-hand"}}
    )
    assert cli("unlock", "db", "--slot", "1") == (
        0,
        'removed slot 1 of group "db" of event "by-hand" (no owner, no lease)\n',
        "",
    )
    code, _, err = cli("unlock", "db", "--slot", "-1")
    assert code == 2 and "--slot" in err


# --- end to end: real daemons sharing one queue and table --------------------------------------


def group_job(key: str, limit: int, command: str, **fields: Any) -> dict[str, Any]:
    return {"command": command, "concurrency_key": key, "concurrency_limit": limit, **fields}


def most_at_once(trace: list[str]) -> int:
    """The most jobs running at once, by the order of their "start"/"end" lines: the file is
    appended to (O_APPEND), so its order is the order in which the lines were written."""
    running = most = 0
    for line in trace:
        running += 1 if line.startswith("start ") else -1
        most = max(most, running)
    return most


def trace_of(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def started(path: Path) -> int:
    return sum(line.startswith("start ") for line in trace_of(path))


def owned_by(daemon: Daemon) -> str:
    """The start of the owner of every lease a daemon takes: host:pid:."""
    return f"{socket.gethostname()}:{daemon.proc.pid}:"


def slot_leases(aws: Aws, key: str) -> dict[int, float]:
    """slot -> LeaseUntil of every held slot of group key."""
    return {slot: float(item["LeaseUntil"]["N"]) for slot, item in held_slots(aws, key).items()}


def test_a_group_of_two_never_runs_three_at_once_across_two_daemons(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # Each job writes its start, waits for the gate, then runs a little while; $PPID is the
    # daemon that ran it.
    command = (
        f"echo start $$ $PPID >> trace; {WAIT_FOR_RELEASE}; sleep 0.2; echo end $$ $PPID >> trace"
    )
    for _ in range(8):
        aws.send(group_job("db", 2, command))
    # A takes three messages (its workers), runs two and waits with the third; B takes three
    # more and waits with them all.
    first, first_port = run_daemon(start_daemon, tmp_path, aws, lease="3s", max_concurrent_num=3)
    wait_until(lambda: started(tmp_path / "trace") >= 2, timeout=30, what="two jobs running")
    first.wait_for_log('waits for concurrency group "db", full (2 held, limit 2)', timeout=30)
    second, second_port = run_daemon(start_daemon, tmp_path, aws, lease="3s", max_concurrent_num=3)
    wait_until(
        lambda: second.log.count('waits for concurrency group "db", full (2 held') == 3,
        timeout=30,
        what="the second daemon's three jobs waiting",
    )
    # The two slots outlive their first lease, renewed by A's heartbeat while the jobs run;
    # the four waiting jobs keep trying meanwhile, and would take a slot whose lease passed.
    leases = slot_leases(aws, "db")
    assert len(leases) == 2
    wait_until(
        lambda: (
            time.time() > max(leases.values()) + 1
            and all(until > leases[slot] for slot, until in slot_leases(aws, "db").items())
        ),
        timeout=30,
        what="the slots renewed past their first lease",
    )
    # Still the same two running: none ended, and none more started.
    assert [line.split()[0] for line in trace_of(tmp_path / "trace")] == ["start", "start"]
    (tmp_path / "release").touch()

    def all_ran() -> bool:
        return invocations(first_port)["succeeded"] + invocations(second_port)["succeeded"] == 8

    wait_until(all_ran, timeout=60, what="all eight jobs run")
    trace = trace_of(tmp_path / "trace")
    assert len(trace) == 16
    assert most_at_once(trace) == 2
    ran_by = Counter(line.split()[2] for line in trace if line.startswith("start "))
    assert set(ran_by) == {str(first.proc.pid), str(second.proc.pid)}
    # B ran the three jobs it waited with, at least.
    assert ran_by[str(second.proc.pid)] >= 3
    assert slot_leases(aws, "db") == {}
    assert first.stop() == 0 and second.stop() == 0


def test_a_slot_of_a_killed_daemon_is_taken_over_and_its_job_runs_again(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Run
) -> None:
    # A has a single worker and no prefetch: busy with the first job, it receives nothing more.
    first, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s", max_concurrent_num=1, prefetch=0)
    killed_id = aws.send(
        group_job("g", 1, f"echo $$ >> pids; echo run >> runs; {WAIT_FOR_RELEASE}")
    )
    wait_until(lambda: lines(tmp_path / "runs") == ["run"], timeout=30, what="job running")
    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    waiting_id = aws.send(
        group_job("g", 1, "echo $PPID > second; while [ ! -f release2 ]; do sleep 0.05; done")
    )
    second.wait_for_log('waits for concurrency group "g", full (1 held, limit 1)', timeout=30)
    slot = slot_item(aws, "g", 0)
    assert slot is not None and slot["EventId"] == {"S": killed_id}
    dead_owner = slot["Owner"]["S"]
    assert dead_owner.startswith(owned_by(first))

    first.kill()
    kill_group(tmp_path / "pids")
    (tmp_path / "release").touch()  # the killed job, run again, ends at once
    # The waiting job takes the slot over once A's lease has passed, and holds it.
    wait_until((tmp_path / "second").exists, timeout=30, what="the waiting job running")
    assert (tmp_path / "second").read_text().split() == [str(second.proc.pid)]
    slot = slot_item(aws, "g", 0)
    assert slot is not None and slot["EventId"] == {"S": waiting_id}
    assert slot["Owner"]["S"].startswith(owned_by(second))
    assert f'concurrency group "g": slot 0 taken over from {dead_owner}' in second.log
    # The killed job was not finished: its message comes back, and B runs it again.
    (tmp_path / "release2").touch()
    wait_until(counted(port, succeeded=2), timeout=60, what="both jobs run by B")
    assert lines(tmp_path / "runs") == ["run", "run"]
    assert f"message {killed_id} delivered again (receive 2)" in second.log
    wait_until(lambda: aws.queue_counts() == (0, 0), timeout=30, what="messages deleted")
    assert slot_leases(aws, "g") == {}
    assert json.loads(cli("locks", "--json")[1]) == {"locks": [], "groups": [], "waiting": []}
    assert second.stop() == 0


def test_locks_shows_the_slots_of_running_jobs_with_their_daemon(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Run
) -> None:
    # A 6 s lease: with 3 s, a loaded machine can let the waiting job's claim lapse and its note
    # go with it.
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="6s", max_concurrent_num=3)
    for i in range(3):
        command = f"echo start ev-{i} >> trace; {WAIT_FOR_RELEASE}"
        aws.send(group_job("db", 2, command, event_id=f"ev-{i}"))
    wait_until(lambda: started(tmp_path / "trace") == 2, timeout=30, what="two jobs running")
    daemon.wait_for_log('waits for concurrency group "db", full (2 held, limit 2)', timeout=30)
    running = sorted(line.split()[1] for line in trace_of(tmp_path / "trace"))

    code, out, err = cli("locks", "--json")
    assert (code, err) == (0, "")
    listed = json.loads(out)
    assert listed["locks"] == []
    [group] = listed["groups"]
    assert (group["key"], group["holders"], group["limit"]) == ("db", 2, 2)
    assert sorted(slot["slot"] for slot in group["slots"]) == [0, 1]
    assert sorted(slot["event_id"] for slot in group["slots"]) == running
    for slot in group["slots"]:
        assert slot["owner"].startswith(owned_by(daemon))
        assert (slot["state"], slot["limit"]) == ("live", 2)
        assert 0 < slot["lease_left"] <= 6

    # Noted in its event's summary just after that log line.
    out = wait_until(lambda: "WAITING FOR" in (listed := cli("locks")[1]) and listed, timeout=30)
    header, *rows, _, waiting_header, waiting = out.splitlines()
    assert header.split() == ["GROUP", "HELD", "SLOT", "EVENT", "OWNER", "LEASE"]
    assert sorted(row.split()[5] for row in rows) == running
    # The third job, as its daemon noted it: waiting for a slot.
    assert waiting_header.split() == ["WAITING", "FOR", "EVENT", "HOST", "SINCE"]
    assert waiting.startswith('concurrency group "db", full; the first slot to end held by ')
    [third] = {f"ev-{i}" for i in range(3)} - set(running)
    assert third in waiting.split()
    for row in rows:
        assert row.split()[:4] == ["db", "2", "of", "2"]
        assert row.split()[6].startswith(owned_by(daemon))

    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=3), timeout=30, what="the three jobs run")
    assert cli("locks") == (0, "", f"sqsjkr: no locks held in table {aws.table!r}\n")
    assert daemon.stop() == 0
