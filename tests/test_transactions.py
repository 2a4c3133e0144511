"""Group commit of DynamoDB transactions against the moto server: writes asked for while a call
is on the wire share the next call, and each caller still gets the answer of its own writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code
from sqsjkr.backends.sqs import MessageSource
from sqsjkr.backends.transactions import MAX_ACTIONS, MAX_COMBINED_BYTES, Transactions
from sqsjkr.daemon.intake import Intake, IntakeSettings
from sqsjkr.daemon.worker import Worker

from .conftest import Aws, Start, counted, run_daemon, wait_until
from .faults import Fault, FaultProxy
from .test_backends import client


class Gated:
    """A DynamoDB client whose first TransactWriteItems waits for open(), so that the test can
    queue writes behind it; it counts the calls and their sizes."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[int] = []  # actions per call, in order

    def open(self) -> None:
        self._gate.set()

    def transact_write_items(self, **request: Any) -> Any:
        first = not self.calls
        self.calls.append(len(request["TransactItems"]))
        if first:
            self.entered.set()
            self._gate.wait(30)
        return self._inner.transact_write_items(**request)


def put(aws: Aws, id_: str, *, new: bool = False, type_: str = "t") -> dict[str, Any]:
    request: dict[str, Any] = {
        "TableName": aws.table,
        "Item": {"Id": {"S": id_}, "Type": {"S": type_}, "V": {"S": "x"}},
    }
    if new:
        request["ConditionExpression"] = "attribute_not_exists(Id)"
    return {"Put": request}


def in_threads(calls: list[Callable[[], None]]) -> tuple[list[threading.Thread], dict[int, Any]]:
    """Start each call in a thread of its own; the dict gets each one's exception or None."""
    answers: dict[int, Any] = {}

    def run(index: int, call: Callable[[], None]) -> None:
        try:
            call()
            answers[index] = None
        except Exception as exc:  # the test looks at it
            answers[index] = exc

    threads = [
        threading.Thread(target=run, args=(i, call), daemon=True) for i, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    return threads, answers


def queue_behind(
    transactions: Transactions, gated: Gated, first: list[dict[str, Any]], later: list[list[Any]]
) -> dict[int, Any]:
    """first on the wire, held; later queued behind it; then everything let through."""
    [head], head_answer = in_threads([lambda: transactions.write(first)])
    assert gated.entered.wait(15)
    threads, answers = in_threads([lambda w=w: transactions.write(w) for w in later])
    wait_until(lambda: transactions.waiting == len(later), what="writes queued")
    gated.open()
    for thread in [head, *threads]:
        thread.join(30)
    assert head_answer == {0: None}
    return answers


def test_writes_asked_for_during_a_call_go_out_together_in_the_next(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=60)
    later = [[put(aws, f"job-{i}"), put(aws, f"job-{i}", type_="u")] for i in range(5)]
    answers = queue_behind(transactions, gated, [put(aws, "first")], later)
    assert answers == dict.fromkeys(range(5))
    assert gated.calls == [1, 10]  # one call for the five waiting writers
    assert aws.item("first", "t") is not None
    assert all(aws.item(f"job-{i}", type_) for i in range(5) for type_ in ("t", "u"))


def test_a_failed_condition_in_a_combined_call_fails_only_its_own_writer(aws: Aws) -> None:
    aws.dynamodb.put_item(TableName=aws.table, Item={"Id": {"S": "taken"}, "Type": {"S": "t"}})
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=60)
    later = [[put(aws, "a", new=True)], [put(aws, "taken", new=True)], [put(aws, "b", new=True)]]
    answers = queue_behind(transactions, gated, [put(aws, "first")], later)
    assert answers[0] is None and answers[2] is None
    assert isinstance(answers[1], ClientError)
    assert error_code(answers[1]) == "TransactionCanceledException"
    # Its own cancellation: one reason, for its one write.
    [reason] = answers[1].response["CancellationReasons"]
    assert reason["Code"] == "ConditionalCheckFailed"
    assert aws.item("a", "t") is not None and aws.item("b", "t") is not None
    # Combined first; then the two it did not refuse together again, and the refused one alone.
    assert gated.calls[:2] == [1, 3] and sorted(gated.calls[2:]) == [1, 2]


def test_writes_to_the_same_item_are_never_in_one_call(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=60)
    later = [[put(aws, "same")], [put(aws, "other")], [put(aws, "same")]]
    answers = queue_behind(transactions, gated, [put(aws, "first")], later)
    assert answers == dict.fromkeys(range(3))
    # DynamoDB refuses two writes of one item in a transaction: the second "same" waits.
    assert gated.calls == [1, 2, 1]


def test_a_call_holds_at_most_dynamodbs_limit_of_actions(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=60)
    later = [[put(aws, f"n-{i}-{j}") for j in range(30)] for i in range(4)]
    answers = queue_behind(transactions, gated, [put(aws, "first")], later)
    assert answers == dict.fromkeys(range(4))
    assert gated.calls[0] == 1 and max(gated.calls) <= MAX_ACTIONS
    assert sum(gated.calls) == 121


def test_big_writes_share_a_call_only_up_to_the_combined_size(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=60)
    # Run records with a lot of output (within DynamoDB's 400 KB an item): three fit in
    # MAX_COMBINED_BYTES, four do not.
    output = "o" * (MAX_COMBINED_BYTES * 2 // 7)
    big = [put(aws, f"big-{i}") for i in range(4)]
    for write in big:
        write["Put"]["Item"]["V"] = {"S": output}
    answers = queue_behind(transactions, gated, [put(aws, "first")], [[w] for w in big])
    assert answers == dict.fromkeys(range(4))
    assert gated.calls == [1, 3, 1]
    assert all(aws.item(f"big-{i}", "t") is not None for i in range(4))


def test_an_error_of_the_store_reaches_every_writer_of_the_call(aws: Aws) -> None:
    transactions = Transactions(client("dynamodb"))
    missing = {
        "Put": {"TableName": "no-such-table", "Item": {"Id": {"S": "a"}, "Type": {"S": "t"}}}
    }
    with pytest.raises(ClientError) as raised:
        transactions.write([missing])
    assert error_code(raised.value) == "ResourceNotFoundException"
    assert transactions.waiting == 0
    # And the next write goes through: a failed call leaves no one stuck as the sender.
    transactions.write([put(aws, "after")])
    assert aws.item("after", "t") is not None


def test_a_write_behind_a_hung_call_goes_alone_after_max_wait(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    transactions = Transactions(gated, max_wait=0.2)
    [head], head_answer = in_threads([lambda: transactions.write([put(aws, "first")])])
    assert gated.entered.wait(15)
    [later], answers = in_threads([lambda: transactions.write([put(aws, "later")])])
    # Done while the first call still hangs: it did not wait for it.
    later.join(15)
    assert answers == {0: None} and gated.calls == [1, 1] and head.is_alive()
    assert aws.item("later", "t") is not None and aws.item("first", "t") is None
    gated.open()
    head.join(15)
    assert head_answer == {0: None} and aws.item("first", "t") is not None


def test_a_lingering_write_rides_the_next_writers_call(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    gated.open()
    transactions = Transactions(gated, max_linger=60)
    # A run's end, written behind its worker: it waits for the next claim rather than send.
    [behind], behind_answer = in_threads([lambda: transactions.write([put(aws, "end")], linger=60)])
    wait_until(lambda: transactions.waiting == 1, what="the lingering write queued")
    assert gated.calls == []
    transactions.write([put(aws, "claim")])
    behind.join(15)
    assert behind_answer == {0: None}
    assert gated.calls == [2]  # one call for both
    assert aws.item("end", "t") is not None and aws.item("claim", "t") is not None


def test_a_lingering_write_that_no_writer_takes_goes_alone_after_its_linger(aws: Aws) -> None:
    gated = Gated(client("dynamodb"))
    gated.open()
    transactions = Transactions(gated, max_linger=0.3)
    started = time.monotonic()
    transactions.write([put(aws, "end")], linger=60)  # capped at max_linger
    assert 0.3 <= time.monotonic() - started < 10
    assert gated.calls == [1] and transactions.waiting == 0


def claims_per_call_of(request: dict[str, Any]) -> int:
    """How many dedupe claims (Puts of throttle items) a TransactWriteItems request makes."""
    return sum(
        w.get("Put", {}).get("Item", {}).get("Type") == {"S": "throttle"}
        for w in request["TransactItems"]
    )


def claims_per_call(proxy: FaultProxy) -> list[int]:
    """claims_per_call_of each TransactWriteItems the daemon made, in order."""
    return [claims_per_call_of(c.json) for c in proxy.calls if c.action == "TransactWriteItems"]


def test_the_daemon_combines_the_claims_of_a_burst_and_a_duplicate_fails_only_itself(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    out = tmp_path / "ran"
    ids = [aws.send({"command": f"echo {i} >> {out}", "event_id": f"ev-{i}"}) for i in range(5)]
    # The third message's job has already run: its claim must fail alone, and it is not run again.
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": ids[2]}, "Type": {"S": "throttle"}, "Expired": {"N": "9999999999"}},
    )
    with FaultProxy(moto_endpoint) as proxy:
        # The first call's answer is late, so the other workers' claims wait behind it.
        proxy.add(Fault(lambda c: c.action == "TransactWriteItems", hold=0.5, times=1))
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=5)
        wait_until(counted(port, succeeded=4, duplicates=1), what="four runs and the duplicate")
        assert sorted(out.read_text().split()) == ["0", "1", "3", "4"]
        assert max(claims_per_call(proxy)) >= 2
        assert daemon.stop() == 0
    wait_until(lambda: aws.queue_counts() == (0, 0), what="every message deleted")


def test_a_combined_call_whose_answer_is_lost_after_it_took_effect_runs_each_job_once(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    out = tmp_path / "ran"
    for i in range(5):
        aws.send({"command": f"echo {i} >> {out}", "event_id": f"ev-{i}"})
    with FaultProxy(moto_endpoint) as proxy:
        transact = "TransactWriteItems"
        # The combined claims (a receive's, claimed on receipt) take effect, and their answer
        # outlasts the read timeout (3 s): botocore sends the call again, and the daemon must
        # see its own claims in what it finds.
        combined = Fault(
            lambda c: c.action == transact and claims_per_call_of(c.json) >= 2, hold=4, times=1
        )
        proxy.add(combined)
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=5)
        wait_until(counted(port, succeeded=5), timeout=30, what="five runs")
        # Held once, then sent again by botocore (the same request: its idempotency token).
        assert combined.hits == 1 and sum(n >= 2 for n in claims_per_call(proxy)) >= 2
        assert sorted(out.read_text().split()) == ["0", "1", "2", "3", "4"]
        assert "LOST" not in daemon.log and " ERROR " not in daemon.log
        assert daemon.stop() == 0
    wait_until(lambda: aws.queue_counts() == (0, 0), what="every message deleted")


def ends_and_claims(request: dict[str, Any]) -> tuple[int, int]:
    """How many claims' finishes (Updates of throttle items) and claims a request makes."""
    ends = sum(
        w.get("Update", {}).get("Key", {}).get("Type") == {"S": "throttle"}
        for w in request["TransactItems"]
    )
    return ends, claims_per_call_of(request)


def one_worker_calls(
    jobs: int,
    prefetch: int,
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    aws_env: dict[str, str],
    moto_endpoint: str,
) -> list[tuple[int, int]]:
    """Run jobs on a daemon of one worker, its next ones received ahead (prefetch), through a
    proxy: each job ran once, and its claim and its end were written once each. Returns the
    ends and claims of each TransactWriteItems call."""
    out = tmp_path / "ran"
    for i in range(jobs):
        aws.send({"command": f"echo {i} >> {out}", "event_id": f"ev-{i}"})
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(
            start_daemon, tmp_path, aws, max_concurrent_num=1, prefetch=prefetch
        )
        wait_until(counted(port, succeeded=jobs), what=f"{jobs} runs")
        assert daemon.stop() == 0
        calls = [ends_and_claims(c.json) for c in proxy.calls if c.action == "TransactWriteItems"]
    assert sorted(map(int, out.read_text().split())) == list(range(jobs))
    assert sum(ends for ends, _ in calls) == jobs and sum(claims for _, claims in calls) == jobs
    wait_until(lambda: aws.queue_counts() == (0, 0), what="every message deleted")
    return calls


def test_one_workers_jobs_received_ahead_are_claimed_together_and_their_ends_share_calls(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    # Its next jobs received ahead: claimed in one write on receipt (daemon/ahead.py), and each
    # run's end written behind it, sharing a call with the next ends or claims.
    calls = one_worker_calls(4, 3, start_daemon, tmp_path, aws, aws_env, moto_endpoint)
    assert max(claims for _, claims in calls) >= 2, calls
    # Fewer calls than a claim and an end per job, each of its own. How many ends share a call
    # depends on timing (a loaded host misses a 0.1 s linger): benchmarks/ measure it.
    assert len(calls) < 8, calls


def test_one_worker_with_batches_of_two_writes_each_end_and_claim_once_and_runs_each_job_once(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    # Batches of two: the second job of each rides its claim on the first's end; the second's
    # end has no job waiting, but the receive came back full, so it waits for the claim of the
    # next batch's first job. How many ends shared a claim's call depends on timing (a loaded
    # host misses a 0.1 s linger): benchmarks/aws_calls.py measures it; the decision to wait is
    # tested below.
    one_worker_calls(12, 1, start_daemon, tmp_path, aws, aws_env, moto_endpoint)


def test_a_full_receive_says_a_claim_is_coming_and_a_short_or_failed_one_does_not() -> None:
    """The end of a batch's last run waits (its linger) for the next batch's first claim only
    after a full receive: the receive loop then receives again at once."""
    settings = IntakeSettings(name="q", max_workers=1)
    intake = Intake(cast(MessageSource, object()), settings, cast(Worker, object()), None)
    assert not intake.claims_coming()
    intake.received(True)
    assert intake.claims_coming()
    intake.received(False)
    assert not intake.claims_coming()
