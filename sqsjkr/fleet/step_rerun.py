"""Re-running a step within a kept run of its pipeline (`sqsjkr trigger STEP --run KEY`): from the
pipeline its run began with, asked in the run's item after its audit and before its send.

A run begun by hand (`send --body`, keyed by its root's message id) has no schedule to find the
step in; a fired one (`<schedule>@<time>`) is resumed the same way, as a re-run of its firing.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass

from sqsjkr.backends.aws import make_client
from sqsjkr.backends.pipeline import PipelineState
from sqsjkr.backends.routes import DynamoRoutes
from sqsjkr.backends.sqs import group_id_of, queue_of_arn
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.pipeline import Pipeline, PipelineRun, parse_pipeline, step_fields
from sqsjkr.errors import AlreadyDone, RequestError, ResourceMissingError, quote
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.history import Store
from sqsjkr.fleet.pipeline_steps import StepStatus, step_claim
from sqsjkr.fleet.pipelines import pipelines_of, read_views
from sqsjkr.fleet.running import read_claims
from sqsjkr.fleet.schedules import read_schedules
from sqsjkr.fleet.trigger import Destination, routed_from, send_triggered


@dataclass(frozen=True)
class RunStep:
    """A step of a kept run of a pipeline: the run's key and state, the pipeline it began with,
    the step's name and its event (under which its runs are recorded)."""

    key: str
    state: PipelineState
    pipeline: Pipeline
    name: str

    @property
    def event_id(self) -> str:
        return str((self.pipeline.steps[self.name].job or {}).get("event_id") or self.name)

    @property
    def firing(self) -> Firing | None:
        """The root's firing a fired run's key names (`<schedule>@<time>`); None for a run
        begun by hand, keyed by its root's message id."""
        if self.state.firing_at is None or "@" not in self.key:
            return None
        fired = Firing(self.state.firing_at, self.key.rsplit("@", 1)[0])
        return fired if fired.key == self.key else None


@dataclass(frozen=True)
class Rerun:
    """A step run again within a run of its pipeline (`trigger STEP --run KEY`): the message
    sent, the run's key, the step's name and event, and the queue it went to and why."""

    message_id: str
    run: str  # the run's key
    step: str
    event_id: str  # the step's event, under which its runs are recorded
    pipeline: str
    queue: str
    why: str  # why that queue: the configured one, --queue, or the step's event's route
    #: The re-run's id (its claim's `#rerun-<id>`); None for a step its run never claimed,
    #: whose claim then keeps one of its own message and this one.
    rerun: str | None
    #: The root's firing, with the re-run's id, when a firing began the run.
    firing: Firing | None = None
    #: Why its audit item does not name the message, when the trail could not amend it.
    warning: str | None = None


def run_step(store: Store, key: str, step: str) -> RunStep:
    """Step (its event id, or its name in the pipeline) of the kept run of key, from the
    pipeline that run began with. ResourceMissingError for a run no daemon began (or expired);
    RequestError for a step not in that pipeline, or its root (which begins a run)."""
    with store.reading():
        state = pipelines_of(store).state(key)
    if state is None:
        raise ResourceMissingError(
            f"no run {quote(key)} of a pipeline is kept: no daemon of this fleet began it, or it "
            "has expired (`sqsjkr pipeline EVENT` shows a run's key)"
        )
    pipeline = None if state.pipeline is None else parse_pipeline({"pipeline": state.pipeline})
    if pipeline is None:
        raise RequestError(
            f"run {quote(key)} was begun by a daemon too old to keep its pipeline: re-run its "
            "steps with --firing, from the schedule's message"
        )
    named = [
        n
        for n, s in pipeline.steps.items()
        if n == step or (s.job is not None and s.job.get("event_id", n) == step)
    ]
    if len(named) != 1:
        steps = ", ".join(sorted(pipeline.steps))
        which = "no step" if not named else f"several steps ({', '.join(named)})"
        raise RequestError(
            f"{which} of pipeline {quote(pipeline.name)} in run {quote(key)} is named or runs "
            f"event {quote(step)}: its steps are {steps}"
        )
    if named[0] == pipeline.root:
        raise RequestError(
            f"{quote(step)} is the root of pipeline {quote(pipeline.name)}, which begins a run: "
            "a fired root is run again with --firing TIME --force, one sent by hand is sent "
            "again (`sqsjkr send --body`, a new run)"
        )
    return RunStep(key, state, pipeline, named[0])


def check_rerun(store: Store, step: RunStep, force: bool) -> str | None:
    """The re-run's id to send step with: None when its run never claimed it (its claim then
    keeps one of its message and the re-run), else a new one. AlreadyDone, unless force, for
    a step that succeeded in that run, runs now or waits for its retry."""
    claim = step_claim(step.key, step.name, step.pipeline.root)
    with store.reading():
        claimed = claim in read_claims(store.client, store.table, [claim])
    if not force:
        if step.name in step.state.succeeded:
            raise AlreadyDone(
                f"step {step.name} of run {quote(step.key)} already succeeded: --force to run "
                "it again"
            )
        shown = read_views(store, [step.state])[0].step(step.name)
        if shown is not None and (shown.status is StepStatus.RUNNING or shown.retry_at):
            raise AlreadyDone(
                f"step {step.name} of run {quote(step.key)} has not ended ({shown.detail}): "
                "--force to run it again at once"
            )
    return secrets.token_hex(16) if claimed else None


def rerun_message(step: RunStep, rerun: str | None) -> str:
    """The step's message as the re-run sends it: its run's key, the root's firing (with the
    re-run's id) for a fired run, else the re-run's id as `rerun`."""
    fired = step.firing
    firing = None if fired is None else Firing(fired.at, fired.schedule, rerun=rerun).as_fields()
    fields = step_fields(step.pipeline, step.key, step.name, firing, Origin.TRIGGER.value)
    if fired is None and rerun is not None:
        fields["rerun"] = rerun
    return json.dumps(fields, ensure_ascii=False)


def destination_of(config: Config, store: Store, step: RunStep, queue: str | None) -> Destination:
    """The queue step goes to: queue (--queue); else, for a fired run, its root's schedule's
    target, where its run's steps run (while that schedule is there to read); else [sqs]
    queue_name. The step's event's route wins over each."""
    if queue is not None:
        to = Destination(queue, config.account.id, "--queue")
    else:
        to = _fired_target(config, store, step) or Destination(
            config.sqs.queue_name, config.account.id, "[sqs] queue_name"
        )
    with store.reading():
        return routed_from(to, step.event_id, DynamoRoutes(store.client, store.table))


def _fired_target(config: Config, store: Store, step: RunStep) -> Destination | None:
    """The queue the schedule whose firing began step's run targets, if the run was fired and
    the schedule is still there."""
    fired = step.firing
    if fired is None:
        return None
    for schedule in read_schedules(config, store.session):
        target = queue_of_arn(schedule.target_arn)
        if fired.schedule in (schedule.arn, schedule.name) and target is not None:
            why = f"schedule {schedule.name}'s target, where its run began"
            return Destination(target[1], target[0], why)
    return None


def trigger_run(
    config: Config,
    store: Store,
    audit: Auditor,
    step_name: str,
    key: str,
    reason: str,
    *,
    force: bool = False,
    queue: str | None = None,
) -> Rerun:
    """Run step_name again within the kept run of key (see run_step, check_rerun): audited
    first, then asked in the run's item (the daemons admit it so), then sent (destination_of),
    its audit item amended with the message sent."""
    step = run_step(store, key, step_name)
    rerun = check_rerun(store, step, force)
    to = destination_of(config, store, step, queue)
    body = rerun_message(step, rerun)
    # Short, for the audit page's row: a fired run by its firing's time (its key's schedule ARN
    # is long), a re-run by its message (whose record names the re-run's id).
    fired = step.firing
    run = f"run {key}" if fired is None else f"{fired.iso} firing"
    again = "" if rerun is None else " again"
    detail = f"step {step.name} of {step.pipeline.name}'s {run}{again}, to queue {to.name}"
    entry = audit("trigger", step.event_id, reason=reason, detail=detail, force=force)
    asking = PipelineRun(step.pipeline, step.name, key).asked(rerun)
    with store.reading():
        asked = pipelines_of(store).ask(key, asking)
    if not asked:
        raise ResourceMissingError(f"the run {quote(key)} is no longer kept")
    sqs = make_client(store.session, "sqs")
    sent = send_triggered(sqs, to, entry.user, reason, body, group_id_of(step.event_id))
    problem = audit.amend(entry, f"{detail}, message {sent}")
    firing = None if fired is None else Firing(fired.at, fired.schedule, rerun=rerun)
    return Rerun(
        sent, key, step.name, step.event_id, step.pipeline.name, to.name, to.why, rerun, firing,
        problem,
    )  # fmt: skip
