"""The `sqsjkr` command: run the daemon, run it locally on an embedded AWS endpoint, send a job.

The Go binary's flags (`sqsjkr -conf PATH ...`) are translated to `sqsjkr run` so unit files keep working.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr import __version__
from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.backends.sqs import resolve_queue_url
from sqsjkr.commands.local import run_local
from sqsjkr.contract.config import DEFAULT_CONFIG_PATH, Config, Overrides, load_config
from sqsjkr.contract.job import build_body, parse_job
from sqsjkr.crontab.eventbridge import (
    DST_CHOICES,
    ConvertOptions,
    DstChoice,
    convert_crontab,
    load_zone,
)
from sqsjkr.crontab.parse import decode_crontab, parse_crontab
from sqsjkr.crontab.tfvars import render_hcl, render_json
from sqsjkr.daemon.service import serve
from sqsjkr.errors import ConfigError, InvalidJobError, SqsjkrError
from sqsjkr.observability.notify import SystemdNotifier

log = logging.getLogger("sqsjkr.cli")

#: The Go binary's flags that take a value, and the option of `sqsjkr run` each one becomes.
GO_VALUE_FLAGS = {
    "conf": "--conf",
    "lock-table": "--lock-table",
    "log-level": "--log-level",
    "profile": "--profile",
    "region": "--region",
    "stats-port": "--stats-port",
    "stats-socket": "--stats-socket",
}

LOG_LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


class UsageFailure(click.UsageError):
    """A bad command line, reported on one line."""


def translate_go_args(args: Sequence[str]) -> list[str]:
    """Turn the Go binary's command line into ours; leave any other command line alone.

    Go's flag package accepts -flag, --flag, -flag=value and -flag value; no arguments runs the daemon.
    """
    if not args:
        return ["run"]
    name = args[0].lstrip("-").split("=", 1)[0]
    if not args[0].startswith("-") or (name not in GO_VALUE_FLAGS and name != "version"):
        return list(args)
    translated = ["run"]
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-") or arg in ("-", "--"):
            raise UsageFailure(f"unexpected argument {arg!r}")
        name, has_value, value = arg.lstrip("-").partition("=")
        if name == "version":
            return ["--version"]
        if name not in GO_VALUE_FLAGS:
            raise UsageFailure(f"flag provided but not defined: -{name}")
        if not has_value:
            if not rest:
                raise UsageFailure(f"flag needs an argument: -{name}")
            value = rest.pop(0)
        translated += [GO_VALUE_FLAGS[name], value]
    return translated


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=LOG_LEVELS[level],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # botocore's debug output prints request bodies, and with them job environments; the
    # embedded moto server logs every request.
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def install_stop_signals(stop: threading.Event, force: threading.Event) -> Callable[[], None]:
    """Make the first stop signal set stop and the next set force; returns a function that
    restores the old handlers."""

    def handle(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            log.warning("%s received again: stopping running jobs now", name)
            force.set()
        else:
            log.info("%s received: stopping (a second signal stops running jobs)", name)
            stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in STOP_SIGNALS}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def load(conf: str, overrides: Overrides | None = None) -> Config:
    try:
        return load_config(conf, overrides=overrides or Overrides())
    except ConfigError as exc:
        hint = ""
        if conf == DEFAULT_CONFIG_PATH and not os.path.exists(conf):
            hint = " (pass --conf PATH; try `sqsjkr --help` or `sqsjkr local --demo`)"
        raise UsageFailure(f"{exc}{hint}") from exc


conf_option = click.option(
    "--conf",
    "-c",
    default=DEFAULT_CONFIG_PATH,
    show_default=True,
    metavar="PATH",
    help="Config file (TOML, the Go sqsjkr format).",
)
log_level_option = click.option(
    "--log-level",
    type=click.Choice(list(LOG_LEVELS), case_sensitive=False),
    default="info",
    show_default=True,
)
profile_option = click.option(
    "--profile", help="AWS credentials profile (overrides [account] profile)."
)
region_option = click.option("--region", help="AWS region (overrides [account] region).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sqsjkr", message="%(prog)s %(version)s")
def cli() -> None:
    """SQS Job Kicker: run the jobs a schedule puts on an SQS queue, once, on one host of a fleet."""


@cli.command()
@conf_option
@click.option("--lock-table", metavar="NAME", help="DynamoDB table (overrides [lock] table).")
@log_level_option
@profile_option
@region_option
@click.option(
    "--stats-port", type=click.IntRange(0, 65535), help="Stats HTTP port (overrides the file)."
)
@click.option("--stats-socket", metavar="PATH", help="Serve stats on this unix socket instead.")
@click.option(
    "--shutdown-timeout",
    metavar="DURATION",
    help='How long a stop waits for running jobs, e.g. "10m" (overrides [kicker] shutdown_timeout).',
)
def run(
    conf: str,
    lock_table: str | None,
    log_level: str,
    profile: str | None,
    region: str | None,
    stats_port: int | None,
    stats_socket: str | None,
    shutdown_timeout: str | None,
) -> None:
    """Run the daemon."""
    setup_logging(log_level.lower())
    config = load(
        conf,
        Overrides(
            lock_table=lock_table,
            profile=profile,
            region=region,
            stats_port=stats_port,
            stats_socket=stats_socket,
            shutdown_timeout=shutdown_timeout,
        ),
    )
    # Before any job can start: jobs copy the daemon's environment, and systemd's variables
    # are not meant for them.
    notifier = SystemdNotifier.from_environment(os.environ, unset=True)
    stop, force = threading.Event(), threading.Event()
    restore = install_stop_signals(stop, force)
    try:
        log.info("sqsjkr %s starting with %s", __version__, conf)
        serve(config, stop, force=force, notifier=notifier)
    finally:
        restore()


@cli.command()
@click.option("--demo", is_flag=True, help="Also send sample jobs and watch them run.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port of the embedded AWS endpoint."
)
@click.option("--stats-port", type=click.IntRange(0, 65535), default=8061, show_default=True)
@click.option("--workers", type=click.IntRange(1, 1000), default=4, show_default=True)
@log_level_option
def local(demo: bool, port: int, stats_port: int, workers: int, log_level: str) -> None:
    """Run the daemon on an embedded local AWS endpoint (moto), with its queue and table."""
    setup_logging(log_level.lower())
    stop, force = threading.Event(), threading.Event()
    restore = install_stop_signals(stop, force)
    try:
        run_local(stop, force, demo=demo, port=port, stats_port=stats_port, workers=workers)
    finally:
        restore()


def parse_env(values: Sequence[str]) -> dict[str, str]:
    envs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageFailure(f"--env {item!r}: expected KEY=VALUE")
        envs[key] = value
    return envs


def duration_option(text: str | None) -> int | str | None:
    """A --life-time or --timeout as the message carries it: int seconds or Go syntax."""
    if text is None:
        return None
    return int(text) if text.isdigit() else text


@cli.command()
@conf_option
@profile_option
@region_option
@click.option("--command", help="Shell command to run (sh -c).")
@click.option("--env", "envs", multiple=True, metavar="KEY=VALUE", help="Job environment; repeat.")
@click.option("--event-id", help="Name of the schedule (default: the message id).")
@click.option("--lock-id", help="Jobs with one lock_id never run at once.")
@click.option("--life-time", help='Cancel when older: seconds or a duration ("90s", "1h30m").')
@click.option("--timeout", help='Stop the job after this long: seconds or a duration ("30m").')
@click.option("--abort-if-locked", is_flag=True, help="Give up at once when the lock is held.")
@click.option("--disable-life-time-trigger", is_flag=True)
@click.option("--delay", type=click.IntRange(0, 900), default=0, help="SQS DelaySeconds.")
@click.option("--body", help="The whole message as JSON, instead of the options above.")
def send(
    conf: str,
    profile: str | None,
    region: str | None,
    command: str | None,
    envs: tuple[str, ...],
    event_id: str | None,
    lock_id: str | None,
    life_time: str | None,
    timeout: str | None,
    abort_if_locked: bool,
    disable_life_time_trigger: bool,
    delay: int,
    body: str | None,
) -> None:
    """Validate a job and put it on the queue; prints the message id."""
    built_from_options = any(
        [
            command,
            envs,
            event_id,
            lock_id,
            life_time,
            timeout,
            abort_if_locked,
            disable_life_time_trigger,
        ]
    )
    if body is not None and built_from_options:
        raise UsageFailure("give either --body or the job options (--command, ...), not both")
    if body is None and command is None:
        raise UsageFailure("--command or --body is required")
    try:
        if body is None:
            assert command is not None
            body = build_body(
                command,
                envs=parse_env(envs),
                event_id=event_id,
                lock_id=lock_id,
                life_time=duration_option(life_time),
                timeout=duration_option(timeout),
                abort_if_locked=abort_if_locked,
                disable_life_time_trigger=disable_life_time_trigger,
            )
        # The daemon's own parser: what it would refuse is never sent.
        parse_job(body, message_id="(not sent)", sent_at=0.0)
    except InvalidJobError as exc:
        raise UsageFailure(f"invalid job, nothing sent: {exc}") from exc
    config = load(conf, Overrides(profile=profile, region=region))
    session = make_session(region=config.account.region, profile=config.account.profile)
    sqs = make_client(session, "sqs")
    queue_url = resolve_queue_url(sqs, config.sqs.queue_name, config.account.id)
    response = sqs.send_message(QueueUrl=queue_url, MessageBody=body, DelaySeconds=delay)
    click.echo(response["MessageId"])


@cli.command("crontab2tf")
@click.argument("crontab", type=click.File("rb"))
@click.option(
    "--timezone",
    "zone",
    metavar="ZONE",
    help="IANA zone of the crontab's times (required): Asia/Tokyo, Europe/Berlin, UTC, ...",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["hcl", "json"]),
    default="hcl",
    show_default=True,
    help="hcl: a .tfvars file; json: a .tfvars.json file.",
)
@click.option("--output", "-o", metavar="FILE", help="Write here instead of stdout.")
@click.option(
    "--accept-dst-shift",
    type=click.Choice(DST_CHOICES),
    help="Convert a zone with daylight saving time with its standard or daylight offset; "
    "runs drift by the difference part of the year (said in each description).",
)
@click.option(
    "--split-dom-dow",
    is_flag=True,
    help="A line restricting day-of-month and day-of-week (cron: either matches) becomes two "
    "rules sharing a lock_id; they both run on days matching both.",
)
@click.option(
    "--system", is_flag=True, help="System crontab (/etc/crontab, cron.d): a user column."
)
def crontab2tf(
    crontab: IO[bytes],
    zone: str | None,
    output_format: str,
    output: str | None,
    accept_dst_shift: DstChoice | None,
    split_dom_dow: bool,
    system: bool,
) -> None:
    """Convert a crontab (a file, or - for stdin) to terraform's `jobs` variable.

    Each job line becomes an EventBridge schedule in UTC (keyed by a stable id made of its
    command and a hash) with the sqsjkr job it sends: the command (a `%` stdin part becomes a
    printf piped into `/bin/sh -c`), the env lines above it, and the line as its description.
    A line with no exact UTC equivalent is refused with the reason. Jobs run with the daemon's
    environment and working directory, not cron's (PATH=/usr/bin:/bin and the user's home).
    """
    if zone is None:
        raise UsageFailure(
            "--timezone is required: the IANA zone the crontab's times are in (e.g. "
            "Asia/Tokyo, or UTC); EventBridge runs schedules in UTC"
        )
    try:
        load_zone(zone)
    except ValueError as exc:
        raise UsageFailure(f"--timezone: {exc}") from exc
    entries = parse_crontab(decode_crontab(crontab.read()), system=system)
    conversion = convert_crontab(
        entries,
        ConvertOptions(zone, accept_dst_shift=accept_dst_shift, split_dom_dow=split_dom_dow),
    )
    for warning in conversion.warnings:
        click.echo(f"sqsjkr: warning: {warning}", err=True)
    text = render_json(conversion) if output_format == "json" else render_hcl(conversion, zone)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.FileError(output, hint=exc.strerror) from exc


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: one-line errors, exit 2 for a bad command line or config, 1 for a failure."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result: Any = cli.main(
            args=translate_go_args(args), prog_name="sqsjkr", standalone_mode=False
        )
    except click.UsageError as exc:
        click.echo(f"sqsjkr: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"sqsjkr: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except (SqsjkrError, BotoCoreError, ClientError) as exc:
        message = describe(exc) if isinstance(exc, (BotoCoreError, ClientError)) else str(exc)
        click.echo(f"sqsjkr: error: {message}", err=True)
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)
