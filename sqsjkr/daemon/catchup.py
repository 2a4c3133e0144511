"""Catch-up: the daemon holding the fleet's catch-up lease looks, once an interval, for firings of its
queues' schedules with `catch_up` that no daemon took, and sends each (older first) as that firing.

No controller: the firing's claim makes a firing run once however many daemons send it, or whether
its own message arrives after all. docs/schedules.md ("Catch-up") has the design and its cost.
"""

from __future__ import annotations

import hashlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

from sqsjkr.backends.aws import AWS_ERRORS, describe, error_code
from sqsjkr.backends.catchup import CatchUpLease, Turn, claims
from sqsjkr.backends.scheduler import (
    EventSchedule,
    get_event_schedule,
    job_message,
    list_states,
)
from sqsjkr.backends.sqs import group_id_of, queue_of_arn, send_noted
from sqsjkr.contract.catchup import (
    MAX_CATCH_UP,
    Seen,
    catch_up_message,
    drop_old_gaps,
    parse_catch_up,
    read_seen,
    seen_enabled,
    seen_text,
)
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import Firing
from sqsjkr.errors import InvalidJobError, ResourceMissingError, quote
from sqsjkr.observability.logs import moment

log = logging.getLogger("sqsjkr.catchup")

#: A lease outlasts its holder's interval by half: its holder renews it before anyone may take it.
LEASE_SHARE = 1.5
#: Most firings of one schedule a look considers (a rate(1 minute) over 7 days is 10,080).
MAX_FIRINGS = 10_080
#: The least wait before a daemon refused the lease asks again (clocks may disagree).
MIN_WAIT_SECONDS = 1.0
#: How long a stopping daemon waits for a look in progress to end.
STOP_WAIT_SECONDS = 2.0
#: How often the sender of a caught-up firing reads whether its run has ended, before the next one.
CLAIM_POLL_SECONDS = 1.0
#: How long past its lease (or its retry's time) a claim counts as still running: beyond that,
#: its holder is gone and its message too, or it would have been taken over.
ABANDONED_SECONDS = 900.0


@dataclass(frozen=True)
class CatchUpSettings:
    """How this daemon takes part: the schedule group it reads, how often the fleet looks, how
    young a firing with no claim may still be on its way (grace, plus its schedule's flexible
    window), and the queues it may send to: (account, name) -> URL."""

    group: str
    interval: float
    grace: float
    owner: str  # this daemon's id, which a caught-up run's record names as who noticed
    queues: Mapping[tuple[str, str], str]
    #: How long a sender waits for a caught-up firing's run to end before it leaves the
    #: schedule's later firings (the older runs first) to the next look; each run that ends
    #: starts the wait again.
    order_wait: float = 60.0


@dataclass(frozen=True)
class CatchUpStores:
    """The clients catch-up calls: EventBridge Scheduler, DynamoDB (the lock table) and SQS."""

    scheduler: Any
    dynamodb: Any
    table: str
    sqs: Any


def queue_key(url: str) -> tuple[str, str]:
    """(account, queue name) of a queue URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME)."""
    account, name = url.rstrip("/").split("/")[-2:]
    return account, name


def missed_since(
    schedule: EventSchedule, window_seconds: float, now: float, grace: float
) -> list[Firing]:
    """The schedule's firings from now - window_seconds to what may no longer be on its way,
    oldest first (the fire times of crontab/fires.py, none before the schedule was created)."""
    # Imported here, as history.py and metrics.py do: `sqsjkr run` starts without the cron
    # arithmetic, which only a daemon that looks for missed firings needs.
    from sqsjkr.crontab.fires import Window, fires_between

    since = now - window_seconds
    if schedule.created is not None:
        since = max(since, schedule.created.timestamp())
    until = now - grace - schedule.flexible_window
    window = Window(schedule.start, schedule.end, schedule.created)
    times, _ = fires_between(
        schedule.expression, schedule.timezone, since, until, window, MAX_FIRINGS
    )
    name = schedule.arn or schedule.name
    return [Firing(at, name, schedule.expression, schedule.timezone) for at in times]


@dataclass(frozen=True)
class Wanted:
    """A schedule with catch_up, and its firings of the window."""

    schedule: EventSchedule
    fields: dict[str, Any]
    url: str
    firings: Sequence[Firing]


class FleetClock:
    """The time the fleet shares: AWS's, as the Date of its answers tells it (the lease's, at
    each turn), run on by this host's clock in between; this host's own until AWS has answered.

    Never ahead of AWS's time (a Date is cut to the second, and was written before its answer
    arrived); behind it by under a second plus a call's latency. A host whose clock is wrong
    then judges no firing due early, and looks at the window the fleet means."""

    def __init__(self, local: Callable[[], float] = time.time) -> None:
        self._local = local
        self._offset: float | None = None

    def heard(self, answered_at: float | None, received: float) -> None:
        """An answer dated answered_at (None: no Date) arrived at received, by the local clock."""
        if answered_at is not None:
            self._offset = answered_at - received

    def now(self) -> float:
        return self._local() + (self._offset or 0.0)


class CatchUp:
    """The catch-up thread: at once, then once an interval, take (or renew) the fleet's lease; the
    holder looks. A daemon that did not get it asks again when the holder's lease ends. Stopping
    gives the lease up, so that the next daemon to start looks at once.

    A failed call is logged (once per outage at WARNING) and left to the next turn: the daemon's
    jobs never wait for catch-up."""

    def __init__(
        self,
        stores: CatchUpStores,
        settings: CatchUpSettings,
        *,
        clock: Callable[[], float] = time.time,
        fleet_clock: FleetClock | None = None,
    ) -> None:
        self._stores = stores
        self._settings = settings
        self._clock = clock
        self._fleet = FleetClock(clock) if fleet_clock is None else fleet_clock
        self._lease = CatchUpLease(stores.dynamodb, stores.table, settings.group)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqsjkr-catchup", daemon=True)
        self._holding = False
        self._taken_at = 0.0  # by the fleet's clock
        self._failing = False
        #: Schedules read whole, by name: (LastModificationDate, the schedule).
        self._read: dict[str, tuple[datetime | None, EventSchedule | None]] = {}
        #: What the looks have seen of each schedule with catch_up (kept in the lease's item);
        #: None until this daemon has held the lease and read the item's.
        self._seen: dict[str, Seen] | None = None
        #: Firings' keys known to have a claim (claims outlive any catch_up window), those whose
        #: run has ended, and those sent.
        self._claimed: set[str] = set()
        self._ended: set[str] = set()
        self._sent: set[str] = set()
        self._refused: set[tuple[str, datetime | None]] = set()  # bad catch_up, warned once

    def __enter__(self) -> CatchUp:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        # A look in the middle of a slow call must not hold up the daemon's stop: the thread is a
        # daemon thread, and a lease not given up lapses by itself.
        self._thread.join(timeout=STOP_WAIT_SECONDS)
        if self._holding and not self._thread.is_alive():
            try:
                self._lease.give_up(self._settings.owner)
            except AWS_ERRORS as error:
                log.debug("could not give up the catch-up lease (%s)", describe(error))

    def _run(self) -> None:
        wait = 0.0
        while not self._stop.wait(wait):
            wait = self.turn()

    def turn(self) -> float:
        """One turn: take the lease and look if it is ours; the seconds to the next turn."""
        interval = self._settings.interval
        try:
            held = self._take()
            if held.ours:
                self.look()
                # The next renewal one interval after the last (a long look renewed it).
                next_turn = max(0.0, self._taken_at + interval - self._fleet.now())
            else:
                # Ask again once the holder's lease has lapsed, spread so that the fleet's
                # daemons do not all ask at the same instant.
                left = max(MIN_WAIT_SECONDS, held.until - self._fleet.now())
                next_turn = left + random.uniform(0, interval / 10)
        except AWS_ERRORS as error:
            self._failed(error)
            return interval
        except Exception:
            log.exception("catch-up failed; trying again in %.0fs", interval)
            return interval
        if self._failing:
            log.info("catch-up works again")
        self._failing = False
        return next_turn

    def _take(self) -> Turn:
        """Take or renew the lease, keeping what this daemon has seen of the schedules in its
        item; a daemon taking it from another adopts what the other had kept there."""
        owner = self._settings.owner
        now = self._fleet.now()
        seen = None if self._seen is None else seen_text(self._seen)
        held = self._lease.take(owner, LEASE_SHARE * self._settings.interval, now, seen)
        self._fleet.heard(held.answered_at, self._clock())
        self._holding = held.ours
        if held.ours:
            self._taken_at = now
            if held.previous != owner or self._seen is None:
                self._seen = read_seen(held.seen)
        return held

    def _failed(self, error: BaseException) -> None:
        level = logging.DEBUG if self._failing else logging.WARNING
        self._failing = True
        denied = error_code(error) in ("AccessDeniedException", "AccessDenied")
        off = '[schedule] catch_up_interval = "0s" turns catch-up off'
        if denied:
            hint = (
                ": the daemon needs scheduler:ListSchedules, scheduler:GetSchedule and "
                f"dynamodb:BatchGetItem (docs/schedules.md, Catch-up); {off}"
            )
        elif isinstance(error, ResourceMissingError):
            hint = f"; {off}"
        else:
            hint = "; trying again next interval"
        log.log(
            level,
            "catch-up could not look for missed firings in schedule group %s (%s)%s",
            quote(self._settings.group),
            describe(error),
            hint,
        )

    def look(self) -> None:
        """Send every missed firing of the window of each schedule with catch_up, older first,
        each once the run of the schedule's firing before it has ended."""
        now = self._fleet.now()
        wanted = self._wanted(now)
        keys = {firing.key for w in wanted for firing in w.firings}
        # Forget what fell out of every window: the sets stay the size of the windows.
        self._claimed &= keys
        self._ended &= keys
        self._sent &= keys
        unknown = keys - self._claimed
        if unknown:
            self._note(unknown, now)
        if not self._stop.is_set():
            self._send_in_order(wanted, unknown)

    def _note(self, keys: Iterable[str], now: float) -> None:
        """Read the claims of these firings: which exist, and whose runs have ended."""
        for key, until in claims(self._stores.dynamodb, self._stores.table, keys).items():
            self._claimed.add(key)
            # A claim held long past its lease has no live holder, and no message left to take
            # it over: waiting for it would hold the schedule's later firings back for good.
            if until is None or until < now - ABANDONED_SECONDS:
                self._ended.add(key)

    def _wanted(self, now: float) -> list[Wanted]:
        found = []
        seen = {} if self._seen is None else self._seen
        kept: dict[str, Seen] = {}
        for modified, schedule in self._schedules():
            if not schedule.enabled:
                # A disabled schedule's firings were not due; its record waits for its enabling,
                # which moves its LastModificationDate.
                if schedule.name in seen:
                    kept[schedule.name] = seen[schedule.name]
                continue
            key = queue_of_arn(schedule.target_arn)
            url = self._settings.queues.get(key) if key is not None else None
            if url is None:
                continue  # another fleet's queue: its own daemons catch it up
            fields = job_message(schedule.message)
            window = self._window(schedule, fields)
            if window is None or modified is None:
                continue  # no catch_up; or no LastModificationDate: nothing known of its state
            record = seen_enabled(seen.get(schedule.name), modified.timestamp(), now)
            record = drop_old_gaps(record, now - MAX_CATCH_UP.seconds)
            kept[schedule.name] = record
            firings = [
                f
                for f in missed_since(schedule, window, now, self._settings.grace)
                if not record.holds_back(f.at)
            ]
            if firings:
                found.append(Wanted(schedule, fields, url, firings))
        self._seen = kept
        return found

    def _window(self, schedule: EventSchedule, fields: Mapping[str, object]) -> float | None:
        try:
            duration = parse_catch_up(fields)
        except InvalidJobError as error:
            seen = (schedule.name, self._read.get(schedule.name, (None, None))[0])
            if seen not in self._refused:
                self._refused.add(seen)
                log.warning("schedule %s is not caught up: %s", quote(schedule.name), error)
            return None
        return None if duration is None else duration.seconds

    def _schedules(self) -> list[tuple[datetime | None, EventSchedule]]:
        """The group's schedules, each read whole (GetSchedule) when new or changed since, with
        its LastModificationDate."""
        listed = list_states(self._stores.scheduler, self._settings.group)
        names = {s.name for s in listed}
        self._read = {name: read for name, read in self._read.items() if name in names}
        for summary in listed:
            known = self._read.get(summary.name)
            if known is None or known[0] != summary.modified or summary.modified is None:
                schedule = get_event_schedule(
                    self._stores.scheduler, self._settings.group, summary.name
                )
                self._read[summary.name] = (summary.modified, schedule)
        return [(m, s) for m, s in self._read.values() if s is not None]

    def _heads(self, wanted: Sequence[Wanted]) -> list[tuple[Wanted, Firing]]:
        """Each schedule's firing to send or wait for: the first whose run has not ended, of
        those up to its last firing without a claim (none when every firing has a claim)."""
        heads = []
        for w in wanted:
            last = max(
                (n for n, f in enumerate(w.firings) if f.key not in self._claimed), default=None
            )
            if last is None:
                continue
            head = next(f for f in w.firings[: last + 1] if f.key not in self._ended)
            heads.append((w, head))
        return heads

    def _send_in_order(self, wanted: Sequence[Wanted], fresh: set[str]) -> None:
        """Send each schedule's missed firings, oldest first, the next once the run of the one
        before it has ended (its claim finished): caught-up runs never overlap, or meet on their
        own lock. Schedules go side by side; one whose run does not end within order_wait is
        left to the next look, and so is one whose firing, sent by an earlier look, no daemon
        has taken yet (its event is paused, or the queue is behind): polling it would cost a
        call a second and bring nothing sooner."""
        deadline = self._clock() + self._settings.order_wait
        fresh = set(fresh)  # keys whose claims were read during this look
        sent_now: set[str] = set()
        while not self._stop.is_set():
            heads = self._heads(wanted)
            stale = {f.key for _, f in heads if f.key not in fresh}
            if stale:
                self._note(stale, self._fleet.now())
                fresh |= stale
                continue
            if not heads:
                return
            for w, firing in heads:
                if firing.key not in self._claimed and firing.key not in self._sent:
                    self._send(w, firing)
                    self._sent.add(firing.key)
                    sent_now.add(firing.key)
            live = [f for _, f in heads if f.key in self._claimed or f.key in sent_now]
            if not live or self._clock() >= deadline:
                for w, firing in heads:
                    log.info(
                        "catch-up: %s's firing of %s %s; its later ones wait for the next look",
                        quote(w.schedule.name),
                        firing.iso,
                        "has not ended yet" if firing.key in self._claimed else "is not taken yet",
                    )
                return
            if self._stop.wait(CLAIM_POLL_SECONDS) or not self._keep_lease():
                return
            ended = len(self._ended)
            waiting = {f.key for _, f in heads}
            self._note(waiting, self._fleet.now())
            fresh = set(waiting)
            if len(self._ended) > ended:
                deadline = self._clock() + self._settings.order_wait

    def _keep_lease(self) -> bool:
        """Renew the lease during a long look, half an interval after its last renewal; False
        once another daemon holds it."""
        if self._fleet.now() - self._taken_at < self._settings.interval / 2:
            return True
        return self._take().ours

    def _send(self, wanted: Wanted, firing: Firing) -> None:
        late = self._fleet.now() - firing.at
        reason = f"caught up: missed firing of {firing.iso}, noticed {late:.0f}s after it was due"
        group = wanted.schedule.group_id or group_id_of(wanted.schedule.event_id)
        # The same deduplication id from every daemon: on a FIFO queue SQS drops a second send
        # of the firing within its five minutes.
        digest = hashlib.sha256(firing.key.encode()).hexdigest()[:64]
        message_id = send_noted(
            self._stores.sqs,
            wanted.url,
            catch_up_message(wanted.fields, firing),
            (self._settings.owner, reason),
            group,
            f"catchup-{digest}",
        )
        log.info(
            "catch-up: sent schedule %s's missed firing of %s (due %.0fs ago) as message %s",
            quote(wanted.schedule.name),
            moment(firing.at),
            late,
            message_id,
        )


def catch_up_interval(config: Config) -> float:
    """Seconds between the fleet's looks; 0: this daemon takes no part. Catch-up reads the
    Scheduler's schedules (not rules), and needs the firings' claims in the table."""
    if config.schedule.engine != "scheduler" or config.dedupe.backend != "dynamodb":
        return 0.0
    return config.schedule.catch_up_interval.seconds


def catch_up(config: Config, stores: CatchUpStores, owner: str, urls: Iterable[str]) -> CatchUp:
    """The catch-up thread of a daemon of these queues (their URLs), named owner."""
    settings = CatchUpSettings(
        group=config.schedule.group,
        interval=catch_up_interval(config),
        grace=config.check.grace.seconds,
        owner=owner,
        queues={queue_key(url): url for url in urls},
    )
    return CatchUp(stores, settings)
