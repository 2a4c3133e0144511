"""A pipeline in a message: its steps, each one's parents (`after`) and `on_failure` steps, the
step a message runs, and the graph's arithmetic (who is ready, who is skipped and why).

The whole pipeline travels in its root's message and on in each step's: no other store holds it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.contract.fields import field_error, json_type
from sqsjkr.contract.firing import MAX_RERUN

#: Most steps of one pipeline: its graph is carried whole in every step's message.
MAX_STEPS = 50
#: A step's name: a job key of the terraform module. Matched whole (fullmatch): "$" would let
#: a name end in a newline.
STEP_NAME = re.compile(r"[A-Za-z0-9._-]{1,62}")
#: The longest pipeline name.
MAX_NAME = 128
#: How a step's claim key is made from its pipeline's run key.
STEP_MARK = "#step-"
#: What a step's job may not carry, and why: the daemon that sends a step writes its pipeline,
#: step, run key and firing (the root's), and a step has no schedule of its own to catch up.
NOT_IN_A_STEP = {
    "pipeline": "a step's job runs in its root's pipeline, not in one of its own",
    "step": "is written by the daemon that sends the step",
    "pipeline_key": "is written by the daemon that sends the step",
    "rerun": "is written by `sqsjkr trigger STEP --run`, for a re-run of the step",
    "firing": "is written by the daemon that sends the step (its root's firing)",
    "catch_up": "belongs to a schedule, and a step has none (its root's catches up the pipeline)",
}


@dataclass(frozen=True)
class Step:
    """One step: the steps that must succeed first, those that run if it fails, and its job's
    message fields (None for the root, whose job is the message that carries the pipeline)."""

    name: str
    after: tuple[str, ...] = ()
    on_failure: tuple[str, ...] = ()
    job: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Pipeline:
    """A pipeline's graph as its root's message carried it."""

    name: str
    root: str
    steps: Mapping[str, Step] = field(default_factory=dict)

    def children(self, step: str) -> list[str]:
        """The steps that name step in their `after`."""
        return [s.name for s in self.steps.values() if step in s.after]

    def ready(self, succeeded: Iterable[str], step: str) -> list[str]:
        """The children of step whose every parent has succeeded."""
        done = set(succeeded)
        return [c for c in self.children(step) if set(self.steps[c].after) <= done]

    def skipped(self, succeeded: Iterable[str], failed: Iterable[str]) -> dict[str, str]:
        """The steps that cannot run because a step they need failed (and has not succeeded
        since), each with the failed step that stops it."""
        done, broken = set(succeeded), set(failed) - set(succeeded)
        why: dict[str, str] = {}
        for name in self.order():
            if name in done:
                continue
            for parent in self.steps[name].after:
                cause = parent if parent in broken else why.get(parent)
                if cause is not None:
                    why[name] = cause
                    break
        return why

    def order(self) -> list[str]:
        """Every step, each after the steps it needs (the root first); the steps of a cycle,
        which none can precede, are left out."""
        placed: list[str] = []
        seen: set[str] = set()
        remaining = dict(self.steps)
        while remaining:
            free = [n for n, s in remaining.items() if set(s.after) <= seen]
            if not free:
                break
            for name in sorted(free):
                placed.append(name)
                seen.add(name)
                del remaining[name]
        return placed

    def depth(self) -> dict[str, int]:
        """Each step's layer: 0 for steps with no parents, else one more than its deepest parent."""
        depths: dict[str, int] = {}
        for name in self.order():
            parents = self.steps[name].after
            depths[name] = 1 + max((depths[p] for p in parents), default=-1)
        return depths

    def graph_fields(self) -> dict[str, Any]:
        """The graph without the steps' jobs: what a pipeline's state keeps, to draw it."""
        steps: dict[str, Any] = {}
        for s in self.steps.values():
            steps[s.name] = {"after": list(s.after), "on_failure": list(s.on_failure)}
            if s.job is not None:
                # Its event, for the faces: the records of its runs are kept under it.
                steps[s.name]["event_id"] = str(s.job.get("event_id") or s.name)
        return {"name": self.name, "root": self.root, "steps": steps}

    def due(self, step: str, succeeded: Iterable[str], failed: Iterable[str]) -> bool:
        """Whether a run whose steps succeeded and failed so has sent step: every step it
        comes after has succeeded, or a step that names it in its on_failure has failed."""
        parents = self.steps[step].after
        if parents and set(parents) <= set(succeeded):
            return True
        return any(step in self.steps[f].on_failure for f in failed if f in self.steps)

    def digest(self) -> str:
        """A digest of the whole pipeline, jobs included: a step's message carries the pipeline
        its run began with, or it is not that run's."""
        text = json.dumps(self.as_fields(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def as_fields(self) -> dict[str, Any]:
        """The message's `pipeline` object."""
        shown = self.graph_fields()
        for name, step in self.steps.items():
            shown["steps"][name].pop("event_id", None)
            if step.job is not None:
                shown["steps"][name]["job"] = dict(step.job)
        return shown


@dataclass(frozen=True)
class PipelineRun:
    """A message's place in one run of its pipeline: the graph, the step it runs, and the run's
    key (its root's firing key, or its root's message id when started by hand)."""

    pipeline: Pipeline
    step: str
    key: str
    #: The id of an operator's re-run of this step in a run begun by hand (`trigger STEP --run`),
    #: from the message's `rerun`; a fired run's re-run carries its id in firing.rerun instead.
    rerun: str | None = None

    @property
    def is_root(self) -> bool:
        return self.step == self.pipeline.root

    def asked(self, rerun: str | None) -> str:
        """How a run keeps that an operator asked for this step (`sqsjkr trigger STEP --firing`),
        as a re-run (rerun) or not: the daemons run a step so asked though it is not due."""
        return self.step if rerun is None else f"{self.step}#rerun-{rerun}"

    def claim_key(self, rerun: str | None = None) -> str:
        """The key of the step's claim: one per run of the pipeline, so that two copies of a
        step's message (two parents ending at once, a redelivery) run it once."""
        key = f"{self.key}{STEP_MARK}{self.step}"
        return key if rerun is None else f"{key}#rerun-{rerun}"


def step_fields(
    pipeline: Pipeline, key: str, name: str, firing: Mapping[str, Any] | None, origin: str
) -> dict[str, Any]:
    """The message of step name of the run key of pipeline: its job's fields (its event is the
    step's name unless they name one), the pipeline, the step, the run's key, the firing (the
    root's, or a re-run of this step of it) and who sends it."""
    fields: dict[str, Any] = dict(pipeline.steps[name].job or {})
    fields.setdefault("event_id", name)
    fields["pipeline"] = pipeline.as_fields()
    fields["step"] = name
    fields["pipeline_key"] = key
    fields["origin"] = origin
    if firing is not None:
        fields["firing"] = dict(firing)
    return fields


def parse_pipeline(fields: Mapping[str, object]) -> Pipeline | None:
    """The message's `pipeline` object, or None; InvalidJobError naming the field at fault."""
    value = fields.get("pipeline")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise field_error("pipeline", f"must be an object, got {json_type(value)}")
    name = value.get("name")
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
        raise field_error("pipeline.name", f"must be a text of 1 to {MAX_NAME} characters")
    steps_value = value.get("steps")
    if not isinstance(steps_value, dict) or not steps_value:
        raise field_error("pipeline.steps", "must be an object of the steps by name")
    if len(steps_value) > MAX_STEPS:
        raise field_error("pipeline.steps", f"has {len(steps_value)} steps, at most {MAX_STEPS}")
    steps = {n: _step(n, s) for n, s in steps_value.items()}
    root = value.get("root")
    if not isinstance(root, str) or root not in steps:
        raise field_error("pipeline.root", "must name one of pipeline.steps")
    pipeline = Pipeline(name, root, steps)
    _check_graph(pipeline)
    return pipeline


def parse_pipeline_run(
    fields: Mapping[str, object], pipeline: Pipeline | None, default_key: str
) -> PipelineRun | None:
    """The message's place in its pipeline: `step` (default: the root) and its run's key. A
    root's run key is minted here, never read from the message: default_key, the root's firing
    key or its own message id. A step's `pipeline_key` is taken as it is; the daemon admits the
    step only when that run's state, which daemons alone write, says it is due (Steps.refusal)."""
    if pipeline is None:
        for name in ("step", "pipeline_key", "rerun"):
            if fields.get(name) is not None:
                raise field_error(name, 'belongs to a "pipeline", and the message has none')
        return None
    step = fields.get("step", pipeline.root)
    if not isinstance(step, str) or step not in pipeline.steps:
        raise field_error("step", "must name one of pipeline.steps")
    if step == pipeline.root:
        if fields.get("pipeline_key") is not None:
            raise field_error(
                "pipeline_key",
                "a root's run is keyed by its firing or its own message id, never by a sender",
            )
        if fields.get("rerun") is not None:
            raise field_error("rerun", "belongs to a step's re-run (`sqsjkr trigger STEP --run`)")
        return PipelineRun(pipeline, step, default_key)
    key = fields.get("pipeline_key")
    if not isinstance(key, str) or not 0 < len(key.encode()) <= 512:
        raise field_error("pipeline_key", "must be a text of 1 to 512 bytes for a step")
    return PipelineRun(pipeline, step, key, _rerun(fields))


def _rerun(fields: Mapping[str, object]) -> str | None:
    """A step's `rerun`: the id of an operator's re-run of it in a run begun by hand. A step of
    a fired run carries its re-run in its firing (firing.rerun), and only there."""
    value = fields.get("rerun")
    if value is None:
        return None
    if fields.get("firing") is not None:
        raise field_error("rerun", "a step of a fired run carries its re-run in firing.rerun")
    if not isinstance(value, str) or not 0 < len(value) <= MAX_RERUN:
        raise field_error("rerun", f"must be a text of 1 to {MAX_RERUN} characters")
    return value


def _step(name: str, value: object) -> Step:
    path = f"pipeline.steps.{name}"
    if not STEP_NAME.fullmatch(name):
        raise field_error(path, "a step's name is 1 to 62 letters, digits, '.', '-' or '_'")
    if not isinstance(value, dict):
        raise field_error(path, f"must be an object, got {json_type(value)}")
    job = value.get("job")
    if job is not None and not isinstance(job, dict):
        raise field_error(f"{path}.job", f"must be an object, got {json_type(job)}")
    for field_name, why in NOT_IN_A_STEP.items():
        if (job or {}).get(field_name) is not None:
            raise field_error(f"{path}.job.{field_name}", why)
    return Step(name, _names(value, path, "after"), _names(value, path, "on_failure"), job)


def _names(value: Mapping[str, object], path: str, key: str) -> tuple[str, ...]:
    names = value.get(key) or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise field_error(f"{path}.{key}", "must be a list of step names")
    return tuple(names)


def _check_graph(pipeline: Pipeline) -> None:
    steps = pipeline.steps
    for step in steps.values():
        for key, names in (("after", step.after), ("on_failure", step.on_failure)):
            for n, name in enumerate(names):
                if name not in steps:
                    raise field_error(
                        f"pipeline.steps.{step.name}.{key}[{n}]", f"{name!r} is no step"
                    )
        if step.name != pipeline.root and step.job is None:
            raise field_error(f"pipeline.steps.{step.name}.job", "required for a step")
    if steps[pipeline.root].after:
        raise field_error(f"pipeline.steps.{pipeline.root}.after", "the root runs first")
    stuck = sorted(set(steps) - set(pipeline.order()))
    if stuck:
        raise field_error("pipeline.steps", f"a cycle through {', '.join(stuck)}")
