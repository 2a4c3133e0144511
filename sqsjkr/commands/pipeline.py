"""`sqsjkr pipeline EVENT`: a pipeline's graph in text, layer by layer with each step's edges, and
each step's state in its latest run (or the run of `--firing T`); the reading is fleet/pipelines' and fleet/pipeline_steps'.
"""

from __future__ import annotations

import json

import click

from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.commands.waiting import timeout_of, timeout_option
from sqsjkr.contract.text import escape
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.pipeline_steps import PipelineView, StepView
from sqsjkr.fleet.pipelines import event_pipeline, parse_firing_time, wait_for_pipeline
from sqsjkr.fleet.waiting import Deadline
from sqsjkr.fleet.wording import local_time

#: How a run's root was sent, when not by its schedule (its record's origin).
ORIGINS = {"send": "sent by hand", "trigger": "triggered"}


def header(view: PipelineView) -> str:
    """The run on one line: the pipeline, its root, the firing (or run key), whether it is over,
    and the steps that failed and were skipped."""
    if view.firing_at is not None:
        which = f"firing {local_time(view.firing_at)}"
    else:
        which = f"run {escape(view.key)}"
    if view.caught_up:
        which += " (caught up)"
    elif view.origin not in (None, "schedule"):
        which += f" ({ORIGINS.get(view.origin or '', 'origin ' + escape(view.origin or ''))})"
    return f"pipeline {escape(view.name)} (root {escape(view.root)}), {which}: {escape(view.state)}"


def _edges(step: StepView) -> str:
    edges = f"after {', '.join(step.after)}" if step.after else ""
    if step.on_failure:
        edges += ("; " if edges else "") + f"on failure {', '.join(step.on_failure)}"
    return edges or "-"


def step_lines(view: PipelineView, indent: str = "") -> list[str]:
    """Each step, layer by layer (its depth: 0 for the root and the on_failure steps), with the
    steps it runs after, its on_failure steps and its state."""
    rows = [["LAYER", "STEP", "EDGES", "STATE"]]
    shown = ""
    for step in sorted(view.steps, key=lambda s: (s.depth, s.name)):
        layer = str(step.depth) if str(step.depth) != shown else ""
        shown = str(step.depth)
        rows.append([layer, step.name, _edges(step), step.detail])
    return [indent + line for line in aligned(rows)]


@click.command()
@store_options
@click.argument("event_id")
@click.option(
    "--firing",
    metavar="TIME",
    help="The run of the firing due at TIME (RFC 3339, as `sqsjkr firings` shows it), "
    "not the latest.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as a JSON object.")
@click.option(
    "--wait",
    is_flag=True,
    help="Wait until the run is over (no step running or due to run), then draw it.",
)
@timeout_option("1h", "the run to be over (--wait)")
def pipeline(
    where: Where, event_id: str, firing: str | None, as_json: bool, wait: bool, timeout: str
) -> None:
    """Draw the pipeline EVENT_ID's runs belong to (its root's event id, or a step's, as `sqsjkr
    status` lists them; else a pipeline's or its root step's name), layer by layer with each
    step's edges, and each step's state in its latest run: waiting for which step, running
    where, ran (outcome, host, when), skipped and why, not needed (read-only). --json gives the
    run's key, which `sqsjkr trigger STEP --run KEY` resumes. --wait waits until the run is over
    (exit 124 past --wait-timeout)."""
    at = None if firing is None else parse_firing_time(firing)
    limit = timeout_of(timeout)
    store = store_of(where.config())
    if wait:
        view = wait_for_pipeline(store, event_id, at, Deadline(limit))
    else:
        view = event_pipeline(store, event_id, at)
    if as_json:
        click.echo(json.dumps(view.as_json(), indent=2))
        return
    click.echo(header(view))
    echo_lines(step_lines(view))
