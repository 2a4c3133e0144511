"""Fuzzing the message contract: the parser over thousands of generated bodies, the daemon over
hundreds of invalid messages sent to a real queue.

A message body comes from whoever can write to the queue. Whatever it holds, parse_job must answer
with a Job or an InvalidJobError naming the field at fault, and the daemon must log or dead-letter
it, count it failed and go on, never running anything from it.
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqsjkr.contract.duration import Duration, parse_duration
from sqsjkr.contract.job import MESSAGE_FIELDS, Job, build_body, parse_job
from sqsjkr.contract.limits import MAX_KEY_BYTES
from sqsjkr.contract.run import RunContext
from sqsjkr.daemon.runner import ShellRunner, StopSwitch
from sqsjkr.errors import InvalidJobError

from .conftest import Aws, Start, invocations, run_daemon, wait_until

MESSAGE_ID = "fuzz-message-id"
#: Longer than any reason the parser gives: an error quotes at most MAX_SHOWN characters of a value.
MAX_REASON = 1000
SENT_AT = 1_700_000_000.25
FLAGS = ("abort_if_locked", "disable_life_time_trigger")
DURATIONS = ("life_time", "timeout")
KNOWN_FIELDS = ("command", "envs", "env", "event_id", "lock_id", *DURATIONS, *FLAGS)
# Keys drawn as unknown leave out all of MESSAGE_FIELDS: sqsjkr's own fields have their tests
# in test_job.py.
MAX_NS = (1 << 63) - 1
SECOND = 1_000_000_000

# Derandomized: the same examples on every run, so that CI is repeatable. To explore new ones
# while working on the parser, set derandomize=False here for a few runs.
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
#: The suite's share of examples; SQSJKR_FUZZ_SCALE=10 explores ten times as many (a deeper run
#: while working on the parser), at ten times the minutes.
SCALE = float(os.environ.get("SQSJKR_FUZZ_SCALE", "1"))


def examples(count: int) -> settings:
    return settings(FUZZ, max_examples=max(1, int(count * SCALE)))


# --- an oracle of the JSON layer and of what a parsed Job must hold ------------------------------


def _no_constant(name: str) -> object:
    raise ValueError(name)


def decoded(body: str | bytes) -> tuple[str, Any]:
    """("utf8", None), ("json", None) or ("value", the JSON value) of a body."""
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError:
            return "utf8", None
    try:
        return "value", json.loads(body, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return "json", None


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def utf8_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(body: str | bytes) -> Job:
    return parse_job(body, message_id=MESSAGE_ID, sent_at=SENT_AT)


def error_of(body: str | bytes) -> str | None:
    try:
        parse(body)
    except InvalidJobError as error:
        return str(error)
    return None


def check(body: str | bytes) -> Job | None:
    """Parse body; assert the outcome is exactly what the contract says of it; return the Job."""
    kind, value = decoded(body)
    try:
        job = parse(body)
    except InvalidJobError as error:  # anything else escapes and fails the test
        message = str(error)
        assert message, "an InvalidJobError must say why"
        # Logged, and kept in a dead letter's attribute beside the body: never a copy of it.
        assert len(message) < MAX_REASON, message[:300]
        if kind == "utf8":
            assert message.startswith("body is not valid UTF-8: "), message
        elif kind == "json":
            assert message.startswith("body is not JSON: "), message
        elif not isinstance(value, dict):
            assert message == f"body must be a JSON object, got {json_type(value)}"
        else:
            check_field_error(message, value)
        return None
    assert kind == "value" and isinstance(value, dict), f"accepted a non-object: {body!r}"
    check_job(job, value)
    check_round_trip(job)
    return job


def check_field_error(message: str, fields: dict[str, Any]) -> None:
    """The error names a known field, and that field alone (beside a good command) fails the same way."""
    assert message.startswith('field "'), message
    name, end = json.JSONDecoder().raw_decode(message, len("field "))
    assert message[end : end + 2] == ": " and message[end + 2 :], message
    base, _, key = name.partition(".")
    assert base in KNOWN_FIELDS, message
    if base == "command":
        assert not key
        alone = {"command": fields["command"]} if "command" in fields else {}
    else:
        assert base in fields, message
        if key:
            assert base in ("env", "envs") and key in fields[base], message
        alone = {"command": "true", base: fields[base]}
    try:
        # Not ASCII-escaped: escaped, a raw "\ud800\udfff" would be read back as one character.
        alone_body = json.dumps(alone, allow_nan=False, ensure_ascii=False)
    except ValueError:
        return  # a number like 1e400 read as inf: no JSON text holds it alone
    assert error_of(alone_body) == message


def check_job(job: Job, fields: dict[str, Any]) -> None:
    """Everything parse_job guarantees of the Job of an accepted body."""
    assert job.message_id == MESSAGE_ID and job.sent_at == SENT_AT
    command = fields["command"]
    assert isinstance(command, str) and command and "\0" not in command and utf8_text(command)
    assert job.command == command
    envs: dict[str, str] = {}
    for name in ("env", "envs"):  # "envs" wins
        if fields.get(name) is not None:
            envs.update(fields[name])
    assert job.envs == envs
    for key, value in job.envs.items():
        assert isinstance(key, str) and key and "=" not in key and "\0" not in key
        assert isinstance(value, str) and "\0" not in value
        assert utf8_text(key) and utf8_text(value)
    for name in ("event_id", "lock_id"):
        raw = fields.get(name)
        assert raw is None or (isinstance(raw, str) and utf8_text(raw))
        # A DynamoDB key, and (event_id) a variable of the job's environment.
        assert raw is None or ("\0" not in raw and len(raw.encode()) <= MAX_KEY_BYTES)
    assert job.event_id == (fields.get("event_id") or MESSAGE_ID)
    assert job.lock_id == (fields.get("lock_id") or None)
    for name in DURATIONS:
        raw, got = fields.get(name), getattr(job, name)
        if raw is None:
            assert got is None
            continue
        assert not isinstance(raw, bool) and isinstance(raw, (int, str))
        want = Duration(raw * SECOND) if isinstance(raw, int) else parse_duration(raw)
        assert 0 <= want.ns <= MAX_NS
        assert got == (want if want.ns else None)
    for name in FLAGS:
        raw = fields.get(name)
        assert raw is None or isinstance(raw, bool)
        assert getattr(job, name) is (raw is True)


def check_round_trip(job: Job) -> None:
    """build_body of a Job's values reads back as the same Job; durations as Go strings."""
    for duration in (job.life_time, job.timeout):
        if duration is not None:
            assert parse_duration(str(duration)) == duration

    def rebuilt(as_text: bool) -> Job:
        def value(duration: Duration | None) -> int | str | None:
            if duration is None:
                return None
            return str(duration) if as_text else duration.ns // SECOND

        body = build_body(
            job.command,
            envs=job.envs,
            event_id=job.event_id,
            lock_id=job.lock_id,
            life_time=value(job.life_time),
            timeout=value(job.timeout),
            abort_if_locked=job.abort_if_locked,
            disable_life_time_trigger=job.disable_life_time_trigger,
        )
        assert body.isascii()
        return parse(body)

    assert rebuilt(as_text=True) == job
    if all(d is None or d.ns % SECOND == 0 for d in (job.life_time, job.timeout)):
        assert rebuilt(as_text=False) == job  # whole seconds also go as JSON ints


# --- strategies ------------------------------------------------------------------------------------

# Characters that matter to the parser: NUL, "=", lone surrogates, JSON syntax, duration syntax.
tricky_chars = st.sampled_from(
    ["\0", "=", ".", "\ud800", "\udfff", "\ufeff", "\ufffe", "µ", "μ", "\U0001f600", '"', "\\"]
    + list("{}[],:0123456789+-eE hmsun\t\n\r")
)
any_text = st.text(max_size=16) | st.lists(tricky_chars | st.characters(), max_size=12).map("".join)
# Text a sender may legitimately put in a job: any characters a JSON string carries as UTF-8.
clean_text = st.text()
# An id (event_id, lock_id) a sender may give: no NUL, which no environment variable carries.
clean_ids = st.text().filter(lambda s: "\0" not in s)
command_texts = st.text(min_size=1).filter(lambda s: "\0" not in s)
# A few common names, so that "env" and "envs" often set the same variable.
env_names = st.sampled_from(["A", "PATH", "é"]) | st.text(min_size=1).filter(
    lambda s: "\0" not in s and "=" not in s
)


def json_trees(
    floats: st.SearchStrategy[float], texts: st.SearchStrategy[str]
) -> st.SearchStrategy[Any]:
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=-(1 << 70), max_value=1 << 70)
        | floats
        | texts
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=6,
    )


# NaN and infinities too (Python writes them, JSON has none), and text with lone surrogates.
json_values = json_trees(st.floats(), any_text)
clean_json_values = json_trees(st.floats(allow_nan=False, allow_infinity=False), clean_text)

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 10**6, "s": SECOND}
_UNITS.update({"m": 60 * SECOND, "h": 3600 * SECOND})


@st.composite
def go_durations(draw: st.DrawFn) -> tuple[str, int]:
    """A valid Go duration string and its nanoseconds."""
    choice = draw(st.integers(0, 2))
    if choice == 0:  # Go's own format, as str(Duration) writes it
        ns = draw(st.integers(min_value=0, max_value=MAX_NS))
        return str(Duration(ns)), ns
    if choice == 1:
        return draw(
            st.sampled_from([("0", 0), ("+0", 0), ("-0", 0), ("-0s", 0), ("+1h", 3600 * SECOND)])
        )
    text, ns = "", 0  # built part by part, units in any order and repeated
    for _ in range(draw(st.integers(1, 4))):
        unit = draw(st.sampled_from(sorted(_UNITS)))
        whole = draw(st.integers(0, 1000))
        text += str(whole)
        ns += whole * _UNITS[unit]
        if _UNITS[unit] >= 10**6 and draw(st.booleans()):  # a fraction Go scales exactly
            digits = draw(st.from_regex(r"[0-9]{0,3}", fullmatch=True))
            text += "." + digits
            ns += int(digits or "0") * _UNITS[unit] // 10 ** len(digits)
        text += unit
    return text, ns


valid_seconds = st.integers(min_value=0, max_value=MAX_NS // SECOND)
env_maps = st.dictionaries(env_names, command_texts | st.just(""), max_size=4)

# Values of each known field: valid ones (most often), tricky ones of its kind, any JSON value.
_VALID: dict[str, st.SearchStrategy[Any]] = {
    "command": command_texts,
    "envs": env_maps,
    "env": env_maps,
    "event_id": clean_ids,
    "lock_id": clean_ids,
    "life_time": valid_seconds | go_durations().map(lambda pair: pair[0]),
    "timeout": valid_seconds | go_durations().map(lambda pair: pair[0]),
    "abort_if_locked": st.booleans(),
    "disable_life_time_trigger": st.booleans(),
}
duration_values = (
    st.from_regex(r"[+-]?([0-9]{0,3}(\.[0-9]{0,3})?(ns|us|µs|μs|ms|s|m|h|d|)){0,3}", fullmatch=True)
    | st.sampled_from(
        ["0", "-0", "", ".", "1e3s", "-1s", "-1h30m", "-.5ms", "1d", "1h 30m", "+-1s"]
        + ["9223372037s", "-2562047h47m16.854775808s", "-9223372036854775808ns"]
        + ["2562047h47m16.854775807s", "2562047h47m16.854775808s", "0.0000000001s"]
    )
    | st.integers(min_value=-3, max_value=MAX_NS // SECOND + 3)
    | st.sampled_from([MAX_NS // SECOND, MAX_NS // SECOND + 1, 1 << 64, -(1 << 64)])
)
env_objects = st.dictionaries(env_names | any_text, any_text | json_values, max_size=3)
_TRICKY: dict[str, st.SearchStrategy[Any]] = {
    "command": any_text,
    "envs": env_objects,
    "env": env_objects,
    "event_id": any_text,
    "lock_id": any_text,
    "life_time": duration_values,
    "timeout": duration_values,
    "abort_if_locked": st.sampled_from([0, 1, "true", "false", [], {}]),
    "disable_life_time_trigger": st.sampled_from([0, 1, "true", "false", [], {}]),
}


def field_values(name: str) -> st.SearchStrategy[Any]:
    return st.one_of(*[_VALID[name]] * 5, *[_TRICKY[name]] * 2, json_values)


unknown_keys = any_text.filter(lambda key: key not in MESSAGE_FIELDS)
unknown_fields = st.dictionaries(unknown_keys, json_values, max_size=3)
near_valid_objects = st.builds(
    lambda known, unknown: {**unknown, **known},
    st.fixed_dictionaries(
        {"command": field_values("command")},
        optional={name: field_values(name) for name in KNOWN_FIELDS if name != "command"},
    ),
    unknown_fields,
)


@st.composite
def well_formed_jobs(draw: st.DrawFn) -> tuple[dict[str, Any], Job]:
    """A valid message (as a dict) and the Job it must parse to, worked out field by field."""
    fields: dict[str, Any] = {"command": draw(command_texts)}
    envs: dict[str, str] = {}
    for name in ("env", "envs"):  # "envs" wins
        if draw(st.booleans()):
            fields[name] = draw(env_maps | st.none())
            envs.update(fields[name] or {})
    for name in ("event_id", "lock_id"):
        if draw(st.booleans()):
            fields[name] = draw(clean_ids | st.none())
    durations: dict[str, Duration | None] = {}
    for name in DURATIONS:
        durations[name] = None
        if draw(st.booleans()):
            if draw(st.booleans()):
                seconds = draw(valid_seconds)
                fields[name], ns = seconds, seconds * SECOND
            else:
                fields[name], ns = draw(go_durations())
            durations[name] = Duration(ns) if ns else None
    for name in FLAGS:
        if draw(st.booleans()):
            fields[name] = draw(st.booleans() | st.none())
    unknown_keys = clean_text.filter(lambda key: key not in MESSAGE_FIELDS)
    fields = {**draw(st.dictionaries(unknown_keys, clean_json_values, max_size=3)), **fields}
    job = Job(
        message_id=MESSAGE_ID,
        command=fields["command"],
        event_id=fields.get("event_id") or MESSAGE_ID,
        envs=envs,
        lock_id=fields.get("lock_id") or None,
        life_time=durations["life_time"],
        timeout=durations["timeout"],
        abort_if_locked=fields.get("abort_if_locked") is True,
        disable_life_time_trigger=fields.get("disable_life_time_trigger") is True,
        sent_at=SENT_AT,
    )
    return fields, job


def _encodings(value: Any) -> list[str | bytes]:
    ascii_text = json.dumps(value)
    unicode_text = json.dumps(value, ensure_ascii=False, indent=1)
    return [
        ascii_text,
        unicode_text,
        ascii_text.encode(),
        # Raw lone surrogates make this invalid UTF-8.
        unicode_text.encode("utf-8", "surrogatepass"),
        f" \n{ascii_text}\t",
        "\ufeff" + ascii_text,  # a BOM: not JSON
    ]


def serialized(values: st.SearchStrategy[Any]) -> st.SearchStrategy[str | bytes]:
    """JSON bodies of values: ASCII or not, compact or not, str or bytes, with a BOM or spaces."""
    return st.tuples(values, st.integers(0, 5)).map(lambda pair: _encodings(pair[0])[pair[1]])


# --- properties of the parser ----------------------------------------------------------------------


@examples(500)
@given(st.text() | st.lists(tricky_chars, max_size=40).map("".join) | st.binary())
def test_any_text_or_bytes_is_a_job_or_an_invalid_job_error(body: str | bytes) -> None:
    check(body)


@examples(400)
@given(serialized(json_values))
def test_any_json_value_is_a_job_or_an_invalid_job_error(body: str | bytes) -> None:
    check(body)


@examples(500)
@given(serialized(near_valid_objects))
def test_near_valid_objects_parse_exactly_or_name_the_field_at_fault(body: str | bytes) -> None:
    check(body)


@examples(400)
@given(st.sampled_from(DURATIONS), duration_values | _VALID["life_time"] | json_values)
def test_duration_fields_parse_exactly_or_name_the_field(name: str, value: Any) -> None:
    check(json.dumps({"command": "true", name: value}))


@examples(400)
@given(well_formed_jobs(), st.integers(0, 4))
def test_well_formed_jobs_are_always_accepted(case: tuple[dict[str, Any], Job], how: int) -> None:
    fields, expected = case
    job = check(_encodings(fields)[how])  # every form but the BOM one
    assert job == expected


# --- what the parser accepts, the runner runs ----------------------------------------------------

#: Stands in for sh: it runs no command of the message's, and fails unless the job's environment
#: holds the run's event id exactly (the runner puts the daemon's own variables in it too).
_FAKE_SH = """#!/bin/sh
[ "$SQSJKR_EVENT_ID" = "$SQSJKR_FUZZ_EXPECTED_EVENT_ID" ] || exit 3
"""
# Values a message may carry in the fields that reach the job's environment or argv: tricky ones
# (NUL, "=", surrogates, control characters) and long ones, up to past the key limit.
_reaching = any_text | st.text(min_size=2000, max_size=2100) | st.just("\0")
runnable_bodies = st.fixed_dictionaries(
    {"command": command_texts | _reaching},
    optional={
        "envs": env_objects,
        "env": env_objects,
        "event_id": _reaching,
        "lock_id": _reaching,
        "concurrency_key": _reaching,
    },
)


@examples(150)
@given(serialized(runnable_bodies))
def test_whatever_the_parser_accepts_reaches_the_job_without_an_exception(
    body: str | bytes,
) -> None:
    """A value the contract accepts but the runner cannot pass on (a NUL in event_id: Popen's
    "embedded null byte") raised in the worker at every delivery, for ever."""
    try:
        job = parse(body)
    except InvalidJobError:
        return
    context = RunContext(job.event_id, job.message_id, SENT_AT, 1, "fuzz-host")
    with tempfile.TemporaryDirectory() as workdir:
        sh = Path(workdir, "sh")
        sh.write_text(_FAKE_SH)
        sh.chmod(0o755)
        with mock.patch("shutil.which", return_value=str(sh)):
            runner = ShellRunner({**os.environ, "SQSJKR_FUZZ_EXPECTED_EVENT_ID": job.event_id})
        result = runner.run(job, timeout=30, stop=StopSwitch(), context=context)
    assert (result.exit_code, result.start_error) == (0, None)


def test_duration_strings_round_trip_at_the_edges() -> None:
    """str(Duration) is Go's format, which parse_duration reads back exactly (check_round_trip
    relies on it)."""
    for ns in (1, 999, 1_000, 1_500, 10**6 + 1, SECOND - 1, SECOND, 90 * SECOND, MAX_NS):
        assert parse_duration(str(Duration(ns))) == Duration(ns)
    assert str(Duration(MAX_NS)) == "2562047h47m16.854775807s"


# --- the daemon over hundreds of invalid messages --------------------------------------------------


def sqs_safe(text: str) -> str:
    """text without the characters SQS refuses in a message body."""
    return "".join(
        c
        for c in text
        if c in "\t\n\r"
        or 0x20 <= ord(c) <= 0xD7FF
        or 0xE000 <= ord(c) <= 0xFFFD
        or 0x10000 <= ord(c) <= 0x10FFFF
    )


class InvalidBodies:
    """Seeded random message bodies, each invalid by construction and checked to be so.

    Every string command in them is a `touch ran-N`, so a body accepted by mistake would leave
    a file behind.
    """

    CHARS = (
        [chr(c) for c in range(0x20, 0x7F)] * 3
        + list("\t\n\r\0\x08\x1f\ufeff\ufffe\uffff\ud800\udc00")
        + ["é", "µ", "中", "\u2028", "\U0001f600", "\U0010ffff", "\ue000"]
    )
    BAD_DURATIONS: tuple[Any, ...] = (-1, 1.5, 90.0, "1d", "", "abc", "-5s", "5", True, [], {})
    BAD_DURATIONS += ("9999999999999h", 1 << 63, "none", "1h 30m", "1.5.5s", "1e3s", "+-1s")
    BAD_ENVS: tuple[Any, ...] = ([], "A=b", 1, True, {"A": 1}, {"": "x"}, {"A=B": "x"})
    BAD_ENVS += ({"A": "\0"}, {"A": None}, {"A": ["x"]}, {"A\0": "x"}, {"\ud800": "x"})

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.count = 0

    def text(self, max_len: int = 40) -> str:
        return "".join(self.rng.choice(self.CHARS) for _ in range(self.rng.randint(0, max_len)))

    def value(self, depth: int = 0) -> Any:
        kind = self.rng.randint(0, 8 if depth < 3 else 5)
        if kind == 0:
            return None
        if kind == 1:
            return self.rng.random() < 0.5
        if kind == 2:
            return self.rng.randint(-(1 << 70), 1 << 70)
        if kind == 3:
            return self.rng.uniform(-1e6, 1e6)
        if kind in (4, 5):
            return self.text(12)
        if kind in (6, 7):
            return [self.value(depth + 1) for _ in range(self.rng.randint(0, 4))]
        return {self.text(6): self.value(depth + 1) for _ in range(self.rng.randint(0, 4))}

    def not_a_string(self) -> Any:
        value = self.value()
        while isinstance(value, str) or value is None:
            value = self.value()
        return value

    def extras(self) -> dict[str, Any]:
        return {self.text(8): self.value() for _ in range(self.rng.randint(0, 3))}

    def candidate(self, ran: str) -> str:
        good = {"command": f"touch {ran}"}
        kind = self.rng.randint(0, 9)
        if kind == 0:  # text that cannot be a JSON object
            return self.rng.choice("x[1'\"-") + self.text()
        if kind == 1:  # JSON, but not an object
            value = self.value()
            while isinstance(value, dict):
                value = self.value()
            return json.dumps(value, ensure_ascii=self.rng.random() < 0.5)
        if kind == 2:  # an object without a command
            fields = {k: v for k, v in self.extras().items() if k != "command"}
            fields.update(self.rng.choice([{}, {"envs": {"A": "b"}}, {"lock_id": "L"}]))
            return json.dumps(fields)
        if kind == 3:  # a command that is not a non-empty string
            command = self.rng.choice([self.not_a_string(), "", None, [f"touch {ran}"]])
            return json.dumps({**self.extras(), "command": command})
        if kind == 4:  # a good command, a bad duration
            field = self.rng.choice(DURATIONS)
            return json.dumps({**good, field: self.rng.choice(self.BAD_DURATIONS)})
        if kind == 5:  # a good command, bad envs
            field = self.rng.choice(["env", "envs"])
            return json.dumps({**good, field: self.rng.choice(self.BAD_ENVS)})
        if kind == 6:  # a good command, a bad flag or id
            field = self.rng.choice([*FLAGS, "event_id", "lock_id"])
            value = self.not_a_string()
            if field in FLAGS:
                value = self.rng.choice([value, 0, 1, "true", "false"])
            return json.dumps({**good, field: value})
        if kind == 7:  # a command no process can take
            command = self.rng.choice([f"touch {ran}\0", f"touch {ran}\ud800", f"\udfff{ran}"])
            return json.dumps({"command": command})
        if kind == 8:  # almost JSON
            text = json.dumps(good)
            return self.rng.choice(
                [
                    text[: self.rng.randint(1, len(text) - 1)],
                    "\ufeff" + text,
                    text + self.rng.choice(["x", "}", "{}", " 1"]),
                    text.replace('"', "'"),
                    text[:-1] + ', "life_time": NaN}',
                    text[:-1] + ', "timeout": Infinity}',
                    text[:-1] + ', "x": ' + "9" * 5000 + "}",
                    text[:-1] + ', "x": ' + "[" * 3000 + "]" * 3000 + "}",
                    "[" * 5000,
                    text.replace(":", "=", 1),
                ]
            )
        # kind 9: a whole random object holding a bad field among unknown ones
        fields = self.extras()
        fields.update(good)
        fields[self.rng.choice(DURATIONS)] = self.rng.choice(self.BAD_DURATIONS)
        return json.dumps(fields, ensure_ascii=False)

    def next(self) -> str:
        while True:
            body = sqs_safe(self.candidate(f"ran-{self.count}"))
            if body.strip(" "):
                self.count += 1
                return body


def invalid_bodies(seed: int, n: int) -> list[tuple[str, str]]:
    """n (body, reason) pairs; each body is checked to be refused by the daemon's own parser."""
    source = InvalidBodies(seed)
    bodies = []
    for _ in range(n):
        body = source.next()
        assert sqs_safe(body) == body and body
        try:
            parse_job(body, message_id="m", sent_at=0.0)
        except InvalidJobError as error:
            bodies.append((body, str(error)))
        else:
            raise AssertionError(f"the generator made a valid job: {body!r}")
    return bodies


def send_batches(aws: Aws, entries: list[dict[str, Any]]) -> list[str]:
    """Send entries ten to a call; the message ids in order."""
    ids = []
    for i in range(0, len(entries), 10):
        chunk = [{"Id": str(j), **entry} for j, entry in enumerate(entries[i : i + 10])]
        response = aws.sqs.send_message_batch(QueueUrl=aws.queue_url, Entries=chunk)
        assert not response.get("Failed"), response["Failed"]
        by_id = {ok["Id"]: ok["MessageId"] for ok in response["Successful"]}
        ids += [by_id[str(j)] for j in range(len(chunk))]
    return ids


@pytest.mark.slow
def test_daemon_survives_hundreds_of_invalid_messages(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # Two hundred: moto's receive reads the whole queue's attributes for each message it hands
    # out, so that the test's CPU grows with the square of the count.
    count = 200
    bodies = invalid_bodies(seed=20240601, n=count)
    reasons = {reason.split(":")[0] for _, reason in bodies}
    # The generator reaches every kind of refusal, not just one.
    assert {"body is not JSON", "body must be a JSON object, got array"} <= reasons
    assert len({r for r in reasons if r.startswith("field ")}) >= 10, reasons
    daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=10)
    ids = send_batches(aws, [{"MessageBody": body} for body, _ in bodies])
    assert len(set(ids)) == count

    wait_until(
        lambda: daemon.proc.poll() is not None or invocations(port)["failed"] >= count,
        timeout=60,
        what=f"{count} invalid messages counted failed",
    )
    assert daemon.proc.poll() is None, daemon.log
    wait_until(lambda: aws.queue_counts() == (0, 0), timeout=30, what="queue emptied")
    assert invocations(port) == {
        "succeeded": 0,
        "failed": count,
        "errored": 0,
        "duplicates": 0,
        "timed_out": 0,
    }
    # Each one logged with its id and the parser's reason.
    log = daemon.log
    for message_id, (_, reason) in zip(ids, bodies, strict=True):
        line = f"invalid message {message_id} deleted (the queue has no dead-letter queue): "
        assert line in log, message_id
        first = reason.splitlines()[0]
        assert re.search(re.escape(line) + r".*" + re.escape(first[:40]), log), reason
    assert log.count("invalid message ") == count
    assert not list(tmp_path.glob("ran-*")), "a command from an invalid message ran"

    aws.send({"command": "touch still-working"})
    wait_until(lambda: invocations(port)["succeeded"] == 1, what="a valid job after the invalid")
    assert (tmp_path / "still-working").exists()
    assert invocations(port)["failed"] == count
    assert daemon.proc.poll() is None
    assert daemon.stop() == 0


def test_invalid_messages_go_to_the_dead_letter_queue_with_body_attributes_and_reason(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    dlq_url = aws.sqs.create_queue(QueueName=f"{aws.queue_name}-dlq")["QueueUrl"]
    dlq_arn = aws.sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"}
    aws.sqs.set_queue_attributes(
        QueueUrl=aws.queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
    )
    daemon, port = run_daemon(start_daemon, tmp_path, aws)

    bodies = invalid_bodies(seed=7, n=20)
    sent: dict[str, tuple[dict[str, Any], str]] = {}  # case -> (attributes, reason)
    entries = []
    for i, (body, reason) in enumerate(bodies):
        attributes: dict[str, Any] = {"case": {"DataType": "String", "StringValue": f"case-{i}"}}
        if i == 19:  # ten attributes, the most SQS allows: no room for the reason
            for k in range(9):
                attributes[f"a{k}"] = {"DataType": "String", "StringValue": f"v{k}"}
        elif i % 3 == 1:
            attributes["n"] = {"DataType": "Number", "StringValue": str(i * 7)}
            attributes["blob"] = {"DataType": "Binary", "BinaryValue": bytes([i, 0, 255])}
        sent[f"case-{i}"] = (attributes, reason)
        entries.append({"MessageBody": body, "MessageAttributes": attributes})
    message_ids = {f"case-{i}": id_ for i, id_ in enumerate(send_batches(aws, entries))}
    expected_bodies = {f"case-{i}": body for i, (body, _) in enumerate(bodies)}

    wait_until(lambda: invocations(port)["failed"] == 20, timeout=30, what="20 counted failed")
    received: dict[str, dict[str, Any]] = {}

    def collect() -> bool:
        response = aws.sqs.receive_message(
            QueueUrl=dlq_url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=60,
        )
        for message in response.get("Messages", []):
            case = message["MessageAttributes"]["case"]["StringValue"]
            assert case not in received, f"{case} dead-lettered twice"
            received[case] = message
        return len(received) == 20

    wait_until(collect, timeout=30, what="20 messages in the dead-letter queue")
    for case, message in received.items():
        attributes, reason = sent[case]
        assert message["Body"] == expected_bodies[case]
        got = {
            name: {
                k: v for k, v in value.items() if k in ("DataType", "StringValue", "BinaryValue")
            }
            for name, value in message["MessageAttributes"].items()
        }
        want = dict(attributes)
        ours = {
            "sqsjkr_error": {"DataType": "String", "StringValue": reason},
            "sqsjkr_message_id": {"DataType": "String", "StringValue": message_ids[case]},
            "sqsjkr_receive_count": {"DataType": "Number", "StringValue": "1"},
        }
        for name, value in ours.items():
            if len(want) < 10:
                want[name] = value
        assert got == want, case
    assert "sqsjkr_error" not in received["case-19"]["MessageAttributes"]
    dlq_counts = aws.sqs.get_queue_attributes(
        QueueUrl=dlq_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    assert dlq_counts == {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesNotVisible": "20",
    }  # each exactly once
    wait_until(lambda: aws.queue_counts() == (0, 0), what="source queue emptied")
    assert daemon.log.count("moved to the dead-letter queue") == 20
    assert not list(tmp_path.glob("ran-*"))
    assert daemon.stop() == 0
