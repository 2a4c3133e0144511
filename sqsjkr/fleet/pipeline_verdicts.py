"""What its pipeline says of an event's verdict: a step's event has no schedule of its own (it is
late or stuck only as its run says), and a root's verdict carries its pipeline's last run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from sqsjkr.backends.pipeline import PipelineState
from sqsjkr.contract.firing import Origin
from sqsjkr.contract.pipeline_progress import graph_of
from sqsjkr.contract.run import EventSummary
from sqsjkr.contract.text import escape
from sqsjkr.fleet.wording import local_time


@dataclass(frozen=True)
class PipelineVerdict:
    """What an event is to the run of a pipeline its last run belongs to, and what that run
    says: the root's failed steps and the steps they skipped, or why it is stuck; a step's own
    failure and the steps it skipped."""

    pipeline: str
    key: str
    step: str
    #: A step other than the root: its messages carry the root's firing, not a schedule of its
    #: own, so it is never judged by the root's schedule nor by an interval of its own.
    is_step: bool
    firing_at: float | None = None
    failed: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    stuck: tuple[str, ...] = ()

    @property
    def critical(self) -> bool:
        """A stuck run is: no step of it moves on without someone."""
        return bool(self.stuck)

    @property
    def problem(self) -> str | None:
        """The run's trouble in words, for the event's verdict (None: none to tell)."""
        if self.stuck:
            # Each reason names its step, the step that made it due and the firing.
            return f"pipeline {escape(self.pipeline)} is stuck: {'; '.join(self.stuck)}"
        which = _which(self)
        if not self.failed:
            return None
        if self.is_step:
            # Its own failure is its finding already (failures in a row): whose step it is, and
            # what it stopped.
            if self.step not in self.failed:
                return None
            said = f"a step of {which}"
            return f"{said}, which skipped {', '.join(self.skipped)}" if self.skipped else said
        said = f"{which} failed at {', '.join(self.failed)}"
        return f"{said}, skipped {', '.join(self.skipped)}" if self.skipped else said


def _which(verdict: PipelineVerdict) -> str:
    name = f"pipeline {escape(verdict.pipeline)}"
    if verdict.firing_at is not None:
        return f"{name}'s run of the {local_time(verdict.firing_at)} firing"
    return f"{name}'s run {escape(verdict.key)}"


def last_run_keys(summaries: Iterable[EventSummary]) -> list[str]:
    """The runs of pipelines the events' last runs belong to: the states a verdict reads."""
    return list(
        dict.fromkeys(
            s.last_run.pipeline_key
            for s in summaries
            if s.last_run is not None and s.last_run.pipeline_key
        )
    )


def pipeline_verdicts(
    summaries: Sequence[EventSummary],
    states: Mapping[str, PipelineState],
    stuck_of: Callable[[PipelineState], Sequence[str]],
) -> dict[str, PipelineVerdict]:
    """Each event's verdict from the run of a pipeline its last run belongs to, by event id
    (states: the runs' kept states by key; stuck_of: why a run is stuck, read only for a
    root's run). A step whose run's state has expired is still a step: its message said so."""
    found: dict[str, PipelineVerdict] = {}
    for summary in summaries:
        last = summary.last_run
        if last is None or not last.pipeline_key:
            continue
        state = states.get(last.pipeline_key)
        step = last.pipeline_step or ""
        if state is None:
            if step and last.origin == Origin.PIPELINE.value:
                found[summary.event_id] = PipelineVerdict("", last.pipeline_key, step, True)
            continue
        found[summary.event_id] = verdict_of(state, step or state.root, stuck_of)
    return found


def verdict_of(
    state: PipelineState, step: str, stuck_of: Callable[[PipelineState], Sequence[str]]
) -> PipelineVerdict:
    """What the run of state says of its step step (its root, or another)."""
    graph = graph_of(state.graph)
    failed = sorted(state.failed - state.succeeded)
    skipped = graph.skipped(state.succeeded, state.failed)
    base = PipelineVerdict(state.name, state.key, step, step != state.root, state.firing_at)
    if base.is_step:
        mine = tuple(sorted(n for n, cause in skipped.items() if cause == step))
        return PipelineVerdict(**{**base.__dict__, "failed": tuple(failed), "skipped": mine})
    return PipelineVerdict(
        **{
            **base.__dict__,
            "failed": tuple(failed),
            "skipped": tuple(n for n in graph.order() if n in skipped),
            "stuck": tuple(stuck_of(state)),
        }
    )
