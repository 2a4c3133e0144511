"""Claims taken ahead: a receive's plain jobs are claimed in one write on receipt; those a host of
one worker receives beyond it are renewed while they wait, killed or given back unrun; a plain
run is noted late.

Leases are short (2-3 s) so that the heartbeat renews within a second.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.dedupe import THROTTLE_TYPE, ClaimState, DynamoDedupe
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome

from .conftest import REGION, Aws, Start, counted, run_daemon, wait_until
from .faults import Call, Fault, FaultProxy
from .test_crash import WAIT_FOR_RELEASE
from .test_dlq import sqsjkr
from .test_transactions import claims_per_call_of

#: The first job, which holds the one worker until the test touches "release".
HOLDER = {"command": f"touch started; {WAIT_FOR_RELEASE}", "event_id": "holder"}


def lease_until(aws: Aws, message_id: str) -> float | None:
    item = aws.item(message_id, THROTTLE_TYPE)
    return None if item is None or "LeaseUntil" not in item else float(item["LeaseUntil"]["N"])


def claimed_ahead(aws: Aws, message_ids: list[str]) -> bool:
    return all(lease_until(aws, message_id) is not None for message_id in message_ids)


def history(aws: Aws) -> DynamoHistory:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=3600)


def test_jobs_waiting_for_the_worker_are_claimed_renewed_and_given_back_unclaimed_on_stop(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(
        start_daemon, tmp_path, aws, lease="2s", max_concurrent_num=1, shutdown_timeout="1s"
    )
    aws.send(HOLDER)
    wait_until((tmp_path / "started").exists, what="the first job running")
    later = [aws.send({"command": f"touch later-{i}", "event_id": f"later-{i}"}) for i in range(3)]
    # Claimed while the worker is busy: before, a prefetched job was claimed only at its turn.
    wait_until(lambda: claimed_ahead(aws, later), what="the waiting jobs claimed ahead")
    items = [aws.item(message_id, THROTTLE_TYPE) or {} for message_id in later]
    assert len({item["Owner"]["S"] for item in items}) == 3
    assert {item["EventId"]["S"] for item in items} == {"later-0", "later-1", "later-2"}
    # Kept by the heartbeat while they wait, as a running job's claim is.
    first = [lease_until(aws, message_id) or 0 for message_id in later]
    wait_until(
        lambda: all(
            (lease_until(aws, m) or 0) > until for m, until in zip(later, first, strict=True)
        ),
        what="the waiting jobs' claims renewed",
    )
    assert daemon.stop() == 0
    # Given back unrun, their claims given up: the next daemon need not wait out a lease.
    assert [aws.item(message_id, THROTTLE_TYPE) for message_id in later] == [None] * 3
    assert not any((tmp_path / f"later-{i}").exists() for i in range(3))
    assert "LOST" not in daemon.log
    (tmp_path / "release").touch()  # the first job, stopped and given back, runs again too
    again, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=1)
    wait_until(counted(port, succeeded=4), what="the jobs run by the next daemon")
    assert "in progress on another daemon" not in again.log
    assert again.stop() == 0


def test_a_stop_while_a_receives_claim_is_on_the_wire_gives_its_jobs_back_unclaimed(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    """A receive's plain jobs are claimed before their workers take them up: a stop that comes
    while that write is on the wire waits for it, and then gives every job back unrun, its
    claim given up, for the next daemon to run at once."""
    out = tmp_path / "ran"
    sent = [aws.send({"command": f"echo {i} >> {out}", "event_id": f"ev-{i}"}) for i in range(4)]
    with FaultProxy(moto_endpoint) as proxy:
        # Held for less than the read timeout (3 s): answered once, not sent again.
        combined = Fault(
            lambda c: c.action == "TransactWriteItems" and claims_per_call_of(c.json) >= 2,
            hold=2,
            times=1,
        )
        proxy.add(combined)
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, _ = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=4)
        wait_until(lambda: combined.hits == 1, what="the receive's claims on the wire")
        assert daemon.stop() == 0
    assert not out.exists()
    assert [aws.item(message_id, THROTTLE_TYPE) for message_id in sent] == [None] * len(sent)
    assert "LOST" not in daemon.log and " ERROR " not in daemon.log
    aws_env["AWS_ENDPOINT_URL"] = moto_endpoint  # the proxy is gone
    again, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=4)
    wait_until(counted(port, succeeded=len(sent)), what="the jobs run by the next daemon")
    assert "in progress on another daemon" not in again.log
    assert again.stop() == 0
    assert sorted(out.read_text().split()) == ["0", "1", "2", "3"]


def test_kill_of_a_job_claimed_ahead_ends_it_killed_without_running(
    start_daemon: Start, tmp_path: Path, aws: Aws, capsys: pytest.CaptureFixture[str]
) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws, lease="3s", max_concurrent_num=1)
    aws.send(HOLDER)
    wait_until((tmp_path / "started").exists, what="the first job running")
    waiter = aws.send({"command": "touch ran", "event_id": "waiter"})
    wait_until(lambda: claimed_ahead(aws, [waiter]), what="the waiting job claimed ahead")

    code, out, err = sqsjkr(capsys, "kill", waiter, "-c", daemon.conf)

    assert code == 0, err
    assert f'message "{waiter}"' in out
    wait_until(lambda: "kill requested" in daemon.log, what="the heartbeat seeing the kill")
    (tmp_path / "release").touch()
    wait_until(counted(port, succeeded=1, failed=1), what="both jobs done")
    [record] = history(aws).runs("waiter", 10)
    assert (record.outcome, record.started_at) == (RunOutcome.KILLED, None)
    assert not (tmp_path / "ran").exists()
    wait_until(lambda: aws.queue_counts() == (0, 0), what="both messages deleted")
    assert daemon.stop() == 0


def notes_of(proxy: FaultProxy, event_id: str) -> list[Call]:
    """The UpdateItems that note a run of event_id as in progress in its summary."""
    return [
        call
        for call in proxy.calls
        if call.action == "UpdateItem"
        and call.json.get("Key", {}).get("Id") == {"S": event_id}
        and "running" in json.dumps(call.json).lower()
    ]


def test_a_run_claimed_ahead_is_noted_running_only_once_it_has_gone_on_a_while(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=1)
        aws.send(HOLDER)
        wait_until((tmp_path / "started").exists, what="the first job running")
        short = aws.send({"command": "true", "event_id": "short"})
        long = aws.send(
            {"command": "touch long; while [ ! -e go ]; do sleep 0.05; done", "event_id": "long"}
        )
        wait_until(lambda: claimed_ahead(aws, [short, long]), what="both claimed ahead")
        assert history(aws).summary("long") is None  # not shown running while it waits
        (tmp_path / "release").touch()
        wait_until((tmp_path / "long").exists, what="the long job running")

        def shown_running() -> bool:
            summary = history(aws).summary("long")
            return summary is not None and [run.message_id for run in summary.running] == [long]

        wait_until(shown_running, what="the long run shown running")
        (tmp_path / "go").touch()
        wait_until(counted(port, succeeded=3), what="all three done")
        assert daemon.stop() == 0
        # Its note written once; the short run's end said all, and it had none.
        assert len(notes_of(proxy, "long")) == 1 and notes_of(proxy, "short") == []
    summary = history(aws).summary("long")
    assert summary is not None and summary.running == ()


def claim_write_of(proxy: FaultProxy, message_id: str, event_id: str) -> list[str]:
    """What the TransactWriteItems that claimed message_id wrote of its job: each of its items
    keyed by the message or its event, as "Put:throttle", "Update:summary"."""
    for call in proxy.calls:
        items = call.json.get("TransactItems", []) if call.action == "TransactWriteItems" else []
        ours = []
        for item in items:
            [(kind, request)] = item.items()
            key = request.get("Item") or request.get("Key") or {}
            if key.get("Id", {}).get("S") in (message_id, event_id):
                ours.append(f"{kind}:{key['Type']['S']}")
        if "Put:throttle" in ours:
            return ours
    return []


def test_a_plain_jobs_claim_writes_its_item_alone_and_a_locked_ones_notes_its_run(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    """With idle workers (no job waits), a plain job is claimed on receipt as well, and its run
    noted late: its claim is one item, and a short run has no note; a job with a lock is claimed
    by its worker, its run noted in its claim's own write, which takes the lock too."""
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=4)
        plain = aws.send({"command": "true", "event_id": "plain"})
        wait_until(counted(port, succeeded=1), what="the plain job done")
        locked = aws.send({"command": "true", "event_id": "locked", "lock_id": "L"})
        wait_until(counted(port, succeeded=2), what="the locked job done")
        assert daemon.stop() == 0
    assert claim_write_of(proxy, plain, "plain") == ["Put:throttle"]
    assert notes_of(proxy, "plain") == []
    assert sorted(claim_write_of(proxy, locked, "locked")) == ["Put:throttle", "Update:summary"]


def test_claims_ahead_are_one_write_and_a_refused_one_is_left_to_its_worker(aws: Aws) -> None:
    dedupe = DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=600, lease_seconds=30)
    taken = dedupe.claim("m-taken")
    assert taken.state is ClaimState.CLAIMED

    claims = dedupe.claim_ahead({"m-1": "ev-1", "m-2": "ev-2"})

    assert sorted(claims) == ["m-1", "m-2"]
    assert all(claim.state is ClaimState.CLAIMED and not claim.noted for claim in claims.values())
    assert all(claim.lease is not None for claim in claims.values())
    # All or none: the write is refused, and each is claimed at its worker's turn.
    assert dedupe.claim_ahead({"m-3": "ev-3", "m-taken": "ev-t"}) == {}
    assert aws.item("m-3", THROTTLE_TYPE) is None
    assert dedupe.claim("m-3").state is ClaimState.CLAIMED
    assert dedupe.claim("m-taken").state is ClaimState.RUNNING


def test_claims_ahead_whose_answer_was_lost_are_known_as_this_daemons_own(
    aws: Aws, moto_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        client = make_client(make_session(region=REGION), "dynamodb")
        dedupe = DynamoDedupe(client, aws.table, retention_seconds=600, lease_seconds=30)
        lost = proxy.add(Fault(lambda c: c.action == "TransactWriteItems", drop=True, times=1))

        claims = dedupe.claim_ahead({"m-1": "ev-1", "m-2": "ev-2"})

        # Written, its answer lost; botocore's try again finds the claims this write made.
        assert lost.hits == 1
        sent = [c for c in proxy.calls if c.action == "TransactWriteItems"]
        assert len(sent) == 2 and all(claims_per_call_of(c.json) == 2 for c in sent)
    assert sorted(claims) == ["m-1", "m-2"]
    for key, claim in claims.items():
        item = aws.item(key, THROTTLE_TYPE) or {}
        assert claim.lease is not None and item["Owner"]["S"] == claim.lease.owner
    assert time.time() < min(claim.lease.until for claim in claims.values() if claim.lease)


def test_a_message_a_go_daemon_took_or_that_ran_days_ago_is_not_claimed_ahead(aws: Aws) -> None:
    dedupe = DynamoDedupe(aws.dynamodb, aws.table, retention_seconds=600, lease_seconds=30)
    # The Go daemon's throttle item: the message taken, no lease.
    expired = {"N": str(int(time.time()) + 600)}
    aws.dynamodb.put_item(
        TableName=aws.table,
        Item={"Id": {"S": "m-go"}, "Type": {"S": THROTTLE_TYPE}, "Expired": expired},
    )
    ran = dedupe.claim("m-ran")
    assert ran.lease is not None and dedupe.finish(ran.lease)

    for key in ("m-go", "m-ran"):
        # A copy received again (late, or beside a Go daemon): refused ahead, and its worker's
        # own claim finds it finished, so the message is deleted unrun.
        assert dedupe.claim_ahead({key: "ev"}) == {}
        assert dedupe.claim(key).state is ClaimState.FINISHED
