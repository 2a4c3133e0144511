"""The fault-point walk's sample (issue 36): a drawn call of a job path per fault, the faults of a
fan-in parent's end that once lost a pipeline, the walk's own checks; the benchmark walks them all.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable, Iterator

import pytest

from tests.fault_points import Kind, PipelineRun, Point, World, paths, replay, sample, world_on
from tests.faults import Call, Fault
from tests.web_fleet import module_env

#: The seed of the sample's draws: the same points in every run of the suite. This one draws
#: three paths' writes (a catch-up send, a lock's claim, a firing's claim) rather than their
#: receives, whose faults only delay them; the benchmark walks every point.
SEED = 50

Record = Callable[[str], list[Point]]


@pytest.fixture(scope="module")
def env(moto_endpoint: str) -> Iterator[dict[str, str]]:
    with module_env(moto_endpoint):
        yield {
            "AWS_ENDPOINT_URL": moto_endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }


@pytest.fixture(scope="module")
def recorded(moto_endpoint: str, env: dict[str, str]) -> Record:
    """The points of a path, from one clean run of it (once per module and worker)."""

    @functools.cache
    def record(name: str) -> list[Point]:
        clean, points = replay(paths()[name], moto_endpoint, env)
        assert not clean.problems, f"the clean run of {name} failed: {clean}"
        return points

    return record


#: Replays of a point at most: one whose aimed call never came tried nothing, and goes again (on
#: a loaded machine a step's end may ride a claim's call rather than go alone, as recorded).
REPLAYS = 3


def tried(name: str, point: Point, kind: Kind, endpoint: str, env: dict[str, str]) -> None:
    for _ in range(REPLAYS):
        outcome, _ = replay(paths()[name], endpoint, env, point, kind)
        # Reached or not, the path ended well: a replay the fault missed is a clean run.
        assert not outcome.problems, str(outcome)
        if outcome.reached:
            return
    raise AssertionError(f"{point} was not reached in {REPLAYS} replays")


#: The job paths the sample draws from, one for each kind of fault.
JOB_PATHS = ("plain", "lock", "firing", "catchup")
DRAWN = [(random.Random(SEED + i).choice(JOB_PATHS), kind) for i, kind in enumerate(Kind)]


@pytest.mark.parametrize(("name", "kind"), DRAWN, ids=[f"{n}-{k.value}" for n, k in DRAWN])
def test_a_drawn_call_of_a_job_path_faulted_loses_nothing(
    name: str, kind: Kind, recorded: Record, moto_endpoint: str, env: dict[str, str]
) -> None:
    points = recorded(name)
    assert len(points) >= 4, points  # the receive, the claim, the record, the delete at least
    [(point, _)] = sample(points, [kind], 1, SEED)
    tried(name, point, kind, moto_endpoint, env)


def step_end(points: list[Point], step: str) -> list[Point]:
    """The calls of a step's end: its run's record and its note in its run's item."""
    return [
        p
        for p in points
        if p.subject == step
        and (p.action == "UpdateItem" and p.shape == "pipeline" or "Put:run" in p.shape)
    ]


#: The faults of a fan-in parent's end that issue 36 item 1 names: its note refused past the
#: retries or its answer lost, and the daemon killed once its record finished its claim (the
#: note's write just after). The benchmark walks the other three.
STEP_END_FAULTS = [(1, Kind.REFUSED), (1, Kind.LOST), (0, Kind.KILLED)]
#: A step's end alone: its run's record (which finishes its claim), then its note in its run.
END_ALONE = ["TransactWriteItems", "UpdateItem"]
#: Clean runs of the pipeline recorded at most, beside the module's, for one whose c ended alone.
RECORDINGS = 3


@pytest.mark.slow
@pytest.mark.parametrize(
    ("which", "kind"),
    STEP_END_FAULTS,
    ids=[f"{('record', 'noted')[w]}-{k.value}" for w, k in STEP_END_FAULTS],
)
def test_a_fan_in_parents_end_faulted_still_runs_the_child_once_after_both(
    which: int, kind: Kind, recorded: Record, moto_endpoint: str, env: dict[str, str]
) -> None:
    ends = step_end(recorded("pipeline"), "c")
    # c's end goes alone, the call these faults aim at, unless a claim was sure to come as it
    # ended (b received with it in a full receive, on a loaded machine) and it rode that call:
    # a clean run is recorded again until it went alone.
    for _ in range(RECORDINGS):
        if [p.action for p in ends] == END_ALONE:
            break
        clean, points = replay(paths()["pipeline"], moto_endpoint, env)
        assert not clean.problems, f"the clean run of pipeline failed: {clean}"
        ends = step_end(points, "c")
    assert [p.action for p in ends] == END_ALONE, ends
    tried("pipeline", ends[which], kind, moto_endpoint, env)


def test_the_walk_tells_a_job_whose_message_was_deleted_unrun(
    moto_endpoint: str, env: dict[str, str]
) -> None:
    # The check under test, not the daemon: a message deleted as it is delivered, its receive
    # refused, must be told as lost, or the walk would prove nothing.
    outcome, _ = replay(
        paths()["plain"], moto_endpoint, env, faults=lambda world: [deleted(world)], settle=3
    )
    assert "never ran, and no message of it is left" in outcome.problems, outcome
    assert "no record of a success: []" in outcome.problems, outcome


def deleted(world: World) -> Fault:
    """A fault that deletes each message a receive brings, and refuses the receive."""

    def delete(call: Call, status: int, answer: bytes) -> bool:
        messages = json.loads(answer).get("Messages") or []
        for message in messages:
            world.aws.sqs.delete_message(
                QueueUrl=world.aws.queue_url, ReceiptHandle=message["ReceiptHandle"]
            )
        return bool(messages)

    return Fault(
        lambda call: call.action == "ReceiveMessage", error=(500, "InternalError"), confirm=delete
    )


def test_the_walk_tells_a_child_started_before_a_parent_ended_and_a_step_left_out(
    moto_endpoint: str, env: dict[str, str]
) -> None:
    # The pipeline's check on what a run left, with no daemon: d started before c ended, b
    # never ran, and nothing was recorded.
    with world_on(moto_endpoint, env) as world:
        world.out.write_text("start-a end-a start-c start-d end-c end-d\n")
        problems = PipelineRun(0.0).check(world)
    assert "d started before c ended" in problems, problems
    assert "b never ended (never started)" in problems, problems
    assert "no item of the run" in problems, problems
    assert "a recorded as succeeded 0 times for the run" in problems, problems
