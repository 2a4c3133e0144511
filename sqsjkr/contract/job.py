"""The job message contract: the JSON body of one SQS message and the Job it describes.

Parsing is strict about the fields sqsjkr uses and ignores the others, as the Go daemon did.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from sqsjkr.contract.duration import Duration, duration_value
from sqsjkr.errors import DurationError, InvalidJobError, quote

#: DynamoDB's limit on a partition key, which a lock_id becomes.
MAX_LOCK_ID_BYTES = 2048

# The Go README documents "env" and the Go code reads "envs": merging in this order lets "envs" win.
_ENV_FIELDS = ("env", "envs")

#: Every field a message may carry; the daemon ignores any other (as the Go daemon did).
MESSAGE_FIELDS = frozenset(
    {
        "command",
        *_ENV_FIELDS,
        "event_id",
        "lock_id",
        "life_time",
        "abort_if_locked",
        "disable_life_time_trigger",
        "timeout",
    }
)


@dataclass(frozen=True)
class Job:
    """One job: a shell command, its environment and how to schedule it."""

    message_id: str
    command: str
    event_id: str = ""
    envs: Mapping[str, str] = field(default_factory=dict)
    lock_id: str | None = None
    life_time: Duration | None = None
    abort_if_locked: bool = False
    disable_life_time_trigger: bool = False
    sent_at: float = 0.0
    timeout: Duration | None = None  # None: the daemon's [kicker] job_timeout, if any

    def __post_init__(self) -> None:
        # The same defaults as parse_job, so that a Job built in code means what a message would.
        if not self.event_id:
            object.__setattr__(self, "event_id", self.message_id)
        # A private copy: later changes to the caller's dict must not change a frozen Job.
        object.__setattr__(self, "envs", dict(self.envs))
        if self.lock_id == "":
            object.__setattr__(self, "lock_id", None)
        if self.life_time is not None and self.life_time.ns == 0:
            object.__setattr__(self, "life_time", None)
        if self.timeout is not None and self.timeout.ns == 0:
            object.__setattr__(self, "timeout", None)


def parse_job(body: str | bytes, *, message_id: str, sent_at: float) -> Job:
    """The Job in an SQS message body; InvalidJobError names the field at fault and why."""
    fields = _load_object(body)
    return Job(
        message_id=message_id,
        command=_command(fields.get("command")),
        event_id=_optional_text(fields, "event_id"),
        envs=_envs(fields),
        lock_id=_lock_id(fields),
        life_time=_duration_field(fields, "life_time"),
        timeout=_duration_field(fields, "timeout"),
        abort_if_locked=_flag(fields, "abort_if_locked"),
        disable_life_time_trigger=_flag(fields, "disable_life_time_trigger"),
        sent_at=sent_at,
    )


def build_body(
    command: str,
    *,
    envs: Mapping[str, str] | None = None,
    event_id: str | None = None,
    lock_id: str | None = None,
    life_time: int | str | None = None,
    timeout: int | str | None = None,
    abort_if_locked: bool = False,
    disable_life_time_trigger: bool = False,
) -> str:
    """The compact message body of a job, with only the fields that are set."""
    fields: dict[str, object] = {"command": command}
    if envs:
        fields["envs"] = dict(envs)
    if event_id:
        fields["event_id"] = event_id
    if lock_id:
        fields["lock_id"] = lock_id
    if life_time is not None:
        # Kept in the caller's form (seconds or Go syntax): the Go daemon reads both.
        fields["life_time"] = life_time
    if timeout is not None:
        fields["timeout"] = timeout
    if abort_if_locked:
        fields["abort_if_locked"] = True
    if disable_life_time_trigger:
        fields["disable_life_time_trigger"] = True
    # ASCII-only JSON escapes every character that SQS refuses in a message body.
    body = json.dumps(fields, separators=(",", ":"))
    # Refuse here what the daemon would refuse, so a bad job never reaches the queue.
    parse_job(body, message_id="", sent_at=0.0)
    return body


def is_expired(job: Job, now: float) -> bool:
    """Whether the job has outlived its life_time at unix time now."""
    if job.life_time is None:
        return False
    # Compare in whole microseconds, the precision of a float epoch time: 10.3 - 10.0 is a
    # hair over 0.3 as floats, and a 300ms job must not expire at exactly 300ms.
    age_us = round((now - job.sent_at) * 1_000_000)
    return age_us * 1_000 > job.life_time.ns


def trigger_line(job: Job) -> str:
    """The line the Go daemon wrote to the life_time trigger's stdin, without the newline."""
    life_time = str(job.life_time) if job.life_time is not None else "0s"
    return (
        f"job_id:{job.message_id}, event_id:{job.event_id}, command:{job.command}, "
        f"life_time:{life_time}, sent_timestamp:{_go_time(job.sent_at)}"
    )


def _go_time(timestamp: float) -> str:
    """Go's time.Time.String() of a unix time in the local zone."""
    # A float epoch time is good to about a quarter of a microsecond: finer digits are noise.
    micros = round(Fraction(timestamp) * 1_000_000)
    seconds, micros = divmod(micros, 1_000_000)
    local = time.localtime(seconds)
    fraction = f".{micros:06d}".rstrip("0") if micros else ""
    sign = "-" if local.tm_gmtoff < 0 else "+"
    hours, minutes = divmod(abs(local.tm_gmtoff) // 60, 60)
    offset = f"{sign}{hours:02d}{minutes:02d}"
    # Go prints the numeric offset again when the zone has no abbreviation.
    zone = local.tm_zone or offset
    return (
        f"{local.tm_year:04d}-{local.tm_mon:02d}-{local.tm_mday:02d} "
        f"{local.tm_hour:02d}:{local.tm_min:02d}:{local.tm_sec:02d}{fraction} {offset} {zone}"
    )


def _load_object(body: str | bytes) -> dict[str, object]:
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidJobError(
                f"body is not valid UTF-8: {error.reason} at byte offset {error.start}"
            ) from None
    try:
        data = json.loads(body, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise InvalidJobError(
            f"body is not JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except (ValueError, RecursionError) as error:
        # Python-only leniencies and limits: NaN/Infinity, huge integers, deep nesting.
        raise InvalidJobError(f"body is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise InvalidJobError(f"body must be a JSON object, got {_json_type(data)}")
    return data


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")


def _command(value: object) -> str:
    if value is None:
        raise _field_error("command", "required")
    command = _text("command", value)
    if not command:
        raise _field_error("command", "must not be empty")
    _reject_nul("command", command)
    return command


def _optional_text(fields: Mapping[str, object], name: str) -> str:
    value = fields.get(name)
    return "" if value is None else _text(name, value)


def _lock_id(fields: Mapping[str, object]) -> str:
    lock_id = _optional_text(fields, "lock_id")
    # It becomes a DynamoDB partition key: refused here, rather than failing at every delivery.
    size = len(lock_id.encode("utf-8"))
    if size > MAX_LOCK_ID_BYTES:
        raise _field_error("lock_id", f"must be at most {MAX_LOCK_ID_BYTES} bytes, got {size}")
    return lock_id


def _flag(fields: Mapping[str, object], name: str) -> bool:
    value = fields.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _field_error(name, f"must be a boolean, got {_json_type(value)}")
    return value


def _duration_field(fields: Mapping[str, object], name: str) -> Duration | None:
    value = fields.get(name)
    if value is None:
        return None
    try:
        duration = duration_value(value)
    except DurationError as error:
        reason = str(error)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            reason += f", got {_json_type(value)}"
            if isinstance(value, float):
                # "got number" alone would puzzle whoever wrote 90.0.
                reason += f" {value!r}"
        raise _field_error(name, reason) from None
    return duration if duration.ns else None


def _envs(fields: Mapping[str, object]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name in _ENV_FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise _field_error(name, f"must be an object, got {_json_type(value)}")
        for key, item in value.items():
            path = f"{name}.{key}"
            _check_env_name(path, key)
            item = _text(path, item)
            _reject_nul(path, item)
            merged[key] = item
    return merged


def _check_env_name(path: str, key: str) -> None:
    if not key:
        raise _field_error(path, "variable name must not be empty")
    if "=" in key:
        raise _field_error(path, 'variable name must not contain "="')
    if "\0" in key:
        raise _field_error(path, "variable name must not contain a NUL character")
    _text(path, key)


def _text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise _field_error(name, f"must be a string, got {_json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # The JSON escape "\ud800" decodes to a lone surrogate, which no command or AWS call takes.
        surrogate = value[error.start].encode("utf-8", "backslashreplace").decode("ascii")
        raise _field_error(name, f"must not contain an unpaired surrogate ({surrogate})") from None
    return value


def _reject_nul(name: str, value: str) -> None:
    # The command line and environment of a process are NUL-terminated C strings.
    if "\0" in value:
        raise _field_error(name, "must not contain a NUL character")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _field_error(name: str, reason: str) -> InvalidJobError:
    return InvalidJobError(f"field {quote(name)}: {reason}")
