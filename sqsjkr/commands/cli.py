"""The `sqsjkr` command: the group of subcommands, the Go binary's flags, exit codes.

The Go binary's flags (`sqsjkr -conf PATH ...`) are translated to `sqsjkr run` so unit files keep working.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr import __version__
from sqsjkr.backends.aws import describe
from sqsjkr.commands.check import check
from sqsjkr.commands.crontab2tf import crontab2tf
from sqsjkr.commands.dlq import dlq
from sqsjkr.commands.history import history
from sqsjkr.commands.locks import locks, unlock
from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.pause import pause, resume
from sqsjkr.commands.run import local, run
from sqsjkr.commands.send import send
from sqsjkr.commands.status import status
from sqsjkr.errors import SqsjkrError

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


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sqsjkr", message="%(prog)s %(version)s")
def cli() -> None:
    """SQS Job Kicker: run the jobs a schedule puts on an SQS queue, once, on one host of a fleet."""


for command in (
    run,
    local,
    send,
    crontab2tf,
    history,
    status,
    locks,
    unlock,
    pause,
    resume,
    check,
    dlq,
):
    cli.add_command(command)


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
