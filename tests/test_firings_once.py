"""Once per firing, end to end: two messages of one schedule's firing run once across two real
daemons on one queue (moto over HTTP), the second recorded as a duplicate; records and summaries
keep the firing.

moto never fires schedules: each test sends the message a schedule would send, with the
Scheduler's context attributes substituted as its guide documents.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sqsjkr.backends.dedupe import (
    CLAIMED_AS,
    HOLDER,
    LATE_COPY_SECONDS,
    ClaimState,
    DedupeStore,
    DynamoDedupe,
    MemoryDedupe,
)
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.config import load_config
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.job import build_body
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.fleet.jobs import JobPhase
from sqsjkr.fleet.send import Sender

from .conftest import (
    Aws,
    Daemon,
    Start,
    config_text,
    counted,
    invocations,
    new_aws,
    run_daemon,
    sqsjkr,
    wait_for_count,
    wait_until,
)
from .test_crash import WAIT_FOR_RELEASE, kill_group, lines
from .web_fleet import module_env

SCHEDULE = "arn:aws:scheduler:us-east-1:123456789012:schedule/jobs/nightly-report"
BERLIN_2AM = "cron(0 2 * * ? *)"
#: 02:00 Europe/Berlin on the day before its clocks skip 02:00-03:00 (2026-03-29).
BEFORE_DST = datetime(2026, 3, 28, 1, 0, tzinfo=timezone.utc).timestamp()


@dataclass
class Pair:
    """Two daemons reading one queue, and the directory their jobs write to."""

    aws: Aws
    daemons: tuple[Daemon, Daemon]
    directory: Path

    def history(self) -> DynamoHistory:
        return DynamoHistory(self.aws.dynamodb, self.aws.table, retention_seconds=1)

    def records(self, event_id: str) -> list[RunRecord]:
        return self.history().runs(event_id, 500)

    def counts(self, name: str) -> int:
        return sum(invocations(d.stats_port)[name] for d in self.daemons)


@pytest.fixture(scope="module")
def pair(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    directory = tmp_path_factory.mktemp("firings-once")
    with module_env(moto_endpoint):
        aws = new_aws()
        conf = directory / "config.toml"
        text = config_text(aws, stats="stats_port = 0", max_concurrent_num=10)
        # A lease that a loaded machine renews in time: one that lapsed mid-run would let the
        # other daemon take the firing over, which is the crash test's case, not this one's.
        conf.write_text(text.replace("[lock]\n", '[lock]\nlease = "12s"\n'))
        daemons = tuple(Daemon(["run", "-c", str(conf)], {}, directory) for _ in range(2))
        try:
            for daemon in daemons:
                daemon.wait_for_log("receiving with")
            yield Pair(aws, (daemons[0], daemons[1]), directory)
        finally:
            for daemon in daemons:
                assert daemon.stop() == 0, daemon.log


def sender(conf: str) -> Sender:
    return Sender(load_config(conf))


def scheduled(command: str, event_id: str, firing: Firing) -> str:
    """The body a schedule's target sends for this firing (its attributes substituted)."""
    return build_body(command, event_id=event_id, firing=firing, origin=Origin.SCHEDULE)


def send_batch(aws: Aws, bodies: list[str]) -> list[str]:
    """Send bodies, ten a call, in order; their message ids."""
    ids = []
    for start in range(0, len(bodies), 10):
        entries = [
            {"Id": str(i), "MessageBody": body} for i, body in enumerate(bodies[start : start + 10])
        ]
        response = aws.sqs.send_message_batch(QueueUrl=aws.queue_url, Entries=entries)
        assert not response.get("Failed"), response
        ids += [e["MessageId"] for e in sorted(response["Successful"], key=lambda e: int(e["Id"]))]
    return ids


@pytest.mark.slow  # 100 firings, 200 messages: about 20 s on two cores
# Its waits fail once progress stalls; a loaded machine slows it past the suite's 120 s, not stalls.
@pytest.mark.timeout(360)
def test_each_of_100_firings_sent_twice_at_once_runs_once_across_two_daemons(pair: Pair) -> None:
    event = f"nightly-{uuid.uuid4().hex[:6]}"
    ran = pair.directory / f"{event}.runs"
    firings = [
        Firing(BEFORE_DST + 86400 * i, SCHEDULE, BERLIN_2AM, "Europe/Berlin") for i in range(100)
    ]
    bodies = []
    for firing in firings:
        body = scheduled(f"echo {firing.iso} >> {ran}", event, firing)
        bodies += [body, body]  # EventBridge's at-least-once: one firing, two messages
    duplicates_before = pair.counts("duplicates")
    ids = send_batch(pair.aws, bodies)

    wait_for_count(lambda: len(pair.records(event)), 200, what="the 200 records")
    # Waited for while the deletes go on (the count of messages left falls towards 0), not
    # within a fixed budget that a loaded machine may overrun.
    wait_for_count(lambda: -sum(pair.aws.queue_counts()), 0, what="every message deleted")
    assert sorted(lines(ran)) == sorted(f.iso for f in firings)  # each firing ran once

    records = pair.records(event)
    runs = [r for r in records if r.outcome is not RunOutcome.DUPLICATE]
    dups = [r for r in records if r.outcome is RunOutcome.DUPLICATE]
    assert len(runs) == 100
    # Each firing's other message is recorded as a duplicate of its run. On a loaded machine a
    # copy may come back once its visibility ran out before its delete: its claim records it
    # again, and never runs it. So 100 copies, each with one record or more.
    copies = {r.message_id for r in dups}
    assert len(copies) == 100 and not copies & {r.message_id for r in runs}
    assert {r.firing_at for r in runs} == {f.at for f in firings}
    assert all(r.outcome is RunOutcome.SUCCEEDED and r.duplicate_of is None for r in runs)
    by_id = {r.message_id: r for r in runs}
    for dup in dups:
        assert dup.duplicate_of in by_id and not dup.failure and dup.started_at is None
        assert by_id[dup.duplicate_of].firing_at == dup.firing_at  # the same firing's run
    # Each firing's pair of messages: one ran, the other is its duplicate.
    assert {r.message_id for r in records} == set(ids)
    # At least the 100 copies, for the same reason.
    wait_for_count(lambda: pair.counts("duplicates") - duplicates_before, 100, what="counted")
    # The firing's claim names the message that ran it, so kill, job and live find its run.
    run = runs[0]
    claim = pair.aws.item(Firing(run.firing_at or 0, SCHEDULE).key, "throttle")
    assert claim is not None and claim[HOLDER]["S"] == run.message_id
    assert "LeaseUntil" not in claim  # finished
    # Its message is marked as the Go daemon marks the messages it takes, naming the firing.
    mark = pair.aws.item(run.message_id, "throttle")
    assert mark is not None and mark[CLAIMED_AS]["S"] == claim["Id"]["S"] and "Expired" in mark


def test_a_firings_record_and_summary_keep_it_and_a_plain_message_leaves_them_none(
    pair: Pair,
) -> None:
    event, plain = f"report-{uuid.uuid4().hex[:6]}", f"plain-{uuid.uuid4().hex[:6]}"
    # A schedule of its own: the module's daemons keep the other tests' firings' claims.
    schedule = f"{SCHEDULE}-{uuid.uuid4().hex[:6]}"
    firing = Firing(BEFORE_DST, schedule, BERLIN_2AM, "Europe/Berlin")
    sent = pair.aws.send(scheduled("true", event, firing))
    pair.aws.send({"command": "true", "event_id": plain})
    wait_until(lambda: pair.records(event) and pair.records(plain), what="both recorded")

    [record] = pair.records(event)
    assert record.message_id == sent and record.outcome is RunOutcome.SUCCEEDED
    assert (record.firing_at, record.firing_schedule) == (firing.at, schedule)
    assert record.origin == "schedule" and record.duplicate_of is None
    assert record.started_at is not None
    assert record.queue_delay == record.started_at - firing.at  # from the firing
    summary = pair.history().summary(event)
    assert summary is not None and summary.last_run == record
    assert (summary.schedule, summary.schedule_expression, summary.schedule_timezone) == (
        schedule,
        BERLIN_2AM,
        "Europe/Berlin",
    )
    assert summary.last_firing_at == firing.at
    # 02:00 of 2026-03-29 is skipped in Berlin: the next firing is 02:00 CEST on the 30th.
    after_dst = datetime(2026, 3, 30, 0, 0, tzinfo=timezone.utc).timestamp()
    assert summary.next_firing_at == after_dst

    [other] = pair.records(plain)
    assert (other.firing_at, other.firing_schedule, other.origin, other.duplicate_of) == (
        None,
        None,
        None,
        None,
    )
    assert other.queue_delay == (other.started_at or 0) - other.sent_at
    unscheduled = pair.history().summary(plain)
    assert unscheduled is not None
    fields = ("schedule", "schedule_expression", "schedule_timezone")
    assert all(getattr(unscheduled, name) is None for name in fields)
    assert unscheduled.last_firing_at is None and unscheduled.next_firing_at is None


def test_a_firing_whose_daemon_is_killed_runs_from_either_copy_after_its_lease(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    firing = Firing(BEFORE_DST, SCHEDULE, BERLIN_2AM, "Europe/Berlin")
    body = scheduled(f"echo $$ >> pids; echo run >> runs; {WAIT_FOR_RELEASE}", "crash", firing)
    first, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    held = aws.send(body)
    wait_until(lambda: lines(tmp_path / "runs") == ["run"], what="the firing running")
    first.kill()
    kill_group(tmp_path / "pids")
    (tmp_path / "release").touch()

    # The firing's other copy arrives. Once the dead daemon's lease on the firing's claim has
    # passed, whichever copy comes first runs it (the other, if the lease was still on, is
    # dropped as the first's duplicate: the first is still on the queue and runs later).
    second, port = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    other = aws.send(body)
    wait_until(counted(port, succeeded=1, duplicates=1), timeout=60, what="run, and dropped")
    assert lines(tmp_path / "runs") == ["run", "run"]
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    records = {r.message_id: r for r in history.runs("crash", 10)}
    assert set(records) == {held, other}
    [ran] = [r for r in records.values() if r.outcome is RunOutcome.SUCCEEDED]
    [dup] = [r for r in records.values() if r.outcome is RunOutcome.DUPLICATE]
    assert dup.duplicate_of == ran.message_id
    wait_until(lambda: aws.queue_counts() == (0, 0), what="both deleted")
    assert second.stop() == 0


def test_a_firings_run_is_killed_and_followed_by_its_message_id(
    pair: Pair, capsys: pytest.CaptureFixture[str]
) -> None:
    event = f"killed-{uuid.uuid4().hex[:6]}"
    flag = pair.directory / f"{event}.started"
    firing = Firing(BEFORE_DST, SCHEDULE + "-" + event, BERLIN_2AM, "Europe/Berlin")
    sent = pair.aws.send(scheduled(f"touch {flag}; sleep 60", event, firing))
    wait_until(flag.exists, what="the firing running")
    conf = str(pair.directory / "config.toml")
    assert sender(conf).job(sent).phase is JobPhase.RUNNING  # found through its note's claim

    code, out, err = sqsjkr(capsys, "kill", sent, "--reason", "stuck", "-c", conf)
    assert code == 0, err
    assert out.startswith(f'kill requested: the run of event "{event}" (message "{sent}")')
    wait_until(lambda: pair.records(event), timeout=20, what="the kill recorded")
    [record] = pair.records(event)
    assert record.outcome is RunOutcome.KILLED and record.firing_at == firing.at
    state = sender(conf).job(sent)  # its claim is the firing's: its record tells its end
    assert state.phase is JobPhase.ENDED and state.outcome is RunOutcome.KILLED


@pytest.mark.parametrize("backend", ["memory", "dynamodb"])
def test_a_firings_claim_tells_its_other_messages_which_one_holds_it(
    backend: str, aws: Aws
) -> None:
    key = Firing(BEFORE_DST, f"{SCHEDULE}-{uuid.uuid4().hex[:6]}").key
    store: DedupeStore = (
        MemoryDedupe()
        if backend == "memory"
        else DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=3600, lease_seconds=30)
    )
    first = store.claim(key, message_id="m-1")
    assert first.state is ClaimState.CLAIMED and first.lease is not None
    running = store.claim(key, message_id="m-2")
    assert (running.state, running.holder) == (ClaimState.RUNNING, "m-1")
    assert store.finish(first.lease)
    finished = store.claim(key, message_id="m-2")
    assert (finished.state, finished.holder) == (ClaimState.FINISHED, "m-1")
    # A message's own claim (no firing) holds itself, as ever.
    plain = f"m-{uuid.uuid4().hex[:6]}"
    assert store.claim(plain).state is ClaimState.CLAIMED
    assert store.claim(plain).holder == plain


def go_marks(aws: Aws, message_id: str) -> bool:
    """Write the Go daemon's throttle item for message_id, as its Throttler.Set does: False
    when its condition fails (the message was taken already, so the Go daemon skips it)."""
    try:
        aws.dynamodb.put_item(
            TableName=aws.table,
            Item={
                "Id": {"S": message_id},
                "Type": {"S": "throttle"},
                "Expired": {"N": "9999999999"},
            },
            ConditionExpression="attribute_not_exists(Expired)",
        )
    except aws.dynamodb.exceptions.ConditionalCheckFailedException:
        return False
    return True


def test_a_firings_message_that_a_go_daemon_took_is_not_run_and_its_claim_stops_a_go_daemon(
    aws: Aws,
) -> None:
    store = DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=3600, lease_seconds=30)
    firing = Firing(BEFORE_DST, f"{SCHEDULE}-{uuid.uuid4().hex[:6]}")
    taken = f"m-{uuid.uuid4().hex[:6]}"
    assert go_marks(aws, taken)  # a Go daemon took the message, then SQS delivered it again
    claim = store.claim(firing.key, message_id=taken)
    assert (claim.state, claim.holder) == (ClaimState.FINISHED, taken)
    assert aws.item(firing.key, "throttle") is None  # nothing written: the firing stays free

    # The reverse: the message a port daemon claims the firing for is one a Go daemon skips.
    mine = f"m-{uuid.uuid4().hex[:6]}"
    claim = store.claim(firing.key, message_id=mine)
    assert claim.state is ClaimState.CLAIMED and claim.lease is not None
    assert not go_marks(aws, mine)
    # Its own message delivered again to a port daemon is told the firing is in progress,
    # as ever (its mark names the firing), not that a Go daemon took it.
    again = store.claim(firing.key, message_id=mine)
    assert (again.state, again.holder) == (ClaimState.RUNNING, mine)
    assert store.finish(claim.lease)
    assert store.claim(firing.key, message_id=mine).state is ClaimState.FINISHED


def test_a_firings_claim_outlives_its_late_copies_with_a_short_retention(aws: Aws) -> None:
    now = [BEFORE_DST]
    store = DynamoDedupe(
        aws.dynamodb, aws.table, retention_seconds=60, lease_seconds=30, clock=lambda: now[0]
    )
    firing = Firing(BEFORE_DST, f"{SCHEDULE}-{uuid.uuid4().hex[:6]}")
    first = store.claim(firing.key, message_id="m-first")
    assert first.lease is not None and store.finish(first.lease)

    def ttl_sweep() -> None:
        """What DynamoDB's TTL on Expired does once the clock has passed it (moto has none)."""
        for key in (firing.key, "m-first"):
            item = aws.item(key, "throttle")
            if item is not None and float(item["Expired"]["N"]) < now[0]:
                aws.dynamodb.delete_item(
                    TableName=aws.table, Key={"Id": {"S": key}, "Type": {"S": "throttle"}}
                )

    # A Scheduler retry 23 h later, and a letter redriven from the DLQ 14 days later: the
    # firing's claim is still there, long after the queue's 60 s retention.
    for late in (23 * 3600, 14 * 86400):
        now[0] = BEFORE_DST + late
        ttl_sweep()
        copy = store.claim(firing.key, message_id=f"m-late-{late}")
        assert (copy.state, copy.holder) == (ClaimState.FINISHED, "m-first"), late
    item = aws.item(firing.key, "throttle")
    assert item is not None
    assert float(item["Expired"]["N"]) >= BEFORE_DST + 60 + LATE_COPY_SECONDS


def test_a_copy_that_comes_while_its_firing_waits_for_a_retry_runs_the_retry(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    firing = Firing(BEFORE_DST, f"{SCHEDULE}-{uuid.uuid4().hex[:6]}", BERLIN_2AM, "Europe/Berlin")
    # Fails its first run, succeeds its second: one retry, due 4 s later.
    command = "echo run >> runs; test -f failed || { touch failed; exit 1; }"
    fields = json.loads(scheduled(command, "retried", firing))
    body = json.dumps({**fields, "retries": 1, "retry_delay": "4s"})
    run_daemon(start_daemon, tmp_path, aws)
    holder = aws.send(body)
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    wait_until(lambda: history.runs("retried", 5), what="the first run, which failed")
    # The holder's message is gone meanwhile (dead-lettered, or past its retention), and a
    # copy of the firing arrives (a Scheduler retry, a redriven letter): it runs the retry.
    aws.sqs.purge_queue(QueueUrl=aws.queue_url)
    copy = aws.send(body)
    wait_until(lambda: lines(tmp_path / "runs") == ["run", "run"], timeout=30, what="the retry")
    wait_until(lambda: len(history.runs("retried", 5)) == 2, what="its record")
    retry, first = history.runs("retried", 5)
    assert (first.message_id, first.outcome, first.final) == (holder, RunOutcome.ERRORED, False)
    assert (retry.message_id, retry.outcome, retry.attempt) == (copy, RunOutcome.SUCCEEDED, 2)
    wait_until(lambda: aws.queue_counts() == (0, 0), what="the copy deleted once it ran")


def test_a_forged_firing_ahead_of_its_sending_is_refused_and_claims_nothing(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    schedule = f"{SCHEDULE}-{uuid.uuid4().hex[:6]}"
    ahead = Firing(time.time() + 2 * 86400, schedule, BERLIN_2AM, "Europe/Berlin")
    aws.send(scheduled("echo forged >> runs", "nightly", ahead))
    due = Firing(time.time() - 60, schedule, BERLIN_2AM, "Europe/Berlin")
    aws.send(scheduled("echo due >> runs", "nightly", due))
    wait_until(counted(port, failed=1, succeeded=1), what="one refused, one run")
    assert lines(tmp_path / "runs") == ["due"]
    assert "after its message was sent" in daemon.log and "firing.time" in daemon.log
    # The real firing, when it comes, is no one's duplicate: the forgery claimed nothing.
    assert aws.item(ahead.key, "throttle") is None


def test_a_forward_forged_on_a_queue_no_route_leads_to_suppresses_nothing(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    victim = aws.send({"command": "echo victim >> runs", "event_id": "victim"})
    forger = aws.sqs.send_message(
        QueueUrl=aws.queue_url,
        MessageBody=json.dumps({"command": "echo forger >> runs", "event_id": "forger"}),
        MessageAttributes={"sqsjkr_forwarded_from": {"DataType": "String", "StringValue": victim}},
    )["MessageId"]
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=2), what="both jobs run")
    assert sorted(lines(tmp_path / "runs")) == ["forger", "victim"]
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    [forged] = history.runs("forger", 5)
    [real] = history.runs("victim", 5)
    assert (forged.message_id, real.message_id) == (forger, victim)
    assert "names a forward" in daemon.log
