"""Runs of a pipeline as the faces read them: their state items and their steps' records and
summaries read in few calls, judged by fleet/pipeline_steps.py; the runs that are stuck.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Protocol, TypeVar

from sqsjkr.backends.index import BATCH_GET_LIMIT
from sqsjkr.backends.pipeline import PREFIX, TYPE, DynamoPipelines, PipelineState, state_of
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.pipeline_progress import graph_of, on_failure_only, pending
from sqsjkr.contract.run import EventSummary, RunRecord
from sqsjkr.errors import RequestError, ResourceMissingError, quote
from sqsjkr.fleet.go_marks import go_takes_after
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.pipeline_steps import (
    STUCK_AFTER,
    PipelineView,
    StepStatus,
    StepView,
    events_of,
    learn_events,
    step_claim,
    stuck_reasons,
    view_of,
    with_go_take,
    with_retry_due,
)
from sqsjkr.fleet.running import claim_is_live, read_claims
from sqsjkr.fleet.waiting import Deadline

#: Runs of one event read to find its pipeline's runs (`sqsjkr pipeline EVENT`).
RUNS_READ = 100
#: Each step event's records read per run of the pipeline shown (retries, re-runs), plus a margin.
RECORDS_PER_RUN = 4
_RECORDS_MARGIN = 10


# -- reading -------------------------------------------------------------------------------


def pipelines_of(store: Store) -> DynamoPipelines:
    """The store of the runs' states, in the config's table."""
    return DynamoPipelines(store.client, store.table, lives_seconds=0.0)


def read_views(
    store: Store,
    states: Sequence[PipelineState],
    root_events: Mapping[str, str] | None = None,
    summaries: Sequence[EventSummary] | None = None,
) -> list[PipelineView]:
    """The runs of states (root_events: each run's root's event, by run key, when known): every
    event's summary read once (the index, in batches: who runs which step now, and under which
    event; or summaries, when the reader holds them already), then each step event's records
    once (a Query each, enough for every run)."""
    if not states:
        return []
    roots = root_events or {}
    if summaries is None:
        with store.reading():
            summaries = store.history.summaries()
    learned = learn_events(summaries)
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
    """views with each running step checked against its claim, and each step sent and not
    started against its own (a retry's time): one BatchGetItem per 100 claims. A daemon that
    died leaves its run in its event's summary until the claim's lease ends."""
    wanted = [
        s.running.claim_item if s.running is not None else step_claim(v.key, s.name, v.root)
        for v in views
        for s in v.steps
        if s.running is not None or _sent(s)
    ]
    if not wanted:
        return list(views)
    with store.reading():
        claims = read_claims(store.client, store.table, wanted)
    now = time.time()
    checked = [
        replace(v, steps=tuple(_against_claim(v, s, claims, now) for s in v.steps)) for v in views
    ]
    return _with_go_takes(store, checked, claims, now)


#: A step's message that no sqsjkr daemon has claimed this long after its send is looked for
#: among a Go daemon's takes: a daemon of the fleet claims a message within seconds of it.
UNCLAIMED_AFTER = 60.0


def _with_go_takes(
    store: Store,
    views: Sequence[PipelineView],
    claims: Mapping[str, Mapping[str, Any]],
    now: float,
) -> list[PipelineView]:
    """views with each step sent that no sqsjkr daemon claimed (for UNCLAIMED_AFTER) told
    whether a Go daemon took a message of the queue just after it was sent (its marks, read
    only for such steps)."""
    unclaimed = {
        (v.key, s.name): s.due_since
        for v in views
        for s in v.steps
        if _sent(s)
        and s.retry_at is None
        and s.due_since is not None
        and now - s.due_since > UNCLAIMED_AFTER
        and step_claim(v.key, s.name, v.root) not in claims
    }
    if not unclaimed:
        return list(views)
    taken = go_takes_after(store, [at for at in unclaimed.values() if at is not None])
    return [
        replace(
            v,
            steps=tuple(
                with_go_take(s, taken[at])
                if (at := unclaimed.get((v.key, s.name))) is not None and at in taken
                else s
                for s in v.steps
            ),
        )
        for v in views
    ]


def _sent(step: StepView) -> bool:
    """Whether the step's message was sent and it has not started: due, not waiting for a
    parent."""
    return step.status is StepStatus.WAITING and not step.waiting_for


def _against_claim(
    view: PipelineView, step: StepView, claims: Mapping[str, Mapping[str, Any]], now: float
) -> StepView:
    """step as its claim says: a running step whose claim is no longer leased is stale; a sent
    one whose claim counts attempts and names a RetryAt waits for that retry."""
    if step.running is not None:
        live = claim_is_live(claims.get(step.running.claim_item), now)
        return step if live else replace(step, detail=step.detail + STALE)
    if not _sent(step):
        return step
    claim = claims.get(step_claim(view.key, step.name, view.root)) or {}
    if "RetryAt" in claim and "LeaseUntil" not in claim:
        attempts = int(claim.get("Attempts", {}).get("N", "1"))
        return with_retry_due(step, attempts, float(claim["RetryAt"]["N"]))
    return step


def read_view(
    store: Store,
    key: str,
    root_event: str | None = None,
    summaries: Sequence[EventSummary] | None = None,
) -> PipelineView | None:
    """The run of key (None: no step of it has ended yet, so none is kept); root_event: its
    root's event, when known (a firing's), and summaries as read_views takes them."""
    with store.reading():
        state = pipelines_of(store).state(key)
    if state is None:
        return None
    roots = None if root_event is None else {key: root_event}
    return read_views(store, [state], roots, summaries)[0]


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
    or its run of the firing due at `firing`; else, when no run of that event is a pipeline's,
    the latest (or that firing's) kept run of the pipeline named event_id or rooted at a step so
    named (the terraform module names a pipeline after its root). ResourceMissingError naming
    what is missing, and what to type instead."""
    with store.reading():
        runs = store.history.runs(event_id, RUNS_READ)
    if firing is not None:
        key = firing_key_at(runs, firing)
    else:
        key = next((r.pipeline_key for r in runs if r.pipeline_key), None)
    if key is None:
        return _named_pipeline(store, event_id, firing)
    with store.reading():
        state = pipelines_of(store).state(key)
    if state is None:
        raise ResourceMissingError(f"no state kept of pipeline run {quote(key)} (expired?)")
    mine = [r for r in runs if r.pipeline_key == key]
    roots = {key: event_id} if any(r.pipeline_step == state.root for r in mine) else {}
    return read_views(store, [state], roots)[0]


#: Seconds between two reads of a run that `sqsjkr pipeline --wait` waits for.
WAIT_POLL = 1.0


def wait_for_pipeline(
    store: Store, event_id: str, firing: float | None, deadline: Deadline
) -> PipelineView:
    """event_pipeline's run once it is over (no step running or due); WaitTimedOut once the
    deadline has passed. A run started meanwhile is not waited for: the firing, when the first
    read has one, pins the run."""
    view = event_pipeline(store, event_id, firing)
    pinned = firing if firing is not None else view.firing_at
    while view.in_progress:
        deadline.pause(WAIT_POLL, f"pipeline run {quote(view.key)} to be over", "its steps go on")
        view = event_pipeline(store, event_id, pinned)
    return view


#: Most pipelines an error names when none is found by the name given.
NAMED_AT_MOST = 10


def _named_pipeline(store: Store, name: str, firing: float | None) -> PipelineView:
    """The latest kept run (or the run of the firing due at `firing`) of the pipeline called
    name, or rooted at a step called name: the runs' items listed once (a Query of the index)."""
    with store.reading():
        states = pipelines_of(store).states()
    named = [s for s in states if name in (s.name, s.root)]
    if firing is not None:
        named = [s for s in named if s.firing_at is not None and abs(s.firing_at - firing) < 1.0]
    if named:
        return read_views(store, named[:1])[0]
    when = "" if firing is None else f" for the {Firing(firing, '').iso} firing"
    kept = sorted({f"{s.name} (root step {s.root})" for s in states})
    hint = (
        f"; pipelines with runs kept: {', '.join(kept[:NAMED_AT_MOST])}"
        + (", ..." if len(kept) > NAMED_AT_MOST else "")
        if kept
        else "; no run of any pipeline is kept (a run is shown once its root has ended)"
    )
    raise ResourceMissingError(
        f"no run{when} of event {quote(name)} belongs to a pipeline (among its last {RUNS_READ} "
        f"runs), and no pipeline called {quote(name)} has a run kept{when}: give the event id of "
        f"a pipeline's root or step (as `sqsjkr status` lists them), or a pipeline's name{hint}"
    )


def stuck_pipelines(
    store: Store,
    now: float,
    after: float = STUCK_AFTER,
    states: Sequence[PipelineState] | None = None,
) -> list[tuple[PipelineView, list[str]]]:
    """Each kept run with a step stuck, and why: the runs' states listed once (a Query of the
    index and a BatchGetItem; or states, listed so already), and only the runs with a step due
    for longer than `after` read further (their steps' records and summaries)."""
    if states is None:
        with store.reading():
            states = pipelines_of(store).states()
    candidates = [s for s in states if may_be_stuck(s, now, after)]
    found = []
    for view in read_views(store, candidates):
        reasons = stuck_reasons(view, now, after)
        if reasons:
            found.append((view, reasons))
    return found


def may_be_stuck(state: PipelineState, now: float, after: float = STUCK_AFTER) -> bool:
    """Whether the run may be stuck by its state alone: no step of it has ended for longer
    than `after`, and a step is due."""
    return now - state.updated_at > after and _has_due_step(state)


def _has_due_step(state: PipelineState) -> bool:
    """Whether a step of the run is due by its state alone (sent, or running: the records tell):
    one still to end (pending) that a failure called, or whose parents have all succeeded."""
    graph = graph_of(state.graph)
    return any(
        name != graph.root
        and (on_failure_only(graph, name) or set(graph.steps[name].after) <= state.succeeded)
        for name in pending(graph, state.succeeded, state.failed)
    )
