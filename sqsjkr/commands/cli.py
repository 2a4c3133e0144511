"""The `sqsjkr` command: the group of subcommands, the Go binary's flags, exit codes.

The Go binary's flags (`sqsjkr -conf PATH ...`) are translated to `sqsjkr run` so unit files keep working.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Sequence
from gettext import gettext as _
from typing import Any

import click

from sqsjkr import __version__
from sqsjkr.commands.options import Invocation, UsageFailure
from sqsjkr.commands.waiting import WAIT_TIMEOUT_EXIT
from sqsjkr.errors import NothingToDo, RequestError, SqsjkrError, WaitTimedOut
from sqsjkr.fleet.failures import failure_text

#: Each subcommand and where it is defined. A subcommand's module is imported only when that
#: subcommand runs (or shows its own --help): `sqsjkr run` starts without the crontab parser,
#: moto, the history tables and the other commands' dependencies.
SUBCOMMANDS = {
    "run": "sqsjkr.commands.run:run",
    "local": "sqsjkr.commands.run:local",
    "send": "sqsjkr.commands.send:send",
    "crontab2tf": "sqsjkr.commands.crontab2tf:crontab2tf",
    "history": "sqsjkr.commands.history:history",
    "status": "sqsjkr.commands.status:status",
    "locks": "sqsjkr.commands.locks:locks",
    "unlock": "sqsjkr.commands.locks:unlock",
    "pause": "sqsjkr.commands.pause:pause",
    "resume": "sqsjkr.commands.pause:resume",
    "check": "sqsjkr.commands.check:check",
    "dlq": "sqsjkr.commands.dlq:dlq",
    "daemons": "sqsjkr.commands.daemons:daemons",
    "schedules": "sqsjkr.commands.schedules:schedules",
    "audit": "sqsjkr.commands.audit:audit",
    "firings": "sqsjkr.commands.firings:firings_command",
    "pipeline": "sqsjkr.commands.pipeline:pipeline",
    "kill": "sqsjkr.commands.kill:kill",
    "route": "sqsjkr.commands.route:route",
    "trigger": "sqsjkr.commands.trigger:trigger",
    "job": "sqsjkr.commands.job:job",
    "web": "sqsjkr.commands.web:web",
    "token": "sqsjkr.commands.token:token",
}

#: The first paragraph of each subcommand's help, which `sqsjkr --help` lists (cut as click
#: cuts it), so that the list imports no subcommand's module: tests/test_cli.py checks each
#: against its command's own help.
SUMMARIES = {
    "run": "Run the daemon.",
    "local": (
        "Run the daemon on an embedded local AWS endpoint (moto), with its queue and table; it "
        "fires the endpoint's schedules, as EventBridge would."
    ),
    "send": "Validate a job and put it on the queue; prints the message id.",
    "crontab2tf": "Convert a crontab (a file, or - for stdin) to terraform's `jobs` variable.",
    "history": (
        "Show the last runs of EVENT_ID, newest first; without EVENT_ID, the last runs of every "
        "event, each with its event (read-only)."
    ),
    "status": "Show each event's last run, last success, failures in a row and runs in progress.",
    "locks": (
        "Show the locks held now: lock, event, owner (host:pid:id) and lease left (read-only); "
        "then the concurrency groups with held slots: key, holders (of the limit), and each slot;"
        " then the jobs waiting for a lock or a slot, as their daemons last noted them."
    ),
    "unlock": (
        "Remove LOCK_ID when its lease has expired or it is a Go daemon's lock (which has no "
        "lease)."
    ),
    "pause": (
        "Pause EVENT_IDs (or --all) on every daemon of the fleet: their jobs wait on the queue."
    ),
    "resume": "Lift the pauses of EVENT_IDs (or every pause, --all) and say what was lifted.",
    "check": (
        "Preflight for a deploy: config, credentials, queue, table and the daemon's permissions."
    ),
    "dlq": "The dead-letter queue of the job queue: list, show, redrive and delete its messages.",
    "daemons": (
        "List the fleet's daemons: host, version, up since, last seen, busy/idle workers, queues."
    ),
    "schedules": (
        "Show every event's schedule: expression, zone, enabled, next three fire times in its "
        "zone, the job it sends (event_id, command's first line), and its event's last run, runs "
        "in progress and pause."
    ),
    "audit": (
        "List who paused, resumed, routed, unlocked, killed, triggered, redrove or sent what, and"
        " why, newest first (read-only)."
    ),
    "firings": (
        "List every firing the schedules imply in the window, newest first, and what became of "
        "it: ran, running, a duplicate dropped, or missed and why (read-only)."
    ),
    "pipeline": (
        "Draw the pipeline EVENT_ID's runs belong to (its root's event id, or a step's, as "
        "`sqsjkr status` lists them; else a pipeline's or its root step's name), layer by layer "
        "with each step's edges, and each step's state in its latest run: waiting for which step,"
        " running where, ran (outcome, host, when), skipped and why, not needed (read-only). "
        "--json gives the run's key, which `sqsjkr trigger STEP --run KEY` resumes. --wait waits "
        "until the run is over (exit 124 past --wait-timeout)."
    ),
    "kill": (
        "Stop the run of EVENT_ID in progress (every one of them, if several run), or the run of "
        "MESSAGE_ID, on whichever host runs it."
    ),
    "route": (
        "Route EVENT_ID's jobs to queue NAME (--queue), clear its route (--clear), or list the "
        "routes (no EVENT_ID)."
    ),
    "trigger": (
        "Run EVENT_ID now: send its schedule's message (to its queue, in its FIFO group), noted "
        "as triggered by you and why; prints the message id. With --firing, as that firing of the"
        " schedule: refused if a run of it is recorded, unless --force."
    ),
    "job": (
        "Show where the job of MESSAGE_ID (as `sqsjkr send` printed it) is now: waiting for its "
        "lock or concurrency group, running on a host, or ended, with its run's record. Exits 1 "
        "when no daemon has taken it: still queued, or an id no daemon of this table knows."
    ),
    "web": (
        "Serve the web dashboard of the config's fleet: what is wrong now, every event's runs and"
        " firings, what runs now, daemons, locks and groups, dead letters and the audit trail "
        "(read-only unless --enable-actions)."
    ),
    "token": "Tokens of the HTTP API (sqsjkr web --api-tokens).",
}

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


class LazyGroup(click.Group):
    """A group whose subcommands are imported from SUBCOMMANDS when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module, _, name = target.partition(":")
        command = getattr(importlib.import_module(module), name)
        assert isinstance(command, click.Command), target
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The list of subcommands in --help, as click writes it, from SUMMARIES: listing them
        imports none (all of them together are most of a command's start-up)."""
        limit = formatter.width - 6 - max(map(len, SUMMARIES))
        rows = [
            (name, click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit))
            for name in self.list_commands(ctx)
        ]
        with formatter.section(_("Commands")):  # click's own heading, translated as it is
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="sqsjkr", message="%(prog)s %(version)s")
def cli() -> None:
    """SQS Job Kicker: run the jobs a schedule puts on an SQS queue, once, on one host of a fleet."""


#: The exit code of each kind of refusal of the fleet layer that is not a failure, first match
#: first: nothing to do (AlreadyDone among them) 1, a malformed request 2, a wait's limit 124.
_EXIT_CODES: tuple[tuple[type[SqsjkrError], int], ...] = (
    (NothingToDo, 1),
    (RequestError, 2),
    (WaitTimedOut, WAIT_TIMEOUT_EXIT),
)


def refusal_exit(exc: SqsjkrError) -> int:
    """The exit code of one of the fleet layer's refusals, by its kind."""
    return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: one-line errors, exit 2 for a bad command line or config, 1 for a failure."""
    try:
        started_as = Invocation(tuple(sys.orig_argv) if argv is None else None)
        _main(list(sys.argv[1:] if argv is None else argv), started_as)
    finally:
        # Everything is frozen out of the collector's sight on the way out: its last full pass at
        # exit would walk every object botocore and click made, ~0.08 s of CPU a command.
        gc.freeze()


def _main(args: list[str], started_as: Invocation) -> None:
    try:
        result: Any = cli.main(
            args=translate_go_args(args),
            prog_name="sqsjkr",
            standalone_mode=False,
            obj=started_as,
        )
    except click.UsageError as exc:
        click.echo(f"sqsjkr: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"sqsjkr: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        sys.exit(1)
    except (NothingToDo, RequestError, WaitTimedOut) as exc:
        # The fleet layer's refusals, said as the command line's own: no "error:".
        click.echo(f"sqsjkr: {exc}", err=True)
        sys.exit(refusal_exit(exc))
    except Exception as exc:
        # One of sqsjkr's errors or an AWS failure; failure_text raises again any other.
        click.echo(f"sqsjkr: error: {failure_text(exc)}", err=True)
        sys.exit(1)
    sys.exit(result if isinstance(result, int) else 0)
