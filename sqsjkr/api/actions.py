"""The API's actions (scope act), the dashboard's own: run now, run a firing, kill, pause and
resume, route, unlock, redrive; each audited by the fleet layer as the token's name.
"""

from __future__ import annotations

import time
from typing import Any

from sqsjkr.api.access import blueprint, caller
from sqsjkr.api.models import (
    EventPath,
    Killed,
    LockPath,
    Paused,
    Pausing,
    Reason,
    Redriven,
    Redriving,
    Resuming,
    Routed,
    Routing,
    Trigger,
    Triggered,
    TriggerFiring,
    TriggerRun,
    Unlocked,
    Unlocking,
)
from sqsjkr.api.problems import ApiProblem
from sqsjkr.api.queues import fleet_queue
from sqsjkr.fleet.kill import Target
from sqsjkr.fleet.trigger import Triggered as Sent

api = blueprint("actions", __name__, "What the dashboard's buttons do, audited")


@api.post("/events/<event_id>/trigger", responses={200: Triggered})
def trigger(path: EventPath, body: Trigger) -> dict[str, Any]:
    """Run an event now (scope act)

    Send its schedule's message to its queue (or its route), as `sqsjkr trigger` does."""
    fleet = caller("act")
    return _sent(
        path.event_id, fleet.trigger(path.event_id, schedule=body.schedule, reason=body.reason)
    )


@api.post("/events/<event_id>/firings", responses={200: Triggered})
def trigger_firing(path: EventPath, body: TriggerFiring) -> dict[str, Any]:
    """Run one firing of an event (scope act)

    As that firing, as `sqsjkr trigger --firing` does; 409 already-done when a run of it is
    recorded, unless force (a re-run that runs once)."""
    sent = caller("act").trigger_firing(
        path.event_id, body.at, schedule=body.schedule, reason=body.reason, force=body.force
    )
    return _sent(path.event_id, sent)


@api.post("/events/<event_id>/reruns", responses={200: Triggered})
def trigger_run(path: EventPath, body: TriggerRun) -> dict[str, Any]:
    """Run a pipeline's step again within a run (scope act)

    The step (its event id, or its name) of the run key, as `sqsjkr trigger STEP --run KEY`
    does; 404 for a run no daemon began, 409 already-done for a step that succeeded or runs
    now, unless force. The steps after it follow as usual."""
    fleet = caller("act")
    sent = fleet.trigger_run(
        path.event_id,
        body.run,
        force=body.force,
        queue=fleet_queue(fleet, body.queue),
        reason=body.reason,
    )
    return {
        "message_id": sent.message_id,
        "event_id": sent.event_id,
        "queue": sent.queue,
        "firing": None if sent.firing is None else sent.firing.iso,
        "run": sent.run,
        "step": sent.step,
        "rerun": sent.rerun,
    }


@api.post("/events/<event_id>/kill", responses={200: Killed})
def kill(path: EventPath, body: Reason) -> dict[str, Any]:
    """Kill every run of an event in progress (scope act)

    Their daemons stop them at their next heartbeat; 409 nothing-to-do when none runs."""
    return killed_json(caller("act").kill(path.event_id, reason=body.reason))


@api.post("/pauses", responses={200: Paused})
def pause(body: Pausing) -> dict[str, Any]:
    """Pause events, or every event (scope act)"""
    made = caller("act").pause(body.events, until=body.until, reason=body.reason)
    return {"pauses": [p.as_dict() for p in made]}


@api.post("/pauses/resume", responses={200: Paused})
def resume(body: Resuming) -> dict[str, Any]:
    """Resume events, or every paused event (scope act)

    The pauses lifted; 409 nothing-to-do when none was paused, as kill and redrive answer."""
    lifted = caller("act").resume(body.events, reason=body.reason)
    if not lifted:
        raise ApiProblem(409, "nothing-to-do", "none of those events was paused: nothing changed")
    return {"pauses": [p.as_dict() for p in lifted]}


@api.post("/events/<event_id>/route", responses={200: Routed})
def route(path: EventPath, body: Routing) -> dict[str, Any]:
    """Run an event's jobs from a queue (scope act)

    409 route-refused for a dead-letter queue or one no live daemon serves, unless force."""
    made = caller("act").route(path.event_id, body.queue, force=body.force, reason=body.reason)
    return made.as_dict()


@api.post("/events/<event_id>/route/clear", responses={200: Routed})
def clear_route(path: EventPath, body: Reason) -> dict[str, Any]:
    """Remove an event's route (scope act)"""
    caller("act").clear_route(path.event_id, reason=body.reason)
    return {"event_id": path.event_id, "queue": None}


@api.post("/locks/<lock_id>/unlock", responses={200: Unlocked})
def unlock(path: LockPath, body: Unlocking) -> dict[str, Any]:
    """Remove a lock, or a slot of a concurrency group (scope act)

    404 not-held when none is held; 409 unlock-refused for a live lease, unless force."""
    removed = caller("act").unlock(
        path.lock_id, slot=body.slot, force=body.force, reason=body.reason
    )
    return {**removed.as_json(time.time()), "lock_id": path.lock_id}


@api.post("/dead-letters/redrive", responses={200: Redriven})
def redrive(body: Redriving) -> dict[str, Any]:
    """Send dead letters back to their queue (scope act)

    Then delete them from the dead-letter queue; one the daemon would refuse again stays
    (skipped), unless force. 409 nothing-to-do when none was moved."""
    fleet = caller("act")
    done = fleet.redrive(
        body.message_ids,
        queue=fleet_queue(fleet, body.queue),
        force=body.force,
        reason=body.reason,
    )
    if done.nothing is not None:
        raise ApiProblem(409, "nothing-to-do", f"{done.nothing}: nothing changed")
    return {"moved": done.moved, "skipped": list(done.skipped), "errors": list(done.errors)}


def killed_json(killed: list[tuple[Target, Any]]) -> dict[str, Any]:
    """What a kill found of each run: marked, already asked, or ended."""
    return {
        "runs": [
            {"message_id": target.message_id, "answer": result.answer.value}
            for target, result in killed
        ]
    }


def _sent(event_id: str, sent: Sent) -> dict[str, Any]:
    return {
        "message_id": sent.message_id,
        "event_id": event_id,
        "queue": sent.to.name,
        "firing": None if sent.firing is None else sent.firing.iso,
    }
