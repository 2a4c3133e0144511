"""`sqsjkr send --at/--in`, `--list-scheduled` and `--cancel`: the options of one-time jobs and
their words; fleet/scheduled.py schedules, lists and cancels them.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from typing import Any

import click

from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.config import CONFIG_ENV, DEFAULT_CONFIG_PATH, Config
from sqsjkr.contract.text import shorten_command
from sqsjkr.contract.when import OneTime
from sqsjkr.errors import ConfigError
from sqsjkr.fleet.audit import Auditor, command_auditor
from sqsjkr.fleet.scheduled import ScheduledJob, cancel_scheduled, scheduled_jobs
from sqsjkr.fleet.scheduled import schedule_job as create_scheduled
from sqsjkr.fleet.send import Outgoing
from sqsjkr.fleet.wording import local_time


def schedule_job(
    config: Config,
    session: Any,
    sqs: Any,
    audit: Auditor,
    out: Outgoing,
    when: OneTime,
    *,
    conf: str = DEFAULT_CONFIG_PATH,
    account: tuple[str | None, str | None] = (None, None),
    reason: str = "",
) -> None:
    """Schedule out's job at when (audited); prints its name, and when it runs on stderr, in
    the time format of every output, with the command that cancels it (account: the --profile
    and --region the send was given, which the cancel needs too)."""
    try:
        name = create_scheduled(config, session, sqs, audit, out, when, reason=reason)
    except ConfigError as exc:
        raise UsageFailure(str(exc)) from exc
    click.echo(name)
    click.echo(
        f"sqsjkr: the job runs at {local_time(when.instant.timestamp())} ({when.expression} "
        f"in {when.timezone}); cancel it with: {cancel_command(conf, name, account)}",
        err=True,
    )


def cancel_command(
    conf: str, name: str, account: tuple[str | None, str | None] = (None, None)
) -> str:
    """The command line that cancels a one-time job: with the config when it is not the
    default, and the --profile and --region given, so that it pastes as it is."""
    words = ["sqsjkr", "send"]
    # A config of SQSJKR_CONF is the shell's own: the command pastes back into it as it is.
    if conf not in (DEFAULT_CONFIG_PATH, os.environ.get(CONFIG_ENV)):
        words += ["-c", conf]
    for option, value in zip(("--profile", "--region"), account, strict=True):
        if value is not None:
            words += [option, value]
    # NAME is the placeholder of the list's hint: left bare, for the reader to replace.
    quoted = [shlex.quote(word) for word in words]
    return " ".join([*quoted, "--cancel", name if name == "NAME" else shlex.quote(name)])


def manage_scheduled(
    load_config: Callable[[], Config],
    *,
    listing: bool,
    cancel: str | None,
    other_options: bool,
    conf: str = DEFAULT_CONFIG_PATH,
    account: tuple[str | None, str | None] = (None, None),
    reason: str = "",
) -> None:
    """--cancel NAME, or --list-scheduled: a table of the jobs still to run, soonest first."""
    if other_options or (listing and cancel is not None):
        raise UsageFailure("--list-scheduled and --cancel NAME take no other job option")
    config = load_config()
    group = config.schedule.group
    if cancel is not None:
        try:
            cancel_scheduled(config, command_auditor(config), cancel, reason=reason)
        except ValueError as exc:
            raise UsageFailure(f"--cancel: {exc}") from exc
        click.echo(f"cancelled {cancel}")
        return
    jobs = scheduled_jobs(config)
    if not jobs:
        click.echo(f"sqsjkr: no one-time jobs to run in schedule group {group!r}", err=True)
        return
    # A STATE column only when a job is not ENABLED (disabled by hand in the console).
    states = any(job.state != "ENABLED" for job in jobs)
    rows = [["NAME", "RUNS AT", *(["STATE"] if states else []), "EVENT", "COMMAND"]]
    for job in jobs:
        rows.append(
            [
                job.name,
                _runs_at(job),
                *([job.state] if states else []),
                job.event_id or "-",
                shorten_command(job.command or "-"),
            ]
        )
    echo_lines(aligned(rows))
    click.echo(f"sqsjkr: cancel one with: {cancel_command(conf, 'NAME', account)}", err=True)


def _runs_at(job: ScheduledJob) -> str:
    """When a one-time job runs, as every output writes a time; as its schedule says it when
    that is no time (a schedule changed by hand)."""
    if job.instant is None:
        return f"{job.when} {job.timezone}"
    return local_time(job.instant.timestamp())
