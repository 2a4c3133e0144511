"""Whether a scheduled event is late: its firing due at T has no run by T + its grace, known
from the schedule its summary keeps (or the scheduler's, when the check reads them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from sqsjkr.backends.scheduler import EventSchedule
from sqsjkr.contract.run import EventSummary
from sqsjkr.crontab.eventbridge import load_zone
from sqsjkr.crontab.fires import Window, next_fires
from sqsjkr.errors import ScheduleExpressionError
from sqsjkr.fleet.wording import format_span

#: A firing due within this long of now is named by its time of day alone ("02:00").
SAME_DAY_SECONDS = 86400.0


@dataclass(frozen=True)
class Due:
    """An event's first firing after its last one that ran: when it was due (unix seconds),
    in which zone, and how long after it a run may still start (the flexible window)."""

    at: float
    timezone: str
    window: float = 0.0


@dataclass(frozen=True)
class Scheduler:
    """What the scheduler's schedules say, when the check read them: each event's enabled
    schedule, and the events whose every schedule is disabled."""

    enabled: Mapping[str, EventSchedule]
    disabled: frozenset[str]
    #: Only some schedules were read whole (the plain check): the events the others send are
    #: judged by the schedule their summaries keep, and none is known to be deleted.
    partial: bool = False

    @classmethod
    def of(cls, schedules: Sequence[EventSchedule]) -> Scheduler:
        enabled = {s.event_id: s for s in schedules if s.enabled and s.event_id is not None}
        disabled = {s.event_id for s in schedules if not s.enabled and s.event_id not in enabled}
        return cls(enabled, frozenset(e for e in disabled if e is not None))

    def deleted(self, event_id: str, summary: EventSummary | None) -> bool:
        """Whether the event's schedule was deleted: its messages came from a schedule (the
        summary names it), and the scheduler has none that sends it any more."""
        if self.partial or summary is None or not summary.schedule:
            return False
        return event_id not in self.enabled and event_id not in self.disabled


def first_fire(
    expression: str, zone: str, after: float, window: Window | None = None
) -> float | None:
    """The schedule's first fire time after `after`, or None (it has ended, or EventBridge
    would not take the expression: `sqsjkr schedules` names why)."""
    instant = datetime.fromtimestamp(after, timezone.utc)
    try:
        fires = next_fires(expression, zone, instant, 1, window or Window()).times
    except ScheduleExpressionError:
        return None
    return fires[0].timestamp() if fires else None


def due_firing(
    event_id: str,
    summary: EventSummary | None,
    scheduler: Scheduler | None,
    newest: float | None = None,
) -> Due | None:
    """The event's first firing after the last that ran, or None when no schedule is known.

    What should fire comes from the scheduler's schedule when the check read it: a message's
    own expression (kept in the summary) never moves a firing later. Without it, the summary's
    schedule stands. newest: the newest firing its run records name, when read: the last firing
    never goes backwards when an older one is run by hand after a newer one."""
    held = scheduler.enabled.get(event_id) if scheduler else None
    window = held.flexible_window if held else 0.0
    last = summary.last_firing_at if summary else None
    if newest is not None:
        last = newest if last is None else max(last, newest)
    if held is not None:
        after = last if last is not None else _first_chance(summary, held)
        if after is None:
            return None
        bounds = Window(held.start, held.end, held.created)
        at = first_fire(held.expression, held.timezone, after, bounds)
        return None if at is None else Due(at, held.timezone, window)
    if summary is not None and summary.schedule_expression:
        zone = summary.schedule_timezone or "UTC"
        at = summary.next_firing_at if newest is None else None
        if at is None and last is not None:
            at = first_fire(summary.schedule_expression, zone, last)
        return None if at is None else Due(at, zone, window)
    return None


def _first_chance(summary: EventSummary | None, held: EventSchedule) -> float | None:
    """Where an event no firing has reached the history yet counts its firings from: its last
    run's sending, else its schedule's StartDate, else its creation."""
    last = summary.last_run if summary else None
    since = held.start or held.created
    return last.sent_at if last else since.timestamp() if since else None


def has_run(summary: EventSummary | None, due: Due) -> bool:
    """Whether a run of the firing (or a later one) has ended or is in progress."""
    if summary is None:
        return False
    last = summary.last_run
    if last is not None and (last.firing_at or last.sent_at) >= due.at:
        return True
    return any(start.sent_at >= due.at for start in summary.running)


def late_text(event_id: str, due: Due, now: float) -> str:
    """'the 02:00 Europe/Berlin firing of nightly-report has not run (14m late)'."""
    try:
        moment = datetime.fromtimestamp(due.at, load_zone(due.timezone))
    except ValueError:
        moment = datetime.fromtimestamp(due.at, timezone.utc)
    late = now - due.at  # in whole minutes past the first: a check runs each minute or so
    shown = moment.strftime("%H:%M" if now - due.at < SAME_DAY_SECONDS else "%Y-%m-%d %H:%M")
    return (
        f"the {shown} {due.timezone} firing of {event_id} has not run "
        f"({format_span(late if late < 60 else late - late % 60)} late)"
    )


def late_problem(
    event_id: str,
    summary: EventSummary | None,
    due: Due | None,
    grace: float,
    now: float,
) -> str | None:
    """Why the event is late, or None: its due firing has no run by due + window + grace."""
    if due is None or now <= due.at + due.window + grace or has_run(summary, due):
        return None
    return late_text(event_id, due, now)
