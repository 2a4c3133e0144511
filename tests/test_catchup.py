"""Catch-up of missed firings (issue 31 item 4): after every daemon was stopped over two firings of a
schedule with catch_up, the daemons started next run each firing once, the older first, recorded as
caught up; a firing older than catch_up, or of a schedule without it, is not run.

moto never fires schedules: a schedule's firings fall in the past by its StartDate, and its
creation is backdated in moto (in this process) before any daemon starts.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.catchup import CatchUpLease, claimed
from sqsjkr.backends.dedupe import claim_key
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.contract.catchup import (
    MAX_GAPS,
    catch_up_message,
    parse_catch_up,
    read_seen,
    seen_enabled,
    seen_text,
)
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing, Origin
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.daemon.catchup import (
    CatchUp,
    CatchUpSettings,
    CatchUpStores,
    FleetClock,
    queue_key,
)
from sqsjkr.errors import InvalidJobError
from sqsjkr.fleet.firings import Evidence, FiringStatus, judge

from .conftest import Aws, Cli, Start, config_text, run_on, wait_until
from .test_firings import fired
from .test_schedules import ROLE_ARN, backdate, queue_arn, scheduler
from .test_schedules import group as group  # noqa: F401 - the fixture
from .test_trigger import received

HOUR = 3600


def module_message(event_id: str, command: str, **more: Any) -> str:
    """A schedule's input as the terraform module writes it: the job, its firing's context
    attributes for the Scheduler to fill in, origin "schedule", and the module's catch_up."""
    message = {
        "event_id": event_id,
        "command": command,
        "firing": {
            "time": SCHEDULED_TIME,
            "schedule": SCHEDULE_ARN,
            "expression": "rate(1 hour)",
            "timezone": "UTC",
        },
        "origin": "schedule",
        **more,
    }
    return json.dumps(message)


def hourly(
    aws: Aws, group: str, name: str, start: float, body: str, rate: str = "rate(1 hour)"
) -> str:
    """An hourly schedule of the group, firing from start (in the past), created (and last
    changed) an hour before it."""
    arn = scheduler().create_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression=rate,
        StartDate=datetime.fromtimestamp(start, timezone.utc),
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"Arn": queue_arn(aws), "RoleArn": ROLE_ARN, "Input": body},
    )["ScheduleArn"]
    backdate(group, name, time.time() - start + HOUR)
    modified_at(group, name, start - HOUR)
    return str(arn)


def modified_at(group: str, name: str, at: float) -> None:
    """Make moto's schedule `name` last changed at `at` (its LastModificationDate), as if it had
    been enabled (or edited) then: moto (in this process) has no other way to date a change."""
    from moto.scheduler.models import scheduler_backends

    for regions in scheduler_backends.values():
        for backend in regions.values():
            found = backend.schedule_groups.get(group)
            if found is not None and name in found.schedules:
                found.schedules[name].last_modified_date = at
                return
    raise AssertionError(f"no schedule {name} in group {group}")


def set_state(group: str, name: str, state: str, at: float) -> None:
    """Disable or enable the schedule (UpdateSchedule, as the console does), changed at `at`."""
    client = scheduler()
    current = client.get_schedule(GroupName=group, Name=name)
    client.update_schedule(
        Name=name,
        GroupName=group,
        ScheduleExpression=current["ScheduleExpression"],
        StartDate=current["StartDate"],
        FlexibleTimeWindow=current["FlexibleTimeWindow"],
        Target=current["Target"],
        State=state,
    )
    modified_at(group, name, at)


def looker(
    aws: Aws,
    group: str,
    owner: str = "host-a:1:abc",
    grace: float = 300,
    order_wait: float = 0,
    **more: Any,
) -> CatchUp:
    """A catch-up of aws's queue that sends one firing of a schedule per look (order_wait 0)."""
    stores = CatchUpStores(scheduler(), aws.dynamodb, aws.table, aws.sqs)
    queues = {queue_key(aws.queue_url): aws.queue_url}
    settings = CatchUpSettings(group, 600, grace, owner, queues, order_wait=order_wait)
    return CatchUp(stores, settings, **more)


def sent_times(aws: Aws) -> list[str]:
    """The firings (their times) of the catch-up messages on the queue, taken off it."""
    return [json.loads(m["Body"])["firing"]["time"] for m in received(aws, aws.queue_url)]


def ended_claim(aws: Aws, firing: Firing, **more: Any) -> None:
    """The claim of a firing whose run has ended (with LeaseUntil: still running)."""
    item = {**claim_key(firing.key), **more}
    aws.dynamodb.put_item(TableName=aws.table, Item=item)


def records(aws: Aws, event_id: str) -> list[RunRecord]:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(event_id, 100)


def test_missed_firings_run_once_the_older_first_when_daemons_start_again(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    cli: Cli,
) -> None:
    # Every daemon stopped: the schedule fired 2h30m, 1h30m and 30m ago, none of it ran.
    start = time.time() - 2.5 * HOUR
    out = tmp_path / "ran"
    arn = hourly(
        aws,
        group,
        "nightly",
        start,
        module_message("nightly", f"echo ran >> {out}", catch_up="2h"),
    )
    hourly(aws, group, "quiet", start, module_message("quiet", f"echo quiet >> {out}"))
    hourly(aws, group, "bad", start, module_message("bad", f"echo bad >> {out}", catch_up="8d"))
    text = config_text(aws, stats="stats_port = 0") + f'\n[schedule]\ngroup = "{group}"\n'
    daemons = [run_on(start_daemon, tmp_path, text) for _ in range(2)]

    wait_until(lambda: sum(r.final for r in records(aws, "nightly")) >= 2, 30, "two runs")
    runs = sorted(records(aws, "nightly"), key=lambda r: r.claimed_at)
    assert len(runs) == 2 and all(r.final for r in runs), runs
    due = [start + HOUR, start + 2 * HOUR]
    # Each missed firing of the window once, the older first; not the one older than catch_up.
    assert [Firing(r.firing_at or 0, arn).key for r in runs] == [
        Firing(float(int(t)), arn).key for t in due
    ]
    senders = [d for d in daemons if "catch-up: sent" in d.log]
    assert len(senders) == 1, "one daemon at a time looks"
    for run in runs:
        assert run.origin == Origin.CATCH_UP.value
        assert run.triggered_by is not None and ":" in run.triggered_by  # the daemon's id
        assert run.trigger_reason is not None and "caught up" in run.trigger_reason
        assert run.lateness is not None and run.lateness > 25 * 60
    assert records(aws, "quiet") == [], "no catch_up: nothing runs"
    # A catch_up the contract refuses is named in the log; the rest goes on.
    assert records(aws, "bad") == []
    warned = 'schedule "bad" is not caught up: field "catch_up": must be at most 168h0m0s'

    assert warned in senders[0].log, senders[0].log
    assert out.read_text() == "ran\nran\n"

    conf = tmp_path / "cli.toml"
    conf.write_text(text)
    result = cli("firings", "nightly", "--since", "3h", "-c", str(conf), "--json")
    rows = {row["at"]: row for row in json.loads(result.stdout)}
    caught = [row for row in rows.values() if row["status"] == "caught up"]
    assert len(caught) == 2 and all("caught up by daemon" in row["reason"] for row in caught)
    for daemon in daemons:
        assert daemon.stop() == 0


def test_one_lease_holder_at_a_time_and_a_lapsed_lease_is_taken(aws: Aws) -> None:
    lease = CatchUpLease(aws.dynamodb, aws.table, "jobs")
    first = lease.take("a", 60, now=1000.0)
    assert first.ours
    assert lease.take("a", 60, now=1030.0).ours, "its holder renews it"
    refused = lease.take("b", 60, now=1040.0)
    assert not refused.ours and refused.holder == "a" and refused.until == 1090.0
    assert lease.take("b", 60, now=1091.0).ours, "lapsed: another daemon takes it"
    lease.give_up("b")
    assert lease.take("c", 60, now=1092.0).ours, "given up at a clean stop"


def test_claimed_reads_which_firings_have_a_claim(aws: Aws) -> None:
    keys = [Firing(1000.0 + 60 * n, "arn:s").key for n in range(150)]
    aws.dynamodb.put_item(
        TableName=aws.table, Item={"Id": {"S": keys[120]}, "Type": {"S": "throttle"}}
    )
    assert claimed(aws.dynamodb, aws.table, keys) == {keys[120]}


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("8d", "at most 168h0m0s"),
        ("soon", "invalid duration"),
        (-5, "must not be negative"),
        ([1], "got array"),
    ],
)
def test_a_bad_catch_up_is_refused_naming_the_field(value: object, reason: str) -> None:
    with pytest.raises(InvalidJobError, match="catch_up") as error:
        parse_catch_up({"catch_up": value})
    assert reason in str(error.value)


def test_catch_up_reads_hours_days_and_seconds() -> None:
    assert parse_catch_up({}) is None
    assert parse_catch_up({"catch_up": "6h"}).seconds == 6 * HOUR  # type: ignore[union-attr]
    assert parse_catch_up({"catch_up": "2d"}).seconds == 48 * HOUR  # type: ignore[union-attr]
    assert parse_catch_up({"catch_up": 90}).seconds == 90  # type: ignore[union-attr]


def test_the_catch_up_message_is_the_schedules_own_as_that_firing() -> None:
    fields = json.loads(module_message("nightly", "true", catch_up="6h"))
    body = json.loads(catch_up_message(fields, Firing(3600.0, "arn:s", "rate(1 hour)", "UTC")))
    assert body["firing"] == {
        "time": "1970-01-01T01:00:00Z",
        "schedule": "arn:s",
        "expression": "rate(1 hour)",
        "timezone": "UTC",
    }
    assert body["origin"] == "catch-up" and body["command"] == "true"


def test_the_ledger_shows_a_caught_up_firing_with_who_noticed_and_how_late() -> None:
    schedule = EventSchedule("sqsjkr-nightly", "rate(1 hour)", "UTC", True, "nightly", "t", None)
    at = 7200.0
    caught = fired(
        "nightly", at, RunOutcome.SUCCEEDED, origin="catch-up", sent_at=at + 5400,
        started_at=at + 5401, triggered_by="host-a:7:abc", trigger_reason="caught up: ...",
    )  # fmt: skip
    row = judge(schedule, at, Evidence(records=[caught]), at + 9000, 300)
    assert row.status is FiringStatus.CAUGHT_UP and row.run == caught
    assert row.reason == "caught up by daemon host-a:7:abc, started 1h30m late"
    assert row.as_json()["status"] == "caught up"


def test_a_later_firing_waits_until_the_run_before_has_ended(aws: Aws, group: str) -> None:  # noqa: F811
    """No daemon takes the first caught-up firing: the second is not sent, on this look or the
    next, and the first is not sent twice; once the first is claimed, the second still waits
    while its run goes on, and goes once the run has ended (issue 36 item 7)."""
    start = time.time() - 2.5 * HOUR
    arn = hourly(aws, group, "nightly", start, module_message("nightly", "true", catch_up="3h"))
    looks = looker(aws, group)
    firings = [Firing(float(int(start + n * HOUR)), arn) for n in range(3)]

    looks.look()
    looks.look()
    assert sent_times(aws) == [firings[0].iso]
    running = {"LeaseUntil": {"N": str(time.time() + 60)}, "Owner": {"S": "b"}}
    ended_claim(aws, firings[0], **running)
    looks.look()
    assert sent_times(aws) == [], "claimed, but its run goes on: the next waits"
    ended_claim(aws, firings[0])
    looks.look()
    assert sent_times(aws) == [firings[1].iso], "the next, once the run before has ended"


def test_caught_up_runs_of_a_locked_job_run_one_after_another_in_order(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
) -> None:
    """Two missed firings of a job with a lock and abort_if_locked: on time both would have run;
    caught up, the second is sent only once the first's run has ended, so neither meets the
    other on its lock, and the older runs first (issue 36 item 7)."""
    start = time.time() - 1.5 * HOUR
    body = module_message(
        "locked", "sleep 2", catch_up="2h", lock_id="locked-job", abort_if_locked=True
    )
    hourly(aws, group, "locked", start, body)
    text = config_text(aws, stats="stats_port = 0") + f'\n[schedule]\ngroup = "{group}"\n'
    daemon = run_on(start_daemon, tmp_path, text)

    wait_until(lambda: sum(r.final for r in records(aws, "locked")) >= 2, 30, "two runs")
    runs = sorted(records(aws, "locked"), key=lambda r: r.claimed_at)
    assert [r.outcome for r in runs] == [RunOutcome.SUCCEEDED] * 2, runs
    assert [r.firing_at for r in runs] == [float(int(start)), float(int(start + HOUR))]
    assert runs[1].started_at is not None and runs[1].started_at >= runs[0].ended_at
    assert daemon.stop() == 0


def test_firings_before_a_schedule_was_enabled_again_are_not_caught_up(
    aws: Aws,
    group: str,  # noqa: F811
) -> None:
    """Disabled 3h ago and enabled again 1h ago, while no daemon looked: its LastModificationDate
    says it has been enabled for an hour, and nothing of it before; only the firing since is
    caught up (issue 36 item 6)."""
    start = time.time() - 4.5 * HOUR
    arn = hourly(aws, group, "nightly", start, module_message("nightly", "true", catch_up="6h"))
    set_state(group, "nightly", "DISABLED", time.time() - 3 * HOUR)
    set_state(group, "nightly", "ENABLED", time.time() - HOUR)
    looks = looker(aws, group)
    looks.look()
    assert sent_times(aws) == [Firing(float(int(start + 4 * HOUR)), arn).iso]
    looks.look()
    assert sent_times(aws) == [], "sent once; the firings of the disabled hours never"


class SetClock(FleetClock):
    """The fleet's time, set by the test: looks at moments of the past."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def heard(self, answered_at: float | None, received: float) -> None:
        return None

    def now(self) -> float:
        return self.at


def test_a_disabling_a_daemon_saw_holds_back_that_span_for_the_daemon_that_looks_next(
    aws: Aws,
    group: str,  # noqa: F811
) -> None:
    """Daemon a looks 4h28m ago (the schedule enabled, unchanged), and again while it is
    disabled; it is enabled again 1h ago; daemon b takes the lapsed lease over and reads what a
    kept in it: the firing before a's first look is caught up, those of the span in which the
    schedule may have been disabled are not, the one since its enabling is (issue 36 item 6)."""
    start = float(int(time.time() - 4.5 * HOUR))
    arn = hourly(aws, group, "nightly", start, module_message("nightly", "true", catch_up="6h"))
    firings = [Firing(start + n * HOUR, arn) for n in range(5)]
    clock = SetClock(start + 120)  # the first firing is not due yet: within the grace
    a = looker(aws, group, "host-a:1:a", fleet_clock=clock)
    a.turn()
    assert sent_times(aws) == []
    set_state(group, "nightly", "DISABLED", start + 0.6 * HOUR)
    clock.at = start + 1.5 * HOUR
    a.turn()
    assert sent_times(aws) == [], "a disabled schedule is not caught up"
    set_state(group, "nightly", "ENABLED", time.time() - HOUR)

    b = looker(aws, group, "host-b:2:b")
    b.turn()
    assert sent_times(aws) == [firings[0].iso]
    ended_claim(aws, firings[0])
    b.look()
    assert sent_times(aws) == [firings[4].iso]


@pytest.mark.parametrize("skew", [600, -600])
def test_a_holder_whose_clock_is_wrong_judges_firings_by_the_time_aws_answers_with(
    aws: Aws,
    group: str,  # noqa: F811
    skew: float,
) -> None:
    """A lease holder whose clock is 10 minutes ahead (or behind) sends no firing before it is
    due, and skips none of the window (issue 36 item 8): a rate(1 minute) schedule with
    catch_up 15m whose one missed firing of the window is 13 minutes old, and whose firings of
    the last half minute and the next minutes have not come yet."""
    now = float(int(time.time()))
    start = now - 1200
    body = module_message("often", "true", catch_up="15m")
    arn = hourly(aws, group, "often", start, body, rate="rate(1 minute)")
    missed = Firing(now - 780, arn)
    for at in range(int(start), int(now) + 1200, 60):
        if now - 910 < at <= now - 30 and at != missed.at:
            ended_claim(aws, Firing(float(at), arn))
    looks = looker(aws, group, grace=60, clock=lambda: time.time() + skew)
    looks.turn()
    assert sent_times(aws) == [missed.iso]


def test_a_schedules_record_holds_back_the_spans_it_may_have_been_disabled_in() -> None:
    first = seen_enabled(None, 1000.0, 5000.0)
    assert first.holds_back(999.0), "never seen: nothing before its last change"
    assert not first.holds_back(1000.0) and not first.holds_back(4999.0)
    same = seen_enabled(first, 1000.0, 6000.0)
    assert same.gaps == first.gaps and same.ok == 6000.0, "unchanged: enabled all along"
    changed = seen_enabled(same, 9000.0, 9500.0)
    assert changed.holds_back(7000.0), "between the last look that saw it and its change"
    assert not changed.holds_back(5500.0) and not changed.holds_back(9100.0)
    record = first
    for n in range(40):
        record = seen_enabled(record, 10000.0 + 100 * n, 10050.0 + 100 * n)
    assert len(record.gaps) <= MAX_GAPS, "bounded"
    assert all(record.holds_back(10000.0 + 100 * n - 25) for n in range(1, 40)), "merged wider"
    assert read_seen(seen_text({"s": record})) == {"s": record}
    assert read_seen("not json") == {} and read_seen('{"s": {"m": 1}}') == {}
    many = {f"s{n:04}": first for n in range(100)}
    assert len(read_seen(seen_text(many, limit=2000))) < 100, "cut to fit the item"


def test_a_look_does_not_poll_for_a_firing_an_earlier_look_sent_and_no_daemon_took(
    aws: Aws,
    group: str,  # noqa: F811
) -> None:
    """Its event paused, or the queue behind: the look that sent it waits order_wait for it,
    the next looks do not (a call a second, for nothing)."""
    start = time.time() - 1.5 * HOUR
    hourly(aws, group, "nightly", start, module_message("nightly", "true", catch_up="2h"))
    looks = looker(aws, group, order_wait=1.5)
    looks.look()
    assert len(sent_times(aws)) == 1
    began = time.monotonic()
    looks.look()
    assert time.monotonic() - began < 1.0, "returned at once"
    assert sent_times(aws) == [], "and sent nothing twice"


def test_a_holder_waiting_for_a_run_to_end_keeps_its_lease(aws: Aws, group: str) -> None:  # noqa: F811
    """A look that waits longer than half an interval for a caught-up run renews the lease, so
    that no other daemon takes it over and sends the same schedule's later firings meanwhile."""
    start = float(int(time.time() - 1.5 * HOUR))
    arn = hourly(aws, group, "nightly", start, module_message("nightly", "true", catch_up="2h"))
    running = {"LeaseUntil": {"N": str(time.time() + 60)}, "Owner": {"S": "b"}}
    ended_claim(aws, Firing(start, arn), **running)
    stores = CatchUpStores(scheduler(), aws.dynamodb, aws.table, aws.sqs)
    queues = {queue_key(aws.queue_url): aws.queue_url}
    looks = CatchUp(stores, CatchUpSettings(group, 2, 300, "a", queues, order_wait=2.5))
    began = time.time()
    looks.turn()
    lease = aws.item(f"catchup:{group}", "catchup")
    assert lease is not None and float(lease["LeaseUntil"]["N"]) > began + 1 + 3, lease
    assert sent_times(aws) == [], "the run before goes on"
