"""The audit trail: the store (in memory and in DynamoDB through one protocol test), an item per
state-changing command with who, what, why and when, `sqsjkr audit`, and a refused action."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sqsjkr.backends.audit import (
    AUDIT_KEEP_SECONDS,
    AuditEntry,
    AuditTrail,
    DynamoAudit,
    MemoryAudit,
)
from sqsjkr.backends.pause import DynamoPauses
from sqsjkr.contract.when import one_time_at
from sqsjkr.fleet.audit import Actor, Auditor
from sqsjkr.fleet.send import audit_send

from .conftest import Aws, config_text
from .faults import Fault, FaultProxy
from .test_dlq import dead_letter, dlq_url, sqsjkr
from .test_dlq import site as site  # noqa: F401 - the fixture

Run = Callable[..., tuple[int, str, str]]
JOB = '{"command": "echo hi", "event_id": "nightly"}'


def entry(at: float, action: str = "pause", target: str = "nightly") -> AuditEntry:
    return AuditEntry(at, action, target, "why", "alice@ops1", "arn:aws:iam::1:user/alice")


@pytest.fixture(params=["memory", "dynamodb"])
def trail(request: pytest.FixtureRequest) -> AuditTrail:
    if request.param == "memory":
        return MemoryAudit()
    aws: Aws = request.getfixturevalue("aws")
    return DynamoAudit(aws.dynamodb, aws.table)


def test_a_trail_lists_entries_since_a_time_newest_first(trail: AuditTrail) -> None:
    old, middle, new = entry(1000.0, "pause"), entry(2000.0, "resume"), entry(3000.0, "kill")
    for made in (middle, new, old):
        trail.write(made)
    assert trail.entries(0) == [new, middle, old]
    assert trail.entries(2000.0) == [new, middle]


def test_an_entry_is_amended_in_place_once_its_action_is_done(trail: AuditTrail) -> None:
    first, other = entry(1000.0, "send"), entry(2000.0, "pause")
    trail.write(first)
    trail.write(other)
    sent = replace(first, detail="echo hi to queue q, message m-1")
    trail.amend(first, sent)
    assert trail.entries(0) == [other, sent]


def test_a_dynamodb_entry_expires_400_days_after_it_was_written(aws: Aws) -> None:
    DynamoAudit(aws.dynamodb, aws.table).write(entry(1_750_000_000.5))
    [item] = aws.dynamodb.scan(TableName=aws.table)["Items"]
    assert item["Type"] == {"S": "audit"}
    assert (
        int(item["Expired"]["N"])
        == 1_750_000_000 + AUDIT_KEEP_SECONDS
        == 1_750_000_000 + 400 * 86400
    )


@pytest.fixture
def cli(site: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Run:  # noqa: F811
    """`sqsjkr COMMAND... -c CONF ARGS` in this process: (exit code, stdout, stderr)."""
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(site, stats="stats_port = 0"))

    def run(*args: str) -> tuple[int, str, str]:
        split = args.index("--") if "--" in args else len(args)
        return sqsjkr(capsys, *args[:split], "-c", str(conf), *args[split + 1 :])

    return run


def audit_items(cli: Run) -> list[dict[str, str]]:
    code, out, err = cli("audit", "--", "--json")
    assert (code, err) == (0, "")
    return list(json.loads(out))


def test_every_state_change_writes_who_what_why_and_when_first(site: Aws, cli: Run) -> None:  # noqa: F811
    letter = dead_letter(site, JOB)
    other = dead_letter(site, JOB)
    done = [
        cli("pause", "--", "nightly", "--reason", "db move"),
        cli("resume", "--", "nightly", "--reason", "db moved"),
        cli("unlock", "--", "nightly-lock", "--reason", "host gone"),
        cli("send", "--", "--command", "echo hi", "--event-id", "nightly", "--reason", "rerun"),
        cli("dlq", "redrive", "--", letter, "--reason", "fixed"),
        cli("dlq", "delete", "--", other, "--reason", "junk"),
        cli("dlq", "purge", "--", "--yes", "--reason", "clean"),
        cli("status", "--", "--forget", "gone", "--reason", "retired"),
    ]
    # No such lock, no such event: nothing removed, and the asking is in the trail all the same
    # (the unlock marked refused).
    assert [code for code, _, _ in done] == [0, 0, 1, 0, 0, 0, 0, 1]
    items = audit_items(cli)
    assert [(i["action"], i["target"], i["reason"]) for i in items[1:]] == [
        ("dlq purge", f"{site.queue_name}-dlq", "clean"),
        ("dlq delete", other, "junk"),
        ("dlq redrive", letter, "fixed"),
        ("send", "nightly", "rerun"),
        ("unlock (refused)", "lock nightly-lock", "host gone"),
        ("resume", "nightly", "db moved"),
        ("pause", "nightly", "db move"),
    ]
    assert (items[0]["action"], items[0]["target"], items[0]["reason"]) == (
        "forget (refused)",
        "gone",
        "retired",
    )
    items = items[1:]
    for item in items:
        user, _, host = item["user"].partition("@")
        assert user and host
        assert item["identity"].startswith("arn:aws:")  # what STS said of the caller
        assert item["at"][:4].isdigit() and item["at"][-6] in "+-"  # ISO 8601 with an offset
    sent = done[3][1].strip()  # the message id send printed
    assert items[3]["detail"] == f"echo hi to queue {site.queue_name}, message {sent}"
    assert items[6]["detail"] == "until resumed"


def test_a_send_without_an_event_id_is_audited_as_one_off_and_names_its_message(
    site: Aws,
    cli: Run,  # noqa: F811
) -> None:
    code, out, err = cli("send", "--", "--command", "echo once", "--reason", "just once")
    assert code == 0, err
    [item] = audit_items(cli)
    assert (item["action"], item["target"], item["reason"]) == ("send", "(one-off)", "just once")
    assert item["detail"] == f"echo once to queue {site.queue_name}, message {out.strip()}"


def test_audit_lists_a_table_and_honours_since(site: Aws, cli: Run) -> None:  # noqa: F811
    assert cli("pause", "--", "nightly", "--reason", "db move")[0] == 0
    code, out, err = cli("audit")
    header, row = out.splitlines()
    assert header.split() == ["when", "action", "target", "user", "identity", "reason", "detail"]
    assert "pause" in row and "db move" in row and "until resumed" in row
    trail = DynamoAudit(site.dynamodb, site.table)
    trail.write(entry(1_000_000.0, "kill", "ancient"))  # long before --since
    assert [i["target"] for i in audit_items(cli)] == ["nightly"]
    code, out, err = cli("audit", "--", "--since", "soon")
    assert code == 2 and "--since" in err and '"soon"' in err


@pytest.fixture
def failing_audit(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultProxy]:
    with FaultProxy(moto_endpoint) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        proxy.add(
            Fault(
                lambda call: call.action == "PutItem" and call.item_type() == "audit",
                error=(400, "AccessDeniedException"),
            )
        )
        yield proxy


def test_an_action_whose_audit_item_cannot_be_written_is_refused(
    site: Aws,
    cli: Run,
    failing_audit: FaultProxy,  # noqa: F811
) -> None:
    code, out, err = cli("pause", "--", "nightly", "--reason", "db move")
    assert code == 1 and out == ""
    assert err.startswith('sqsjkr: error: pause "nightly" not done: its audit item could not')
    assert "AccessDeniedException" in err
    assert DynamoPauses(site.dynamodb, site.table).pauses() == []
    code, out, err = cli("send", "--", "--command", "echo hi", "--event-id", "nightly")
    assert code == 1 and out == "" and "not done" in err
    assert site.queue_counts() == (0, 0)
    assert dlq_url(site)  # the dead-letter queue is there, and untouched below
    letter = dead_letter(site, JOB)
    code, _, err = cli("dlq", "redrive", "--", letter)
    assert code == 1 and "not done" in err
    assert site.queue_counts() == (0, 0)


def test_an_action_is_refused_when_sts_cannot_name_the_caller(
    site: Aws,
    cli: Run,
    monkeypatch: pytest.MonkeyPatch,  # noqa: F811
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", "http://127.0.0.1:9")  # nothing listens there
    code, out, err = cli("pause", "--", "nightly")
    assert code == 1 and out == ""
    assert err.startswith("sqsjkr: error: not done: the caller's AWS identity could not be read")
    assert DynamoPauses(site.dynamodb, site.table).pauses() == []


# -- refused and forced actions, and times (issue 30, item 18) ------------------------------------


def test_a_refused_action_is_recorded_as_refused_not_as_done(site: Aws, cli: Run) -> None:  # noqa: F811
    assert cli("pause", "--", "nightly", "--reason", "db move")[0] == 0
    assert cli("resume", "--", "nightly", "weekly", "--reason", "moved")[0] == 0
    assert cli("resume", "--", "nightly", "--reason", "again")[0] == 1
    assert cli("resume", "--", "--all", "--reason", "all again")[0] == 1
    assert cli("unlock", "--", "no-such-lock", "--reason", "gone")[0] == 1
    assert cli("dlq", "redrive", "--", "no-such-letter", "--reason", "retry")[0] == 1
    assert cli("dlq", "delete", "--", "no-such-letter", "--reason", "junk")[0] == 1
    items = audit_items(cli)
    none_found = f"none of them was in dead-letter queue {site.queue_name}-dlq"
    assert [(i["action"], i["target"], i["detail"]) for i in items[:6]] == [
        ("dlq delete (refused)", "no-such-letter", none_found),
        ("dlq redrive (refused)", "no-such-letter", none_found),
        ("unlock (refused)", "lock no-such-lock", "none was held"),
        ("resume (refused)", "every pause", "nothing was paused"),
        ("resume (refused)", "nightly", "nothing was paused"),
        ("resume", "nightly, weekly", "no pause of weekly"),
    ]


def test_a_forced_action_says_so(site: Aws, cli: Run) -> None:  # noqa: F811
    lease = {"Id": {"S": "held-lock"}, "Type": {"S": "lock"}, "EventId": {"S": "nightly"}}
    lease["Owner"] = {"S": "host-b:1:x"}
    lease["LeaseUntil"] = {"N": str(int(time.time()) + 3600)}
    site.dynamodb.put_item(TableName=site.table, Item=lease)
    assert cli("unlock", "--", "held-lock", "--reason", "stuck")[0] == 1  # a live lease
    assert cli("unlock", "--", "held-lock", "--force", "--reason", "stuck")[0] == 0
    letter = dead_letter(site, '{"command": ""}')  # malformed: moved only with --force
    assert cli("dlq", "redrive", "--", letter, "--force", "--reason", "retry")[0] == 0
    items = audit_items(cli)
    assert [(i["action"], i["detail"]) for i in items[:2]] == [
        ("dlq redrive", f"forced: {site.queue_name}-dlq to {site.queue_name}"),
        ("unlock", "forced"),
    ]
    assert items[2]["action"] == "unlock (refused)"
    assert items[2]["detail"].startswith("its lease lives (")


def test_a_forced_items_amended_detail_stays_forced() -> None:
    trail = MemoryAudit()
    audit = Auditor(trail, Actor("alice@ops1", "arn:aws:iam::1:user/alice"))
    entry = audit("trigger", "nightly", detail="schedule s to queue q", force=True)
    assert entry.detail == "forced: schedule s to queue q"
    assert audit.amend(entry, "schedule s to queue q, message m-1") is None
    [kept] = trail.entries(0)
    assert kept.detail == "forced: schedule s to queue q, message m-1"


def test_a_send_at_is_audited_with_its_time_in_iso() -> None:
    when = one_time_at("2030-01-31 09:30", "Asia/Tokyo", datetime(2030, 1, 1, tzinfo=timezone.utc))
    trail = MemoryAudit()
    audit = Auditor(trail, Actor("alice@ops1", "arn:aws:iam::1:user/alice"))
    audit_send(audit, '{"command": "echo hi", "event_id": "e"}', "jobs", "later", when)
    [kept] = trail.entries(0)
    assert kept.detail == "echo hi to queue jobs at 2030-01-31T09:30:00+09:00"
