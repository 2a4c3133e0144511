"""The ledger of firings (`sqsjkr firings`, Fleet.firings) against moto over HTTP: each firing of a
schedule in the window judged from the run records, the audit trail, the daemons' items and the
dead-letter queue; --missed and --json; fire times across Europe/Berlin's daylight saving changes.

moto never fires schedules, and a schedule it creates is created now: the ledger is read as at a
later moment (`now`), with the evidence written as the fleet would have written it by then.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import boto3
import pytest

import sqsjkr
from sqsjkr.backends.audit import AuditEntry, DynamoAudit
from sqsjkr.backends.members import DynamoRoster, Member
from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.commands.options import load
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunOutcome, RunStart
from sqsjkr.fleet.firings import (
    MAX_FIRES,
    Evidence,
    FiringRow,
    FiringStatus,
    fire_times,
    firings,
    judge,
)
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.wording import local_time
from tests.conftest import REGION, Cli
from tests.test_schedules import backdate
from tests.web_fleet import WebFleet, make_fleet, module_env, record

HOUR = 3600.0
ROLE_ARN = "arn:aws:iam::123456789012:role/sqsjkr-scheduler"


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("firings"))


#: A schedule made long before the times a test looks at.
YEARS = 5 * 365 * 86400.0


def create_schedule(
    fleet: WebFleet,
    event_id: str,
    expression: str,
    zone: str = "UTC",
    dlq: str | None = None,
    age: float = 0.0,
) -> str:
    """A schedule of the fleet's group sending event_id's job to its queue (its dead letters
    to the queue dlq names, when given), created age seconds ago; its name."""
    arn = fleet.sqs.get_queue_attributes(QueueUrl=fleet.queue_url, AttributeNames=["QueueArn"])
    body = {"event_id": event_id, "command": "true"}
    name = f"sqsjkr-{event_id}"
    target = {"Arn": arn["Attributes"]["QueueArn"], "RoleArn": ROLE_ARN, "Input": json.dumps(body)}
    if dlq is not None:
        target["DeadLetterConfig"] = {"Arn": dlq}
    boto3.client("scheduler", region_name=REGION).create_schedule(
        Name=name,
        GroupName=fleet.table,
        ScheduleExpression=expression,
        ScheduleExpressionTimezone=zone,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )
    if age:
        backdate(fleet.table, name, age)
    return name


def store(fleet: WebFleet) -> Store:
    return store_of(load(str(fleet.conf)))


def hour_mark(moment: float) -> float:
    return moment - moment % HOUR


def fired(event_id: str, at: float, outcome: RunOutcome, **fields: Any) -> Any:
    """The record of a run of the firing at `at` (f27-once's daemon writes these)."""
    defaults = {"origin": "schedule", "sent_at": at + 1}
    return record(
        event_id,
        at + 30,
        outcome,
        firing_at=at,
        firing_schedule=f"sqsjkr-{event_id}",
        **{**defaults, **fields},
    )


def daemon_alive(fleet: WebFleet, since: float, until: float) -> None:
    member = Member(
        owner=f"host-a:1:{uuid.uuid4().hex[:6]}",
        host="host-a",
        pid=1,
        version="test",
        queues=((fleet.queue_name, 2),),
        started_at=since,
        stats="127.0.0.1:0",
        refresh=30.0,
        seen_at=until,
    )
    DynamoRoster(fleet.dynamodb, fleet.table).write(member)


def audited(fleet: WebFleet, at: float, action: str, target: str, detail: str = "") -> None:
    entry = AuditEntry(at, action, target, "maintenance", "ops@host", "arn:test", detail)
    DynamoAudit(fleet.dynamodb, fleet.table).write(entry)


def scheduler_dead_letter(
    fleet: WebFleet, event_id: str, at: float, queue_url: str | None = None
) -> None:
    """What EventBridge Scheduler puts in a schedule's DLQ when it cannot deliver a firing: the
    target's input, context attributes substituted, and its error attributes."""
    firing = Firing(at, f"arn:aws:scheduler:{REGION}:123456789012:schedule/g/sqsjkr-{event_id}")
    body = {"event_id": event_id, "command": "true", "firing": firing.as_fields()}
    attributes = {
        "ERROR_CODE": "AWS.SQS.KmsAccessDenied",
        "ERROR_MESSAGE": "The role cannot use the queue's KMS key",
        "RETRY_ATTEMPTS": "185",
    }
    fleet.sqs.send_message(
        QueueUrl=queue_url or fleet.dlq_url,
        MessageBody=json.dumps(body),
        MessageAttributes={
            name: {"DataType": "String", "StringValue": value} for name, value in attributes.items()
        },
    )


def by_time(rows: list[FiringRow]) -> dict[float, FiringRow]:
    return {row.at: row for row in rows}


def test_the_ledger_says_what_became_of_each_firing(fleet: WebFleet, moto_endpoint: str) -> None:
    """Nine hourly firings, read as at nine hours after the schedule was made: each with its
    own fate, found in the ledger's order."""
    create_schedule(fleet, "hourly", "cron(0 * * * ? *)")
    now = hour_mark(time.time()) + 9 * HOUR + 120
    hours = [hour_mark(now) - n * HOUR for n in range(9)]  # newest first, hours[0] is 2m old
    history = fleet.history()
    ran = fired("hourly", hours[1], RunOutcome.SUCCEEDED)
    history.finished(ran)
    first = fired("hourly", hours[2], RunOutcome.ERRORED)
    history.finished(first)
    history.finished(fired("hourly", hours[2], RunOutcome.SUCCEEDED, duplicate_of=first.message_id))
    # hours[3]: nothing anywhere, a daemon alive: no message reached the queue.
    # A pause that ends by its until (as `sqsjkr pause --until` words it), and one of all
    # events lifted by a resume of every pause.
    audited(fleet, hours[4] - 60, "pause", "hourly", f"until {local_time(hours[4] + 60)}")
    audited(fleet, hours[8] - 60, "pause", "all events")
    audited(fleet, hours[8] + 60, "resume", "every pause")
    scheduler_dead_letter(fleet, "hourly", hours[5])
    history.finished(fired("hourly", hours[6], RunOutcome.CANCELLED))
    daemon_alive(fleet, hours[6] - 600, now)  # none alive at hours[7]

    with module_env(moto_endpoint):
        rows = firings(store(fleet), "hourly", 8 * HOUR + 1200, now)
    found = by_time(rows)
    assert [row.at for row in rows] == hours
    assert found[hours[0]].status is FiringStatus.DUE  # within its grace
    assert found[hours[1]].status is FiringStatus.RAN
    assert found[hours[1]].run is not None and found[hours[1]].run.message_id == ran.message_id
    assert (found[hours[2]].status, found[hours[2]].duplicates) == (FiringStatus.RAN, 1)
    assert found[hours[2]].run is not None and found[hours[2]].run.outcome is RunOutcome.ERRORED
    reasons = {n: found[hours[n]].reason for n in range(3, 9)}
    assert reasons == {
        3: "no message reached the queue",
        4: "event paused",
        5: "the scheduler could not deliver it: AWS.SQS.KmsAccessDenied: "
        "The role cannot use the queue's KMS key",
        6: "cancelled: older than its life_time when a daemon took it",
        7: "no live daemon then",
        8: "event paused",
    }
    # Skipped during a deliberate pause: shown apart, not missed.
    statuses = {n: found[hours[n]].status for n in range(3, 9)}
    assert {n for n, s in statuses.items() if s is FiringStatus.PAUSED} == {4, 8}
    assert {n for n, s in statuses.items() if s is FiringStatus.MISSED} == {3, 5, 6, 7}

    with module_env(moto_endpoint):
        missed = firings(store(fleet), "hourly", 8 * HOUR + 1200, now, missed_only=True)
    assert [row.at for row in missed] == [hours[n] for n in (3, 5, 6, 7)]


def test_firings_start_at_the_schedules_creation_and_the_cli(
    fleet: WebFleet, cli: Cli, aws_env: dict[str, str]
) -> None:
    """`sqsjkr firings`: a firing that ran, one missed, and none before the schedule was
    created (a time its expression names before then was no firing); --missed keeps the missed
    one, --json gives each as an object, and trigger takes the time shown."""
    now = time.time()
    last = hour_mark(now)
    # Created a minute before the firing of the hour before the last.
    create_schedule(fleet, "made-now", "cron(0 * * * ? *)", age=now - (last - HOUR) + 60)
    fleet.history().finished(fired("made-now", last - HOUR, RunOutcome.SUCCEEDED))
    shown = cli("firings", "made-now", "--since", "5h", "-c", str(fleet.conf))
    missed = cli(
        "firings", "made-now", "--missed", "--since", "5h", "--json", "-c", str(fleet.conf)
    )
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split()[:2] == ["due", "event"]
    assert len(lines) == 3  # the header, the last hour's firing, the one before it
    assert "ran" in lines[2] and "succeeded on host-a" in lines[2]
    assert "missed" in lines[1]
    due = lines[1].split()[0]
    assert datetime.fromisoformat(due).timestamp() == last  # a time trigger --firing takes
    assert missed.returncode == 0, missed.stderr
    objects = [o for o in json.loads(missed.stdout) if o["event_id"] == "made-now"]
    assert [o["status"] for o in objects] == ["missed"]
    expected = datetime.fromtimestamp(last, timezone.utc).isoformat().replace("+00:00", "Z")
    assert objects[0]["at"] == expected
    # The Python API's read is the same ledger.
    rows = sqsjkr.Fleet(str(fleet.conf)).firings("made-now", since=5 * HOUR)
    assert [(r.at, r.status) for r in rows] == [
        (last, FiringStatus.MISSED),
        (last - HOUR, FiringStatus.RAN),
    ]


def test_firings_across_berlins_daylight_saving_changes(
    fleet: WebFleet, moto_endpoint: str
) -> None:
    """In the schedule's zone, as docs/schedules.md says: 02:30 does not fire on the day the
    clock skips it, and fires once on the day it comes twice."""
    create_schedule(fleet, "berlin", "cron(30 2 * * ? *)", "Europe/Berlin", age=YEARS)
    create_schedule(fleet, "berlin-half", "cron(0/30 * * * ? *)", "Europe/Berlin", age=YEARS)
    spring = datetime(2026, 3, 31, tzinfo=timezone.utc).timestamp()
    autumn = datetime(2026, 10, 25, 2, 45, tzinfo=timezone.utc).timestamp()
    with module_env(moto_endpoint):
        daily = firings(store(fleet), "berlin", 4 * 86400, spring)
        halves = firings(store(fleet), "berlin-half", 3 * HOUR, autumn)
    assert [row.local for row in reversed(daily)] == [
        "2026-03-27T02:30:00+01:00",
        "2026-03-28T02:30:00+01:00",
        "2026-03-30T02:30:00+02:00",
    ]
    # 23:45 to 02:45 UTC: 02:00 and 02:30 local come twice, and fire once.
    shown = [row.local for row in reversed(halves)]
    assert shown == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:30:00+02:00",
        "2026-10-25T03:00:00+01:00",
        "2026-10-25T03:30:00+01:00",
    ]
    assert [Firing(r.at, "s").iso for r in reversed(halves)] == [
        "2026-10-25T00:00:00Z",
        "2026-10-25T00:30:00Z",
        "2026-10-25T02:00:00Z",
        "2026-10-25T02:30:00Z",
    ]


def test_a_firing_in_progress_is_running_and_a_lone_duplicate_is_dropped() -> None:
    """Judged from the evidence alone: a run in progress sent for the firing, and a firing
    whose only record is a duplicate's (its first run's record expired)."""
    schedule = EventSchedule(
        "sqsjkr-judged", "cron(0 * * * ? *)", "UTC", True, "judged", "true", None
    )
    at = hour_mark(time.time())
    start = RunStart("judged", "m-1", "host-a", "host-a:1:x", at + 5, at + 1, "true")
    running = judge(schedule, at, Evidence(running=[start]), at + 600, 300)
    assert running.status is FiringStatus.RUNNING
    dropped = fired("judged", at, RunOutcome.SUCCEEDED, duplicate_of="m-first")
    lone = judge(schedule, at, Evidence(records=[dropped]), at + 600, 300)
    assert (lone.status, lone.reason, lone.duplicates) == (
        FiringStatus.DUPLICATE,
        "duplicate of m-first",
        1,
    )


def test_a_schedules_own_dead_letter_queue_is_read_too(fleet: WebFleet, moto_endpoint: str) -> None:
    """A FIFO queue's schedules dead-letter into a standard queue of their own (the Scheduler
    refuses a FIFO one): its letters name the firings the scheduler could not deliver."""
    url = fleet.sqs.create_queue(QueueName=f"{fleet.queue_name}-schedules-dlq")["QueueUrl"]
    dlq = fleet.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    create_schedule(fleet, "own-dlq", "cron(0 * * * ? *)", dlq=dlq["Attributes"]["QueueArn"])
    now = hour_mark(time.time()) + 3 * HOUR + 600
    scheduler_dead_letter(fleet, "own-dlq", hour_mark(now), url)
    with module_env(moto_endpoint):
        [row] = firings(store(fleet), "own-dlq", 900, now)
    assert row.reason is not None
    assert row.reason.startswith("the scheduler could not deliver it: AWS.SQS.KmsAccessDenied")


def test_a_long_window_keeps_the_newest_firings_and_says_it_cut() -> None:
    """`firings --since 14d` of a minutely schedule: more than MAX_FIRES firings; the newest
    are kept (the oldest cut), and the caller is told."""
    now = hour_mark(time.time()) + 1800
    made = datetime.fromtimestamp(now - 30 * 86400, timezone.utc)
    minutely = EventSchedule(
        "sqsjkr-minutely", "cron(* * * * ? *)", "UTC", True, "minutely", "true", None,
        created=made,
    )  # fmt: skip
    told: list[str] = []
    times = fire_times(minutely, now - 14 * 86400, now, told.append)
    assert len(times) == MAX_FIRES and max(times) == now
    assert min(times) == now - (MAX_FIRES - 1) * 60
    assert told == [
        f"schedule sqsjkr-minutely: only its newest {MAX_FIRES:,} firings of {14 * 1440:,} in "
        "the window are listed (a shorter --since lists them all)"
    ]


def test_a_firing_run_again_shows_both_runs_and_its_lateness_apart_from_its_queue_delay() -> None:
    schedule = EventSchedule(
        "sqsjkr-judged", "cron(0 * * * ? *)", "UTC", True, "judged", "true", None
    )
    at = hour_mark(time.time()) - 86400
    first = fired("judged", at, RunOutcome.ERRORED)
    # Run again by hand a day later: its message waited 2 s on the queue.
    again = fired(
        "judged", at, RunOutcome.SUCCEEDED, origin="trigger", firing_rerun="r1",
        sent_at=at + 86400, started_at=at + 86402,
    )  # fmt: skip
    row = judge(schedule, at, Evidence(records=[again, first]), at + 90000, 300)
    assert row.status is FiringStatus.RAN and row.run == again and row.reruns == (first,)
    assert [r["message_id"] for r in row.as_json()["reruns"]] == [first.message_id]
    assert again.queue_delay == 2 and again.lateness == 86402  # apart
    assert first.queue_delay == first.lateness  # the schedule's own: from its firing


def test_a_deleted_schedules_past_firings_stay_readable_from_its_runs(
    fleet: WebFleet, cli: Cli, aws_env: dict[str, str]
) -> None:
    last = hour_mark(time.time())
    history = fleet.history()
    history.finished(fired("retired", last - 2 * HOUR, RunOutcome.SUCCEEDED))
    history.finished(fired("retired", last - HOUR, RunOutcome.CANCELLED))
    shown = cli("firings", "retired", "--since", "1d", "-c", str(fleet.conf))
    assert shown.returncode == 0, shown.stderr
    assert "no schedule sends event 'retired' any more (deleted?)" in shown.stderr
    rows = shown.stdout.splitlines()[1:]
    assert len(rows) == 2
    assert "missed" in rows[0] and "cancelled: older than its life_time" in rows[0]
    assert "ran" in rows[1] and "succeeded" in rows[1]
    unknown = cli("firings", "never-was", "-c", str(fleet.conf))
    assert unknown.returncode == 1 and "no schedule sends event 'never-was'" in unknown.stderr
