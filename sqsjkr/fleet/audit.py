"""The audit trail: who acts (Actor), the item each action writes before it acts (Auditor), and the
entries that were written, for `sqsjkr audit` and the dashboard's audit page.

An action calls its Auditor first; when the item cannot be written, AuditRefused, and it changes
nothing. One that then finds nothing to do marks its item refused (docs/semantics.md, "Audit").
"""

from __future__ import annotations

import getpass
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from sqsjkr.backends.audit import AuditEntry as AuditEntry
from sqsjkr.backends.audit import AuditTrail, DynamoAudit
from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.contract.config import Config
from sqsjkr.errors import AuditRefused, quote
from sqsjkr.fleet.paging import Paged, Position, position
from sqsjkr.fleet.wording import local_time
from sqsjkr.observability.logs import escape

#: The target of a send of a job without an event_id: its message, named in the detail once
#: it is sent, is its event.
ONE_OFF = "(one-off)"
#: How an item's detail starts when the action was forced (`--force`, the dashboard's checkbox),
#: past a check that would have refused it; an amended detail keeps it.
FORCED = "forced"
#: What an action's name becomes in its item once it was refused and changed nothing.
REFUSED = " (refused)"


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
    force: bool = False,
    clock: Callable[[], float] = time.time,
) -> AuditEntry:
    """Write the audit item of an action about to be taken (forced past its checks: force);
    AuditRefused when it was not kept, so that the caller does not act."""
    if force:
        detail = forced(detail)
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
        self, action: str, target: str, *, reason: str = "", detail: str = "", force: bool = False
    ) -> AuditEntry:
        return audited(
            self.trail, self.actor, action, target, reason=reason, detail=detail, force=force
        )

    def amend(self, entry: AuditEntry, detail: str) -> str | None:
        """Give entry, written before the action, what the action did (detail; a forced one
        stays marked so); why the trail could not keep it, or None. The action is done by then:
        the caller only warns."""
        if is_forced(entry.detail):
            detail = forced(detail)
        return self._replace(entry, replace(entry, detail=detail), detail)

    def refused(self, entry: AuditEntry, why: str) -> str | None:
        """Mark entry, written before an action that then changed nothing (a resume of no pause,
        an unlock of no lock), as refused, with why: the trail does not show it as done. Why
        the trail could not keep that, or None."""
        action = entry.action + REFUSED
        return self._replace(entry, replace(entry, action=action, detail=why), f"{action}: {why}")

    def _replace(self, entry: AuditEntry, amended: AuditEntry, said: str) -> str | None:
        try:
            self.trail.amend(entry, amended)
        except Exception as exc:
            return (
                f"the audit item of {entry.action} {quote(entry.target)} does not say "
                f"{escape(said)} ({escape(describe(exc))})"
            )
        return None


def forced(detail: str) -> str:
    """detail marked as the detail of a forced action."""
    return detail if is_forced(detail) else f"{FORCED}: {detail}" if detail else FORCED


def is_forced(detail: str) -> bool:
    return detail == FORCED or detail.startswith(f"{FORCED}: ")


def command_auditor(config: Config) -> Auditor:
    """The Auditor of a command run by this OS user with config's account, into its table."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    return auditor_of(session, config.lock.table)


def auditor_of(session: Any, table: str, user: str | None = None) -> Auditor:
    """The Auditor of user (default: this OS user, as a command's) acting through session's
    AWS identity, into table; AuditRefused when STS cannot name that identity."""
    trail = DynamoAudit(make_client(session, "dynamodb"), table)
    return Auditor(trail, Actor(user or os_user(), aws_identity(session)))


def auditor_as(client: Any, table: str, actor: Actor) -> Auditor:
    """The Auditor of actor, named already, into table through client (the dashboard's)."""
    return Auditor(DynamoAudit(client, table), actor)


def entries_since(client: Any, table: str, since: float) -> list[AuditEntry]:
    """Every audit entry of the table from since (unix seconds) on, newest first."""
    return DynamoAudit(client, table).entries(since)


def audit_page(
    client: Any, table: str, since: float, after: Position | None, limit: int
) -> Paged[AuditEntry]:
    """A page of the audit entries from since on, newest first, past the position of the
    previous page's last one (None: the first page); PageError for a position of another list."""
    start = None
    if after is not None:
        at, id_ = position(after, (float, str))
        start = (float(at), str(id_))
    entries, last = DynamoAudit(client, table).page(since, start, limit)
    return Paged(entries, last)


def entry_json(entry: AuditEntry) -> dict[str, object]:
    """An entry as data for JSON and pages: its fields, its time in the host's zone."""
    return {**entry.as_dict(), "at": local_time(entry.at)}
