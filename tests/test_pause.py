"""The pause store (DynamoDB against the moto server, and in memory, through one protocol test),
`paused()`, the --until times, and `sqsjkr pause`, `resume` and `status` end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sqsjkr.backends.pause import (
    PAUSE_TYPE,
    PAUSES_ID,
    DynamoPauses,
    MemoryPauses,
    Pause,
    PauseStore,
    paused,
)
from sqsjkr.errors import RequestError, StoreError
from sqsjkr.fleet.pause import parse_until
from sqsjkr.fleet.wording import local_time

from .conftest import Aws, config_text, sqsjkr_argv
from .test_history_cli import HOUR, hourly, sqsjkr, write

NOW = 1_750_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def pause_of(event_id: str | None, until: float | None = None, reason: str = "") -> Pause:
    return Pause(event_id, NOW - 60, until, reason, "alice@ops1")


# -- the store ----------------------------------------------------------------------------------


@pytest.fixture(params=["memory", "dynamodb"])
def stores(request: pytest.FixtureRequest) -> Iterator[tuple[PauseStore, Clock]]:
    clock = Clock()
    if request.param == "memory":
        yield MemoryPauses(clock), clock
    else:
        aws: Aws = request.getfixturevalue("aws")
        yield DynamoPauses(aws.dynamodb, aws.table, clock=clock), clock


def test_a_pause_store_keeps_lists_replaces_and_lifts_pauses(
    stores: tuple[PauseStore, Clock],
) -> None:
    store, clock = stores
    assert store.pauses() == []
    assert store.resume(None) == []
    assert store.resume(["nightly"]) == []
    every = pause_of(None, until=NOW + HOUR, reason="maintenance")
    nightly = pause_of("nightly")
    brief = pause_of("hourly", until=NOW + 30)
    for made in (nightly, every, brief):
        store.pause(made)
    # All first, then by event.
    assert store.pauses() == [every, brief, nightly]
    replaced = pause_of("nightly", until=NOW + 2 * HOUR, reason="db move")
    store.pause(replaced)
    assert store.pauses() == [every, brief, replaced]
    clock.now = NOW + 31
    assert store.pauses() == [every, replaced], "a pause past its until is left out"
    # Lifting one whose until has passed is no lifting.
    assert store.resume(["hourly", "nightly", "weekly"]) == [replaced]
    assert store.pauses() == [every]
    store.pause(nightly)
    assert store.resume(None) == [every, nightly]
    assert store.pauses() == []
    assert store.resume(None) == []


def test_the_dynamodb_pauses_are_one_item_with_an_attribute_per_scope(aws: Aws) -> None:
    store = DynamoPauses(aws.dynamodb, aws.table, clock=Clock())
    assert store.resume(["nightly"]) == []
    assert aws.item(PAUSES_ID, PAUSE_TYPE) is None, "a resume of nothing creates no item"
    store.pause(pause_of(None, reason="all"))
    store.pause(pause_of("nightly", until=NOW + HOUR))
    item = aws.item(PAUSES_ID, PAUSE_TYPE)
    assert item is not None
    assert sorted(item) == ["Id", "Pause:*", "Pause:nightly", "Type"]
    assert json.loads(item["Pause:nightly"]["S"]) == {
        "event_id": "nightly",
        "since": NOW - 60,
        "until": NOW + HOUR,
        "reason": "",
        "by": "alice@ops1",
    }
    assert "Expired" not in item, "the TTL must never lift a pause"
    store.resume(None)
    # Every pause attribute is gone; the item stays, since it holds the routes too.
    assert sorted(aws.item(PAUSES_ID, PAUSE_TYPE) or {}) == ["Id", "Type"]


def test_a_damaged_pause_is_named_and_resume_removes_it(aws: Aws) -> None:
    store = DynamoPauses(aws.dynamodb, aws.table, clock=Clock())
    store.pause(pause_of("nightly"))
    aws.dynamodb.update_item(
        TableName=aws.table,
        Key={"Id": {"S": PAUSES_ID}, "Type": {"S": PAUSE_TYPE}},
        UpdateExpression="SET #p = :bad",
        ExpressionAttributeNames={"#p": "Pause:weekly"},
        ExpressionAttributeValues={":bad": {"S": "{not json"}},
    )
    with pytest.raises(StoreError, match="damaged attribute 'Pause:weekly'"):
        store.pauses()
    assert store.resume(["weekly"]) == []
    assert store.pauses() == [pause_of("nightly")]


def test_a_missing_table_is_named(aws: Aws) -> None:
    store = DynamoPauses(aws.dynamodb, "no-such-table")
    for call in (store.pauses, lambda: store.pause(pause_of(None)), lambda: store.resume(None)):
        with pytest.raises(Exception, match="DynamoDB table 'no-such-table' not found"):
            call()


def test_paused_finds_the_pause_that_holds_an_event() -> None:
    every = pause_of(None, until=NOW + HOUR)
    own = pause_of("nightly", until=NOW + 2 * HOUR)
    past = pause_of("hourly", until=NOW - 1)
    pauses = [every, own, past]
    assert paused(pauses, "nightly", NOW) == own, "its own pause ends later"
    assert paused(pauses, "weekly", NOW) == every
    assert paused(pauses, "hourly", NOW) == every, "a pause past its until holds nothing"
    assert paused([own, past], "hourly", NOW) is None
    assert paused([own], "nightly", NOW + 2 * HOUR) is None
    for_ever = pause_of(None)
    assert paused([own, for_ever], "nightly", NOW) == for_ever, "until resumed ends last"
    same = pause_of(None, until=own.until)
    assert paused([same, own], "nightly", NOW) == own, "on a tie, its own"


# -- --until ------------------------------------------------------------------------------------


def test_until_takes_rfc_3339_local_times_and_durations() -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()
    expected = datetime(2030, 1, 31, 0, 30, tzinfo=timezone.utc).timestamp()
    assert parse_until("2030-01-31T09:30:00+09:00", now) == expected
    assert parse_until("2030-01-31T00:30Z", now) == expected
    local = datetime(2030, 1, 31, 9, 30).timestamp()  # in this process's zone
    assert parse_until("2030-01-31 09:30", now) == local
    assert parse_until("2030-01-31T09:30:15", now) == local + 15
    assert parse_until("90m", now) == now + 5400
    assert parse_until("1d", now) == now + 86400


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2000-01-31 09:30", "is in the past"),
        ("2020-01-31T09:30:00+09:00", "is in the past"),
        ("0s", "a duration must be longer than 0"),
        ("-5m", "a duration must be longer than 0"),
        ("tomorrow", "give a time (2030-01-31T09:30:00+09:00"),
        ("2030-02-30 09:30", "day is out of range"),
        ("2030-01-31T09:30:00+25:00", '--until "2030-01-31T09:30:00+25:00"'),
    ],
)
def test_until_refuses_past_and_malformed_times(text: str, message: str) -> None:
    now = datetime(2030, 1, 1, tzinfo=timezone.utc).timestamp()
    with pytest.raises(RequestError, match=message.replace("(", r"\(").replace("+", r"\+")):
        parse_until(text, now)


def until_in_zone(text: str, zone: str) -> subprocess.CompletedProcess[str]:
    """parse_until in a process whose local time zone is zone."""
    code = f"from sqsjkr.fleet.pause import parse_until; print(parse_until({text!r}, 0))"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TZ": zone},
    )


def test_a_local_until_is_read_in_the_hosts_zone_and_a_skipped_or_repeated_time_is_refused() -> (
    None
):
    berlin = datetime(2030, 1, 31, 8, 30, tzinfo=timezone.utc).timestamp()
    result = until_in_zone("2030-01-31 09:30", "Europe/Berlin")
    assert (result.returncode, float(result.stdout)) == (0, berlin)
    skipped = until_in_zone("2030-03-31 02:30", "Europe/Berlin")
    assert skipped.returncode == 1
    assert "does not exist in this host's time zone" in skipped.stderr
    repeated = until_in_zone("2030-10-27 02:30", "Europe/Berlin")
    assert repeated.returncode == 1
    assert "happens twice in this host's time zone" in repeated.stderr


# -- the commands, against the moto server ------------------------------------------------------


@pytest.fixture
def conf(tmp_path: Path, aws: Aws) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(config_text(aws, stats="stats_port = 0"))
    return path


Run = Callable[..., tuple[int, str, str]]

#: What pause says of when the daemons see it, with the config's [kicker] pause_refresh.
HONOURED = (
    "sqsjkr: daemons honour it within 1m ([kicker] pause_refresh) of their next messages; "
    "jobs already running go on\n"
)


@pytest.fixture
def cli(conf: Path, capsys: pytest.CaptureFixture[str]) -> Run:
    """`sqsjkr COMMAND -c CONF ARGS` in this process: (exit code, stdout, stderr)."""
    return lambda command, *args: sqsjkr(capsys, command, "-c", str(conf), *args)


def stored(aws: Aws) -> list[Pause]:
    return DynamoPauses(aws.dynamodb, aws.table).pauses()


def test_pause_writes_a_pause_per_event_and_says_so(aws: Aws, cli: Run) -> None:
    before = time.time()
    code, out, err = cli("pause", "nightly", "hourly", "nightly", "--reason", "db move")
    assert (code, err) == (0, HONOURED)
    hourly_pause, nightly_pause = stored(aws)
    assert (hourly_pause.event_id, nightly_pause.event_id) == ("hourly", "nightly")
    for made in (hourly_pause, nightly_pause):
        assert made.until is None and made.reason == "db move"
        assert before <= made.since <= time.time()
        user, _, host = made.by.partition("@")
        assert user and host
    since = local_time(nightly_pause.since)
    assert out.splitlines() == [
        f'paused event "hourly" since {since} until resumed, by {hourly_pause.by}: db move',
        f'paused event "nightly" since {since} until resumed, by {nightly_pause.by}: db move',
    ]


def test_pause_all_until_a_time(aws: Aws, cli: Run) -> None:
    code, out, err = cli("pause", "--all", "--until", "2h")
    assert (code, err) == (0, HONOURED)
    (made,) = stored(aws)
    assert made.event_id is None and made.until is not None
    assert made.until - made.since == pytest.approx(7200)
    assert out == (
        f"paused all events since {local_time(made.since)} until {local_time(made.until)} "
        f"(2h left), by {made.by}\n"
    )
    # A pause of the same scope replaces the one before.
    assert cli("pause", "--all", "--until", "2099-01-01T00:00:00Z")[0] == 0
    (again,) = stored(aws)
    assert again.until == datetime(2099, 1, 1, tzinfo=timezone.utc).timestamp()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give the EVENT_IDs to act on, or --all for every event"),
        (["nightly", "--all"], "give EVENT_IDs or --all, not both"),
        (["*"], '"*" is not an event id (--all acts on every event)'),
        (["--all", "--until", "2001-01-01 00:00"], '--until "2001-01-01 00:00" is in the past'),
        (["--all", "--until", "soon"], '--until "soon": give a time'),
    ],
)
def test_pause_refuses_a_bad_command_line_and_writes_nothing(
    aws: Aws, cli: Run, args: list[str], message: str
) -> None:
    code, out, err = cli("pause", *args)
    assert (code, out) == (2, "")
    assert message in err and err.count("\n") == 1
    assert aws.item(PAUSES_ID, PAUSE_TYPE) is None


def test_resume_lifts_pauses_and_says_what_it_lifted(aws: Aws, cli: Run) -> None:
    assert cli("pause", "nightly", "hourly")[0] == 0
    code, out, err = cli("resume", "nightly", "weekly")
    assert (code, err) == (0, 'sqsjkr: event "weekly" had no pause\n')
    assert out.startswith('resumed event "nightly", paused since ') and out.count("\n") == 1
    assert [p.event_id for p in stored(aws)] == ["hourly"]
    code, out, err = cli("resume", "nightly")
    assert (code, out) == (1, "")
    assert err == 'sqsjkr: nothing was paused: event "nightly" had no pause\n'
    assert cli("pause", "--all", "--reason", "freeze")[0] == 0
    code, out, err = cli("resume", "--all")
    assert (code, err) == (0, "")
    assert [line.split(" since ")[0] for line in out.splitlines()] == [
        "resumed all events, paused",
        'resumed event "hourly", paused',
    ]
    assert stored(aws) == []
    assert cli("resume", "--all")[:3] == (1, "", "sqsjkr: nothing was paused\n")
    assert cli("resume")[0] == 2


def test_resuming_an_event_while_all_are_paused_says_they_still_are(aws: Aws, cli: Run) -> None:
    assert cli("pause", "--all", "--reason", "freeze")[0] == 0
    code, out, err = cli("resume", "nightly")
    assert (code, out) == (1, "")
    assert err.startswith(
        'sqsjkr: nothing was paused: event "nightly" had no pause; all events are still paused ('
    )
    assert err.endswith("freeze): `resume --all` lifts that\n")
    assert cli("pause", "nightly")[0] == 0
    code, out, err = cli("resume", "nightly")
    assert code == 0 and out.startswith('resumed event "nightly", paused since ')
    assert err.startswith("sqsjkr: warning: all events are still paused (")


def test_status_shows_the_pauses_and_marks_paused_events(aws: Aws, cli: Run) -> None:
    now = time.time()
    write(aws, *hourly("hourly", 2, now - HOUR), *hourly("nightly", 2, now - HOUR))
    code, out, err = cli("status")
    assert (code, err) == (0, "")
    assert [line.split()[0] for line in out.splitlines()] == ["EVENT", "hourly", "nightly"]
    assert "PAUSED" not in out
    assert cli("pause", "nightly", "--reason", "db move")[0] == 0
    assert cli("pause", "weekly", "--until", "1d")[0] == 0
    code, out, err = cli("status")
    assert (code, err) == (0, "")
    nightly_pause, weekly_pause = stored(aws)
    lines = out.splitlines()
    assert lines[0] == (
        f'PAUSED event "nightly" since {local_time(nightly_pause.since)} until resumed, '
        f"by {nightly_pause.by}: db move"
    )
    assert lines[1].startswith('PAUSED event "weekly" since ')
    # A day, less the moments since the pause was made.
    until = re.escape(local_time(weekly_pause.until or 0))  # "+00:00": a regex's "+"
    assert re.search(rf"until {until} \((1d|23h59m) left\)", lines[1])
    assert lines[2].startswith("EVENT ")
    assert lines[3].startswith("hourly ") and "PAUSED" not in lines[3]
    assert lines[4].startswith("nightly ") and lines[4].endswith(" PAUSED")
    assert cli("pause", "--all")[0] == 0
    _, out, _ = cli("status")
    assert out.splitlines()[0].startswith("PAUSED all events since ")
    assert out.splitlines()[4].endswith(" PAUSED (all events)")
    assert out.splitlines()[5].endswith(" PAUSED"), "its own pause, until resumed, holds it"


def test_status_json_has_the_pauses_beside_the_events(aws: Aws, cli: Run) -> None:
    write(aws, *hourly("hourly", 2, time.time() - HOUR))
    assert cli("pause", "nightly", "--until", "2099-01-01T00:00:00Z", "--reason", "why")[0] == 0
    code, out, _ = cli("status", "--json")
    assert code == 0
    shown = json.loads(out)
    (made,) = stored(aws)
    assert shown["pauses"] == [
        {
            "event_id": "nightly",
            "since": made.since,
            "until": datetime(2099, 1, 1, tzinfo=timezone.utc).timestamp(),
            "reason": "why",
            "by": made.by,
        }
    ]
    assert [event["event_id"] for event in shown["events"]] == ["hourly"]


def test_status_of_a_table_with_pauses_and_no_runs(aws: Aws, cli: Run) -> None:
    assert cli("pause", "--all")[0] == 0
    code, out, err = cli("status")
    assert code == 0 and out.startswith("PAUSED all events since ") and out.count("\n") == 1
    assert err == f"sqsjkr: no runs recorded in table {aws.table!r}\n"


def test_the_installed_commands_pause_and_resume(aws: Aws, conf: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            sqsjkr_argv(*args, "-c", str(conf)), capture_output=True, text=True, timeout=60
        )

    paused_now = run("pause", "nightly", "--until", "90m")
    assert paused_now.returncode == 0, paused_now.stderr
    assert "(1h30m left)" in paused_now.stdout
    assert [p.event_id for p in stored(aws)] == ["nightly"]
    resumed = run("resume", "nightly")
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.startswith('resumed event "nightly", paused since ')
    assert stored(aws) == []
