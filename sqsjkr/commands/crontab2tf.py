"""`sqsjkr crontab2tf`: a crontab converted to the terraform module's jobs variable.

Its options checked, the crontab read and converted: sqsjkr.crontab's, through fleet.crontab;
this is its command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO

import click

from sqsjkr.commands.options import UsageFailure, warn
from sqsjkr.errors import CrontabError
from sqsjkr.fleet.crontab import (
    DST_CHOICES,
    ENGINES,
    MAX_KEY_LENGTH,
    MAX_MODULE_KEY_LENGTH,
    ConvertOptions,
    CrontabProblems,
    DstChoice,
    Engine,
    convert_file,
    options_problem,
    rendered,
)


@click.command("crontab2tf")
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
    "--engine",
    type=click.Choice(ENGINES),
    default="scheduler",
    show_default=True,
    help="The module's schedule_engine: scheduler (in the crontab's zone) or rules (in UTC).",
)
@click.option(
    "--accept-dst-shift",
    type=click.Choice(DST_CHOICES),
    help="With --engine rules: convert a zone with daylight saving time with its standard or "
    "daylight offset; runs drift by the difference part of the year (said in each description).",
)
@click.option(
    "--split-dom-dow",
    is_flag=True,
    help="A line restricting day-of-month and day-of-week (cron: either matches) becomes two "
    "schedules (or rules) sharing a lock_id; they both fire on days matching both, and the "
    "lock runs one of them at a time. Without it such a line is refused.",
)
@click.option(
    "--system", is_flag=True, help="System crontab (/etc/crontab, cron.d): a user column."
)
@click.option(
    "--key-prefix",
    default="",
    metavar="PREFIX",
    help="Start every job key with this (letters, digits, '.', '-', '_'), e.g. web1-.",
)
@click.option(
    "--max-key-length",
    type=click.IntRange(1, MAX_MODULE_KEY_LENGTH),
    default=MAX_KEY_LENGTH,
    show_default=True,
    metavar="N",
    help="Longest job key, prefix included. The module names each schedule (or rule) "
    "<name>-<key>, at most 64 characters: use 63 minus the length of its `name`.",
)
def crontab2tf(
    crontab: IO[bytes],
    zone: str | None,
    output_format: str,
    output: str | None,
    engine: Engine,
    accept_dst_shift: DstChoice | None,
    split_dom_dow: bool,
    system: bool,
    key_prefix: str,
    max_key_length: int,
) -> None:
    """Convert a crontab (a file, or - for stdin) to terraform's `jobs` variable.

    Each job line becomes a schedule (keyed by a stable id: --key-prefix, a slug of its command
    and a hash) with the sqsjkr job it sends: the command (a `%` stdin part becomes a printf piped into
    `/bin/sh -c`), the env lines above it, and the line as its description. For EventBridge
    Scheduler (the default) a schedule keeps the line's times in its zone (--timezone, or a
    CRON_TZ line above it); for rules (--engine rules) it is converted to UTC, and a line with no
    exact UTC equivalent is refused with the reason. Every refused line is reported, and then
    nothing is written. Jobs run with the daemon's environment and working directory, not cron's (PATH=/usr/bin:/bin and the user's home).
    A crontab cannot say that a job runs after another: make a pipeline of them by hand, with
    `after` in place of a schedule (docs/pipelines.md).
    """
    wrong = options_problem(zone, engine, accept_dst_shift, key_prefix, max_key_length)
    if wrong is not None:
        raise UsageFailure(wrong)
    assert zone is not None
    options = ConvertOptions(
        zone,
        engine=engine,
        accept_dst_shift=accept_dst_shift,
        split_dom_dow=split_dom_dow,
        key_prefix=key_prefix,
        max_key_length=max_key_length,
    )
    try:
        conversion = convert_file(crontab.read(), options, system=system)
    except CrontabProblems as exc:
        if len(exc.problems) == 1:
            raise
        for problem in exc.problems:
            click.echo(f"sqsjkr: error: {problem}", err=True)
        raise CrontabError(
            f"{len(exc.problems)} crontab lines cannot be converted (above); nothing written"
        ) from exc
    for warning in conversion.warnings:
        warn(warning)
    text = rendered(conversion, output_format, zone)
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        Path(output).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise click.FileError(output, hint=exc.strerror) from exc
