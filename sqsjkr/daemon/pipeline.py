"""What a daemon does when a pipeline's step ends: note it in the run's state, then send each step
that is now ready (or the failed step's on_failure steps), before the step's message is deleted.

No leader and no polling: the step that ends moves its pipeline on. Sends are idempotent (each
step is claimed once per run), so a redelivered message of an ended step simply does it again,
from how its claim says it ended. A step's message is run only when its run's state says it is
due: a sender cannot start, or take, a run's step.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.pipeline import PipelineState, PipelineStore
from sqsjkr.contract.firing import Origin
from sqsjkr.contract.job import Job
from sqsjkr.contract.pipeline import PipelineRun, parse_pipeline, step_fields
from sqsjkr.contract.run import RunOutcome
from sqsjkr.daemon.runs import LEAVE, Ending
from sqsjkr.observability.logs import JobLog

log = logging.getLogger("sqsjkr.pipeline")


class StepSender(Protocol):
    """Puts a step's message on a queue (backends/sqs.py QueueForwarder)."""

    def send(self, body: str, queue: str, event_id: str, deduplication_id: str) -> str:
        """The id of the message sent."""


class Steps:
    """Moves each run of a pipeline on as its steps end, for the jobs of one queue."""

    def __init__(
        self, store: PipelineStore, sender: StepSender, queue: str, clock: Callable[[], float]
    ) -> None:
        self._store = store
        self._sender = sender
        self._queue = queue
        self._clock = clock

    def refusal(self, job: Job) -> str | None:
        """Why job, a step of a pipeline's run, may not run: None when its run's state (which
        only daemons write) says it is due, or an operator asked for it. A root is never
        refused: its run's key is minted from its own firing or message id. AWS errors are
        raised."""
        run = job.pipeline
        if run is None or run.is_root:
            return None
        what = f"step {run.step} of pipeline {run.pipeline.name}, run {run.key}"
        state = self._store.state(run.key)
        if state is None:
            return f"{what}: no daemon of this fleet began that run"
        if state.digest is not None and state.digest != run.pipeline.digest():
            return f"{what}: the message carries a pipeline other than the one its run began with"
        rerun = job.rerun
        if run.asked(rerun) in state.asked:
            return None
        if rerun is not None:
            return f"{what}: no operator asked for its re-run {rerun}"
        if not run.pipeline.due(run.step, state.succeeded, state.failed):
            return f"{what}: not due, as the steps it follows have not ended so"
        return None

    def moved_on(self, job: Job, jlog: JobLog, succeeded: bool | None) -> bool:
        """Whether job's pipeline (if any) was moved on from its step's end: succeeded says how
        it ended, None that it ended before and its claim did not keep how (a redelivery: from
        the run's state). False when AWS failed: the message is then kept, and its redelivery
        does it."""
        if job.pipeline is None:
            return True
        try:
            if succeeded is None:
                self.again(job, jlog)
            else:
                self.ended(job, succeeded, jlog)
        except AWS_ERRORS as exc:
            jlog.error(
                "pipeline %s: the steps after %s could not be sent (%s); its message stays on "
                "the queue, and its redelivery sends them",
                job.pipeline.pipeline.name,
                job.pipeline.step,
                describe(exc),
            )
            return False
        return True

    def ended(self, job: Job, succeeded: bool, jlog: JobLog) -> None:
        """job's step has ended for good: note it, then send the steps that follow from it.
        AWS errors are raised: the message is then kept, and its redelivery does it again."""
        run = job.pipeline
        assert run is not None
        at = None if job.firing is None else job.firing.at
        state = self._store.step_ended(run, succeeded, self._clock(), at)
        self._follow(job, _as_begun(run, state), state, succeeded, jlog)

    def again(self, job: Job, jlog: JobLog) -> None:
        """A message of a step that has ended came again: send what follows from its end
        again (it may have been cut short), from the run's state."""
        run = job.pipeline
        assert run is not None
        state = self._store.state(run.key)
        if state is None or run.step not in state.succeeded | state.failed:
            return  # its end was not noted: the run of it that ends will move the pipeline on
        self._follow(job, _as_begun(run, state), state, run.step in state.succeeded, jlog)

    def _follow(
        self, job: Job, run: PipelineRun, state: PipelineState, succeeded: bool, jlog: JobLog
    ) -> None:
        pipeline = run.pipeline
        if succeeded:
            nexts = pipeline.ready(state.succeeded, run.step)
        else:
            nexts = list(pipeline.steps[run.step].on_failure)
            skipped = sorted(pipeline.skipped(state.succeeded, state.failed))
            if skipped:
                jlog.warning(
                    "pipeline %s: skipped for this run, as %s failed: %s",
                    pipeline.name,
                    run.step,
                    ", ".join(skipped),
                )
        for name in nexts:
            body, event_id = step_message(job, run, name)
            # On a FIFO queue, two parents' sends of one step within five minutes are kept once.
            claim = PipelineRun(pipeline, name, run.key).claim_key()
            dedupe = hashlib.sha256(claim.encode()).hexdigest()
            sent = self._sender.send(body, self._queue, event_id, dedupe)
            jlog.info("pipeline %s: step %s sent as message %s", pipeline.name, name, sent)


def _as_begun(run: PipelineRun, state: PipelineState) -> PipelineRun:
    """run, following the pipeline its run began with (a root re-run after its schedule's
    pipeline changed finishes the run as it started)."""
    if state.pipeline is None or state.digest == run.pipeline.digest():
        return run
    begun = parse_pipeline({"pipeline": state.pipeline})
    if begun is None or run.step not in begun.steps:
        return run
    return PipelineRun(begun, run.step, run.key)


def step_message(job: Job, run: PipelineRun, name: str) -> tuple[str, str]:
    """The message of step name of job's run of its pipeline, and its event id."""
    firing = None if job.firing is None else job.firing.as_fields()
    if firing is not None:
        # The root's firing, never a re-run's id: the steps a re-run starts are the run's own.
        firing.pop("rerun", None)
    fields = step_fields(run.pipeline, run.key, name, firing, Origin.PIPELINE.value)
    return json.dumps(fields, separators=(",", ":")), str(fields["event_id"])


def step_ended(steps: Steps | None, job: Job, ending: Ending, jlog: JobLog) -> Ending:
    """ending, once a pipeline's step that ended for good has moved its pipeline on; when that
    could not be written, the same ending but the message kept (not deleted) for a redelivery."""
    final = ending.run is not None and (ending.settle.delete or ending.last)
    if steps is None or job.pipeline is None or not final:
        return ending
    if steps.moved_on(job, jlog, ending.run is RunOutcome.SUCCEEDED):
        return ending
    return replace(ending, settle=LEAVE) if ending.settle.delete else ending
