"""`sqsjkr audit`: the audit trail from the operator's side, newest first.

Each state change writes its audit item before it is made, inside the fleet layer (sqsjkr.fleet.audit).
"""

from __future__ import annotations

import json
import time

import click

from sqsjkr.commands.options import UsageFailure, note
from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.duration import parse_duration
from sqsjkr.contract.text import escape
from sqsjkr.errors import DurationError, quote
from sqsjkr.fleet.audit import entries_since, entry_json
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.wording import local_time


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
    where: Where,
    since: str,
    as_json: bool,
) -> None:
    """List who paused, resumed, routed, unlocked, killed, triggered, redrove or sent what, and
    why, newest first (read-only)."""
    try:
        back = parse_duration(since, days=True).seconds
    except DurationError as exc:
        raise UsageFailure(f"--since {quote(since)}: {exc}") from exc
    store = store_of(where.config())
    with store.reading():
        entries = entries_since(store.client, store.table, time.time() - back)
    if as_json:
        click.echo(json.dumps([entry_json(e) for e in entries], indent=2))
        return
    if not entries:
        note(f"no audit entries in the last {escape(since)} in table {store.table!r}")
        return
    rows = [["when", "action", "target", "user", "identity", "reason", "detail"]]
    rows += [
        [local_time(e.at), e.action, e.target, e.user, e.identity, e.reason, e.detail]
        for e in entries
    ]
    echo_lines(aligned(rows))
