"""`sqsjkr send`: check a job with the daemon's own parser and put it on the queue.

What the daemon would refuse is never sent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    profile_option,
    queue_option,
    reason_option,
    region_option,
    warn,
)
from sqsjkr.commands.scheduled import manage_scheduled, schedule_job
from sqsjkr.commands.store import auditor
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.commands.waiting import WAIT_TIMEOUT_EXIT, duration_seconds
from sqsjkr.contract.config import Overrides
from sqsjkr.contract.http_call import METHODS
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import InvalidJobError, WaitTimedOut, quote
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.job_fields import JobFields, job_body
from sqsjkr.fleet.jobs import JobHandle
from sqsjkr.fleet.scheduled import check_timing, when_of
from sqsjkr.fleet.send import addressed, by_hand, send_job


def checked_job(body: str | None, options: JobFields) -> str:
    """The body to send, from --body or the job options, checked with the daemon's parser; warns
    of the fields it ignores."""
    try:
        if body is not None:
            # What only the fleet writes (firing, step, ...) is refused first, as a usage
            # error: the parser would refuse some of it less clearly.
            by_hand(body)
        body, warnings = job_body(body, options)
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    for warning in warnings:
        warn(warning)
    return body


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
    options = JobFields(**job)
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
            account=(profile, region),
            reason=reason,
        )
        return 0
    later = check_timing(at_time, in_time, zone, delay)
    if body is not None and built_from_options:
        raise UsageFailure("give either --body or the job options (--command, ...), not both")
    body = checked_job(body, options)
    config = load(conf, Overrides(profile=profile, region=region))
    try:
        # The daemons' [http] allow is not known here: this config's stands in for it.
        parse_job(body, message_id="(not sent)", sent_at=0.0, http_allow=config.http.allow)
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    waits = Waits.of(wait, wait_timeout, unique_for, later=later, history=config.history.backend)
    when = when_of(config, at_time, in_time, zone) if later else None
    store = store_of(config)
    sqs = store.service_client("sqs")
    outgoing = addressed(
        config, sqs, body, queue_name, delay=delay, group_id=group_id, dedupe_id=dedupe_id,
        later=later, warn=warn,
    )  # fmt: skip
    audit = auditor(store)
    if when is not None:
        schedule_job(
            config, store.session, sqs, audit, outgoing, when,
            conf=conf, account=(profile, region), reason=reason,
        )  # fmt: skip
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
        warn(sent.audit_problem)
    return waits.follow(sent.handle)


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
        echo_lines(history_lines([record], output=True))
        return 0 if record.outcome is RunOutcome.SUCCEEDED else 1
