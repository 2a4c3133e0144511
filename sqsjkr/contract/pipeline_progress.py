"""Where a run of a pipeline stands by its state alone (the steps that succeeded, those that
failed): the steps still to end, and whether the run is over; for the faces and the daemon's gauge.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqsjkr.contract.pipeline import Pipeline, Step


def graph_of(fields: Mapping[str, Any]) -> Pipeline:
    """The Pipeline of a run's kept graph (Pipeline.graph_fields(): the steps without their
    jobs), for its arithmetic."""
    steps = {
        name: Step(name, tuple(step.get("after", ())), tuple(step.get("on_failure", ())))
        for name, step in dict(fields.get("steps", {})).items()
    }
    return Pipeline(str(fields.get("name", "")), str(fields.get("root", "")), steps)


def on_failure_only(pipeline: Pipeline, step: str) -> bool:
    """Whether step runs only when another fails: a step other than the root with no `after`."""
    return step != pipeline.root and not pipeline.steps[step].after


def called_for(pipeline: Pipeline, failed: Iterable[str]) -> dict[str, str]:
    """The on_failure steps a failure called for, each with the (first) failed step naming it."""
    called: dict[str, str] = {}
    for name in sorted(failed):
        step = pipeline.steps.get(name)
        for target in step.on_failure if step is not None else ():
            called.setdefault(target, name)
    return called


def pending(pipeline: Pipeline, succeeded: Iterable[str], failed: Iterable[str]) -> list[str]:
    """The steps still to end, in the graph's order: neither succeeded nor failed, not skipped
    by a failure, and not an on_failure step no failure called for. None left: the run is over."""
    done, broken = set(succeeded), set(failed)
    skipped = pipeline.skipped(done, broken)
    called = called_for(pipeline, broken)
    return [
        name
        for name in pipeline.order()
        if name not in done | broken
        and name not in skipped
        and (not on_failure_only(pipeline, name) or name in called)
    ]
