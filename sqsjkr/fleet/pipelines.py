"""A run of a pipeline as the faces show it: each step's state (waiting for which step, running
where, ran, skipped and why, not needed), read from the run's state item and its steps' records.

The stuck check is here too: a step whose parents all succeeded long ago and that has not started.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from sqsjkr.backends.index import BATCH_GET_LIMIT
from sqsjkr.backends.pipeline import PREFIX, TYPE, DynamoPipelines, PipelineState, state_of
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.pipeline import STEP_MARK, Pipeline
from sqsjkr.contract.pipeline_progress import called_for, graph_of, on_failure_only
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart
from sqsjkr.errors import RequestError, ResourceMissingError, quote
from sqsjkr.fleet.history import Store, record_json
from sqsjkr.fleet.running import claim_is_live, read_claims
from sqsjkr.fleet.wording import format_span, local_time

#: A step whose parents all succeeded (or whose on_failure call came) this long ago and that has
#: not started is stuck: its message was sent at that moment, and a step waits for a worker, a
#: lock or a concurrency slot, rarely for an hour (`status --check`, docs/pipelines-seen.md).
STUCK_AFTER = 3600.0
#: Runs of one event read to find its pipeline's runs (`sqsjkr pipeline EVENT`).
RUNS_READ = 100
#: Each step event's records read per run of the pipeline shown (retries, re-runs), plus a margin.
RECORDS_PER_RUN = 4
_RECORDS_MARGIN = 10
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
    #: When it became due: its parents' last success, or the failure that called it (WAITING).
    due_since: float | None = None

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
    if on_failure_only(graph, name):
        caller = called_for(graph, state.failed).get(name)
        if caller is None:
            return _with(base, StepStatus.NOT_NEEDED, "not needed: no step that calls it failed")
        return _with(base, StepStatus.WAITING, f"sent as {caller} failed, not started yet")
    missing = tuple(p for p in step.after if p not in state.succeeded)
    if missing:
        return _with(base, StepStatus.WAITING, f"waiting for {', '.join(missing)}", missing)
    return _with(base, StepStatus.WAITING, "sent: its parents succeeded, not started yet")


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


# -- reading -------------------------------------------------------------------------------


def pipelines_of(store: Store) -> DynamoPipelines:
    """The store of the runs' states, in the config's table."""
    return DynamoPipelines(store.client, store.table, lives_seconds=0.0)


def read_views(
    store: Store, states: Sequence[PipelineState], root_events: Mapping[str, str] | None = None
) -> list[PipelineView]:
    """The runs of states (root_events: each run's root's event, by run key, when known): every
    event's summary read once (the index, in batches: who runs which step now, and under which
    event), then each step event's records once (a Query each, enough for every run)."""
    if not states:
        return []
    roots = root_events or {}
    with store.reading():
        learned = learn_events(store.history.summaries())
    events = {s.key: events_of(s, learned, roots.get(s.key)) for s in states}
    wanted = sorted({e for by_step in events.values() for es in by_step.values() for e in es})
    limit = len(states) * RECORDS_PER_RUN + _RECORDS_MARGIN
    with store.reading():
        records = {event: store.history.runs(event, limit) for event in wanted}
    views = [view_of(s, records, learned.running, events[s.key]) for s in states]
    return with_stale_runs(store, views)


#: How a running step whose daemon died is told apart: its claim is no longer renewed.
STALE = " (stale: its daemon stopped renewing its claim; it runs again after its lease)"


def with_stale_runs(store: Store, views: Sequence[PipelineView]) -> list[PipelineView]:
    """views with each running step checked against its claim (one BatchGetItem per 100): a
    daemon that died leaves its run in its event's summary until the claim's lease ends."""
    starts = [s.running for v in views for s in v.steps if s.running is not None]
    if not starts:
        return list(views)
    with store.reading():
        claims = read_claims(store.client, store.table, [s.claim_item for s in starts])
    now = time.time()
    return [
        replace(
            v,
            steps=tuple(
                replace(s, detail=s.detail + STALE)
                if s.running is not None
                and not claim_is_live(claims.get(s.running.claim_item), now)
                else s
                for s in v.steps
            ),
        )
        for v in views
    ]


def read_view(store: Store, key: str) -> PipelineView | None:
    """The run of key (None: no step of it has ended yet, so none is kept)."""
    with store.reading():
        state = pipelines_of(store).state(key)
    return None if state is None else read_views(store, [state])[0]


def read_states(store: Store, keys: Iterable[str]) -> list[PipelineState]:
    """The kept states of the runs of keys, read by key BATCH_GET_LIMIT a call."""
    wanted = [{"Id": {"S": PREFIX + k}, "Type": {"S": TYPE}} for k in dict.fromkeys(keys)]
    found: list[PipelineState] = []
    with store.reading():
        for i in range(0, len(wanted), BATCH_GET_LIMIT):
            pending: dict[str, Any] = {
                store.table: {"Keys": wanted[i : i + BATCH_GET_LIMIT], "ConsistentRead": True}
            }
            while pending:
                answer = store.client.batch_get_item(RequestItems=pending)
                found += [state_of(item) for item in answer["Responses"].get(store.table, [])]
                pending = answer.get("UnprocessedKeys") or {}
    return found


class _HasRun(Protocol):
    @property
    def event_id(self) -> str: ...

    @property
    def run(self) -> RunRecord | None: ...


R = TypeVar("R", bound=_HasRun)


def with_pipelines(
    store: Store, rows: Sequence[R], attach: Callable[[R, PipelineView], R]
) -> list[R]:
    """rows (a ledger's firings) each with the run of the pipeline its root's run started, when
    it did: the runs' states read by key (a BatchGetItem per 100), only when a row's run has a
    pipeline key, then the summaries and each step event's records once for them all."""
    keyed = {r.run.pipeline_key: r for r in rows if r.run is not None and r.run.pipeline_key}
    if not keyed:
        return list(rows)
    states = read_states(store, keyed)
    roots = {s.key: keyed[s.key].event_id for s in states}
    views = {v.key: v for v in read_views(store, states, roots)}
    return [
        attach(r, views[key])
        if r.run is not None and (key := r.run.pipeline_key or "") in views
        else r
        for r in rows
    ]


def firing_key_at(runs: Iterable[RunRecord], at: float) -> str | None:
    """The pipeline key of the runs' firing due at `at` (unix seconds), if one of them ran it."""
    for run in runs:
        if run.pipeline_key and run.firing_at is not None and abs(run.firing_at - at) < 1.0:
            return run.pipeline_key
    return None


def parse_firing_time(text: str) -> float:
    """--firing's TIME: RFC 3339 (an offset, or Z; none is UTC); RequestError otherwise."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise RequestError(
            f"--firing {quote(text)}: not a time (RFC 3339, as `sqsjkr firings` shows it: "
            "2030-01-31T02:00:00+01:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def event_pipeline(store: Store, event_id: str, firing: float | None = None) -> PipelineView:
    """The latest run of the pipeline event_id's runs belong to (its root's event, or a step's),
    or its run of the firing due at `firing`; ResourceMissingError naming what is missing."""
    with store.reading():
        runs = store.history.runs(event_id, RUNS_READ)
    if firing is not None:
        key = firing_key_at(runs, firing)
        when = Firing(firing, "").iso
        if key is None:
            raise ResourceMissingError(
                f"no run of event {quote(event_id)} of a pipeline for the {when} firing among "
                f"its last {RUNS_READ} runs (sqsjkr firings {event_id} lists its firings)"
            )
    else:
        key = next((r.pipeline_key for r in runs if r.pipeline_key), None)
        if key is None:
            raise ResourceMissingError(
                f"no run of event {quote(event_id)} belongs to a pipeline (among its last "
                f"{RUNS_READ} runs; a pipeline is shown once its root has run)"
            )
    with store.reading():
        state = pipelines_of(store).state(key)
    if state is None:
        raise ResourceMissingError(f"no state kept of pipeline run {quote(key)} (expired?)")
    mine = [r for r in runs if r.pipeline_key == key]
    roots = {key: event_id} if any(r.pipeline_step == state.root for r in mine) else {}
    return read_views(store, [state], roots)[0]


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
        reasons.append(
            f"{step.name} has not started {format_span(now - step.due_since)} after {cause} "
            f"for {_which(view)}"
        )
    return reasons


def _cause(view: PipelineView, step: StepView) -> str:
    """What made the step due: its parent that succeeded last, or the failure that called it."""
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


def stuck_pipelines(
    store: Store, now: float, after: float = STUCK_AFTER
) -> list[tuple[PipelineView, list[str]]]:
    """Each kept run with a step stuck, and why: the runs' states listed once (a Query of the
    index and a BatchGetItem), and only the runs with a step due for longer than `after` read
    further (their steps' records and summaries)."""
    with store.reading():
        states = pipelines_of(store).states()
    candidates = [s for s in states if now - s.updated_at > after and _has_due_step(s)]
    found = []
    for view in read_views(store, candidates):
        reasons = stuck_reasons(view, now, after)
        if reasons:
            found.append((view, reasons))
    return found


def _has_due_step(state: PipelineState) -> bool:
    """Whether a step of the run is due by its state alone (sent, or running: the records tell)."""
    graph = graph_of(state.graph)
    done = state.succeeded | state.failed
    skipped = graph.skipped(state.succeeded, state.failed)
    called = called_for(graph, state.failed)
    for name, step in graph.steps.items():
        if name in done or name in skipped or name == graph.root:
            continue
        if on_failure_only(graph, name):
            if name in called:
                return True
        elif set(step.after) <= state.succeeded:
            return True
    return False
