"""`sqsjkr send`: check a job with the daemon's own parser and put it on the queue.

What the daemon would refuse is never sent.
"""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.sqs import resolve_queue_url
from sqsjkr.commands.options import UsageFailure, conf_option, load, profile_option, region_option
from sqsjkr.commands.scheduled import check_timing, manage_scheduled, schedule_job, when_of
from sqsjkr.contract.config import Overrides
from sqsjkr.contract.job import MESSAGE_FIELDS, build_body, parse_job
from sqsjkr.errors import InvalidJobError, quote


def parse_env(values: Sequence[str]) -> dict[str, str]:
    envs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageFailure(f"--env {item!r}: expected KEY=VALUE")
        envs[key] = value
    return envs


def parse_headers(values: Sequence[str]) -> dict[str, str]:
    headers = {}
    for item in values:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageFailure(f"--http-header {item!r}: expected NAME=VALUE")
        headers[name] = value
    return headers


def http_option(
    url: str | None, method: str | None, headers: Sequence[str], body: str | None
) -> dict[str, object] | None:
    """The "http" field from the --http-* options; None without --http-url."""
    if url is None:
        if method is not None or headers or body is not None:
            raise UsageFailure("--http-method, --http-header and --http-body need --http-url")
        return None
    call: dict[str, object] = {"url": url}
    if method is not None:
        call["method"] = method
    if headers:
        call["headers"] = parse_headers(headers)
    if body is not None:
        call["body"] = body
    return call


def duration_option(text: str | None) -> int | str | None:
    """A --life-time or --timeout as the message carries it: int seconds or Go syntax."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


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


def unknown_fields(body: str) -> list[str]:
    """A warning for each field the daemon ignores, with the known name it is closest to."""
    warnings = []
    # Called once parse_job accepted the body, so it is a JSON object.
    for name in json.loads(body):
        if name in MESSAGE_FIELDS:
            continue
        warning = f"field {quote(name)} is not a job field and the daemon ignores it"
        close = difflib.get_close_matches(name, sorted(MESSAGE_FIELDS), n=1)
        if close:
            warning += f"; did you mean {quote(close[0])}?"
        warnings.append(warning)
    return warnings


@click.command()
@conf_option
@profile_option
@region_option
@click.option("--command", help="Shell command to run (sh -c).")
@click.option("--http-url", metavar="URL", help="Make this HTTP call instead of a command.")
@click.option("--http-method", metavar="METHOD", help="The call's method (default POST).")
@click.option(
    "--http-header",
    "http_headers",
    multiple=True,
    metavar="NAME=VALUE",
    help="A header of the call; repeat.",
)
@click.option("--http-body", metavar="TEXT", help="The call's body.")
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="Job environment; repeat.")
@click.option("--event-id", help="Name of the schedule (default: the message id).")
@click.option("--lock-id", help="Jobs with one lock_id never run at once.")
@click.option("--life-time", help='Cancel when older: seconds or a duration ("90s", "1h30m").')
@click.option("--timeout", help='Stop the job after this long: seconds or a duration ("30m").')
@click.option("--abort-if-locked", is_flag=True, help="Give up at once when the lock is held.")
@click.option("--disable-life-time-trigger", is_flag=True)
@click.option("--delay", type=click.IntRange(0, 900), default=0, help="SQS DelaySeconds.")
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
def send(
    conf: str,
    profile: str | None,
    region: str | None,
    command: str | None,
    http_url: str | None,
    http_method: str | None,
    http_headers: tuple[str, ...],
    http_body: str | None,
    envs: tuple[str, ...],
    event_id: str | None,
    lock_id: str | None,
    life_time: str | None,
    timeout: str | None,
    abort_if_locked: bool,
    disable_life_time_trigger: bool,
    delay: int,
    body: str | None,
    at_time: str | None,
    in_time: str | None,
    zone: str | None,
    list_scheduled: bool,
    cancel: str | None,
) -> None:
    """Validate a job and put it on the queue; prints the message id.

    With --at or --in, EventBridge Scheduler puts it on the queue later instead; prints the
    name of its one-time schedule.
    """
    built_from_options = any(
        [
            command,
            http_url,
            http_method,
            http_headers,
            http_body is not None,
            envs,
            event_id,
            lock_id,
            life_time,
            timeout,
            abort_if_locked,
            disable_life_time_trigger,
        ]
    )
    if list_scheduled or cancel is not None:
        others = built_from_options or body or at_time or in_time or zone or delay
        manage_scheduled(
            lambda: load(conf, Overrides(profile=profile, region=region)),
            listing=list_scheduled,
            cancel=cancel,
            other_options=bool(others),
        )
        return
    later = check_timing(at_time, in_time, zone, delay)
    if body is not None and built_from_options:
        raise UsageFailure("give either --body or the job options (--command, ...), not both")
    http = http_option(http_url, http_method, http_headers, http_body)
    if body is None and command is None and http is None:
        raise UsageFailure("--command or --body is required (or --http-url for an HTTP job)")
    if command is not None and http_url is not None:
        raise UsageFailure("give either --command or --http-url, not both")
    try:
        if body is not None:
            body = checked_body(body)
        else:
            body = build_body(
                command,
                http=http,
                envs=parse_env(envs),
                event_id=event_id,
                lock_id=lock_id,
                life_time=duration_option(life_time),
                timeout=duration_option(timeout),
                abort_if_locked=abort_if_locked,
                disable_life_time_trigger=disable_life_time_trigger,
            )  # checked with the daemon's parser, too
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    config = load(conf, Overrides(profile=profile, region=region))
    try:
        # The daemons' [http] allow is not known here: this config's stands in for it.
        parse_job(body, message_id="(not sent)", sent_at=0.0, http_allow=config.http.allow)
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    when = when_of(config, at_time, in_time, zone) if later else None
    session = make_session(region=config.account.region, profile=config.account.profile)
    sqs = make_client(session, "sqs")
    queue_url = resolve_queue_url(sqs, config.sqs.queue_name, config.account.id)
    if when is not None:
        schedule_job(config, session, sqs, queue_url, body, when)
        return
    response = sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay)
    click.echo(response["MessageId"])
