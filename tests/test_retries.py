"""Retries and the job's context, end to end: a failed run runs again after a growing delay, with
its attempt number in its environment and its record; what is not retried; life_time from the
first send; and the dedupe record that counts the runs."""

from __future__ import annotations

import json
import socket
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sqsjkr.backends.dedupe import ClaimState, DynamoDedupe, Retry
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome, RunStart

from .conftest import Aws, Cli, Start, counted, invocations, run_daemon, wait_until


def runs(aws: Aws, event_id: str) -> list:  # newest first
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(event_id, 20)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_failed_run_runs_again_after_a_growing_delay(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    message_id = aws.send(
        {
            "command": 'echo "$SQSJKR_ATTEMPT $(date +%s.%N)" >> runs; [ "$SQSJKR_ATTEMPT" = 3 ]',
            "event_id": "flaky",
            "retries": 3,
            "retry_delay": "1s",
        }
    )
    wait_until(counted(port, succeeded=1), timeout=40, what="the third run succeeding")
    attempts = [line.split() for line in lines(tmp_path / "runs")]
    assert [a for a, _ in attempts] == ["1", "2", "3"]
    first, second = (float(attempts[i + 1][1]) - float(attempts[i][1]) for i in range(2))
    assert first >= 0.9 and second >= 1.8  # 1 s, then 2 s (at most a tenth less)
    assert invocations(port)["errored"] == 2
    records = sorted(runs(aws, "flaky"), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.final) for r in records] == [
        (1, RunOutcome.ERRORED, False),
        (2, RunOutcome.ERRORED, False),
        (3, RunOutcome.SUCCEEDED, True),
    ]
    assert {r.message_id for r in records} == {message_id}  # the same message, made visible later
    wait_until(lambda: aws.queue_counts() == (0, 0), what="its message deleted at last")
    assert daemon.stop() == 0


def test_retries_spent_leave_a_final_failure(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws, kill_grace="1s")
    aws.send({"command": "sleep 5", "event_id": "slow", "timeout": "0.5s", "retries": 1,
              "retry_delay": "1s"})  # fmt: skip
    wait_until(counted(port, timed_out=2), timeout=30, what="both runs timed out")
    records = sorted(runs(aws, "slow"), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.final) for r in records] == [
        (1, RunOutcome.TIMED_OUT, False),
        (2, RunOutcome.TIMED_OUT, True),
    ]
    [summary] = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).summaries()
    assert summary.consecutive_failures == 1  # the final failure only
    assert daemon.stop() == 0


def test_a_cancel_or_an_abort_is_not_retried(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "held"}, "Type": {"S": "lock"}, "EventId": {"S": "go-daemon"}},
    )
    aws.send({"command": "true", "event_id": "late", "life_time": 1, "retries": 5}, delay=2)
    aws.send({"command": "true", "event_id": "aborted", "lock_id": "held",
              "abort_if_locked": True, "retries": 5})  # fmt: skip
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, failed=2), timeout=20, what="both ended")
    wait_until(lambda: aws.queue_counts() == (0, 0), what="both deleted: no retry")
    assert [r.final for r in runs(aws, "late") + runs(aws, "aborted")] == [True, True]
    assert daemon.stop() == 0


def test_life_time_counts_from_the_first_send(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "echo ran >> runs; exit 1", "event_id": "short-lived", "life_time": 2,
              "retries": 5, "retry_delay": "1s"})  # fmt: skip
    wait_until(counted(port, failed=1), timeout=30, what="a retry cancelled for its life_time")
    records = runs(aws, "short-lived")
    assert records[0].outcome is RunOutcome.CANCELLED and records[0].final
    assert 1 <= len(lines(tmp_path / "runs")) < 6
    assert daemon.stop() == 0


def test_the_job_knows_which_scheduled_run_it_is(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    message_id = aws.send(
        {
            "command": "env | grep ^SQSJKR_ | sort > context",
            "event_id": "hourly",
            # A message cannot pretend to be another run.
            "envs": {"SQSJKR_ATTEMPT": "99", "SQSJKR_EVENT_ID": "forged"},
        }
    )
    wait_until(counted(port, succeeded=1), what="the job")
    context = dict(line.split("=", 1) for line in lines(tmp_path / "context"))
    sent_at = runs(aws, "hourly")[0].sent_at
    scheduled = datetime.fromtimestamp(sent_at, timezone.utc).isoformat(timespec="milliseconds")
    assert context == {
        "SQSJKR_ATTEMPT": "1",
        "SQSJKR_EVENT_ID": "hourly",
        "SQSJKR_HOST": socket.gethostname(),
        "SQSJKR_MESSAGE_ID": message_id,
        "SQSJKR_SCHEDULED_AT": scheduled.replace("+00:00", "Z"),
    }
    assert daemon.stop() == 0


# --- the dedupe record that counts runs --------------------------------------------------------


def dedupe(aws: Aws, clock: list[float]) -> DynamoDedupe:
    return DynamoDedupe(
        aws.dynamodb, aws.table, retention_seconds=600, lease_seconds=30, clock=lambda: clock[0]
    )


def test_a_retry_waits_for_its_time_then_counts_the_run(aws: Aws) -> None:
    clock = [1_700_000_000.0]
    store = dedupe(aws, clock)
    first = store.claim("m1")
    assert (first.state, first.attempt) == (ClaimState.CLAIMED, 1)
    assert first.lease is not None
    store.release(first.lease, Retry(attempts=1, at=clock[0] + 60))
    early = store.claim("m1")
    assert (early.state, early.held_until) == (ClaimState.WAITING, clock[0] + 60)
    clock[0] += 61
    second = store.claim("m1")
    assert (second.state, second.attempt) == (ClaimState.CLAIMED, 2)
    assert dedupe(aws, clock).claim("m1").state is ClaimState.RUNNING  # one daemon at a time
    assert second.lease is not None and store.finish(second.lease)
    assert store.claim("m1").state is ClaimState.FINISHED


def test_a_retry_whose_daemon_died_runs_again_as_the_same_attempt(aws: Aws) -> None:
    clock = [1_700_000_000.0]
    store = dedupe(aws, clock)
    first = store.claim("m1")
    assert first.lease is not None
    store.release(first.lease, Retry(attempts=1, at=clock[0]))
    second = store.claim("m1")
    assert second.attempt == 2  # and then its daemon dies
    clock[0] += 31
    taken = dedupe(aws, clock).claim("m1")
    # A crash is not the job's fault: the run it cut short is not counted.
    assert (taken.state, taken.attempt) == (ClaimState.CLAIMED, 2)


@pytest.mark.parametrize("noted", [True, False])
def test_a_claim_notes_its_run_in_the_same_write(aws: Aws, noted: bool) -> None:
    from sqsjkr.backends.history import running_update

    store = DynamoDedupe(
        aws.dynamodb,
        aws.table,
        retention_seconds=600,
        lease_seconds=30,
        note_running=running_update if noted else None,
    )
    start = RunStart("nightly", "m1", "host", "host:1", time.time(), time.time(), "run-it")
    claim = store.claim("m1", running=start)
    assert claim.state is ClaimState.CLAIMED and claim.noted is noted
    summaries = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).summaries()
    assert [s.running for s in summaries] == ([(start,)] if noted else [])
    # A second claim of the same message is refused, and notes nothing.
    other = store.claim("m1", running=start)
    assert other.state is ClaimState.RUNNING and not other.noted


def test_a_retry_past_max_receive_count_is_named_in_the_log_and_is_a_final_failure(
    start_daemon: Start, tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    """SQS dead-letters a message past its maxReceiveCount: the retry that cannot run says so,
    and the run before it is the job's last: a final failure, counted in the event's summary
    and by `status --check`."""
    dlq = aws.sqs.create_queue(QueueName=f"{aws.queue_name}-dlq")["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]
    policy = {"deadLetterTargetArn": arn["QueueArn"], "maxReceiveCount": 1}
    aws.sqs.set_queue_attributes(
        QueueUrl=aws.queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
    )
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "exit 1", "event_id": "doomed", "retries": 2, "retry_delay": "0s"})
    daemon.wait_for_log(
        "failed for good: its retry cannot run here: the message has been received 1 time(s)"
    )
    assert "maxReceiveCount above retries + 1 (3)" in daemon.log
    wait_until(
        lambda: (
            int(
                aws.sqs.get_queue_attributes(
                    QueueUrl=dlq, AttributeNames=["ApproximateNumberOfMessages"]
                )["Attributes"]["ApproximateNumberOfMessages"]
            )
            == 1
        ),
        what="the message in the dead-letter queue",
    )
    assert invocations(port)["errored"] == 1
    assert daemon.stop() == 0
    [record] = runs(aws, "doomed")
    assert (record.outcome, record.final) == (RunOutcome.ERRORED, True)
    [summary] = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).summaries()
    assert summary.consecutive_failures == 1
    conf = next(tmp_path.glob("config-*.toml"))
    check = cli("status", "-c", str(conf), "--check")
    assert check.returncode == 2, check.stdout + check.stderr
