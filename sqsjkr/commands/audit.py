"""The audit trail from the operator's side: each state change is written down before it is made,
and `sqsjkr audit` lists what was done, newest first.

Commands call `record` (or `audited`, with an actor of their own, as the web dashboard does) first;
when the audit item cannot be written, they raise AuditRefused and change nothing.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import click

from sqsjkr.backends.audit import AuditEntry, AuditTrail, DynamoAudit
from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.commands.options import UsageFailure, load
from sqsjkr.commands.store import store_options
from sqsjkr.commands.tables import aligned
from sqsjkr.contract.config import Config, Overrides
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import AuditRefused, DurationError, quote
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.wording import local_time
from sqsjkr.observability.logs import escape

#: The target of a send of a job without an event_id: its message, named in the detail once
#: it is sent, is its event.
ONE_OFF = "(one-off)"


@dataclass(frozen=True)
class Actor:
    """Who acts: the OS user@host of a command (or a dashboard's user) and the AWS identity."""

    user: str
    identity: str


def os_user() -> str:
    """user@host of whoever runs the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no login name and no passwd entry (a bare container)
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def aws_identity(session: object) -> str:
    """The caller's ARN, as STS names it; AuditRefused when STS cannot say, since an audit item
    that does not say who acted is worth little."""
    try:
        return str(make_client(session, "sts").get_caller_identity()["Arn"])
    except Exception as exc:
        raise AuditRefused(
            f"not done: the caller's AWS identity could not be read from STS for the audit "
            f"trail ({escape(describe(exc))})"
        ) from exc


def audited(
    trail: AuditTrail,
    actor: Actor,
    action: str,
    target: str,
    *,
    reason: str = "",
    detail: str = "",
    clock: Callable[[], float] = time.time,
) -> AuditEntry:
    """Write the audit item of an action about to be taken; AuditRefused when it was not kept,
    so that the caller does not act."""
    entry = AuditEntry(clock(), action, target, reason, actor.user, actor.identity, detail)
    try:
        trail.write(entry)
    except Exception as exc:
        raise AuditRefused(
            f"{action} {quote(target)} not done: its audit item could not be written "
            f"({escape(describe(exc))})"
        ) from exc
    return entry


@dataclass(frozen=True)
class Auditor:
    """Writes the audit items of one actor's actions to one trail."""

    trail: AuditTrail
    actor: Actor

    def __call__(
        self, action: str, target: str, *, reason: str = "", detail: str = ""
    ) -> AuditEntry:
        return audited(self.trail, self.actor, action, target, reason=reason, detail=detail)

    def amend(self, entry: AuditEntry, detail: str) -> str | None:
        """Give entry, written before the action, what the action did (detail); why the trail
        could not keep it, or None. The action is done by then: the caller only warns."""
        try:
            self.trail.amend(entry, replace(entry, detail=detail))
        except Exception as exc:
            return f"the audit item of {entry.action} {quote(entry.target)} does not say {escape(detail)} ({escape(describe(exc))})"
        return None


def command_auditor(config: Config) -> Auditor:
    """The Auditor of a command run by this OS user with config's account, into its table."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    trail = DynamoAudit(make_client(session, "dynamodb"), config.lock.table)
    return Auditor(trail, Actor(os_user(), aws_identity(session)))


def entry_json(entry: AuditEntry) -> dict[str, object]:
    return {**entry.as_dict(), "at": local_time(entry.at)}


@click.command()
@store_options
@click.option(
    "--since",
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="How far back to list (30m, 12h, 90d; entries are kept 400 days).",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array of entries.")
def audit(
    conf: str,
    lock_table: str | None,
    profile: str | None,
    region: str | None,
    since: str,
    as_json: bool,
) -> None:
    """List who paused, resumed, routed, unlocked, killed, triggered, redrove or sent what, and
    why, newest first (read-only)."""
    try:
        back = parse_duration(since, days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"--since {quote(since)}: {exc}") from exc
    store = store_of(load(conf, Overrides(lock_table=lock_table, profile=profile, region=region)))
    with store.reading():
        entries = DynamoAudit(store.client, store.table).entries(time.time() - back)
    if as_json:
        click.echo(json.dumps([entry_json(e) for e in entries], indent=2))
        return
    if not entries:
        click.echo(
            f"no audit entries in the last {escape(since)} in table {store.table!r}", err=True
        )
        return
    rows = [["when", "action", "target", "user", "identity", "reason", "detail"]]
    rows += [
        [local_time(e.at), e.action, e.target, e.user, e.identity, e.reason, e.detail]
        for e in entries
    ]
    for line in aligned(rows):
        click.echo(line)
