"""sqsjkr.Fleet's actions: trigger, kill, pause and resume, route, unlock, the dead letters' redrive,
delete and purge, forget; each the fleet layer's function, audited inside it as the Fleet's actor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime, timezone

from sqsjkr.backends.kills import KillResult
from sqsjkr.backends.pause import ALL_SCOPE, DynamoPauses, Pause
from sqsjkr.backends.routes import DynamoRoutes, Route
from sqsjkr.contract.run import EventSummary
from sqsjkr.errors import RequestError
from sqsjkr.fleet.client_reads import Reads
from sqsjkr.fleet.dead_letters import DeadLetter
from sqsjkr.fleet.firings import FiringRow
from sqsjkr.fleet.history import forget_event
from sqsjkr.fleet.kill import Target, kill_runs, need_claims
from sqsjkr.fleet.locks import HeldLock
from sqsjkr.fleet.pause import parse_until, pause_events, resume_events
from sqsjkr.fleet.redrive import Redrive, delete_letters, purge_letters, redrive_letters
from sqsjkr.fleet.route import clear_route, set_route
from sqsjkr.fleet.step_rerun import Rerun, trigger_run
from sqsjkr.fleet.trigger import Triggered, trigger_event, trigger_firing
from sqsjkr.fleet.unlock import unlock_held

#: Where the layer's notes go (a disabled schedule triggered, a forced route's warning, a run of
#: a kill's target that has ended): a program's logging, not a terminal.
_log = logging.getLogger("sqsjkr.fleet")


def _firing_time(at: float) -> str:
    """A firing's unix time as trigger --firing takes it: RFC 3339 in UTC, its microseconds
    kept when it has them (a rate() schedule's firings have its start's)."""
    return datetime.fromtimestamp(at, timezone.utc).isoformat().replace("+00:00", "Z")


def _events(event_ids: str | Sequence[str] | None) -> list[str] | None:
    """The events an action names: one, several, or None for every event."""
    if event_ids is None:
        return None
    events = [event_ids] if isinstance(event_ids, str) else list(event_ids)
    if not events or any(event in ("", ALL_SCOPE) for event in events):
        raise RequestError(
            f"name the events to act on by their ids ({events!r} names none), or None for every event"
        )
    return sorted(set(events))


class Actions(Reads):
    """What a Fleet changes. Each action writes its audit item first, as this Fleet's actor
    (AuditRefused, and nothing changed, when it cannot)."""

    def trigger(self, event_id: str, *, schedule: str | None = None, reason: str = "") -> Triggered:
        """Send event_id's schedule's message to its queue (or its route) now, as `sqsjkr
        trigger` does; `fleet.handle(t.message_id, event_id).wait()` waits for its run.
        schedule: the schedule's name, when the event has several that differ."""
        return trigger_event(
            self.config, self.store, self.auditor, event_id, schedule, reason, _log.warning
        )

    def trigger_firing(
        self,
        event_id: str | FiringRow,
        at: str | datetime | None = None,
        *,
        schedule: str | None = None,
        reason: str = "",
        force: bool = False,
    ) -> Triggered:
        """Run the firing of event_id's schedule due at `at` as that firing, as `sqsjkr trigger
        --firing` does: at is an aware datetime, or text (RFC 3339, or a wall time in the
        schedule's zone); or give a row of firings() alone, its event, schedule and time.
        AlreadyDone (a RequestError) if a run of it is recorded, unless force."""
        if isinstance(event_id, FiringRow):
            row = event_id
            if at is not None:
                raise RequestError("a firing row names its own time: give no `at` with it")
            event_id, at, schedule = row.event_id, _firing_time(row.at), schedule or row.schedule
        elif isinstance(at, datetime):
            if at.utcoffset() is None:
                raise RequestError(f"at {at.isoformat()} has no time zone: give an aware datetime")
            at = _firing_time(at.timestamp())
        elif at is None:
            raise RequestError("name the firing to run: its time (at), or a row of firings()")
        return trigger_firing(
            self.config,
            self.store,
            self.auditor,
            event_id,
            at,
            reason,
            _log.warning,
            schedule_name=schedule,
            force=force,
        )

    def trigger_run(
        self,
        step: str,
        run: str,
        *,
        force: bool = False,
        queue: str | None = None,
        reason: str = "",
    ) -> Rerun:
        """Run step (its event id, or its name) again within the pipeline's kept run, as `sqsjkr
        trigger STEP --run KEY` does: run is the run's key (`Fleet.pipeline(...).key`: the root's
        message id when sent by hand, `<schedule>@<time>` when fired), the step sent from the
        pipeline that run began with, to queue (default: a fired run's schedule's target, else
        [sqs] queue_name) or its route. The
        steps after it follow as usual. ResourceMissingError for a run no daemon began;
        AlreadyDone (a RequestError), unless force, for a step that succeeded or runs now."""
        return trigger_run(
            self.config, self.store, self.auditor, step, run, reason, force=force, queue=queue
        )

    def kill(self, target: str, *, reason: str = "") -> list[tuple[Target, KillResult]]:
        """Ask the daemons to stop every run of event target in progress (or the run of message
        target), at their next heartbeat. NothingToDo, changing nothing, when none runs."""
        need_claims(self.store, self.source)
        return kill_runs(self.store, self.auditor, self.actor.user, target, reason, _log.info)

    def pause(
        self,
        event_ids: str | Sequence[str] | None = None,
        *,
        until: float | str | None = None,
        reason: str = "",
    ) -> list[Pause]:
        """Pause events (None: every event) fleet-wide until resumed, or until a time: unix
        seconds, or text as `pause --until` takes it ("2h", "2030-01-31T09:30:00+09:00")."""
        events, now = _events(event_ids), time.time()
        ends = parse_until(until, now) if isinstance(until, str) else until
        if ends is not None and ends <= now:
            raise RequestError(f"until {ends:.0f} is in the past: nothing paused")
        store = DynamoPauses(self.store.client, self.store.table)
        with self.table.reading():
            return list(
                pause_events(store, self.auditor, self.actor.user, events, now, ends, reason)
            )

    def resume(
        self, event_ids: str | Sequence[str] | None = None, *, reason: str = ""
    ) -> list[Pause]:
        """Lift the pauses of events (None: every pause); the pauses lifted (none: nothing
        was paused)."""
        store = DynamoPauses(self.store.client, self.store.table)
        with self.table.reading():
            return resume_events(store, self.auditor, _events(event_ids), reason)

    def route(self, event_id: str, queue: str, *, force: bool = False, reason: str = "") -> Route:
        """Run event_id's jobs from queue, wherever they are sent; the route made. RouteRefused
        (unless force) for a dead-letter queue or one no live daemon serves, NothingToDo when
        it is routed there already."""
        made = Route(event_id, queue, time.time(), reason, self.actor.user)
        store = DynamoRoutes(self.store.client, self.store.table)
        lines = set_route(
            self.config, store, self.table, self.auditor, made, force=force, sqs=self.sqs
        )
        for line in lines[1:]:
            _log.warning(line.strip())
        return made

    def clear_route(self, event_id: str, *, reason: str = "") -> str:
        """Remove event_id's route; what was cleared, in words. NothingToDo when it had none."""
        store = DynamoRoutes(self.store.client, self.store.table)
        return clear_route(store, self.table, self.auditor, event_id, reason)

    def unlock(
        self, lock_id: str, *, slot: int | None = None, force: bool = False, reason: str = ""
    ) -> HeldLock:
        """Remove lock_id (or slot of concurrency group lock_id); the lock removed. NotHeld
        when none is held, UnlockRefused for a live lease unless force."""
        return unlock_held(self.table, self.auditor, lock_id, slot, force, reason, time.time())

    def redrive(
        self,
        message_ids: Sequence[str] | None = None,
        *,
        queue: str | None = None,
        force: bool = False,
        reason: str = "",
    ) -> Redrive:
        """Send dead letters (None: every one) back to queue, then delete them from its
        dead-letter queue; one the daemon would refuse again stays unless force. What was
        done: moved, skipped (malformed), errors (a named id not found among them)."""
        return redrive_letters(
            self.queues(queue), self.auditor, message_ids, force, reason, warn=_log.warning
        )

    def delete_dead_letters(
        self, message_ids: Sequence[str], *, queue: str | None = None, reason: str = ""
    ) -> tuple[list[DeadLetter], list[str]]:
        """Delete the named dead letters for good, unrun: those deleted, the ids not found."""
        return delete_letters(self.queues(queue), self.auditor, message_ids, reason, _log.warning)

    def purge_dead_letters(
        self, *, queue: str | None = None, reason: str = ""
    ) -> tuple[int, list[str]]:
        """Delete every message of the dead-letter queue, unrun: how many went, and why each
        one that did not failed."""
        return purge_letters(self.queues(queue), self.auditor, reason, _log.warning)

    def forget(self, event_id: str, *, reason: str = "") -> EventSummary | None:
        """Delete event_id's summary (its run records expire as before): the summary it had,
        or None when there was none."""
        with self.store.reading():
            return forget_event(self.store.history, self.auditor, event_id, reason)
