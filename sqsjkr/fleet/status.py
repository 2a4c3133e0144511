"""The fleet's state as `status` and `status --check` judge it: failures in a row, firings late by
their schedule, else the usual interval learned from past runs, the daemons, and runs in progress.
"""

from __future__ import annotations

import enum
import functools
import itertools
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from sqsjkr.backends.fleet import DynamoControls
from sqsjkr.backends.members import DynamoRoster, Member
from sqsjkr.backends.pause import DynamoPauses, Pause, paused
from sqsjkr.backends.routes import Route
from sqsjkr.contract.run import EventSummary, RunRecord
from sqsjkr.fleet.daemons import live
from sqsjkr.fleet.failures import failure_text
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.late import Scheduler, due_firing, late_problem
from sqsjkr.fleet.pipeline_verdicts import PipelineVerdict, pipeline_verdicts
from sqsjkr.fleet.pipelines import pipelines_of, stuck_pipelines
from sqsjkr.fleet.running import Running, running_now
from sqsjkr.fleet.schedules import read_schedules, unseen_schedules
from sqsjkr.fleet.wording import failures_text, format_span
from sqsjkr.observability.logs import escape

#: How many of an event's last runs its usual interval is learned from.
LEARN_FROM_RUNS = 20


#: The fewest intervals (between three runs) a usual interval is learned from.
MIN_INTERVALS = 2


#: No success for this many usual intervals is critical: one missed run is not yet.
MISSED_INTERVALS = 2


#: Gaps between firings shorter than this are not a schedule's: sends by hand, a burst, a
#: redrive. They teach no interval (cron fires at most once a minute).
MIN_INTERVAL_SECONDS = 60.0


class Level(enum.IntEnum):
    """The exit codes and words of Nagios and Mackerel check plugins."""

    OK = 0
    WARNING = 1
    CRITICAL = 2
    UNKNOWN = 3


@dataclass(frozen=True)
class Finding:
    """What the check says of one event."""

    event_id: str
    level: Level
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckPolicy:
    """--max-failures, --max-age and --include-one-off: which events are judged, and when one
    is critical."""

    max_failures: int = 1
    max_ages: Mapping[str, float] = field(default_factory=dict)  # seconds, by event_id
    #: Judge jobs sent without an event_id too: each is an event of one run, with no next run
    #: to mend a failure, so by default they are left to `status` and the reporters.
    include_one_off: bool = False
    #: --min-daemons: fewer daemons running than this is critical.
    min_daemons: int | None = None
    #: [check] grace: how long after a firing was due (and its flexible window) it is late.
    grace: float = 300.0
    #: --schedules: read the scheduler's schedules too (a GetSchedule each), so that disabled
    #: ones are known and events no firing has reached yet are judged by theirs.
    read_schedules: bool = False


def learned_interval(runs: Sequence[RunRecord]) -> float | None:
    """The event's usual interval: the median gap between the firings of its final runs.

    A run knows no more of its firing than its message's send time, so runs sent by hand are
    told apart by their gaps: one under MIN_INTERVAL_SECONDS is left out, and a manual send
    between two firings moves a median little, where it would halve a mean. None until there
    are MIN_INTERVALS gaps.
    """
    fired = sorted({run.sent_at for run in runs if run.final and run.duplicate_of is None})
    gaps = [
        later - earlier
        for earlier, later in itertools.pairwise(fired)
        if later - earlier >= MIN_INTERVAL_SECONDS
    ]
    return statistics.median(gaps) if len(gaps) >= MIN_INTERVALS else None


def age_problem(
    summary: EventSummary,
    runs: Callable[[], Sequence[RunRecord]],
    policy: CheckPolicy,
    now: float,
    scheduled: bool = False,
) -> str | None:
    """Why the event has gone too long without a success, or None; runs is read only if needed.
    An event with a known schedule is judged by its firings instead of a learned interval."""
    explicit = policy.max_ages.get(summary.event_id)
    past: Sequence[RunRecord] | None = None
    if explicit is not None:
        limit, why = explicit, f"max age {format_span(explicit)}"
    elif scheduled:
        return None
    else:
        past = runs()
        interval = learned_interval(past)
        if interval is None:
            return None
        limit, why = MISSED_INTERVALS * interval, f"usual interval {format_span(interval)}"
    if summary.last_success_at is not None:
        age = now - summary.last_success_at
        return f"no success for {format_span(age)} ({why})" if age > limit else None
    past = runs() if past is None else past
    if not past:
        return None
    age = now - min(run.ended_at for run in past)
    return f"never succeeded, first run {format_span(age)} ago ({why})" if age > limit else None


def judge(
    summary: EventSummary,
    runs: Callable[[], Sequence[RunRecord]],
    policy: CheckPolicy,
    now: float,
    paused: bool = False,
    scheduler: Scheduler | None = None,
    pipeline: PipelineVerdict | None = None,
) -> Finding:
    """One event's verdict: critical for max_failures in a row, a late firing or too long
    without a success, or its pipeline's last run stuck; a warning for fewer failures in a row,
    or its pipeline's last run failed. A paused event is not judged by age or firings: it is
    meant not to run. pipeline: what the run of a pipeline its last run belongs to says."""
    failures = summary.consecutive_failures
    critical = []
    if failures >= policy.max_failures:
        critical.append(failures_text(failures))
    too_old = None if paused else overdue(summary, runs, policy, now, scheduler, pipeline)
    if too_old:
        critical.append(too_old)
    problem = None if pipeline is None else pipeline.problem
    if problem and pipeline is not None and pipeline.critical:
        critical.append(problem)
    if critical:
        said = [*critical, problem] if problem and problem not in critical else critical
        return Finding(summary.event_id, Level.CRITICAL, tuple(said))
    warnings = []
    if failures:
        warnings.append(f"{failures_text(failures)} (critical at {policy.max_failures})")
    if problem:
        warnings.append(problem)
    if warnings:
        return Finding(summary.event_id, Level.WARNING, tuple(warnings))
    return Finding(summary.event_id, Level.OK)


def overdue(
    summary: EventSummary,
    runs: Callable[[], Sequence[RunRecord]],
    policy: CheckPolicy,
    now: float,
    scheduler: Scheduler | None,
    pipeline: PipelineVerdict | None = None,
) -> str | None:
    """Why the event is late (a firing of its schedule has not run) or has gone too long
    without a success, or None. A pipeline's step has no schedule of its own (its messages
    carry its root's firing) and runs only as its run moves on: only a --max-age judges it."""
    if pipeline is not None and pipeline.is_step:
        if summary.event_id not in policy.max_ages:
            return None
        return age_problem(summary, runs, policy, now)
    scheduled, late = lateness(summary.event_id, summary, policy, now, scheduler, runs)
    return late or age_problem(summary, runs, policy, now, scheduled)


def lateness(
    event_id: str,
    summary: EventSummary | None,
    policy: CheckPolicy,
    now: float,
    scheduler: Scheduler | None,
    runs: Callable[[], Sequence[RunRecord]] | None = None,
) -> tuple[bool, str | None]:
    """Whether the event's schedule is known, and why it is late (None: it is not). An event
    whose every schedule is disabled, or whose schedule was deleted, has a known schedule and
    is never late. A firing that looks late by the summary is looked up in the event's runs
    (read only then): the summary keeps the last run's firing, which an older firing run by hand
    after a newer one moves back; the newest firing that ran is where lateness counts from."""
    if scheduler is not None and (
        event_id in scheduler.disabled or scheduler.deleted(event_id, summary)
    ):
        return True, None
    due = due_firing(event_id, summary, scheduler)
    known = due is not None or bool(summary and summary.schedule_expression)
    late = late_problem(event_id, summary, due, policy.grace, now)
    if late is None or runs is None:
        return known, late
    fired = [r.firing_at for r in runs() if r.firing_at is not None and r.duplicate_of is None]
    if not fired:
        return known, late
    due = due_firing(event_id, summary, scheduler, newest=max(fired))
    return known, late_problem(event_id, summary, due, policy.grace, now)


def unrecorded_findings(
    known: set[str], policy: CheckPolicy, now: float, pauses: Sequence[Pause], scheduler: Scheduler
) -> list[Finding]:
    """The scheduler's events the history does not know yet: late when their first firing
    since the schedule was created has no run by its grace."""
    findings = []
    for event_id in sorted(set(scheduler.enabled) - known):
        _, late = lateness(event_id, None, policy, now, scheduler)
        if late and paused(pauses, event_id, now) is None:
            findings.append(Finding(event_id, Level.CRITICAL, (late,)))
    return findings


def judge_all(
    summaries: Sequence[EventSummary],
    runs_of: Callable[[str], Sequence[RunRecord]],
    policy: CheckPolicy,
    now: float,
    pauses: Sequence[Pause] = (),
    scheduler: Scheduler | None = None,
    pipelines: Mapping[str, PipelineVerdict] | None = None,
) -> list[Finding]:
    """Every event's verdict (one-off jobs' only if the policy asks), a warning for each
    --max-age event the history does not know, and the scheduler's late events it does not.
    pipelines: what the run of a pipeline each event's last run belongs to says, by event."""
    verdicts = pipelines or {}
    known = {s.event_id for s in summaries}
    summaries = judged_events(summaries, policy)
    findings = [
        judge(
            s,
            functools.partial(runs_of, s.event_id),
            policy,
            now,
            paused=paused(pauses, s.event_id, now) is not None,
            scheduler=scheduler,
            pipeline=verdicts.get(s.event_id),
        )
        for s in summaries
    ]
    if scheduler is not None:
        findings += unrecorded_findings(known, policy, now, pauses, scheduler)
    findings += [
        Finding(event_id, Level.WARNING, ("no runs recorded (named by --max-age)",))
        for event_id in policy.max_ages
        if event_id not in known
    ]
    return findings


def judged_events(summaries: Sequence[EventSummary], policy: CheckPolicy) -> list[EventSummary]:
    """The events the check judges: one-off jobs only with --include-one-off."""
    return [s for s in summaries if policy.include_one_off or not s.one_off]


def daemons_finding(members: Sequence[Member], minimum: int, now: float) -> Finding:
    """--min-daemons: critical when fewer daemons than minimum are running."""
    count = len(live(members, now))
    if count >= minimum:
        return Finding("daemons", Level.OK)
    reason = f"{count} running, fewer than --min-daemons {minimum}"
    return Finding("daemons", Level.CRITICAL, (reason,))


@dataclass(frozen=True)
class FleetStatus:
    """What `status` shows: the pauses in effect and the routes, every event's summary, and each
    event's runs in progress (by the summaries' order)."""

    pauses: Sequence[Pause]
    routes: Sequence[Route]
    summaries: Sequence[EventSummary]
    running: Sequence[Sequence[Running]]


def with_scheduled(
    summaries: Sequence[EventSummary], scheduled: Iterable[str]
) -> list[EventSummary]:
    """summaries, and an empty one for each scheduled event no run has reached yet: the
    schedules are the list of what should run, so such an event is shown, and judged, from its
    first firing on."""
    known = {s.event_id for s in summaries}
    return [*summaries, *(EventSummary(e) for e in sorted(set(scheduled) - known))]


def scheduled_too(fleet: FleetStatus, scheduled: Iterable[str]) -> FleetStatus:
    """fleet with a row for each scheduled event no run has reached yet (see with_scheduled)."""
    summaries = with_scheduled(fleet.summaries, scheduled)
    running = [*fleet.running, *([] for _ in summaries[len(fleet.summaries) :])]
    return replace(fleet, summaries=summaries, running=running)


def read_status(store: Store, now: float) -> FleetStatus:
    """The controls item, every summary and each run in progress checked against its claim."""
    with store.reading():
        controls = DynamoControls(store.client, store.table).controls()
        summaries = store.history.summaries()
        running = [running_now(store, summary, now) for summary in summaries]
    return FleetStatus(controls.pauses, controls.routes, summaries, running)


def check_fleet(store: Store, policy: CheckPolicy, now: float) -> tuple[list[Finding], int]:
    """`status --check`'s verdicts (with --min-daemons, the daemons' too), and how many events
    were judged. The summaries are read through the index in batches; an event's runs are read
    only to learn its interval, when its schedule is not known."""
    policy = replace(policy, grace=store.config.check.grace.seconds)
    with store.reading():
        summaries = store.history.summaries()
        states = pipelines_of(store).states()
    stuck = {view.key: (view, why) for view, why in stuck_pipelines(store, now, states=states)}
    verdicts = pipeline_verdicts(
        summaries, {s.key: s for s in states}, lambda s: stuck[s.key][1] if s.key in stuck else ()
    )
    if policy.read_schedules:
        scheduler: Scheduler | None = Scheduler.of(read_schedules(store.config, store.session))
    else:
        scheduler = unseen_schedules(store.config, store.session, summaries)
    with store.reading():
        findings = judge_all(
            summaries,
            lambda event_id: store.history.runs(event_id, LEARN_FROM_RUNS),
            policy,
            now,
            DynamoPauses(store.client, store.table).pauses(),
            scheduler,
            verdicts,
        )
        if policy.min_daemons is not None:
            members = DynamoRoster(store.client, store.table).members()
            findings.append(daemons_finding(members, policy.min_daemons, now))
    # A stuck run its root's verdict names (its last run) is not named twice.
    judged = {s.event_id for s in judged_events(summaries, policy)}
    told = {v.key for e, v in verdicts.items() if v.stuck and e in judged}
    findings += [
        Finding(f"pipeline {view.name}", Level.CRITICAL, tuple(reasons))
        for key, (view, reasons) in stuck.items()
        if key not in told
    ]
    return findings, len(judged_events(summaries, policy))


def check_line(findings: Sequence[Finding], events: int) -> tuple[Level, str]:
    """The check's level and its one line: the worst level, then every event not OK, worst first."""
    bad = sorted((f for f in findings if f.level > Level.OK), key=lambda f: -f.level)
    if not bad:
        return Level.OK, f"SQSJKR OK - {events} event{'' if events == 1 else 's'}"
    items = "; ".join(f"{escape(f.event_id)}: {', '.join(f.reasons)}" for f in bad)
    return bad[0].level, f"SQSJKR {bad[0].level.name} - {items}"


def check_verdict(open_: Callable[[], Store], policy: CheckPolicy, now: float) -> tuple[Level, str]:
    """The check's level and its line. Whatever leaves the events unjudged is UNKNOWN: an AWS
    error, or one of sqsjkr's errors from open_ (a config that does not load or that turns the
    history off)."""
    try:
        findings, events = check_fleet(open_(), policy, now)
    except Exception as exc:
        # One line, as a check plugin's output is read (a TOML error may quote several lines of
        # the file); failure_text raises again what is neither.
        return Level.UNKNOWN, f"SQSJKR UNKNOWN - {' '.join(failure_text(exc).splitlines())}"
    return check_line(findings, events)
