"""`sqsjkr send`: check a job with the daemon's own parser and put it on the queue.

What the daemon would refuse is never sent.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, TypeVar

import click

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.sqs import (
    SendSettings,
    fifo_id_error,
    fifo_send_parameters,
    group_id_of,
    resolve_queue_url,
    send_settings,
)
from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    profile_option,
    queue_option,
    reason_option,
    region_option,
)
from sqsjkr.commands.scheduled import check_timing, manage_scheduled, schedule_job, when_of
from sqsjkr.commands.tables import history_lines
from sqsjkr.commands.waiting import WAIT_TIMEOUT_EXIT
from sqsjkr.contract.config import Overrides
from sqsjkr.contract.duration import parse_duration
from sqsjkr.contract.http_call import METHODS
from sqsjkr.contract.job import build_body, parse_job
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import DurationError, InvalidJobError, WaitTimedOut, quote
from sqsjkr.fleet.audit import command_auditor
from sqsjkr.fleet.checks import retries_warning, unknown_fields
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.jobs import JobHandle
from sqsjkr.fleet.send import Outgoing, send_job


def key_values(option: str, values: Sequence[str]) -> dict[str, str]:
    """Repeated KEY=VALUE options (--env, --http-header) as a dict; the last of a key wins."""
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageFailure(f"{option} {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return pairs


def duration_option(text: str | None) -> int | str | None:
    """A --life-time or --timeout as the message carries it: int seconds or Go syntax."""
    if text is None:
        return None
    # Past 20 digits it is out of range either way, and int() refuses past 4300: left as text,
    # the parser's error names the option.
    return int(text) if text.isdigit() and len(text) <= 20 else text


def read_body(value: str) -> str | bytes:
    """--body: the JSON itself, "-" for standard input, or "@PATH" for a file's contents.

    What is read stays bytes, so that the daemon's parser reports a body that is not UTF-8.
    """
    if value == "-":
        return sys.stdin.buffer.read()
    if value.startswith("@"):
        path = value[1:]
        if not path:
            raise UsageFailure("--body @: expected a file name after @ (--body @job.json)")
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise UsageFailure(f"--body {value}: cannot read {path}: {exc.strerror}") from exc
    return value


def checked_body(value: str) -> str:
    """The --body message, checked with the daemon's own parser; warns of fields it ignores."""
    raw = read_body(value)
    # What the daemon would refuse is never sent.
    parse_job(raw, message_id="(not sent)", sent_at=0.0)
    body = raw.decode() if isinstance(raw, bytes) else raw
    for warning in unknown_fields(body):
        click.echo(f"sqsjkr: warning: {warning}", err=True)
    return body


#: The option that sets each message field (a dotted path inside "http"), for errors: whoever
#: used the options never saw the field names.
_FIELD_OPTIONS = {
    "command": "--command",
    "env": "--env",
    "envs": "--env",
    "event_id": "--event-id",
    "lock_id": "--lock-id",
    "life_time": "--life-time",
    "timeout": "--timeout",
    "abort_if_locked": "--abort-if-locked",
    "disable_life_time_trigger": "--disable-life-time-trigger",
    "concurrency_key": "--concurrency-key",
    "concurrency_limit": "--concurrency-limit",
    "retries": "--retries",
    "retry_delay": "--retry-delay",
    "http": "--http-url",
    "http.url": "--http-url",
    "http.method": "--http-method",
    "http.headers": "--http-header",
    "http.body": "--http-body",
    "http.timeout": "--http-timeout",
    "http.success_status": "--success-status",
}
#: How contract.fields.field_error starts its message: the field's name, JSON-quoted (and cut,
#: when long, to a prefix that still names its option).
_FIELD_ERROR = re.compile(r'field ("(?:[^"\\]|\\.)*")(?:\.\.\. \(\d+ more characters\))?: ')
#: The options whose parameter name is not the option's own.
_OPTION_NAMES = {
    "envs": "--env",
    "http_headers": "--http-header",
    "success_statuses": "--success-status",
}


def option_of(error: InvalidJobError) -> str | None:
    """The option that set the field an error of the daemon's parser names, if one did."""
    match = _FIELD_ERROR.match(str(error))
    if not match:
        return None
    name = json.loads(match.group(1))
    # Longest first: "http.headers.X" is --http-header's, "http" alone is --http-url's.
    for field_name in sorted(_FIELD_OPTIONS, key=len, reverse=True):
        if name == field_name or name.startswith(f"{field_name}."):
            return _FIELD_OPTIONS[field_name]
    return None


def _is_set(value: object) -> bool:
    # Not a truth test: --retries 0 and --concurrency-limit 0 are given all the same.
    return value is not None and value is not False and value != ()


@dataclass(frozen=True)
class JobOptions:
    """The job as the command-line options give it, before it becomes a message body."""

    command: str | None
    envs: tuple[str, ...]
    event_id: str | None
    lock_id: str | None
    life_time: str | None
    timeout: str | None
    abort_if_locked: bool
    disable_life_time_trigger: bool
    concurrency_key: str | None
    concurrency_limit: int | None
    retries: int | None
    retry_delay: str | None
    http_url: str | None
    http_method: str | None
    http_headers: tuple[str, ...]
    http_body: str | None
    http_timeout: str | None
    success_statuses: tuple[int, ...]

    def given(self) -> list[str]:
        """The options given, by their names on the command line."""
        return [
            _OPTION_NAMES.get(item.name, "--" + item.name.replace("_", "-"))
            for item in fields(self)
            if _is_set(getattr(self, item.name))
        ]

    def body(self) -> str:
        """The message body, checked with the daemon's parser; errors name the option at fault."""
        self._check_combinations()
        try:
            return build_body(
                self.command,
                envs=key_values("--env", self.envs),
                event_id=self.event_id,
                lock_id=self.lock_id,
                life_time=duration_option(self.life_time),
                timeout=duration_option(self.timeout),
                abort_if_locked=self.abort_if_locked,
                disable_life_time_trigger=self.disable_life_time_trigger,
                http=self._http(),
                concurrency_key=self.concurrency_key,
                concurrency_limit=self.concurrency_limit,
                retries=self.retries,
                retry_delay=duration_option(self.retry_delay),
            )
        except InvalidJobError as exc:
            option = option_of(exc)
            where = f"{option}: " if option else ""
            raise UsageFailure(f"invalid job, nothing sent: {where}{exc}") from exc

    def _check_combinations(self) -> None:
        given = self.given()
        if self.command is not None and self.http_url is not None:
            raise UsageFailure("give either --command or --http-url, not both")
        if self.http_url is None:
            for option in given:
                if option.startswith("--http-") or option == "--success-status":
                    raise UsageFailure(f"{option} needs --http-url")
        if self.command is None and self.http_url is None:
            raise UsageFailure("--command, --http-url or --body is required")
        if self.concurrency_limit is not None and not self.concurrency_key:
            raise UsageFailure("--concurrency-limit needs --concurrency-key")

    def _http(self) -> dict[str, object] | None:
        if self.http_url is None:
            return None
        call: dict[str, object] = {"url": self.http_url}
        if self.http_method is not None:
            call["method"] = self.http_method
        if self.http_headers:
            call["headers"] = key_values("--http-header", self.http_headers)
        if self.http_body is not None:
            call["body"] = self.http_body
        if self.http_timeout is not None:
            call["timeout"] = duration_option(self.http_timeout)
        if self.success_statuses:
            call["success_status"] = list(self.success_statuses)
        return call


_Command = TypeVar("_Command", bound=Callable[..., Any])

_JOB_OPTIONS = [
    click.option("--command", help="Shell command to run (sh -c)."),
    click.option(
        "--env", "envs", multiple=True, metavar="KEY=VALUE", help="Job environment; repeat."
    ),
    click.option("--event-id", help="Name of the schedule (default: the message id)."),
    click.option("--lock-id", help="Jobs with one lock_id never run at once."),
    click.option("--life-time", help='Cancel when older: seconds or a duration ("90s", "1h30m").'),
    click.option("--timeout", help='Stop the job after this long: seconds or a duration ("30m").'),
    click.option("--abort-if-locked", is_flag=True, help="Give up at once when the lock is held."),
    click.option("--disable-life-time-trigger", is_flag=True),
    click.option(
        "--concurrency-key",
        metavar="KEY",
        help="At most --concurrency-limit jobs of one key run at once, across all hosts.",
    ),
    click.option(
        "--concurrency-limit",
        type=int,
        metavar="N",
        help="How many jobs of --concurrency-key may run at once (1 to 1000; default 1).",
    ),
    click.option(
        "--retries",
        type=int,
        metavar="N",
        help="Run an errored or timed-out job again, up to N times (0 to 100).",
    ),
    click.option(
        "--retry-delay",
        metavar="DURATION",
        help='Wait before the first retry, doubling after each ("30s"; default 1m).',
    ),
    click.option(
        "--http-url",
        metavar="URL",
        help="Make an HTTP call instead of running a command (the daemon's [http] allow "
        "decides which URLs it calls).",
    ),
    click.option(
        "--http-method",
        metavar="METHOD",
        help=f"Method of the call: {', '.join(METHODS)} (default POST).",
    ),
    click.option(
        "--http-header",
        "http_headers",
        multiple=True,
        metavar="NAME=VALUE",
        help="A header of the call; repeat.",
    ),
    click.option("--http-body", metavar="TEXT", help="Body of the call."),
    click.option(
        "--http-timeout",
        metavar="DURATION",
        help="Give up on the call after this long (default: --timeout, else [kicker] job_timeout).",
    ),
    click.option(
        "--success-status",
        "success_statuses",
        type=int,
        multiple=True,
        metavar="N",
        help="A status that counts as success, instead of any 2xx; repeat.",
    ),
]


def job_options(command: _Command) -> _Command:
    """The options that build a job, in the order --help lists them."""
    for option in reversed(_JOB_OPTIONS):
        command = option(command)
    return command


@click.command()
@conf_option
@profile_option
@region_option
@job_options
@click.option(
    "--delay",
    type=click.IntRange(0, 900),
    default=0,
    help="SQS DelaySeconds (not for FIFO queues, which have no per-message delay).",
)
@click.option(
    "--group-id",
    metavar="ID",
    help="FIFO queues: the message group (default: the job's event_id, else sqsjkr).",
)
@click.option(
    "--dedupe-id",
    metavar="ID",
    help="FIFO queues: the MessageDeduplicationId (default: none, for a queue with "
    "content-based deduplication).",
)
@click.option(
    "--body",
    metavar="JSON|-|@PATH",
    help="The whole message as JSON instead of the options above; - reads it from standard "
    "input, @PATH from a file.",
)
@click.option(
    "--at",
    "at_time",
    metavar="TIME",
    help="Put the job on the queue once, at TIME (EventBridge Scheduler): RFC 3339 "
    "(2030-01-31T09:30:00+09:00) or a local date and time (2030-01-31 09:30) in --timezone.",
)
@click.option(
    "--in", "in_time", metavar="DURATION", help='As --at, this long from now ("90m", "2h").'
)
@click.option(
    "--timezone",
    "zone",
    metavar="ZONE",
    help="Zone of --at without an offset ([schedule] timezone).",
)
@click.option("--list-scheduled", is_flag=True, help="List the --at and --in jobs still to run.")
@click.option("--cancel", metavar="NAME", help="Cancel an --at or --in job, by its name.")
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the run to its end and print its record; exit 0 only if it succeeded.",
)
@click.option(
    "--wait-timeout",
    default="1h",
    show_default=True,
    metavar="DURATION",
    help=f"Give up --wait after this long (0: never), and exit {WAIT_TIMEOUT_EXIT}.",
)
@click.option(
    "--unique-for",
    metavar="DURATION",
    help='While the same job sent to the same queue in the last DURATION ("10m") is '
    "unfinished, print its message id and send nothing.",
)
@queue_option
@reason_option
def send(
    conf: str,
    profile: str | None,
    region: str | None,
    queue_name: str | None,
    delay: int,
    group_id: str | None,
    dedupe_id: str | None,
    body: str | None,
    at_time: str | None,
    in_time: str | None,
    zone: str | None,
    list_scheduled: bool,
    cancel: str | None,
    reason: str,
    wait: bool,
    wait_timeout: str,
    unique_for: str | None,
    **job: Any,
) -> int:
    """Validate a job and put it on the queue; prints the message id.

    With --at or --in, EventBridge Scheduler puts it on the queue later instead; prints the
    name of its one-time schedule.
    """
    options = JobOptions(**job)
    built_from_options = bool(options.given())
    if list_scheduled or cancel is not None:
        others = any(
            (built_from_options, body, at_time, in_time, zone, delay, group_id, queue_name)
        )
        others = others or dedupe_id is not None or wait or unique_for is not None
        manage_scheduled(
            lambda: load(conf, Overrides(profile=profile, region=region)),
            listing=list_scheduled,
            cancel=cancel,
            other_options=bool(others),
            conf=conf,
            reason=reason,
        )
        return 0
    later = check_timing(at_time, in_time, zone, delay)
    if body is not None and built_from_options:
        raise UsageFailure("give either --body or the job options (--command, ...), not both")
    if body is not None:
        try:
            body = checked_body(body)
        except InvalidJobError as exc:
            raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    else:
        body = options.body()
    config = load(conf, Overrides(profile=profile, region=region))
    try:
        # The daemons' [http] allow is not known here: this config's stands in for it.
        parse_job(body, message_id="(not sent)", sent_at=0.0, http_allow=config.http.allow)
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    waits = Waits.of(wait, wait_timeout, unique_for, later=later, history=config.history.backend)
    when = when_of(config, at_time, in_time, zone) if later else None
    store = store_of(config)
    sqs = make_client(store.session, "sqs")
    queue_name = queue_name or config.sqs.queue_name
    queue_url = resolve_queue_url(sqs, queue_name, config.account.id)
    queue = QueueSend(queue_name, send_settings(sqs, queue_url))
    queue.warn_of_retries(body)
    fifo = queue.fifo_parameters(body, group_id, dedupe_id, delay=delay, later=later)
    audit = command_auditor(config)
    outgoing = Outgoing(body, queue_name, queue_url, delay, fifo)
    if when is not None:
        schedule_job(config, store.session, sqs, audit, outgoing, when, conf=conf, reason=reason)
        return 0
    sent = send_job(store, audit, outgoing, reason=reason, unique_for=waits.unique_for)
    click.echo(sent.handle.message_id)
    if sent.earlier:
        click.echo(
            "sqsjkr: an identical job sent earlier is unfinished (--unique-for): that is its "
            "message id; nothing was sent",
            err=True,
        )
    if sent.audit_problem is not None:
        click.echo(f"sqsjkr: warning: {sent.audit_problem}", err=True)
    return waits.follow(sent.handle)


def duration_seconds(option: str, text: str) -> float:
    """The seconds of a duration option (90s, 10m, 2h, 1d); a UsageFailure when it is not one."""
    try:
        seconds = parse_duration(text.strip(), days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"{option} {quote(text)}: {exc}") from exc
    if seconds < 0:
        raise UsageFailure(f"{option} {quote(text)}: a duration of 0 or more")
    return seconds


@dataclass(frozen=True)
class Waits:
    """--wait (with --wait-timeout) and --unique-for, checked against the other options."""

    wait: bool
    timeout: float | None
    unique_for: float | None

    @classmethod
    def of(
        cls, wait: bool, timeout: str, unique_for: str | None, *, later: bool, history: str
    ) -> Waits:
        if later and (wait or unique_for is not None):
            raise UsageFailure("--wait and --unique-for are for jobs sent now, not --at or --in")
        if wait and history == "none":
            raise UsageFailure(
                '--wait follows the run history, which is off ([history] backend = "none")'
            )
        seconds = None if unique_for is None else duration_seconds("--unique-for", unique_for)
        if seconds == 0:
            raise UsageFailure(f"--unique-for {quote(unique_for or '')}: a duration above 0")
        limit = duration_seconds("--wait-timeout", timeout) or None
        return cls(wait, limit, seconds)

    def follow(self, handle: JobHandle) -> int:
        """With --wait: the run's record, printed as `history` prints one run; 0 only if it
        succeeded, WAIT_TIMEOUT_EXIT when --wait-timeout passed."""
        if not self.wait:
            return 0
        try:
            record = handle.wait(self.timeout)
        except WaitTimedOut as exc:
            raise WaitTimedOut(f"{exc} (--wait-timeout)") from exc
        for line in history_lines([record], output=True):
            click.echo(line)
        return 0 if record.outcome is RunOutcome.SUCCEEDED else 1


@dataclass(frozen=True)
class QueueSend:
    """What sending a job to one queue takes: FIFO parameters, and a word on its RedrivePolicy."""

    name: str
    settings: SendSettings

    def warn_of_retries(self, body: str) -> None:
        """Warn when the job's retries can take it to the dead-letter queue."""
        warning = retries_warning(self.name, self.settings, body)
        if warning is not None:
            click.echo(f"sqsjkr: warning: {warning}", err=True)

    def fifo_parameters(
        self, body: str, group_id: str | None, dedupe_id: str | None, *, delay: int, later: bool
    ) -> dict[str, str] | None:
        """MessageGroupId (and MessageDeduplicationId) for a FIFO queue; None for a standard
        one. UsageFailure for options the queue cannot take."""
        if not self.settings.fifo:
            for option, value in (("--group-id", group_id), ("--dedupe-id", dedupe_id)):
                if value is not None:
                    raise UsageFailure(
                        f"{option} is for FIFO queues; queue {self.name} is a standard queue"
                    )
            return None
        if delay:
            raise UsageFailure(
                f"--delay: queue {self.name} is a FIFO queue, and SQS takes no per-message delay "
                "on those (only the queue's own DelaySeconds); use --in for a later run"
            )
        for option, value in (("--group-id", group_id), ("--dedupe-id", dedupe_id)):
            error = None if value is None else fifo_id_error(value)
            if error is not None:
                raise UsageFailure(f"{option}: {error}")
        self._check_deduplication(dedupe_id, later)
        group = group_id or group_id_of(json.loads(body).get("event_id"))
        if dedupe_id is not None:
            return fifo_send_parameters(group, dedupe_id)
        return {"MessageGroupId": group}  # deduplicated by its content

    def _check_deduplication(self, dedupe_id: str | None, later: bool) -> None:
        if later:
            if dedupe_id is not None:
                raise UsageFailure(
                    "--dedupe-id is for jobs sent now: EventBridge Scheduler sends to a FIFO "
                    "queue with no deduplication id, by the queue's content-based deduplication"
                )
            if not self.settings.content_based_deduplication:
                raise UsageFailure(
                    f"--at and --in: queue {self.name} is a FIFO queue without content-based "
                    "deduplication, and EventBridge Scheduler can only send to a FIFO queue that "
                    "has it (ContentBasedDeduplication; the terraform module sets it)"
                )
        elif dedupe_id is None and not self.settings.content_based_deduplication:
            raise UsageFailure(
                f"queue {self.name} is a FIFO queue without content-based deduplication: give "
                "--dedupe-id ID (SQS drops a later message with the same id for 5 minutes), or "
                "turn on ContentBasedDeduplication on the queue"
            )
