"""The job message contract: the JSON body of one SQS message and the Job it describes.

Parsing is strict about the fields sqsjkr uses and ignores the others, as the Go daemon did.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from sqsjkr.contract.catchup import parse_catch_up
from sqsjkr.contract.duration import Duration
from sqsjkr.contract.fields import (
    duration_field,
    field_error,
    flag,
    integer,
    json_type,
    key_text,
    load_object,
    reject_nul,
    text,
)
from sqsjkr.contract.firing import Firing, Origin, parse_firing, parse_origin
from sqsjkr.contract.http_call import HttpCall, parse_http
from sqsjkr.contract.pipeline import Pipeline, PipelineRun, parse_pipeline, parse_pipeline_run
from sqsjkr.errors import InvalidFieldError, InvalidJobError

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
        "http",
        "concurrency_key",
        "concurrency_limit",
        "retries",
        "retry_delay",
        "firing",
        "origin",
        "pipeline",
        "step",
        "pipeline_key",
        "rerun",
        "catch_up",  # read from the schedule by the daemon's catch-up, not when a job runs
    }
)
#: Most runs one message may ask for: a first one and this many retries.
MAX_RETRIES = 100
#: Most jobs of one concurrency_key running at once.
MAX_CONCURRENCY_LIMIT = 1000
DEFAULT_RETRY_DELAY = Duration.of_seconds(60)


@dataclass(frozen=True)
class Job:
    """One job: a shell command (or an HTTP call), its environment and how to schedule it."""

    message_id: str
    command: str = ""  # "": the job is its http call
    event_id: str = ""
    envs: Mapping[str, str] = field(default_factory=dict)
    lock_id: str | None = None
    life_time: Duration | None = None
    abort_if_locked: bool = False
    disable_life_time_trigger: bool = False
    sent_at: float = 0.0
    timeout: Duration | None = None  # None: the daemon's [kicker] job_timeout, if any
    http: HttpCall | None = None  # the call this job makes instead of a command
    #: At most concurrency_limit jobs of one concurrency_key run at once, fleet-wide.
    concurrency_key: str | None = None
    concurrency_limit: int = 1
    retries: int = 0  # runs again after an error or a timeout, this many times at most
    retry_delay: Duration = DEFAULT_RETRY_DELAY  # the first wait; it doubles
    #: The schedule's firing this message is (None: sent without one, or by an older module).
    firing: Firing | None = None
    origin: Origin | None = None  # who sent it, when the message says
    #: The pipeline the message carries, the step it runs and the run's key (docs/pipelines.md).
    pipeline: PipelineRun | None = None

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
        if self.concurrency_key == "":
            object.__setattr__(self, "concurrency_key", None)
        if not self.command and self.http is None:
            raise ValueError("a Job needs a command or an http call")

    @property
    def what(self) -> str:
        """What the job runs, for logs, records and reports: its command, or its HTTP call's
        method and origin (never its path or query, which may hold a token)."""
        if self.http is not None:
            return f"{self.http.method} {self.http.origin}"
        return self.command

    @property
    def rerun(self) -> str | None:
        """The id of an operator's re-run of this message's firing or pipeline step (trigger
        --firing, or --run for a run begun by hand), run once apart from the first run's claim."""
        if self.firing is not None and self.firing.rerun is not None:
            return self.firing.rerun
        return None if self.pipeline is None else self.pipeline.rerun


def parse_job(
    body: str | bytes,
    *,
    message_id: str,
    sent_at: float,
    http_allow: Sequence[str] | None = None,
) -> Job:
    """The Job in an SQS message body; InvalidJobError names the field at fault and why.

    http_allow: the URL prefixes an HTTP job may call (None: not checked here).
    """
    fields = load_object(body)
    command, http = _command_or_http(fields, http_allow)
    key, limit = _concurrency(fields)
    firing = parse_firing(fields)
    # Read by catch-up from the schedule, not when the job runs: checked alike all the same, so
    # that a send or a redrive refuses a bad value as the schedule's reader would.
    parse_catch_up(fields)
    # A run of a pipeline is keyed by its root's firing, or by the root's message when sent by hand.
    run_key = message_id if firing is None else firing.key
    pipeline = parse_pipeline(fields)
    _check_step_jobs(pipeline, http_allow)
    return Job(
        message_id=message_id,
        command=command,
        http=http,
        event_id=key_text(fields, "event_id"),
        envs=_envs(fields),
        lock_id=key_text(fields, "lock_id"),
        life_time=duration_field(fields, "life_time"),
        timeout=duration_field(fields, "timeout"),
        abort_if_locked=flag(fields, "abort_if_locked"),
        disable_life_time_trigger=flag(fields, "disable_life_time_trigger"),
        sent_at=sent_at,
        concurrency_key=key,
        concurrency_limit=limit,
        retries=integer(fields, "retries", 0, 0, MAX_RETRIES),
        retry_delay=_retry_delay(fields),
        firing=firing,
        origin=parse_origin(fields),
        pipeline=parse_pipeline_run(fields, pipeline, run_key),
    )


def _check_step_jobs(pipeline: Pipeline | None, http_allow: Sequence[str] | None) -> None:
    """Each step's job parsed as its message will be, so that a malformed one is refused with
    the pipeline wherever it enters (its root's message, a send), not once the steps before it ran;
    InvalidJobError names the field by its place (pipeline.steps.NAME.job.timeout)."""
    if pipeline is None:
        return
    for step in pipeline.steps.values():
        if step.job is None:
            continue
        try:
            parse_job(
                json.dumps(step.job), message_id=step.name, sent_at=0.0, http_allow=http_allow
            )
        except InvalidFieldError as error:
            raise field_error(
                f"pipeline.steps.{step.name}.job.{error.field}", error.reason
            ) from None
        except InvalidJobError as error:  # of the job as a whole, not of one of its fields
            raise field_error(f"pipeline.steps.{step.name}.job", str(error)) from None


def _command_or_http(
    fields: Mapping[str, object], allow: Sequence[str] | None
) -> tuple[str, HttpCall | None]:
    if fields.get("http") is None:
        return _command(fields.get("command")), None
    if fields.get("command") is not None:
        raise field_error("http", 'give either "command" or "http", not both')
    return "", parse_http(fields["http"], allow)


def _retry_delay(fields: Mapping[str, object]) -> Duration:
    """retry_delay: absent means the default; 0 means at once."""
    if fields.get("retry_delay") is None:
        return DEFAULT_RETRY_DELAY
    return duration_field(fields, "retry_delay") or Duration(0)


def _concurrency(fields: Mapping[str, object]) -> tuple[str | None, int]:
    key = key_text(fields, "concurrency_key")
    if not key and fields.get("concurrency_limit") is not None:
        raise field_error("concurrency_limit", 'needs a "concurrency_key"')
    limit = integer(fields, "concurrency_limit", 1, 1, MAX_CONCURRENCY_LIMIT)
    return key or None, limit


def build_body(
    command: str | None,
    *,
    envs: Mapping[str, str] | None = None,
    event_id: str | None = None,
    lock_id: str | None = None,
    life_time: int | str | None = None,
    timeout: int | str | None = None,
    abort_if_locked: bool = False,
    disable_life_time_trigger: bool = False,
    http: Mapping[str, object] | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    retries: int | None = None,
    retry_delay: int | str | None = None,
    firing: Firing | None = None,
    origin: Origin | None = None,
) -> str:
    """The compact message body of a job, with only the fields that are set."""
    fields: dict[str, object] = {"command": command} if command is not None else {}
    if http is not None:
        fields["http"] = dict(http)
    if concurrency_key:
        fields["concurrency_key"] = concurrency_key
    if concurrency_limit is not None:
        fields["concurrency_limit"] = concurrency_limit
    if retries:
        fields["retries"] = retries
    if retry_delay is not None:
        fields["retry_delay"] = retry_delay
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
    if firing is not None:
        fields["firing"] = firing.as_fields()
    if origin is not None:
        fields["origin"] = origin.value
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


def _command(value: object) -> str:
    if value is None:
        raise field_error("command", "required")
    command = text("command", value)
    if not command:
        raise field_error("command", "must not be empty")
    reject_nul("command", command)
    return command


def _envs(fields: Mapping[str, object]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name in _ENV_FIELDS:
        value = fields.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise field_error(name, f"must be an object, got {json_type(value)}")
        for key, item in value.items():
            path = f"{name}.{key}"
            _check_env_name(path, key)
            item = text(path, item)
            reject_nul(path, item)
            merged[key] = item
    return merged


def _check_env_name(path: str, key: str) -> None:
    if not key:
        raise field_error(path, "variable name must not be empty")
    if "=" in key:
        raise field_error(path, 'variable name must not contain "="')
    if "\0" in key:
        raise field_error(path, "variable name must not contain a NUL character")
    text(path, key)
