"""The run history: the store of a config's table, every event's last runs, one run by its message id,
and forgetting an event (audited).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import make_client, make_session, raise_if_missing
from sqsjkr.backends.history import RUN_TYPE_PREFIX as RUN_TYPE_PREFIX
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.history import run_type as run_type
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary, RunRecord
from sqsjkr.errors import PageError
from sqsjkr.fleet.paging import Paged, Position, position
from sqsjkr.fleet.sessions import SharedSession

if TYPE_CHECKING:
    # fleet-actions moves the Auditor into sqsjkr/fleet/audit.py: the lead points this there.
    from sqsjkr.fleet.audit import Auditor


@dataclass(frozen=True)
class Store:
    """The run history of a config's table, opened for reading, and the client under it."""

    history: DynamoHistory
    client: Any
    table: str
    config: Config
    session: Any  # for the other services a command reads beside the table

    def reading(self) -> AbstractContextManager[None]:
        return reading_table(self.table)

    def service_client(self, service: str) -> Any:
        """A client of another service ("sqs", ...) in the store's session: its account and region."""
        return make_client(self.session, service)


@contextmanager
def reading_table(name: str) -> Iterator[None]:
    """Name the lock table when it is not there (wrong --lock-table, region or account)."""
    try:
        yield
    except ClientError as exc:
        raise_if_missing(exc, name)
        raise


def store_of(config: Config) -> Store:
    """The config's history, whether or not its daemons write it. Its session makes each client
    once: a command's parts that ask for one (its auditor, its sends) share it."""
    session = SharedSession(
        make_session(region=config.account.region, profile=config.account.profile)
    )
    client = make_client(session, "dynamodb")
    history = DynamoHistory(
        client, config.lock.table, retention_seconds=config.history.retention.seconds
    )
    return Store(history, client, config.lock.table, config, session)


def recent_runs(history: DynamoHistory, limit: int, *, failed: bool) -> list[RunRecord]:
    """The last runs of every event, newest first: the events from the index of summaries, newest
    last run first, each queried for its own last runs until no event left can have a newer one
    than those found (no scan of the table)."""
    summaries = [summary for summary in history.summaries() if summary.last_run is not None]
    summaries.sort(key=lambda summary: ended_at(summary.last_run), reverse=True)
    found: list[RunRecord] = []
    for summary in summaries:
        if len(found) >= limit and ended_at(summary.last_run) < found[-1].ended_at:
            break  # this event's runs, and those of every event after it, are all older
        found += history.runs(summary.event_id, limit, failed=failed)
        found.sort(key=lambda record: record.ended_at, reverse=True)
        del found[limit:]
    return found


def last_runs(store: Store, event_id: str | None, limit: int, *, failed: bool) -> list[RunRecord]:
    """The last runs of event_id (None: of every event), newest first; with failed, only those
    that did not succeed."""
    with store.reading():
        if event_id is None:
            return recent_runs(store.history, limit, failed=failed)
        return store.history.runs(event_id, limit, failed=failed)


def runs_page(
    store: Store, event_id: str, after: Position | None, limit: int, *, failed: bool
) -> Paged[RunRecord]:
    """A page of the event's runs, newest first, past the run whose item's Type (its run_type,
    which sorts as its end time) is the position (None: the first page); PageError for a
    position of another list."""
    before = None
    if after is not None:
        before = str(position(after, (str,))[0])
        if not before.startswith(RUN_TYPE_PREFIX):
            raise PageError(f"the position {after!r} is no run's")
    with store.reading():
        found = store.history.runs(event_id, limit + 1, failed=failed, before=before)
    shown = found[:limit]
    return Paged(shown, (run_type(shown[-1]),) if len(found) > limit else None)


def ended_at(record: RunRecord | None) -> float:
    return 0.0 if record is None else record.ended_at


def record_json(record: RunRecord, *, output: bool) -> dict[str, Any]:
    """A record as `--json` shows it: the store keeps the merged output only, and that on request."""
    data = record.as_dict()
    del data["stdout"], data["stderr"]
    if not output:
        del data["output"]
    return data


#: How many of the event's last runs are searched for the run named by --message-id.
RUNS_SEARCHED = 100


def find_record(history: DynamoHistory, event_id: str, message_id: str) -> RunRecord | None:
    """The newest record of message_id's runs (a retry runs it again), if among the last ones."""
    records = history.runs(event_id, RUNS_SEARCHED)
    return next((record for record in records if record.message_id == message_id), None)


def forget_event(
    history: DynamoHistory, audit: Auditor, event_id: str, reason: str = ""
) -> EventSummary | None:
    """Delete the event's summary, audited first: the summary it had, or None (none to delete).
    Its run records expire as before."""
    entry = audit("forget", event_id, reason=reason)
    had = history.forget(event_id)
    if had is None:
        audit.refused(entry, "it had no summary")  # nothing forgotten: not a forget in the trail
    return had


def forget_events(
    store: Store, audit: Auditor, event_ids: Sequence[str], reason: str = ""
) -> Iterator[tuple[str, EventSummary | None]]:
    """forget_event of each event in turn, yielded as it is done: the event and the summary it
    had, or None."""
    with store.reading():
        for event_id in event_ids:
            yield event_id, forget_event(store.history, audit, event_id, reason)
