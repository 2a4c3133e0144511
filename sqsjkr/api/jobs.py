"""The API's jobs: submit one (unique for a while if asked), read its state, wait for it to end,
and kill its run: the submit-and-poll pattern of a program in any language.
"""

from __future__ import annotations

import contextlib
from typing import Any

from flask import g, request

from sqsjkr.api.access import PREFIX, blueprint, caller, waits
from sqsjkr.api.actions import killed_json
from sqsjkr.api.models import (
    Job,
    JobPath,
    JobQuery,
    Killed,
    Reason,
    Submit,
    SubmitHeaders,
    Submitted,
    WaitQuery,
)
from sqsjkr.api.problems import ApiProblem
from sqsjkr.api.queues import fleet_queue
from sqsjkr.api.slots import RETRY_AFTER, Slot, WaitRefused
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, WaitTimedOut
from sqsjkr.fleet.jobs import JobPhase, JobState, of_sqs_shape

api = blueprint("jobs", __name__, "Submit a job and follow it to its end")


@api.post("/jobs", responses={201: Submitted, 200: Submitted})
def submit(
    body: Submit, header: SubmitHeaders
) -> tuple[dict[str, Any], int] | tuple[dict[str, Any], int, dict[str, str]]:
    """Submit a job (scope send)

    Put the job on its queue, checked as the daemon will check it. With unique_for, an
    identical job (the same unique_key of this token, else the same body) sent that long ago and
    unfinished is answered instead, with 200 and deduplicated true, and nothing is sent. With an
    Idempotency-Key, a retry of the request answers as the first did."""
    fleet = caller("send")
    handle = fleet.send(
        body.job,
        queue=fleet_queue(fleet, body.queue),
        delay=body.delay,
        unique_for=_seconds("unique_for", body.unique_for),
        unique_key=body.unique_key,
        reason=body.reason,
        unique_scope=g.token.name,
        idempotency_key=header.key(),
    )
    shown = {
        "message_id": handle.message_id,
        "event_id": handle.event_id,
        "deduplicated": handle.deduplicated,
    }
    if handle.deduplicated:
        return shown, 200
    return shown, 201, {"Location": f"{PREFIX}/jobs/{handle.message_id}"}


@api.get("/jobs/<message_id>", responses={200: Job})
def job(path: JobPath, query: JobQuery) -> dict[str, Any]:
    """A job's state (scope read)

    queued, waiting (for its lock, its group's slot or its retry), running, or ended with its
    outcome and record. A job no daemon has left a trace of is queued with traced false: not
    taken yet, or no job of this fleet."""
    return job_json(caller("read").job(path.message_id, query.event_id))


@api.get("/jobs/<message_id>/wait", responses={200: Job})
def wait(path: JobPath, query: WaitQuery) -> dict[str, Any]:
    """Wait for a job to end (scope read)

    A long poll: the job's state once it has ended, or once timeout seconds (at most 60) have
    passed, whichever comes first. Nothing is stopped. A job on no queue (phase unknown: no
    daemon left a trace of it, and SQS never gives its id) is answered at once."""
    fleet = caller("read")
    slot = _slot()
    try:
        if not of_sqs_shape(path.message_id):
            known = fleet.job(path.message_id, query.event_id)
            if known.phase is JobPhase.UNKNOWN:
                return job_json(known)  # on no queue: nothing to wait for
        handle = fleet.handle(path.message_id, query.event_id)
        with contextlib.suppress(WaitTimedOut):
            # A HEAD answers the state now: nobody reads a long poll's body it does not get.
            handle.wait(0 if request.method == "HEAD" else query.timeout)
        return job_json(fleet.job(path.message_id, handle.event_id))
    finally:
        slot.release()


@api.post("/jobs/<message_id>/kill", responses={200: Killed})
def kill(path: JobPath, body: Reason) -> dict[str, Any]:
    """Kill a job's run (scope act)

    Its daemon stops it at its next heartbeat, as `sqsjkr kill MESSAGE_ID` does."""
    return killed_json(caller("act").kill(path.message_id, reason=body.reason))


def _slot() -> Slot:
    """A slot for this request's wait; 429 too-many-waits with Retry-After when its token holds
    its share, or the listener its bound (a client backs off and calls again)."""
    try:
        return waits().take(g.token.name)
    except WaitRefused as exc:
        retry = {"Retry-After": str(RETRY_AFTER)}
        raise ApiProblem(429, "too-many-waits", exc.detail, retry) from exc


def _seconds(field: str, text: str | None) -> float | None:
    """A duration field's seconds; 400 invalid-duration naming the field."""
    if text is None:
        return None
    try:
        return parse_duration(text, days=True).seconds
    except DurationError as exc:
        raise ApiProblem(400, "invalid-duration", f"{field}: {exc}") from exc


def job_json(state: JobState) -> dict[str, Any]:
    """A job's state as the API shows it: `job --json`'s object, its phase one of five. A job
    no daemon has left a trace of is queued (traced false) while it may still be on its queue,
    and unknown once it cannot be (JobState.may_be_queued), so that a poll stops."""
    shown = state.as_json()
    phase = shown.pop("state")
    shown["traced"] = phase != "unknown"
    if phase == "unknown" and state.may_be_queued:
        phase = "queued"
    shown["phase"] = phase
    return shown
