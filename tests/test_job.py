"""Tests of sqsjkr.job: the message contract shared with the Go daemon.

Every parse_job error must name the field at fault, so operators can fix the sender.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator

import pytest

from sqsjkr.contract.duration import Duration, parse_duration
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.job import Job, build_body, is_expired, parse_job, trigger_line
from sqsjkr.errors import InvalidJobError

SENT_AT = 1_614_600_000.123  # 2021-03-01 12:00:00.123 UTC


def parse(fields: object, message_id: str = "msg-1") -> Job:
    return parse_job(json.dumps(fields), message_id=message_id, sent_at=SENT_AT)


def parse_error(fields: object) -> str:
    with pytest.raises(InvalidJobError) as caught:
        parse(fields)
    return str(caught.value)


@pytest.fixture
def local_tz() -> Iterator[None]:
    """Run the test with TZ set, restoring the process's zone afterwards."""
    saved = os.environ.get("TZ")
    yield
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def set_tz(zone: str) -> None:
    os.environ["TZ"] = zone
    time.tzset()


# --- parse_job: the whole message ---


def test_minimal_job_gets_defaults() -> None:
    job = parse({"command": "echo hi"})
    assert job == Job(
        message_id="msg-1",
        command="echo hi",
        event_id="msg-1",
        envs={},
        lock_id=None,
        life_time=None,
        abort_if_locked=False,
        disable_life_time_trigger=False,
        sent_at=SENT_AT,
    )


def test_full_job() -> None:
    job = parse(
        {
            "command": "sh ./run.sh",
            "envs": {"FOO": "bar", "EMPTY": ""},
            "event_id": "nightly",
            "lock_id": "db",
            "life_time": "1h30m",
            "abort_if_locked": True,
            "disable_life_time_trigger": True,
        }
    )
    assert job.command == "sh ./run.sh"
    assert job.envs == {"FOO": "bar", "EMPTY": ""}
    assert job.event_id == "nightly"
    assert job.lock_id == "db"
    assert job.life_time == Duration(90 * 60 * 10**9)
    assert job.abort_if_locked is True
    assert job.disable_life_time_trigger is True
    assert job.sent_at == SENT_AT


def test_accepts_bytes_body() -> None:
    job = parse_job(b'{"command":"echo \xc3\xa9"}', message_id="m", sent_at=0.0)
    assert job.command == "echo \u00e9"


def test_unknown_fields_are_ignored() -> None:
    job = parse({"command": "true", "priority": 3, "future": {"x": [1]}})
    assert job.command == "true"


@pytest.mark.parametrize(
    "field",
    [
        "envs",
        "env",
        "event_id",
        "lock_id",
        "life_time",
        "abort_if_locked",
        "disable_life_time_trigger",
    ],
)
def test_null_optional_field_is_absent(field: str) -> None:
    assert parse({"command": "true", field: None}) == parse({"command": "true"})


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "body is not JSON: Expecting value at line 1 column 1"),
        ('{"a"', "body is not JSON: Expecting ':' delimiter at line 1 column 5"),
        ('{"command": "x"} trailing', "body is not JSON: Extra data at line 1 column 18"),
        ('{"command": "x", "life_time": NaN}', "body is not JSON: NaN is not a JSON value"),
        ("[]", "body must be a JSON object, got array"),
        ('"echo"', "body must be a JSON object, got string"),
        ("42", "body must be a JSON object, got number"),
        ("null", "body must be a JSON object, got null"),
        ("true", "body must be a JSON object, got boolean"),
    ],
)
def test_body_must_be_a_json_object(body: str, message: str) -> None:
    with pytest.raises(InvalidJobError) as caught:
        parse_job(body, message_id="m", sent_at=0.0)
    assert str(caught.value) == message


def test_body_must_be_utf8() -> None:
    with pytest.raises(
        InvalidJobError, match="^body is not valid UTF-8: invalid start byte at byte offset 12$"
    ):
        parse_job(b'{"command":"\xff"}', message_id="m", sent_at=0.0)


def test_deeply_nested_body_is_an_invalid_job() -> None:
    with pytest.raises(InvalidJobError, match="^body nests deeper than 64 arrays and objects$"):
        parse_job('{"x":' + "[" * 100_000 + "]" * 100_000 + "}", message_id="m", sent_at=0.0)


# --- command ---


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, 'field "command": required'),
        ({"command": None}, 'field "command": required'),
        ({"command": ""}, 'field "command": must not be empty'),
        ({"command": 1}, 'field "command": must be a string, got number'),
        ({"command": ["echo", "hi"]}, 'field "command": must be a string, got array'),
        ({"command": "echo\0hi"}, 'field "command": must not contain a NUL character'),
        (
            {"command": "echo \ud800"},
            'field "command": must not contain an unpaired surrogate (\\ud800)',
        ),
    ],
)
def test_command_errors(fields: dict[str, object], message: str) -> None:
    assert parse_error(fields) == message


# --- envs and env ---


def test_env_and_envs_merge_with_envs_winning() -> None:
    job = parse({"command": "true", "env": {"A": "1", "B": "env"}, "envs": {"B": "envs", "C": "3"}})
    assert job.envs == {"A": "1", "B": "envs", "C": "3"}


def test_env_alone_is_read() -> None:
    assert parse({"command": "true", "env": {"A": "1"}}).envs == {"A": "1"}


@pytest.mark.parametrize("field", ["envs", "env"])
@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        (["A=1"], "", "must be an object, got array"),
        ("A=1", "", "must be an object, got string"),
        ({"FOO": 1}, ".FOO", "must be a string, got number"),
        ({"FOO": None}, ".FOO", "must be a string, got null"),
        ({"FOO": True}, ".FOO", "must be a string, got boolean"),
        ({"FOO": {"x": "y"}}, ".FOO", "must be a string, got object"),
        ({"FOO": "a\0b"}, ".FOO", "must not contain a NUL character"),
        ({"FOO": "\udc80"}, ".FOO", "must not contain an unpaired surrogate (\\udc80)"),
        ({"": "x"}, ".", "variable name must not be empty"),
        ({"A=B": "x"}, ".A=B", 'variable name must not contain "="'),
        ({"A\0B": "x"}, ".A\\u0000B", "variable name must not contain a NUL character"),
    ],
)
def test_env_errors_name_the_key(field: str, value: object, path: str, reason: str) -> None:
    assert parse_error({"command": "true", field: value}) == f'field "{field}{path}": {reason}'


def test_envs_are_copied_into_the_job() -> None:
    envs = {"A": "1"}
    job = Job(message_id="m", command="true", envs=envs)
    envs["A"] = "changed"
    assert job.envs == {"A": "1"}


# --- event_id and lock_id ---


@pytest.mark.parametrize("event_id", [None, ""])
def test_event_id_defaults_to_message_id(event_id: object) -> None:
    assert parse({"command": "true", "event_id": event_id}, message_id="abc").event_id == "abc"


@pytest.mark.parametrize("lock_id", [None, ""])
def test_lock_id_absent_or_empty_is_none(lock_id: object) -> None:
    assert parse({"command": "true", "lock_id": lock_id}).lock_id is None


@pytest.mark.parametrize("field", ["event_id", "lock_id"])
@pytest.mark.parametrize(("value", "kind"), [(1, "number"), (True, "boolean"), ({}, "object")])
def test_event_id_and_lock_id_must_be_strings(field: str, value: object, kind: str) -> None:
    assert parse_error({"command": "true", field: value}) == (
        f'field "{field}": must be a string, got {kind}'
    )


# --- boolean flags ---


@pytest.mark.parametrize("field", ["abort_if_locked", "disable_life_time_trigger"])
@pytest.mark.parametrize(
    ("value", "kind"), [(1, "number"), (0, "number"), ("true", "string"), ([], "array")]
)
def test_flags_must_be_json_booleans(field: str, value: object, kind: str) -> None:
    assert parse_error({"command": "true", field: value}) == (
        f'field "{field}": must be a boolean, got {kind}'
    )


@pytest.mark.parametrize("field", ["abort_if_locked", "disable_life_time_trigger"])
def test_flags_false(field: str) -> None:
    assert getattr(parse({"command": "true", field: False}), field) is False


# --- life_time ---


@pytest.mark.parametrize(
    ("value", "text"),
    [(90, "1m30s"), ("90s", "1m30s"), ("1m", "1m0s"), ("1.5h", "1h30m0s"), ("300ms", "300ms")],
)
def test_life_time_values(value: object, text: str) -> None:
    life_time = parse({"command": "true", "life_time": value}).life_time
    assert str(life_time) == text


@pytest.mark.parametrize("value", [0, "0", "0s", "0h0m"])
def test_zero_life_time_means_no_limit(value: object) -> None:
    assert parse({"command": "true", "life_time": value}).life_time is None


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (
            "1d",
            'invalid duration "1d": unknown unit "d" (use ns, us, ms, s, m or h)',
        ),
        ("10", 'invalid duration "10": missing unit after "10" (use ns, us, ms, s, m or h)'),
        (-1, "must not be negative"),
        ("-5s", "must not be negative"),
        (
            True,
            'must be an int number of seconds or a duration string like "90s" or "1h30m", '
            "got boolean",
        ),
        (
            1.5,
            'must be an int number of seconds or a duration string like "90s" or "1h30m", '
            "got number 1.5",
        ),
        (
            [90],
            'must be an int number of seconds or a duration string like "90s" or "1h30m", '
            "got array",
        ),
    ],
)
def test_life_time_errors(value: object, reason: str) -> None:
    assert parse_error({"command": "true", "life_time": value}) == f'field "life_time": {reason}'


# --- Job normalisation ---


def test_job_built_in_code_normalises_like_parse_job() -> None:
    job = Job(message_id="m", command="true", lock_id="", life_time=Duration(0))
    assert job.event_id == "m"
    assert job.lock_id is None
    assert job.life_time is None


# --- build_body ---


def test_build_body_minimal_is_compact() -> None:
    assert build_body("echo hi") == '{"command":"echo hi"}'


def test_build_body_full() -> None:
    body = build_body(
        "echo hi",
        envs={"A": "1"},
        event_id="ev",
        lock_id="lk",
        life_time="1h30m",
        abort_if_locked=True,
        disable_life_time_trigger=True,
    )
    assert body == (
        '{"command":"echo hi","envs":{"A":"1"},"event_id":"ev","lock_id":"lk",'
        '"life_time":"1h30m","abort_if_locked":true,"disable_life_time_trigger":true}'
    )


def test_build_body_omits_unset_fields() -> None:
    body = build_body("true", envs={}, event_id="", lock_id=None, life_time=None)
    assert json.loads(body) == {"command": "true"}


@pytest.mark.parametrize(
    ("life_time", "expected"),
    [(None, None), (0, None), (90, "1m30s"), ("90s", "1m30s"), ("1.5h", "1h30m0s")],
)
def test_build_body_round_trips(life_time: int | str | None, expected: str | None) -> None:
    command = "printf '%s\\n' \"caf\u00e9\""
    body = build_body(
        command,
        envs={"A": "1", "B": "two words"},
        event_id="ev",
        lock_id="lk",
        life_time=life_time,
        abort_if_locked=True,
    )
    job = parse_job(body, message_id="m", sent_at=1.0)
    assert job == Job(
        message_id="m",
        command=command,
        event_id="ev",
        envs={"A": "1", "B": "two words"},
        lock_id="lk",
        life_time=None if expected is None else parse_duration(expected),
        abort_if_locked=True,
        disable_life_time_trigger=False,
        sent_at=1.0,
    )


def test_build_body_is_ascii() -> None:
    assert build_body("echo \u00e9 \ufffe").isascii()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"command": ""}, 'field "command": must not be empty'),
        ({"command": "true", "life_time": "1d"}, 'field "life_time": invalid duration "1d"'),
        ({"command": "true", "envs": {"A=B": "x"}}, 'field "envs.A=B"'),
    ],
)
def test_build_body_refuses_what_the_daemon_would(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidJobError) as caught:
        build_body(**kwargs)  # type: ignore[arg-type]
    assert str(caught.value).startswith(message)


# --- is_expired ---


@pytest.mark.parametrize(
    ("age", "expired"),
    [(-5.0, False), (0.0, False), (59.999, False), (60.0, False), (60.001, True), (3600.0, True)],
)
def test_is_expired_boundaries(age: float, expired: bool) -> None:
    job = Job(message_id="m", command="true", life_time=Duration.of_seconds(60), sent_at=1000.0)
    assert is_expired(job, 1000.0 + age) is expired


def test_is_expired_sub_second_life_time() -> None:
    job = Job(message_id="m", command="true", life_time=parse_duration("300ms"), sent_at=10.0)
    assert not is_expired(job, 10.3)
    assert is_expired(job, 10.301)


def test_is_expired_at_epoch_scale() -> None:
    sent_at = 1_614_600_000_000 / 1000
    job = Job(message_id="m", command="true", life_time=parse_duration("300ms"), sent_at=sent_at)
    assert not is_expired(job, sent_at + 0.3)
    assert is_expired(job, sent_at + 0.301)


def test_never_expires_without_life_time() -> None:
    job = Job(message_id="m", command="true", sent_at=0.0)
    assert not is_expired(job, 10.0**12)


# --- trigger_line ---


def test_trigger_line_exact_in_utc(local_tz: None) -> None:
    set_tz("UTC")
    job = parse_job(
        '{"command":"echo hi","event_id":"nightly","life_time":"1h30m"}',
        message_id="0f5e-42",
        sent_at=1_614_600_000_123 / 1000,
    )
    assert trigger_line(job) == (
        "job_id:0f5e-42, event_id:nightly, command:echo hi, life_time:1h30m0s, "
        "sent_timestamp:2021-03-01 12:00:00.123 +0000 UTC"
    )


def test_trigger_line_without_life_time_and_whole_seconds(local_tz: None) -> None:
    set_tz("UTC")
    job = Job(message_id="m", command="true", sent_at=1_614_600_000.0)
    assert trigger_line(job) == (
        "job_id:m, event_id:m, command:true, life_time:0s, "
        "sent_timestamp:2021-03-01 12:00:00 +0000 UTC"
    )


@pytest.mark.parametrize(
    ("zone", "stamp"),
    [
        ("EST5EDT,M3.2.0,M11.1.0", "2021-03-01 07:00:00.5 -0500 EST"),
        ("JST-9", "2021-03-01 21:00:00.5 +0900 JST"),
        ("<+0530>-5:30", "2021-03-01 17:30:00.5 +0530 +0530"),
    ],
)
def test_trigger_line_uses_local_zone(local_tz: None, zone: str, stamp: str) -> None:
    set_tz(zone)
    job = Job(message_id="m", command="true", sent_at=1_614_600_000.5)
    assert trigger_line(job).endswith(f"sent_timestamp:{stamp}")


def test_trigger_line_has_no_newline(local_tz: None) -> None:
    set_tz("UTC")
    assert "\n" not in trigger_line(Job(message_id="m", command="true"))


def test_a_lock_id_longer_than_a_dynamodb_key_is_refused() -> None:
    assert parse_job(
        json.dumps({"command": "x", "lock_id": "é" * 1024}), message_id="m", sent_at=0
    ).lock_id
    with pytest.raises(
        InvalidJobError, match=r'field "lock_id": must be at most 2048 bytes, got 2050'
    ):
        parse_job(json.dumps({"command": "x", "lock_id": "é" * 1025}), message_id="m", sent_at=0)


@pytest.mark.parametrize("name", ["event_id", "lock_id", "concurrency_key"])
def test_every_field_that_becomes_a_dynamodb_key_is_held_to_its_limit(name: str) -> None:
    """Each becomes a partition key (run records and summary, lock, group slots): one over
    DynamoDB's 2048 bytes would fail its write at every delivery."""
    assert getattr(parse({"command": "x", name: "é" * 1024}), name) == "é" * 1024
    assert parse_error({"command": "x", name: "E" * 5000}) == (
        f'field "{name}": must be at most 2048 bytes, got 5000 (DynamoDB\'s limit on a key)'
    )


@pytest.mark.parametrize("name", ["event_id", "lock_id", "concurrency_key"])
def test_a_key_field_holding_a_nul_is_refused(name: str) -> None:
    """A NUL cannot reach a job's environment (SQSJKR_EVENT_ID), nor any C string."""
    assert parse_error({"command": "true", name: "ev\0x"}) == (
        f'field "{name}": must not contain a NUL character'
    )


@pytest.mark.parametrize(
    ("fields", "start"),
    [
        ({"command": "x", "life_time": "1" + "h" * 200_000}, 'field "life_time": invalid duration'),
        ({"command": "x", "timeout": "1x" * 100_000}, 'field "timeout": invalid duration'),
        ({"command": "x", "envs": {"A=" + "b" * 200_000: "x"}}, 'field "envs.A=bbb'),
        ({"command": "x", "retries": int("9" * 4000)}, 'field "retries": must be between'),
        ({"http": {"url": "http://127.0.0.1/", "method": "P" * 200_000}}, 'field "http.method"'),
        ({"http": {"url": "x" * 200_000 + "://h/"}}, 'field "http.url"'),
        ({"http": {"url": "http://h/", "success_status": ["s" * 200_000]}}, 'field "http.succ'),
        (
            {"http": {"url": "http://127.0.0.1/", "headers": {"a\n" * 100_000: "v"}}},
            'field "http.headers.a\\na\\n',
        ),
    ],
)
def test_an_error_quotes_a_bounded_excerpt_of_the_message(
    fields: dict[str, object], start: str
) -> None:
    """A reason is logged and kept in a dead letter's attribute, beside the body: one that
    repeated a 200 KB value would make the dead letter too big to send."""
    error = parse_error(fields)
    assert error.startswith(start)
    assert len(error) < 1000, error[:300]


def test_an_http_job_is_named_by_its_method_and_origin_only() -> None:
    job = parse({"http": {"url": "http://user:pw@127.0.0.1:8080/q?token=SECRET", "method": "get"}})
    assert job.what == "GET http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://127.0.0.1/q?token=SECRET", 'must be an http:// or https:// URL, got "ftp"'),
        ("/q?token=SECRET", "must be an http:// or https:// URL, got no scheme"),
        ("http:///q?token=SECRET", "must be an http:// or https:// URL with a host"),
        ("http://10.1.2.3:81/q?token=SECRET", 'a URL of "http://10.1.2.3:81" (path not shown)'),
    ],
)
def test_an_http_url_refused_is_named_without_its_path_or_query(url: str, problem: str) -> None:
    body = json.dumps({"http": {"url": url}})
    with pytest.raises(InvalidJobError) as caught:
        parse_job(body, message_id="m", sent_at=0, http_allow=["http://127.0.0.1/"])
    assert problem in str(caught.value)
    assert "SECRET" not in str(caught.value) and "/q" not in str(caught.value)


# --- the firing a message is (issue 27) -----------------------------------------------------


FIRING = {
    "time": "2026-11-27T01:00:00Z",
    "schedule": "arn:aws:scheduler:eu-west-1:123456789012:schedule/sqsjkr/nightly",
    "expression": "cron(0 2 * * ? *)",
    "timezone": "Europe/Berlin",
}


def test_a_firing_and_its_origin_are_read_and_key_the_firing() -> None:
    body = json.dumps({"command": "true", "firing": FIRING, "origin": "schedule"})
    job = parse_job(body, message_id="m-1", sent_at=0.0)
    assert job.origin is Origin.SCHEDULE
    assert job.firing == Firing(
        1795741200.0, FIRING["schedule"], FIRING["expression"], "Europe/Berlin"
    )
    # Two deliveries of one firing share its key, whatever their message ids; the next firing's differs.
    again = parse_job(body, message_id="m-2", sent_at=5.0)
    assert again.firing is not None and again.firing.key == job.firing.key
    later = dict(FIRING, time="2026-11-28T02:00:00+01:00")
    other = parse_job(json.dumps({"command": "true", "firing": later}), message_id="m-3", sent_at=0)
    assert other.firing is not None and other.firing.key != job.firing.key
    assert json.loads(build_body("true", firing=job.firing, origin=Origin.SEND)) == {
        "command": "true",
        "firing": FIRING,
        "origin": "send",
    }


@pytest.mark.parametrize(
    ("firing", "field", "says"),
    [
        ([], "firing", "must be an object"),
        (dict(FIRING, time="<aws.scheduler.scheduled-time>"), "firing.time", "did not substitute"),
        (dict(FIRING, time="2026-11-27T01:00:00"), "firing.time", "UTC offset"),
        (dict(FIRING, time="yesterday"), "firing.time", "RFC 3339"),
        (dict(FIRING, schedule=""), "firing.schedule", "is required"),
        (dict(FIRING, schedule="<aws.scheduler.schedule-arn>"), "firing.schedule", "substitute"),
        (dict(FIRING, expression=7), "firing.expression", "must be a string"),
    ],
)
def test_a_malformed_firing_names_its_field(firing: object, field: str, says: str) -> None:
    with pytest.raises(InvalidJobError, match=f'field "{re.escape(field)}".*{says}'):
        parse_job(json.dumps({"command": "true", "firing": firing}), message_id="m", sent_at=0)


def test_an_unknown_origin_is_refused() -> None:
    with pytest.raises(InvalidJobError, match='field "origin": must be one of schedule, send'):
        parse_job('{"command":"true","origin":"cron"}', message_id="m", sent_at=0)
