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
from sqsjkr.backends.catchup import CatchUpLease, claimed
from sqsjkr.backends.scheduler import (
    EventSchedule,
    get_event_schedule,
    job_message,
    list_states,
)
from sqsjkr.backends.sqs import group_id_of, queue_of_arn, send_noted
from sqsjkr.contract.catchup import catch_up_message, parse_catch_up
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
#: How often the sender of a caught-up firing reads whether it was claimed, before the next one.
CLAIM_POLL_SECONDS = 1.0


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
    #: How long a sender waits for a caught-up firing to be claimed before it sends the next
    #: firing of the same schedule (the older first); the rest waits for the next look.
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
    ) -> None:
        self._stores = stores
        self._settings = settings
        self._clock = clock
        self._lease = CatchUpLease(stores.dynamodb, stores.table, settings.group)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqsjkr-catchup", daemon=True)
        self._holding = False
        self._failing = False
        #: Schedules read whole, by name: (LastModificationDate, the schedule).
        self._read: dict[str, tuple[datetime | None, EventSchedule | None]] = {}
        #: Firings' keys known to have a claim (claims outlive any catch_up window), or sent.
        self._claimed: set[str] = set()
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
            held = self._lease.take(self._settings.owner, LEASE_SHARE * interval, self._clock())
            self._holding = held.ours
            if held.ours:
                self.look()
                next_turn = interval
            else:
                # Ask again once the holder's lease has lapsed, spread so that the fleet's
                # daemons do not all ask at the same instant.
                left = max(MIN_WAIT_SECONDS, held.until - self._clock())
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
        """Send every missed firing of the window of each schedule with catch_up, older first."""
        now = self._clock()
        wanted = self._wanted(now)
        keys = {firing.key for w in wanted for firing in w.firings}
        # Forget what fell out of every window: the sets stay the size of the windows.
        self._claimed &= keys
        self._sent &= keys
        unknown = keys - self._claimed
        if unknown:
            self._claimed |= claimed(self._stores.dynamodb, self._stores.table, unknown)
        for w in wanted:
            missed = [f for f in w.firings if f.key not in self._claimed]
            if missed and not self._stop.is_set():
                self._send_in_order(w, missed, now)

    def _wanted(self, now: float) -> list[Wanted]:
        found = []
        for schedule in self._schedules():
            if not schedule.enabled:
                continue  # a disabled schedule's firings were not due
            key = queue_of_arn(schedule.target_arn)
            url = self._settings.queues.get(key) if key is not None else None
            if url is None:
                continue  # another fleet's queue: its own daemons catch it up
            fields = job_message(schedule.message)
            window = self._window(schedule, fields)
            if window is None:
                continue
            firings = missed_since(schedule, window, now, self._settings.grace)
            if firings:
                found.append(Wanted(schedule, fields, url, firings))
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

    def _schedules(self) -> list[EventSchedule]:
        """The group's schedules, each read whole (GetSchedule) when new or changed since."""
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
        return [s for _, s in self._read.values() if s is not None]

    def _send_in_order(self, wanted: Wanted, missed: Sequence[Firing], now: float) -> None:
        """Send each missed firing, oldest first, the next once the one before is claimed."""
        for n, firing in enumerate(missed):
            if firing.key not in self._sent:
                self._send(wanted, firing, now)
                self._sent.add(firing.key)
            if n + 1 < len(missed) and not self._wait_claimed(firing):
                log.info(
                    "catch-up: %s's firing of %s is not taken yet; its later ones wait for "
                    "the next look",
                    quote(wanted.schedule.name),
                    firing.iso,
                )
                return

    def _send(self, wanted: Wanted, firing: Firing, now: float) -> None:
        late = now - firing.at
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

    def _wait_claimed(self, firing: Firing) -> bool:
        deadline = self._clock() + self._settings.order_wait
        while not self._stop.is_set():
            if claimed(self._stores.dynamodb, self._stores.table, [firing.key]):
                self._claimed.add(firing.key)
                return True
            if self._clock() >= deadline:
                return False
            self._stop.wait(CLAIM_POLL_SECONDS)
        return False


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
