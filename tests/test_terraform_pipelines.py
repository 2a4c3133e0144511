"""Pipelines in the terraform module: a diamond's root schedule carries the graph the daemon
parses, its steps get no schedule, and a plan refuses each malformed graph naming its jobs.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.pipeline import MAX_STEPS
from sqsjkr.errors import InvalidJobError

from .pipeline_calls import BAD_STEPS, DIAMOND
from .test_terraform import (
    TERRAFORM_DIR,
    ExamplePlan,
    Refusals,
    body_of,
    build_message,
    by_key,
    example_plan,  # noqa: F401 (a fixture)
    expr,
    load_config,
    needs_providers,
    once,  # noqa: F401 (a fixture)
    refusals,  # noqa: F401 (a fixture)
    substituted,
)

STEPS = ("b", "c", "d", "notify")


# The diamond is planned beside the example, and the refused calls together with
# tests/test_terraform.py's: each plan costs seconds of CPU.
@pytest.fixture(scope="module")
def diamond(example_plan: ExamplePlan) -> dict[str, Any]:  # noqa: F811
    return {
        "resources": example_plan.resources,
        "pipelines": example_plan.pipelines,
        "bodies": example_plan.bodies,
    }


@pytest.fixture(scope="module")
def refused(refusals: Refusals) -> dict[str, str]:  # noqa: F811
    """What the plan says of the calls of pipeline_calls.REFUSED: each call's validations, and
    the graphs' preconditions."""
    return {
        "jobs": refusals.validations["pipeline_jobs"],
        "graph": refusals.preconditions,
        "steps": refusals.validations["steps"],
    }


def root_message(template: str, time: str, schedule: str) -> Any:
    """The diamond's root message as EventBridge sends it at 02:00, parsed by the daemon."""
    arn = "arn:aws:scheduler:us-east-1:123456789012:schedule/sqsjkr/sqsjkr-a"
    sent = substituted(template, {time: "2030-01-31T02:00:00Z", schedule: arn})
    return parse_job(sent, message_id="m", sent_at=0)


@needs_providers
@pytest.mark.slow
def test_a_diamonds_root_schedule_carries_the_graph_the_daemon_parses(
    diamond: dict[str, Any],
) -> None:
    module = load_config(TERRAFORM_DIR)
    schedules = by_key(diamond["resources"], "module.scheduler.aws_scheduler_schedule.job")
    targets = by_key(diamond["resources"], "module.rules.aws_cloudwatch_event_target.job")
    # The steps have no schedule of their own: the daemons send each when it is due.
    assert set(schedules) == set(targets) == {"a", "plain"}
    assert diamond["pipelines"] == {"a": ["a", "b", "c", "d", "notify"]}
    for job in (
        root_message(schedules["a"]["target"][0]["input"], SCHEDULED_TIME, SCHEDULE_ARN),
        root_message(targets["a"]["input_transformer"][0]["input_template"], "<time>", "<rule>"),
    ):
        assert job.command == "extract" and job.pipeline is not None and job.firing is not None
        run = job.pipeline
        assert (run.step, run.is_root, run.key) == ("a", True, job.firing.key)
        assert run.pipeline.graph_fields() == {
            "name": "a",
            "root": "a",
            "steps": {
                "a": {"after": [], "on_failure": ["notify"]},
                "b": {"after": ["a"], "on_failure": [], "event_id": "b"},
                "c": {"after": ["a"], "on_failure": ["notify"], "event_id": "c"},
                "d": {"after": ["b", "c"], "on_failure": [], "event_id": "nightly-load"},
                "notify": {"after": [], "on_failure": [], "event_id": "notify"},
            },
        }
        assert run.pipeline.steps["a"].job is None  # the root's job is the message itself
        # Each step's job: the message fields the module writes for that job alone.
        for step in STEPS:
            assert run.pipeline.steps[step].job == build_message(module, step, DIAMOND[step])
        assert run.pipeline.skipped({"a", "b"}, {"c"}) == {"d": "c"}


@needs_providers
@pytest.mark.slow
def test_the_roots_body_in_job_messages_starts_its_pipeline_by_hand(
    diamond: dict[str, Any],
) -> None:
    """`sqsjkr send --body` of it (test_pipelines_send.py runs one): a run keyed by its message."""
    job = parse_job(diamond["bodies"]["a"], message_id="sent-by-hand", sent_at=0)
    assert job.pipeline is not None and job.firing is None
    assert (job.pipeline.step, job.pipeline.key) == ("a", "sent-by-hand")
    assert job.pipeline.pipeline.order() == ["a", "notify", "b", "c", "d"]
    # A step's body runs that job alone; a plain job's is its message.
    for key in ("d", "plain"):
        assert json.loads(diamond["bodies"][key]) == build_message(
            load_config(TERRAFORM_DIR), key, DIAMOND[key]
        )


@needs_providers
@pytest.mark.slow
def test_a_job_outside_any_pipeline_keeps_its_message(diamond: dict[str, Any]) -> None:
    module = load_config(TERRAFORM_DIR)
    schedules = by_key(diamond["resources"], "module.scheduler.aws_scheduler_schedule.job")
    expected = {
        **build_message(module, "plain", DIAMOND["plain"]),
        "origin": "schedule",
        "firing": {
            "expression": "rate(1 hour)",
            "schedule": SCHEDULE_ARN,
            "time": SCHEDULED_TIME,
            "timezone": "UTC",
        },
    }
    assert schedules["plain"]["target"][0]["input"] == body_of(expected)


@needs_providers
@pytest.mark.slow
def test_plan_refuses_unknown_names_a_schedule_with_after_a_job_that_never_runs_and_a_steps_zone(
    refused: dict[str, str],
) -> None:
    said = refused["jobs"]
    for message in (
        "after and on_failure must name jobs of this module: job b names nope, gone, which the "
        "module does not have.",
        "A job runs on its schedule_expression or after other jobs, not both: both has both",
        "on_failure must name jobs without a schedule_expression: job f names a.",
        "or to be named in another job's on_failure: lost has none of them.",
        "a pipeline's step has none (its root's schedule sets them for the whole pipeline): "
        "zoned sets one.",
    ):
        assert message in said, message


@needs_providers
@pytest.mark.slow
def test_plan_refuses_a_cycle_two_roots_too_many_steps_and_a_root_message_too_long(
    refused: dict[str, str],
) -> None:
    said = refused["graph"]
    for message in (
        "after and on_failure must not lead a job back to itself: b, c, d, p, q are in a cycle.",
        "no scheduled job leads to r by after or on_failure.",
        "A pipeline has one scheduled root: job d runs after jobs of a and x.",
        f"A pipeline has at most {MAX_STEPS} jobs: the pipeline of a has {MAX_STEPS + 1}.",
        "The message of job a is longer than the 8192 characters EventBridge Scheduler allows",
    ):
        assert message in said, message


def test_the_modules_limit_on_a_pipelines_size_is_the_daemons() -> None:
    module = load_config(TERRAFORM_DIR)
    conditions = [expr(check["condition"]) for check in module.outputs["pipelines"]["precondition"]]
    limits = [int(n) for c in conditions for n in re.findall(r"length\(steps\) <= (\d+)", c)]
    assert limits == [MAX_STEPS]


@needs_providers
@pytest.mark.slow
def test_plan_refuses_each_step_whose_job_the_daemon_would_refuse(refused: dict[str, str]) -> None:
    said = refused["steps"]
    # Each list of jobs is exact: edge and most, at the limits, are accepted.
    for message in (
        'timeout must be a Go duration such as "90s", "1h30m" or "1.5h".',
        "must not hold a NUL character, and a header's name or value a line break (nor its "
        "name be empty): header, nul holds one.",
        "DynamoDB keys, of at most 2048 bytes: long, wide has a longer one.",
        "(Go's longest duration): forever has a longer one.",
    ):
        assert message in said, message
    # The daemon refuses each of them in the root's message, which the plan spares it.
    module = load_config(TERRAFORM_DIR)
    for key, step in BAD_STEPS.items():
        with pytest.raises(InvalidJobError, match=f'"pipeline.steps.{key}.job'):
            parse_job(
                json.dumps(
                    {
                        "command": "x",
                        "pipeline": {
                            "name": "a",
                            "root": "a",
                            "steps": {
                                "a": {},
                                key: {"after": ["a"], "job": build_message(module, key, step)},
                            },
                        },
                    }
                ),
                message_id="m",
                sent_at=0,
            )
