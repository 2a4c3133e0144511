"""Tests of `sqsjkr check` against moto over HTTP: a good setup, and each broken one.

Permissions are checked with moto enforcing IAM for a user holding the hosts' policy.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from sqsjkr.commands.cli import main
from sqsjkr.local.endpoint import create_queue

from .conftest import MOTO_EXTRAS, REGION, Aws, config_text, free_port
from .iam_calls import daemon_actions

Lines = list[tuple[str, str, str]]

#: The lines of a check whose every DynamoDB call of the daemon's was allowed, in their order.
DAEMON_CALLS_ALLOWED = [
    f"dynamodb:{action} allowed"
    for action in (
        "GetItem",
        "BatchGetItem",
        "Query",
        "PutItem",
        "UpdateItem",
        "TransactWriteItems",
        "DeleteItem",
    )
]


def sqsjkr_check(capsys: pytest.CaptureFixture[str], conf: Path) -> tuple[int, Lines, str]:
    """`sqsjkr check -c conf` in this process: (exit code, (level, subject, text) per check line,
    the summary line)."""
    with pytest.raises(SystemExit) as exited:
        main(["check", "-c", str(conf)])
    out = capsys.readouterr().out
    *checks, last = out.splitlines()
    lines = []
    for line in checks:
        level, _, rest = line.partition(" ")
        subject, _, text = rest.strip().partition(": ")
        lines.append((level, subject, text))
    return int(exited.value.code or 0), lines, last


def texts(lines: Lines, level: str, subject: str) -> list[str]:
    return [text for lvl, subj, text in lines if (lvl, subj) == (level, subject)]


def write_conf(tmp_path: Path, aws: Aws, **lock: str) -> Path:
    text = config_text(aws, stats="stats_port = 0")
    for key, value in lock.items():
        text = text.replace("[lock]\n", f"[lock]\n{key} = {json.dumps(value)}\n")
    path = tmp_path / f"config-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(text)
    return path


def enable_ttl(aws: Aws) -> None:
    aws.dynamodb.update_time_to_live(
        TableName=aws.table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": "Expired"},
    )


@pytest.fixture
def good(aws: Aws) -> Aws:
    """The setup the terraform module makes: a queue with a dead-letter queue, TTL on."""
    name = f"{aws.queue_name}-good"
    enable_ttl(aws)
    return replace(aws, queue_name=name, queue_url=create_queue(aws.sqs, name, dead_letter=True))


def set_redrive(aws: Aws, dlq_url: str, max_receive_count: int = 5) -> None:
    arn = aws.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])
    policy = {
        "deadLetterTargetArn": arn["Attributes"]["QueueArn"],
        "maxReceiveCount": str(max_receive_count),
    }
    aws.sqs.set_queue_attributes(
        QueueUrl=aws.queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
    )


def test_a_good_setup_passes_every_check(
    good: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, lines, last = sqsjkr_check(capsys, write_conf(tmp_path, good))
    assert code == 0, lines
    assert {level for level, _, _ in lines} == {"OK", "SKIP"}, lines
    assert last == f"{len(lines) - 1} OK, 0 WARN, 0 FAIL, 1 SKIP"
    table = f"table {good.table}"
    assert texts(lines, "OK", "credentials") == [
        "arn:aws:sts::123456789012:user/moto (account 123456789012)"
    ]
    assert texts(lines, "OK", f"queue {good.queue_name}") == [
        good.queue_url,
        "retention 4d",
        f"dead-letter queue {good.queue_name}-dlq after 5 receives",
    ]
    assert texts(lines, "OK", table) == [
        "hash key Id (S), range key Type (S)",
        "index TypeExpiredIndex",
        "TTL on Expired",
        *DAEMON_CALLS_ALLOWED,
    ]
    [skipped] = texts(lines, "SKIP", f"queue {good.queue_name}")
    assert "not exercised" in skipped and "sqs:ReceiveMessage" in skipped
    # The probe item is gone again.
    assert good.dynamodb.scan(TableName=good.table, ConsistentRead=True)["Items"] == []


def test_a_missing_table_fails(
    good: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = replace(good, table=f"{good.table}-missing")
    code, lines, last = sqsjkr_check(capsys, write_conf(tmp_path, missing))
    assert code == 1
    table = f"table {missing.table}"
    assert texts(lines, "FAIL", table) == [
        "not found (check [lock] table or --lock-table, and the region)"
    ]
    assert [line for line in lines if line[1] == table and line[0] != "FAIL"] == []
    assert last.endswith("1 FAIL, 1 SKIP")


def test_a_table_without_ttl_is_a_warning(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"{aws.queue_name}-nottl"
    site = replace(aws, queue_name=name, queue_url=create_queue(aws.sqs, name, dead_letter=True))
    code, lines, last = sqsjkr_check(capsys, write_conf(tmp_path, site))
    assert code == 0
    [warning] = texts(lines, "WARN", f"table {site.table}")
    assert warning.startswith("TTL is off: dedupe records, released locks and run records pile up")
    assert f"update-time-to-live --table-name {site.table}" in warning
    assert "1 WARN, 0 FAIL" in last


def test_a_queue_without_redrive_policy_is_a_warning(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    enable_ttl(aws)
    code, lines, last = sqsjkr_check(capsys, write_conf(tmp_path, aws))
    assert code == 0
    [warning] = texts(lines, "WARN", f"queue {aws.queue_name}")
    assert warning.startswith("no RedrivePolicy: malformed messages are logged and dropped")
    assert "1 WARN, 0 FAIL" in last


def test_a_missing_dead_letter_queue_fails(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    enable_ttl(aws)
    dlq_url = aws.sqs.create_queue(QueueName=f"{aws.queue_name}-gone")["QueueUrl"]
    set_redrive(aws, dlq_url)
    aws.sqs.delete_queue(QueueUrl=dlq_url)
    code, lines, _ = sqsjkr_check(capsys, write_conf(tmp_path, aws))
    assert code == 1
    [failure] = texts(lines, "FAIL", f"queue {aws.queue_name}")
    assert failure == (
        f'the dead-letter queue "arn:aws:sqs:{REGION}:123456789012:{aws.queue_name}-gone" named '
        "by the queue's RedrivePolicy does not exist (fix the RedrivePolicy or create the queue)"
    )


@pytest.mark.parametrize(
    ("keys", "found"),
    [
        ([("Id", "HASH", "S")], "hash key Id (S)"),
        ([("Id", "HASH", "N"), ("Type", "RANGE", "S")], "hash key Id (N), range key Type (S)"),
        ([("Type", "HASH", "S"), ("Id", "RANGE", "S")], "hash key Type (S), range key Id (S)"),
    ],
)
def test_a_table_with_other_keys_fails(
    good: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keys: list[tuple[str, str, str]],
    found: str,
) -> None:
    table = f"{good.table}-keys"
    good.dynamodb.create_table(
        TableName=table,
        AttributeDefinitions=[{"AttributeName": n, "AttributeType": t} for n, _, t in keys],
        KeySchema=[{"AttributeName": n, "KeyType": k} for n, k, _ in keys],
        BillingMode="PAY_PER_REQUEST",
    )
    code, lines, _ = sqsjkr_check(capsys, write_conf(tmp_path, replace(good, table=table)))
    assert code == 1
    # Nothing is written to a table of another layout.
    assert [(level, text) for level, subject, text in lines if subject == f"table {table}"] == [
        ("FAIL", f"has {found}: sqsjkr needs hash key Id and range key Type, both strings (S)")
    ]


def test_a_missing_queue_fails_and_its_checks_are_left(
    good: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = replace(good, queue_name=f"{good.queue_name}-missing")
    code, lines, _ = sqsjkr_check(capsys, write_conf(tmp_path, missing))
    assert code == 1
    subject = f"queue {missing.queue_name}"
    assert [(level, text) for level, subj, text in lines if subj == subject] == [
        (
            "FAIL",
            "not found in account 123456789012, region us-east-1 "
            "(check its name in [sqs] or [[queues]], [account] id and region)",
        )
    ]


def test_a_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text('[account]\nid = "123456789012"\nregion = "us-east-1"\n')
    code, lines, last = sqsjkr_check(capsys, conf)
    assert code == 2
    [(level, subject, text)] = lines
    assert (level, subject) == ("FAIL", "config")
    assert "[sqs] queue_name" in text
    assert last == "0 OK, 0 WARN, 1 FAIL, 0 SKIP"


def test_risky_settings_are_warnings(
    aws: Aws, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A short lease, visibility barely over it, short retentions, few receives, no index."""
    name = f"{aws.queue_name}-risky"
    dlq_url = aws.sqs.create_queue(
        QueueName=f"{name}-dlq", Attributes={"MessageRetentionPeriod": "600"}
    )["QueueUrl"]
    url = aws.sqs.create_queue(QueueName=name, Attributes={"MessageRetentionPeriod": "3600"})
    site = replace(aws, queue_name=name, queue_url=url["QueueUrl"], table=f"{aws.table}-noindex")
    set_redrive(site, dlq_url, max_receive_count=1)
    aws.dynamodb.create_table(
        TableName=site.table,
        AttributeDefinitions=[
            {"AttributeName": "Id", "AttributeType": "S"},
            {"AttributeName": "Type", "AttributeType": "S"},
        ],
        KeySchema=[
            {"AttributeName": "Id", "KeyType": "HASH"},
            {"AttributeName": "Type", "KeyType": "RANGE"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    enable_ttl(site)
    conf = write_conf(tmp_path, site, lease="10s")
    conf.write_text(conf.read_text().replace("[sqs]\n", "[sqs]\nvisibility_timeout = 11\n"))
    code, lines, last = sqsjkr_check(capsys, conf)
    assert code == 0, lines
    warnings = [(subject, text.split(":")[0]) for level, subject, text in lines if level == "WARN"]
    assert warnings == [
        ("lease", "[lock] lease 10s is shorter than the smallest safe lease (60s)"),
        ("visibility", "11s, lease 10s + 1s"),
        (f"queue {name}", "retention 1h, under 1d"),
        (f"queue {name}", f"dead-letter queue {name}-dlq after 1 receives"),
        (f"dead-letter queue {name}-dlq", "retention 10m, shorter than the queue's 1h"),
        (f"table {site.table}", "no index TypeExpiredIndex (hash key Type, range key Expired)"),
    ]
    assert "6 WARN, 0 FAIL" in last


def test_an_unreachable_endpoint_fails_naming_it(
    good: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    conf = write_conf(tmp_path, good)
    nowhere = f"http://127.0.0.1:{free_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_SQS", nowhere)
    monkeypatch.setenv("AWS_ENDPOINT_URL_DYNAMODB", nowhere)
    code, lines, _ = sqsjkr_check(capsys, conf)
    assert code == 1
    failures = [(subject, text) for level, subject, text in lines if level == "FAIL"]
    assert [subject for subject, _ in failures] == [
        f"queue {good.queue_name}",
        f"table {good.table}",
    ]
    assert [text for _, text in failures] == [
        f"cannot reach {nowhere}/ (sqs:GetQueueUrl: EndpointConnectionError)",
        f"cannot reach {nowhere}/ (dynamodb:DescribeTable: EndpointConnectionError)",
    ]


# -- permissions, with moto enforcing IAM -------------------------------------------------------


def test_the_hosts_policy_passes_with_warnings_for_what_it_may_not_read(
    good: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    host_user: Callable[[set[str]], None],
) -> None:
    conf = write_conf(tmp_path, good)
    host_user(daemon_actions() | MOTO_EXTRAS)
    code, lines, _ = sqsjkr_check(capsys, conf)
    assert code == 0, lines
    table = f"table {good.table}"
    assert texts(lines, "WARN", table) == [
        "keys by a read only, index and TTL not checked: dynamodb:DescribeTable denied"
    ]
    assert texts(lines, "OK", table) == [
        "hash key Id and range key Type (by dynamodb:GetItem)",
        *DAEMON_CALLS_ALLOWED,
    ]


def test_a_denied_write_fails_naming_its_action(
    good: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    host_user: Callable[[set[str]], None],
) -> None:
    conf = write_conf(tmp_path, good)
    host_user((daemon_actions() | MOTO_EXTRAS) - {"dynamodb:UpdateItem", "dynamodb:PutItem"})
    code, lines, last = sqsjkr_check(capsys, conf)
    assert code == 1
    table = f"table {good.table}"
    assert texts(lines, "FAIL", table) == ["dynamodb:PutItem denied", "dynamodb:UpdateItem denied"]
    # The writes after a denied PutItem find no item: their failed condition shows them allowed.
    assert "dynamodb:DeleteItem allowed" in texts(lines, "OK", table)
    assert "2 FAIL" in last
