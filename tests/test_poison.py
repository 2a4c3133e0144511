"""Poison messages (issue 30, items 5 and 8): bodies nested thousands deep, firing times past
Python's dates, schedules too long for a claim's key, rate()s whose next firing overflows and a
pipeline step's malformed job (issue 36) are refused by the contract with a reason naming the
field; every reader of letters still answers.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from sqsjkr.backends.scheduler import job_message
from sqsjkr.contract import safe_json
from sqsjkr.contract.firing import MAX_SCHEDULE_BYTES
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.limits import MAX_JSON_DEPTH, MAX_KEY_BYTES
from sqsjkr.contract.run import RunOutcome
from sqsjkr.crontab.fires import next_firing
from sqsjkr.errors import InvalidJobError
from sqsjkr.fleet.dead_letters import DeadLetter
from sqsjkr.fleet.send import MINTED_FIELDS, by_hand
from tests.conftest import Cli, Start, wait_until
from tests.web_fleet import WebFleet, make_fleet, record

NOW = "2030-01-01T00:00:00Z"
DEEP = "[" * 50_000 + "]" * 50_000


def job(firing: Any, event_id: str = "poison") -> str:
    return json.dumps({"event_id": event_id, "command": "true", "firing": firing})


#: Each poison body, and the start of the reason it is refused with.
POISON = {
    "deep": (
        job(None).replace("null", DEEP),
        f"body nests deeper than {MAX_JSON_DEPTH} arrays and objects",
    ),
    "past 9999": (
        job({"time": "9999-12-31T23:59:59-01:00", "schedule": "sqsjkr-poison"}),
        'field "firing.time": is 9999-12-31T23:59:59-01:00: must lie from 1970-01-01',
    ),
    "long schedule": (
        job({"time": NOW, "schedule": "s" * 2040}),
        f'field "firing.schedule": must be at most {MAX_SCHEDULE_BYTES} bytes, got 2040',
    ),
    "rate overflow": (
        job({"time": NOW, "schedule": "sqsjkr-poison", "expression": "rate(100000000 days)"}),
        'field "firing.expression": rate(100000000 days) repeats less often than every 3650 days',
    ),
    # Refused with its root, before anything runs: not once the root has run and sent the step.
    "bad step": (
        json.dumps(
            {
                "event_id": "poison",
                "command": "true",
                "pipeline": {
                    "name": "poison",
                    "root": "a",
                    "steps": {
                        "a": {},
                        "b": {"after": ["a"], "job": {"command": "x", "timeout": "soon"}},
                    },
                },
            }
        ),
        'field "pipeline.steps.b.job.timeout": invalid duration "soon"',
    ),
}


# -- the contract ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(POISON))
def test_the_contract_refuses_each_poison_naming_its_field(name: str) -> None:
    body, reason = POISON[name]
    with pytest.raises(InvalidJobError) as refused:
        parse_job(body, message_id="m", sent_at=0.0)
    assert str(refused.value).startswith(reason)


def test_what_lies_within_the_bounds_is_taken() -> None:
    longest = "s" * MAX_SCHEDULE_BYTES
    firing = {"time": "8999-12-31T23:59:59Z", "schedule": longest, "expression": "rate(3650 days)"}
    parsed = parse_job(job(firing), message_id="m", sent_at=0.0).firing
    assert parsed is not None
    assert len(parsed.key.encode()) <= MAX_KEY_BYTES  # the claim's key fits DynamoDB's
    assert next_firing("rate(3650 days)", None, parsed.at) is not None  # and the next firing
    nested = json.dumps({"command": "true", "x": json.loads("[" * 63 + "]" * 63)})
    parse_job(nested, message_id="m", sent_at=0.0)


def test_the_safe_decoder_counts_no_bracket_inside_a_string() -> None:
    text = json.dumps({"a": "[[[[{{{{" * 100, "b": [1, {"c": '\\"]]]'}]})
    assert not safe_json.too_deep(text, 3) and safe_json.too_deep(text, 2)
    assert safe_json.loads(text)["b"][1]["c"] == '\\"]]]'
    for bad, why in (("[" * 100_000, "nests deeper"), ("[NaN]", "is not JSON: NaN")):
        with pytest.raises(safe_json.JsonError, match=why):
            safe_json.loads(bad)


def test_a_next_firing_past_the_dates_never_stops_a_record() -> None:
    # Defence in depth below the contract: what it refuses, computed anyway, is no next firing.
    assert next_firing("rate(100000000 days)", None, 1.9e9) is None
    assert next_firing("rate(1 day)", None, 253402300000.0) is None


def test_send_body_refuses_each_poison(cli: Cli) -> None:
    for body, reason in POISON.values():
        refused = cli("send", "--body", body, "-c", "/nonexistent.toml")
        assert refused.returncode == 2, refused.stderr
        # A sender may not set what the fleet mints: that refusal comes first.
        try:
            fields = safe_json.loads(body)
        except safe_json.JsonError:
            fields = None
        minted = [n for n in MINTED_FIELDS if isinstance(fields, dict) and n in fields]
        if minted:
            reason = f'field "{minted[0]}": is set by the fleet\'s daemons, not by a sender'
        assert f"invalid job, nothing sent: {reason}" in refused.stderr


def test_a_dead_letters_repr_masks_its_body() -> None:
    body = json.dumps({"command": "true", "envs": {"A": "env-secret"}, "token": "tok-secret"})
    letter = DeadLetter("m", "handle-secret", body, {"SentTimestamp": "0"})
    shown = repr(letter)
    assert "DeadLetter(message_id='m'" in shown
    for secret in ("env-secret", "tok-secret", "handle-secret"):
        assert secret not in shown


# -- every reader, after a real daemon dead-lettered them ---------------------------------------


def test_poison_is_dead_lettered_with_its_reason_and_every_reader_answers(
    aws_env: dict[str, str], tmp_path: Path, start_daemon: Start, cli: Cli
) -> None:
    fleet = make_fleet(tmp_path)
    _schedule(fleet)
    # A run of its own: the page of an event that never ran is another item's (issue 30, 10).
    fleet.history().finished(record("poison", time.time() - 60, RunOutcome.SUCCEEDED))
    daemon = start_daemon("run", "-c", str(fleet.conf))
    for body, _ in POISON.values():
        fleet.sqs.send_message(QueueUrl=fleet.queue_url, MessageBody=body)
    letters = wait_until(lambda: _letters(fleet, len(POISON)), 30, "the poison dead-lettered")
    reasons = sorted(letters.values())
    for _, reason in POISON.values():
        assert any(r.startswith(reason) for r in reasons), (reason, reasons)
    assert "Traceback" not in daemon.log and daemon.proc.poll() is None

    conf = str(fleet.conf)
    for args in (("firings", "poison"), ("dlq", "list"), ("dlq", "list", "--json")):
        answered = cli(*args, "-c", conf)
        assert answered.returncode == 0, (args, answered.stderr)
    for message_id in letters:
        shown = cli("dlq", "show", message_id, "-c", conf)
        assert shown.returncode == 0 and "error:" in shown.stdout, shown.stderr
    served = fleet.serve()
    try:
        for path in ("/event?id=poison", "/dead-letters"):
            page = requests.get(served.url + path.lstrip("/"), timeout=30)
            assert page.status_code == 200, (path, page.text[:500])
    finally:
        served.close()


def _schedule(fleet: WebFleet) -> None:
    arn = fleet.sqs.get_queue_attributes(QueueUrl=fleet.queue_url, AttributeNames=["QueueArn"])
    target = {
        "Arn": arn["Attributes"]["QueueArn"],
        "RoleArn": "arn:aws:iam::123456789012:role/sqsjkr-scheduler",
        "Input": job({"time": "<aws.scheduler.scheduled-time>", "schedule": "sqsjkr-poison"}),
    }
    boto3.client("scheduler").create_schedule(
        Name="sqsjkr-poison",
        GroupName=fleet.table,
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )


def _letters(fleet: WebFleet, count: int) -> dict[str, str] | None:
    """The dead letters' reasons by DLQ message id, once there are count of them."""
    found: dict[str, str] = {}
    deadline = time.monotonic() + 5
    while len(found) < count and time.monotonic() < deadline:
        got = fleet.sqs.receive_message(
            QueueUrl=fleet.dlq_url,
            MaxNumberOfMessages=10,
            VisibilityTimeout=0,
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        if not got:
            break
        for raw in got:
            reason = raw.get("MessageAttributes", {}).get("sqsjkr_error", {})
            found[raw["MessageId"]] = reason.get("StringValue", "(moved by SQS, no reason)")
    return found if len(found) == count else None


def test_a_schedules_input_nested_thousands_deep_is_no_job_message() -> None:
    # Every schedule read goes through this: one hostile input must not fail them all.
    assert job_message('{"command": "true", "x": ' + DEEP + "}") == {}
    assert job_message('{"command": "true"}') == {"command": "true"}


def test_a_send_of_a_deep_body_is_refused_not_a_recursion_error() -> None:
    # Fleet.send marks a body sent by hand before the parser sees it: that read is safe too.
    deep = job(None).replace("null", DEEP)
    assert by_hand(deep) == deep
    with pytest.raises(InvalidJobError, match="^body nests deeper"):
        parse_job(by_hand(deep), message_id="m", sent_at=0.0)
