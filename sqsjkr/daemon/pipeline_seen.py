"""The daemon's pipeline store as its metrics see it: each run's state that a step's end writes
(its UpdateItem answers with it) is told to the gauges, with no AWS call of its own.
"""

from __future__ import annotations

from typing import Protocol

from sqsjkr.backends.pipeline import PipelineState, PipelineStore
from sqsjkr.contract.pipeline import PipelineRun
from sqsjkr.contract.pipeline_progress import graph_of, pending


class PipelineGauges(Protocol):
    """What keeps the pipelines' gauges (observability/metrics.py Metrics)."""

    def pipeline_step_ended(self, pipeline: str, at: float, in_progress: bool) -> None:
        """A step of pipeline ended at `at`, leaving its run in progress or over."""


class SeenPipelines:
    """A PipelineStore that tells gauges of each state a step's end leaves."""

    def __init__(self, store: PipelineStore, gauges: PipelineGauges) -> None:
        self._store = store
        self._gauges = gauges

    def step_ended(
        self, run: PipelineRun, succeeded: bool, now: float, firing_at: float | None = None
    ) -> PipelineState:
        state = self._store.step_ended(run, succeeded, now, firing_at)
        steps_left = pending(graph_of(state.graph), state.succeeded, state.failed)
        self._gauges.pipeline_step_ended(state.name, state.updated_at, bool(steps_left))
        return state

    def state(self, key: str) -> PipelineState | None:
        return self._store.state(key)


def seen(store: PipelineStore | None, gauges: PipelineGauges) -> PipelineStore | None:
    """store, its states told to gauges (None: no store)."""
    return None if store is None else SeenPipelines(store, gauges)
