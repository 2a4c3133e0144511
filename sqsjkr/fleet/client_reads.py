"""sqsjkr.Fleet's reads: status and its check, history and one run, live output, schedules, daemons,
locks, routes and pauses, dead letters and the audit trail, each through the fleet layer's function.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqsjkr.backends.audit import AuditEntry
from sqsjkr.backends.live import DynamoLive, LiveOutput
from sqsjkr.backends.members import Member
from sqsjkr.backends.pause import DynamoPauses, Pause
from sqsjkr.backends.routes import DynamoRoutes, Route
from sqsjkr.contract.run import RunRecord
from sqsjkr.fleet.audit import audit_page, entries_since
from sqsjkr.fleet.connection import Connection
from sqsjkr.fleet.daemons import ordered, read_members
from sqsjkr.fleet.dead_letters import DeadLetter, Queues, find_letter, queues_of, read_letters
from sqsjkr.fleet.firings import DEFAULT_SINCE, FiringRow, firings
from sqsjkr.fleet.history import find_record, last_runs, runs_page
from sqsjkr.fleet.locks import HeldLock, Holdings, held, lock_of
from sqsjkr.fleet.paging import Paged, Position
from sqsjkr.fleet.pipeline_steps import PipelineView
from sqsjkr.fleet.pipelines import event_pipeline, parse_firing_time
from sqsjkr.fleet.route import routes_of
from sqsjkr.fleet.schedules import Scheduled, Upcoming, read_upcoming, scheduled_now
from sqsjkr.fleet.status import CheckPolicy, Finding, FleetStatus, check_fleet, read_status


class Reads(Connection):
    """What a Fleet reads; nothing here writes."""

    def status(self) -> FleetStatus:
        """What `sqsjkr status` shows: the pauses and routes, every event's summary, and each
        event's runs in progress checked against their claims (stale: their daemon died)."""
        return read_status(self.store, time.time())

    def check(
        self,
        *,
        max_failures: int = 1,
        max_ages: Mapping[str, float] | None = None,
        include_one_off: bool = False,
        min_daemons: int | None = None,
        schedules: bool = False,
    ) -> list[Finding]:
        """`sqsjkr status --check`'s verdict on each event (and on the daemons, with
        min_daemons); max_ages: seconds without a success, by event_id; schedules: read the
        scheduler's schedules too, as --schedules."""
        policy = CheckPolicy(
            max_failures,
            dict(max_ages or {}),
            include_one_off,
            min_daemons,
            read_schedules=schedules,
        )
        findings, _ = check_fleet(self.store, policy, time.time())
        return findings

    def history(
        self, event_id: str | None = None, limit: int = 10, *, failed: bool = False
    ) -> list[RunRecord]:
        """The last runs of event_id (None: of every event), newest first; with failed, only
        those that did not succeed (`sqsjkr history`)."""
        return last_runs(self.store, event_id, limit, failed=failed)

    def history_page(
        self,
        event_id: str,
        *,
        after: Position | None = None,
        limit: int = 100,
        failed: bool = False,
    ) -> Paged[RunRecord]:
        """A page of event_id's runs, newest first, past the previous page's `after` (None:
        the first page); runs recorded meanwhile move no run of the next pages."""
        return runs_page(self.store, event_id, after, limit, failed=failed)

    def run(self, event_id: str, message_id: str) -> RunRecord | None:
        """The newest record of message_id's run among event_id's last runs, or None."""
        with self.store.reading():
            return find_record(self.store.history, event_id, message_id)

    def live_output(self, event_id: str, message_id: str) -> LiveOutput | None:
        """The tail of a run in progress's output, as its daemon last wrote it (None: none
        written, or the run has ended: its record holds its output)."""
        with self.store.reading():
            return DynamoLive(self.store.client, self.store.table).read(event_id, message_id)

    def schedules(self) -> list[Scheduled]:
        """Every schedule of [schedule] engine, with its next fire times (`sqsjkr schedules`)."""
        return scheduled_now(self.config, self.session, time.time())

    def next_runs(self) -> Upcoming:
        """Each event's next run (the soonest fire time of its enabled schedules), and the
        events whose every schedule is disabled: status's NEXT column."""
        return read_upcoming(self.config, self.session, time.time())

    def daemons(self) -> list[Member]:
        """The fleet's daemons: running first, then lost, then stopped (`sqsjkr daemons`)."""
        return ordered(read_members(self.config, self.store.client), time.time())

    def locks(self) -> Holdings:
        """The held locks, the concurrency groups' held slots, and the jobs waiting for one: a
        Scan of the whole table (`sqsjkr locks`)."""
        return held(self.table)

    def lock(self, lock_id: str) -> HeldLock | None:
        """Who holds lock_id now (None: free): one read."""
        with self.table.reading():
            return lock_of(self.table, lock_id)

    def routes(self) -> list[Route]:
        """Every route of the table (`sqsjkr route`)."""
        return routes_of(DynamoRoutes(self.store.client, self.store.table), self.table)

    def job_queues(self) -> list[str]:
        """The fleet's job queues, sorted: the config's ([sqs] and each [[queues]]) and those
        its routes name. The HTTP API sends to and reads the dead letters of these alone."""
        named = {queue.name for queue in self.config.all_queues()}
        return sorted(named | {route.queue for route in self.routes()})

    def pauses(self) -> list[Pause]:
        """Every pause in the table, in effect or past its until."""
        with self.table.reading():
            return DynamoPauses(self.store.client, self.store.table).pauses()

    def queues(self, queue: str | None = None) -> Queues:
        """queue (default: [sqs] queue_name) and the dead-letter queue its RedrivePolicy names;
        ResourceMissingError when it has none."""
        return queues_of(self.config, queue, self.sqs)

    def dead_letters(self, queue: str | None = None) -> list[DeadLetter]:
        """Every message of queue's dead-letter queue, oldest first, left there."""
        return read_letters(self.queues(queue))

    def dead_letter(self, message_id: str, queue: str | None = None) -> DeadLetter | None:
        """The dead letter whose id (in the DLQ, or its original) is message_id, or None."""
        return find_letter(self.queues(queue), message_id)

    def audit(self, since: float) -> list[AuditEntry]:
        """Every audit entry from since (unix seconds) on, newest first (`sqsjkr audit`)."""
        with self.store.reading():
            return entries_since(self.store.client, self.store.table, since)

    def audit_page(
        self, since: float, *, after: Position | None = None, limit: int = 100
    ) -> Paged[AuditEntry]:
        """A page of the audit entries from since (unix seconds) on, newest first, past the
        previous page's `after` (None: the first page); entries written meanwhile move no entry
        of the next pages. Only the page's items are read."""
        with self.store.reading():
            return audit_page(self.store.client, self.store.table, since, after, limit)

    def firings(
        self, event_id: str | None = None, since: float = DEFAULT_SINCE, missed_only: bool = False
    ) -> list[FiringRow]:
        """Every firing the schedules (of event_id's, when given) imply in the last `since`
        seconds, newest first, and what became of it (`sqsjkr firings`)."""
        return firings(self.store, event_id, since, time.time(), missed_only=missed_only)

    def pipeline(self, event_id: str, firing: str | float | None = None) -> PipelineView:
        """The latest run of event_id's pipeline, or its run of the firing due at `firing` (RFC
        3339, or unix seconds): each step's state (`sqsjkr pipeline`)."""
        at = parse_firing_time(firing) if isinstance(firing, str) else firing
        return event_pipeline(self.store, event_id, at)
