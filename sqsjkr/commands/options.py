"""What the commands share: one-line usage errors and warnings, the config loaded, the common options.

A command module takes its options from here, so every command spells --conf or --region alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import click

from sqsjkr.contract.config import CONFIG_ENV, DEFAULT_CONFIG_PATH, Config, Overrides, load_config
from sqsjkr.errors import ConfigError
from sqsjkr.fleet.daemon import LOG_LEVELS


@dataclass(frozen=True)
class Invocation:
    """How the command was started (click's context obj): command_line is the process's own
    (sys.orig_argv) when it was exec'd as `sqsjkr ...`, None when main() was given arguments."""

    command_line: tuple[str, ...] | None = None


class UsageFailure(click.UsageError):
    """A bad command line, reported on one line."""


def note(line: str) -> None:
    """A note of a command on stderr (nothing to list, say), with every message's one prefix."""
    click.echo(f"sqsjkr: {line}", err=True)


def warn(line: str) -> None:
    """A warning of a command, on stderr."""
    click.echo(f"sqsjkr: warning: {line}", err=True)


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
    envvar=CONFIG_ENV,
    show_envvar=True,
    help="Config file (TOML, the Go sqsjkr format).",
)
log_level_option = click.option(
    "--log-level",
    type=click.Choice(list(LOG_LEVELS), case_sensitive=False),
    default="info",
    show_default=True,
)
log_all_option = click.option(
    "--log-all",
    is_flag=True,
    help="Log other libraries' records at --log-level too (default: their warnings and errors "
    "only); botocore's stay at warnings, since its debug lines show job environments.",
)
profile_option = click.option(
    "--profile", help="AWS credentials profile (overrides [account] profile)."
)
region_option = click.option("--region", help="AWS region (overrides [account] region).")
queue_option = click.option(
    "--queue",
    "queue_name",
    metavar="NAME",
    help="The queue, by name (default: [sqs] queue_name, else the first [[queues]]).",
)
lock_table_option = click.option(
    "--lock-table", metavar="NAME", help="DynamoDB table (overrides [lock] table)."
)
reason_option = click.option("--reason", default="", help="Why, for the audit trail.")
