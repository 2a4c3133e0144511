"""A run of a pipeline judged step by step, from its state and its steps' records: each step's
state (waiting for which step, running where, ran, skipped and why, not needed), and why it is stuck.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.pipeline import PipelineState
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.pipeline import STEP_MARK, Pipeline
from sqsjkr.contract.pipeline_progress import called_for, graph_of, on_failure_only
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart
from sqsjkr.fleet.history import record_json
from sqsjkr.fleet.wording import format_span, local_time

#: A step whose parents all succeeded (or whose on_failure call came) this long ago and that has
#: not started is stuck: its message was sent at that moment, and a step waits for a worker, a
#: lock or a concurrency slot, rarely for an hour (`status --check`, docs/pipelines-seen.md).
STUCK_AFTER = 3600.0
#: The origin a caught-up firing's root run records, shown as "caught up".
CAUGHT_UP = Origin.CATCH_UP.value


class StepStatus(enum.Enum):
    """Where one step of one run stands."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    RUNNING = "running"
    WAITING = "waiting"  # for a parent, or sent and not started yet
    SKIPPED = "skipped"  # a step it needs failed
    NOT_NEEDED = "not needed"  # an on_failure step no failure called for


@dataclass(frozen=True)
class StepView:
    """One step of one run: its place in the graph, its state, and why."""

    name: str
    depth: int
    after: tuple[str, ...]
    on_failure: tuple[str, ...]
    status: StepStatus
    detail: str
    #: Its parents that have not succeeded (WAITING), or the failed step that stops it (SKIPPED).
    waiting_for: tuple[str, ...] = ()
    skipped_by: str | None = None
    #: Its newest record of this run (ran), and its run in progress (RUNNING).
    run: RunRecord | None = None
    running: RunStart | None = None
    #: When it became due: its parents' last success, or the failure that called it (WAITING);
    #: for a step waiting for its retry, when that retry is due.
    due_since: float | None = None
    #: When its next attempt may start (WAITING for its retry, as its claim says).
    retry_at: float | None = None
    #: When a Go daemon took a message of the queue just after this step's was sent, no sqsjkr
    #: daemon having claimed it (fleet/go_marks.py): it runs the step, and moves nothing on.
    taken_by_go: float | None = None

    def as_json(self) -> dict[str, Any]:
        running = self.running
        return {
            "step": self.name,
            "depth": self.depth,
            "after": list(self.after),
            "on_failure": list(self.on_failure),
            "status": self.status.value,
            "detail": self.detail,
            "waiting_for": list(self.waiting_for),
            "skipped_by": self.skipped_by,
            "due_since": self.due_since,
            "retry_at": self.retry_at,
            "taken_by_go": self.taken_by_go,
            "run": None if self.run is None else record_json(self.run, output=False),
            "running": None
            if running is None
            else {
                "event_id": running.event_id,
                "message_id": running.message_id,
                "host": running.host,
                "started_at": running.started_at,
            },
        }


@dataclass(frozen=True)
class PipelineView:
    """One run of a pipeline: its key, its graph's name and root, the root's firing, and each
    step in the graph's order."""

    key: str
    name: str
    root: str
    steps: tuple[StepView, ...]
    started_at: float
    updated_at: float
    firing_at: float | None = None
    #: Who sent the root's message (its record's origin): "schedule", "trigger", "catch-up" ...
    origin: str | None = None

    @property
    def in_progress(self) -> bool:
        """Whether any step is still to end (running or waiting)."""
        return any(s.status in (StepStatus.RUNNING, StepStatus.WAITING) for s in self.steps)

    @property
    def caught_up(self) -> bool:
        return self.origin == CAUGHT_UP

    @property
    def state(self) -> str:
        """The run in words: in progress or over, and the steps that failed and those skipped
        ("over, failed at transform-b, skipped load")."""
        said = "in progress" if self.in_progress else "over"
        failed = [s.name for s in self.steps if s.status is StepStatus.FAILED]
        if failed:
            said += f", failed at {', '.join(failed)}"
        skipped = [s.name for s in self.steps if s.status is StepStatus.SKIPPED]
        return said + f", skipped {', '.join(skipped)}" if skipped else said

    def step(self, name: str) -> StepView | None:
        return next((s for s in self.steps if s.name == name), None)

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "pipeline": self.name,
            "root": self.root,
            "firing_at": None if self.firing_at is None else Firing(self.firing_at, "").iso,
            "origin": self.origin,
            "caught_up": self.caught_up,
            "in_progress": self.in_progress,
            "started_at": self.started_at,
            "updated_at": self.updated_at,
            "steps": [s.as_json() for s in self.steps],
        }


def step_claim(key: str, step: str, root: str) -> str:
    """The Id of a step's claim in the run key (the root's: the key itself)."""
    return key if step == root else f"{key}{STEP_MARK}{step}"


def _of_run(start: RunStart, key: str, step: str, root: str) -> bool:
    claim = step_claim(key, step, root)
    item = start.claim_item
    return item == claim or item.startswith(f"{claim}#rerun-")


@dataclass(frozen=True)
class StepEvents:
    """Which events the steps' runs are recorded under (a step's job names its own event_id,
    which a run's kept graph does not hold), learned from the events' summaries: their last
    run's step, and the claims of their runs in progress."""

    by_step: Mapping[str, frozenset[str]]
    by_claim: Mapping[str, str]
    running: Mapping[str, Sequence[RunStart]]


def learn_events(summaries: Iterable[EventSummary]) -> StepEvents:
    """Which events run which steps, by the summaries' last runs and runs in progress."""
    by_step: dict[str, set[str]] = {}
    by_claim: dict[str, str] = {}
    running: dict[str, Sequence[RunStart]] = {}
    for summary in summaries:
        last = summary.last_run
        if last is not None and last.pipeline_step:
            by_step.setdefault(last.pipeline_step, set()).add(summary.event_id)
        for start in summary.running:
            by_claim[start.claim_item.split("#rerun-")[0]] = summary.event_id
        running[summary.event_id] = summary.running
    return StepEvents({k: frozenset(v) for k, v in by_step.items()}, by_claim, running)


def events_of(
    state: PipelineState, learned: StepEvents, root_event: str | None
) -> dict[str, tuple[str, ...]]:
    """Each step's candidate events: the root's is root_event when known; a step's the events
    whose last run was that step or that run it now, else its name (the job's default)."""
    graph = graph_of(state.graph)
    found: dict[str, tuple[str, ...]] = {}
    for name in graph.steps:
        hint = state.graph.get("steps", {}).get(name, {}).get("event_id")
        events = {str(hint)} if hint else set(learned.by_step.get(name, ()))
        running = learned.by_claim.get(step_claim(state.key, name, graph.root))
        events |= {running} if running else set()
        if name == graph.root and root_event:
            events.add(root_event)
        found[name] = tuple(sorted(events or {name}))
    return found


def view_of(
    state: PipelineState,
    records: Mapping[str, Sequence[RunRecord]],
    running: Mapping[str, Sequence[RunStart]],
    events: Mapping[str, Sequence[str]],
) -> PipelineView:
    """The run of state, each step judged by the state and by the records and runs in progress
    of its events (events: by step): those of this run are found by their pipeline key, step
    and claim."""
    graph = graph_of(state.graph)
    mine: dict[str, list[RunRecord]] = {
        n: sorted(
            (
                r
                for e in events.get(n, (n,))
                for r in records.get(e, ())
                if r.pipeline_key == state.key and (r.pipeline_step or graph.root) == n
            ),
            key=lambda r: r.ended_at,
            reverse=True,
        )
        for n in graph.steps
    }
    started = {
        n: next(
            (
                s
                for e in events.get(n, (n,))
                for s in running.get(e, ())
                if _of_run(s, state.key, n, graph.root)
            ),
            None,
        )
        for n in graph.steps
    }
    depth = graph.depth()
    steps = tuple(
        _judge(graph, state, n, depth.get(n, 0), mine[n], started[n]) for n in graph.order()
    )
    root_runs = mine[graph.root]
    view = PipelineView(
        state.key,
        state.name,
        state.root,
        steps,
        state.started_at,
        state.updated_at,
        state.firing_at,
        root_runs[-1].origin if root_runs else None,
    )
    return with_due_times(view)


def _judge(
    graph: Pipeline,
    state: PipelineState,
    name: str,
    depth: int,
    records: Sequence[RunRecord],
    running: RunStart | None,
) -> StepView:
    """One step's state: running, else ended (by the state), skipped, waiting or not needed."""
    step = graph.steps[name]
    base = StepView(name, depth, step.after, step.on_failure, StepStatus.WAITING, "")
    final = [r for r in records if r.final and r.outcome is not RunOutcome.DUPLICATE]
    if running is not None:
        # A step run again for its firing (trigger --firing --force) runs whatever it did before.
        again = " (again: it failed before)" if name in state.failed else ""
        detail = f"running on {running.host} since {local_time(running.started_at)}{again}"
        return _with(base, StepStatus.RUNNING, detail, running=running)
    if name in state.succeeded:
        run = next((r for r in final if r.outcome is RunOutcome.SUCCEEDED), None)
        return _with(base, StepStatus.SUCCEEDED, _ran("succeeded", run), run=run)
    if name in state.failed:
        run = final[0] if final else None
        outcome = run.outcome.value if run is not None else "failed"
        return _with(base, StepStatus.FAILED, _ran(outcome, run), run=run)
    skipped = graph.skipped(state.succeeded, state.failed)
    if name in skipped:
        cause = skipped[name]
        return _with(base, StepStatus.SKIPPED, f"skipped: {cause} failed", skipped_by=cause)
    caller = called_for(graph, state.failed).get(name)
    if on_failure_only(graph, name) and caller is None:
        return _with(base, StepStatus.NOT_NEEDED, "not needed: no step that calls it failed")
    missing = tuple(p for p in step.after if p not in state.succeeded)
    if missing:
        return _with(base, StepStatus.WAITING, f"waiting for {', '.join(missing)}", missing)
    tried = next((r for r in records if not r.final and r.outcome.failed), None)
    if tried is not None:
        # An attempt failed with retries left: its claim says when the next may start.
        detail = f"{WAITING_RETRY}: attempt {tried.attempt} {_ran(tried.outcome.value, tried)}"
        return _with(base, StepStatus.WAITING, detail, run=tried, due_since=tried.ended_at)
    if on_failure_only(graph, name):
        return _with(base, StepStatus.WAITING, f"sent as {caller} failed, not started yet")
    return _with(base, StepStatus.WAITING, "sent: its parents succeeded, not started yet")


#: How a step that waits for its retry is told.
WAITING_RETRY = "waiting for its retry"


#: What a Go daemon does with a step's message.
GO_TAKES = "taken by a Go daemon, which runs a step but does not move its pipeline on"


def with_go_take(step: StepView, at: float) -> StepView:
    """step, sent and claimed by no sqsjkr daemon, when a Go daemon took a message of the queue
    at `at`, moments after the step's was sent: what is known of it."""
    after = format_span(at - step.due_since) if step.due_since is not None else "moments"
    detail = (
        f"{GO_TAKES} (no sqsjkr daemon claimed it; a Go daemon took a message of the queue "
        f"{after} after it was sent, at {local_time(at)})"
    )
    return _with(step, StepStatus.WAITING, detail, taken_by_go=at)


def with_retry_due(step: StepView, attempts: int, retry_at: float) -> StepView:
    """step, waiting for its retry, with when its claim says the next attempt may start: due
    (for stuck) from then on."""
    detail = step.detail if step.detail.startswith(WAITING_RETRY) else WAITING_RETRY
    detail += f"; attempt {attempts + 1} at {local_time(retry_at)}"
    return _with(step, StepStatus.WAITING, detail, retry_at=retry_at, due_since=retry_at)


def _with(base: StepView, status: StepStatus, detail: str, *args: Any, **changes: Any) -> StepView:
    if args:
        changes["waiting_for"] = args[0]
    return StepView(**{**base.__dict__, "status": status, "detail": detail, **changes})


def _ran(outcome: str, run: RunRecord | None) -> str:
    if run is None:
        return outcome
    return f"{outcome} on {run.host} at {local_time(run.ended_at)}"


def with_due_times(view: PipelineView) -> PipelineView:
    """view with each step sent and not started told since when it is due: the last of its
    parents' successes, or the failure that called it (their records' ends; the run's last
    update when they are not found)."""
    steps = []
    for s in view.steps:
        if s.status is StepStatus.WAITING and not s.waiting_for and s.due_since is None:
            causes = [view.step(p) for p in s.after] if s.after else _callers(view, s.name)
            ends = [c.run.ended_at for c in causes if c is not None and c.run is not None]
            s = StepView(**{**s.__dict__, "due_since": max(ends, default=view.updated_at)})
        steps.append(s)
    return PipelineView(**{**view.__dict__, "steps": tuple(steps)})


# -- stuck ---------------------------------------------------------------------------------


def stuck_reasons(view: PipelineView, now: float, after: float = STUCK_AFTER) -> list[str]:
    """Why the run is stuck: each step due (sent) for longer than `after` that has not started,
    "load has not started 2h after transform-b succeeded for the 02:00 firing"."""
    reasons = []
    for step in view.steps:
        if step.status is not StepStatus.WAITING or step.waiting_for or step.due_since is None:
            continue
        if now - step.due_since <= after:
            continue
        cause = _cause(view, step)
        if step.taken_by_go is not None:
            reasons.append(f"{step.name} was {GO_TAKES}, after {cause} for {_which(view)}")
            continue
        reasons.append(
            f"{step.name} has not started {format_span(now - step.due_since)} after {cause} "
            f"for {_which(view)}"
        )
    return reasons


def _cause(view: PipelineView, step: StepView) -> str:
    """What made the step due: its retry's time, its parent that succeeded last, or the failure
    that called it."""
    if step.retry_at is not None:
        return "its retry was due"
    if not step.after:
        callers = _callers(view, step.name)
        return f"{callers[0].name if callers else 'a step'} failed"
    parents = [view.step(p) for p in step.after]
    ends = [(p.run.ended_at, p.name) for p in parents if p is not None and p.run is not None]
    last = max(ends)[1] if ends else step.after[-1]
    return f"{last} succeeded"


def _callers(view: PipelineView, name: str) -> list[StepView]:
    """The failed steps that call step name as their on_failure."""
    return [s for s in view.steps if s.status is StepStatus.FAILED and name in s.on_failure]


def _which(view: PipelineView) -> str:
    if view.firing_at is not None:
        return f"the {local_time(view.firing_at)} firing"
    return f"the run {view.key}"
