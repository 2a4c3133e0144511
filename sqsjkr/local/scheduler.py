"""Local mode's stand-in for EventBridge Scheduler, which moto keeps schedules for but never runs:
it fires every schedule of the embedded endpoint as the Scheduler would, on crontab/fires.py's times.

Never against AWS: it refuses any endpoint but local mode's own, on this host.
"""

from __future__ import annotations

import logging
import math
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, error_code, make_client
from sqsjkr.backends.scheduler import EventSchedule, get_event_schedule, list_states
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing
from sqsjkr.crontab.fires import Window, fires_between, next_fires
from sqsjkr.errors import LocalModeError, ResourceMissingError, ScheduleExpressionError
from sqsjkr.local.delivery import Delivery, deliver, is_queue, substituted
from sqsjkr.local.rules import LocalRules

log = logging.getLogger("sqsjkr.local")

#: The Scheduler's other two context attributes (its guide, "Adding context attributes").
EXECUTION_ID = "<aws.scheduler.execution-id>"
ATTEMPT_NUMBER = "<aws.scheduler.attempt-number>"
#: How often the schedules are listed again, for new and changed ones: a firing already known
#: wakes the thread at its time.
LOOK_SECONDS = 5.0
#: Most firings of one schedule sent at one look (a clock that jumped a day: a rate(1 minute)).
MAX_FIRES = 1000
#: How long a firing is remembered as sent after its flexible window has passed.
REMEMBER_SECONDS = 3600.0
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def check_embedded(endpoint: str, clients: list[Any]) -> None:
    """LocalModeError unless endpoint is on this host and every client calls it: local mode's
    scheduler sends jobs to queues, which it must never do to an AWS account's."""
    parts = urlsplit(endpoint)
    if parts.scheme != "http" or parts.hostname not in _LOOPBACK:
        raise LocalModeError(
            f"local mode fires schedules only on its embedded endpoint, never on {endpoint}"
        )
    for client in clients:
        if client.meta.endpoint_url.rstrip("/") != endpoint.rstrip("/"):
            raise LocalModeError(
                f"local mode fires schedules only on its embedded endpoint {endpoint}; its "
                f"{client.meta.service_model.service_name} client calls {client.meta.endpoint_url}"
            )


@dataclass(frozen=True)
class Known:
    """A schedule read whole, kept until ListSchedules says it changed."""

    group: str
    modified: datetime | None
    schedule: EventSchedule


class LocalScheduler:
    """Fires the embedded endpoint's schedules (and scheduled rules, local/rules.py): each firing
    once, when due (within its flexible window), context attributes substituted in its input.

    fire_due(now) does one look; start() runs a thread that looks every LOOK_SECONDS and at each
    firing's time, joined by close(). Since is when it first looks from: no firing before it."""

    def __init__(
        self,
        session: Any,
        endpoint: str,
        *,
        since: float | None = None,
        clock: Callable[[], float] = time.time,
        delay: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self._scheduler = make_client(session, "scheduler")
        self._sqs = make_client(session, "sqs")
        events = make_client(session, "events")
        check_embedded(endpoint, [self._scheduler, self._sqs, events])
        self._clock = clock
        self._delay = delay  # (0, window): when in its flexible window a firing is sent
        self._looked = clock() if since is None else since
        self._rules = LocalRules(events, self._sqs, self._looked)
        self._known: dict[tuple[str, str], Known] = {}
        self._fired: dict[str, float] = {}  # each firing sent (schedule@time), by its time
        self._delays: dict[str, tuple[float, float]] = {}  # each firing's (time, delay)
        # Each schedule's (LastModificationDate, time before which nothing of it is due): an
        # idle look computes no fire times (croniter's are a millisecond or more each).
        self._quiet: dict[tuple[str, str], tuple[datetime | None, float]] = {}
        self._warned: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sqsjkr-local-scheduler")
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            now = self._clock()
            try:
                soonest = self.fire_due(now)
            except (BotoCoreError, ClientError, ResourceMissingError) as exc:
                log.warning("local scheduler: cannot read the schedules: %s", describe(exc))
                soonest = None
            wait = LOOK_SECONDS if soonest is None else min(LOOK_SECONDS, soonest - now)
            if self._stop.wait(max(wait, 0.0)):
                return

    def fire_due(self, now: float) -> float | None:
        """Deliver every firing due by now (unix seconds) that is not yet delivered; when the
        next one is due, None when none is known."""
        soonest = self._rules.fire_due(now)
        for known in self._read():
            name = (known.group, known.schedule.name)
            quiet = self._quiet.get(name)
            if quiet is not None and quiet[0] == known.modified and now < quiet[1]:
                due: float | None = quiet[1]  # unchanged, and nothing of it due yet
            else:
                try:
                    due = self._fire(known, now)
                except (ValueError, OverflowError) as exc:
                    # A time past Python's dates: this schedule alone is skipped.
                    self._warn(known.schedule, f"cannot compute its firings: {exc}")
                    continue
                self._quiet[name] = (known.modified, math.inf if due is None else due)
            if due is not None and due < math.inf and (soonest is None or due < soonest):
                soonest = due
        self._looked = now
        self._forget(now)
        return soonest

    def _read(self) -> list[Known]:
        """Every schedule of every group, read whole when new or changed since the last look."""
        fresh: dict[tuple[str, str], Known] = {}
        for group in self._groups():
            try:
                listed = list_states(self._scheduler, group)
            except ResourceMissingError:
                continue  # deleted since it was listed
            for summary in listed:
                known = self._known.get((group, summary.name))
                if known is None or known.modified != summary.modified:
                    schedule = get_event_schedule(self._scheduler, group, summary.name)
                    if schedule is None:
                        continue
                    known = Known(group, summary.modified, schedule)
                fresh[(group, summary.name)] = known
        self._known = fresh
        return list(fresh.values())

    def _groups(self) -> Iterator[str]:
        for page in self._scheduler.get_paginator("list_schedule_groups").paginate():
            yield from (str(group["Name"]) for group in page.get("ScheduleGroups", []))

    def _fire(self, known: Known, now: float) -> float | None:
        """Deliver the schedule's firings due by now; when its next one is due."""
        schedule = known.schedule
        if not schedule.enabled:
            return None
        window = Window(schedule.start, schedule.end, schedule.created)
        # Within its flexible window a firing due before the last look may not be sent yet.
        since = self._looked - schedule.flexible_window
        if schedule.created is not None:
            since = max(since, schedule.created.timestamp())
        times, _ = fires_between(
            schedule.expression, schedule.timezone, since, now, window, MAX_FIRES
        )
        soonest: float | None = None
        for at in times:
            key = f"{schedule.arn}@{at}"
            if key in self._fired:
                continue
            due = at + self._delay_of(key, at, schedule.flexible_window)
            if due > now:
                soonest = due if soonest is None else min(soonest, due)
                continue
            self._send(schedule, at)
            self._fired[key] = at
            if schedule.delete_after and self._next(schedule, at + 1) is None:
                self._delete(known)
                return None
        upcoming = self._next(schedule, now)
        if upcoming is not None:
            at = float(int(upcoming))  # to the second, as fires_between names it
            due = upcoming + self._delay_of(f"{schedule.arn}@{at}", at, schedule.flexible_window)
            soonest = due if soonest is None else min(soonest, due)
        return soonest

    def _next(self, schedule: EventSchedule, after: float) -> float | None:
        """The schedule's next fire time after `after`, exactly (a rate() counts from its start,
        to the microsecond); None when it fires no more."""
        window = Window(schedule.start, schedule.end, schedule.created)
        moment = datetime.fromtimestamp(after, timezone.utc)
        try:
            fires = next_fires(schedule.expression, schedule.timezone, moment, 1, window)
        except ScheduleExpressionError:
            return None
        return fires.times[0].timestamp() if fires.times else None

    def _delay_of(self, key: str, at: float, window: float) -> float:
        """How long after it is due the firing is sent: drawn once in its flexible window."""
        if key not in self._delays:
            self._delays[key] = (at, self._delay(0.0, window) if window > 0 else 0.0)
        return self._delays[key][1]

    def _send(self, schedule: EventSchedule, at: float) -> None:
        if not is_queue(schedule.target_arn):
            self._warn(
                schedule,
                f"targets {schedule.target_arn}; local mode delivers to SQS queues only, and "
                "skips its firings",
            )
            return
        delivery = scheduler_delivery(schedule, at)
        what = deliver(self._sqs, delivery)
        log.info("local scheduler: schedule %s fired for %s: %s", schedule.name, _iso(at), what)

    def _warn(self, schedule: EventSchedule, what: str) -> None:
        """Say once per schedule what keeps it from firing."""
        key = schedule.arn or schedule.name
        if key not in self._warned:
            self._warned.add(key)
            log.warning("local scheduler: schedule %s %s", schedule.name, what)

    def _delete(self, known: Known) -> None:
        """ActionAfterCompletion DELETE: the schedule fires no more, and goes."""
        try:
            self._scheduler.delete_schedule(GroupName=known.group, Name=known.schedule.name)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
        self._known.pop((known.group, known.schedule.name), None)
        log.info("local scheduler: schedule %s completed and was deleted", known.schedule.name)

    def _forget(self, now: float) -> None:
        """Firings whose flexible window closed long ago: no look reaches back to them."""
        widest = max((k.schedule.flexible_window for k in self._known.values()), default=0.0)
        horizon = now - widest - REMEMBER_SECONDS
        self._fired = {key: at for key, at in self._fired.items() if at >= horizon}
        self._delays = {key: d for key, d in self._delays.items() if d[0] >= horizon}
        self._quiet = {name: q for name, q in self._quiet.items() if name in self._known}


def scheduler_delivery(schedule: EventSchedule, at: float) -> Delivery:
    """The firing at `at` of the schedule as the Scheduler sends it: its input with the context
    attributes substituted; refused, its dead-letter event's attributes (its guide,
    "Configuring a schedule's dead-letter queue")."""
    execution = secrets.token_hex(8)
    arn = schedule.arn or ""
    body = substituted(
        schedule.message or "{}",
        {SCHEDULED_TIME: _iso(at), SCHEDULE_ARN: arn, EXECUTION_ID: execution, ATTEMPT_NUMBER: "1"},
    )
    return Delivery(
        target_arn=schedule.target_arn or "",
        body=body,
        group_id=schedule.group_id,
        dead_letter_arn=schedule.dead_letter_arn,
        attributes={"EXECUTION_ID": execution, "SCHEDULE_ARN": arn, "SCHEDULED_TIME": _iso(at)},
    )


def _iso(at: float) -> str:
    return Firing(at, "").iso
