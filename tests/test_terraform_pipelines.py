"""Pipelines in the terraform module: a diamond's root schedule carries the graph the daemon
parses, its steps get no schedule, and a plan refuses each malformed graph naming its jobs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.pipeline import MAX_STEPS
from sqsjkr.errors import InvalidJobError

from .test_terraform import (
    MODULE_PROVIDER,
    TERRAFORM_DIR,
    body_of,
    build_message,
    by_key,
    copy_module,
    expr,
    init,
    load_config,
    needs_providers,
    once,  # noqa: F401 (a fixture)
    said,
    substituted,
    terraform,
)

#: The diamond of issue 31: a -> (b, c) -> d, notify on the failure of a or c, and a plain job
#: beside it, as a module call's jobs (python values, written as HCL by hcl()).
DIAMOND: dict[str, dict[str, Any]] = {
    "a": {
        "schedule_expression": "cron(0 2 * * ? *)",
        "command": "extract",
        "on_failure": ["notify"],
    },
    "b": {"after": ["a"], "command": "transform-b", "envs": {"PART": "b"}},
    "c": {"after": ["a"], "command": "transform-c < in", "retries": 2, "on_failure": ["notify"]},
    "d": {"after": ["b", "c"], "command": "load", "event_id": "nightly-load"},
    "notify": {"command": "page-oncall"},
    "plain": {"schedule_expression": "rate(1 hour)", "command": "poll", "lock_id": "poll"},
}
STEPS = ("b", "c", "d", "notify")


def hcl(value: Any) -> str:
    """value as an HCL expression: JSON's strings, numbers and lists are HCL's; objects take =."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {hcl(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(hcl(v) for v in value) + "]"
    return json.dumps(value)


def call(name: str, jobs: dict[str, dict[str, Any]], **arguments: str) -> str:
    extra = "".join(f"  {k} = {json.dumps(v)}\n" for k, v in arguments.items())
    return f'module "{name}" {{\n  source = "../"\n{extra}  jobs = {hcl(jobs)}\n}}\n'


#: A step of 200 characters, 40 times after one root: a root message over 8192 characters.
LONG = {
    "a": {"schedule_expression": "rate(1 day)", "command": "x"},
    **{f"s{n}": {"after": ["a"], "command": "y" * 200} for n in range(40)},
}

#: Steps whose job the daemon refuses, each for one reason: refused in the root's message, each
#: would refuse its pipeline at its root's firing, so the plan refuses them first.
BAD_STEPS: dict[str, dict[str, Any]] = {
    "soon": {"after": ["a"], "command": "x", "timeout": "soon"},
    "nul": {"after": ["a"], "command": "x\u0000"},
    "long": {"after": ["a"], "command": "x", "lock_id": "k" * 2049},
    "wide": {"after": ["a"], "command": "x", "event_id": "\u00e9" * 1025},
    "forever": {"after": ["a"], "command": "x", "retry_delay": "2562048h"},
    "header": {
        "after": ["a"],
        "http": {"url": "http://127.0.0.1/", "headers": {"X-A": "1\r\nX-B: 2"}},
    },
}

#: Module calls a plan refuses. Each root fails in one phase: a failed validation of var.jobs ends
#: a plan before the graph's checks (the output's and the schedules' preconditions).
REFUSED = {
    "jobs": call(
        "refused",
        {
            "a": {"schedule_expression": "rate(1 day)", "command": "x"},
            "b": {"after": ["a", "nope"], "command": "x", "on_failure": ["gone"]},
            "both": {"schedule_expression": "rate(1 day)", "after": ["a"], "command": "x"},
            "f": {"after": ["a"], "command": "x", "on_failure": ["a"]},
            "lost": {"command": "x"},
            "zoned": {"after": ["a"], "command": "x", "schedule_expression_timezone": "UTC"},
        },
    ),
    "graph": call(
        "cycle",
        {
            "a": {"schedule_expression": "rate(1 day)", "command": "x"},
            "b": {"after": ["a", "d"], "command": "x"},
            "c": {"after": ["b"], "command": "x"},
            "d": {"after": ["c"], "command": "x"},
            # A cycle no scheduled job leads to, and a job after it.
            "p": {"after": ["q"], "command": "x"},
            "q": {"after": ["p"], "command": "x"},
            "r": {"after": ["q"], "command": "x"},
        },
    )
    + call(
        "roots",
        {
            "a": {"schedule_expression": "rate(1 day)", "command": "x"},
            "x": {"schedule_expression": "rate(1 hour)", "command": "x"},
            "d": {"after": ["a", "x"], "command": "x"},
        },
    )
    + call(
        "big",
        {
            "a": {"schedule_expression": "rate(1 day)", "command": "x"},
            **{f"s{n}": {"after": ["a"], "command": "x"} for n in range(MAX_STEPS)},
        },
    )
    + call("long", LONG),
    "steps": call(
        "steps",
        {
            "a": {"schedule_expression": "rate(1 day)", "command": "x"},
            # At the limits, and accepted: 2048 bytes of UTF-8, and Go's longest duration.
            "edge": {"after": ["a"], "command": "x", "event_id": "\u00e9" * 1024},
            "most": {"after": ["a"], "command": "x", "timeout": "2562047h47m16.854775807s"},
            **BAD_STEPS,
        },
    ),
}


def plan_diamond(tmp_path: Path) -> dict[str, Any]:
    """The planned resources of the diamond with either engine, and the pipelines output."""
    diamond = copy_module(tmp_path) / "diamond"
    diamond.mkdir()
    (diamond / "main.tf").write_text(
        MODULE_PROVIDER
        + call("scheduler", DIAMOND)
        + call("rules", DIAMOND, schedule_engine="rules")
        + 'output "pipelines" {\n  value = module.scheduler.pipelines\n}\n'
        + 'output "bodies" {\n  value     = module.scheduler.job_messages\n  sensitive = true\n}\n'
    )
    init(diamond)
    terraform(diamond, "plan", "-input=false", "-lock=false", "-out=plan.bin")
    shown = json.loads(terraform(diamond, "show", "-json", "plan.bin").stdout)
    resources = {
        change["address"]: change["change"]["after"] or {}
        for change in shown["resource_changes"]
        if "create" in change["change"]["actions"]
    }
    outputs = shown["planned_values"]["outputs"]
    return {
        "resources": resources,
        "pipelines": outputs["pipelines"]["value"],
        "bodies": outputs["bodies"]["value"],
    }


def plan_refused(tmp_path: Path) -> dict[str, str]:
    """What the plan of each of REFUSED says, as one line of words."""
    copy = copy_module(tmp_path)
    refusals = {}
    for name, calls in REFUSED.items():
        root = copy / f"refused-{name}"
        root.mkdir()
        (root / "main.tf").write_text(MODULE_PROVIDER + calls)
        init(root)
        result = terraform(root, "plan", "-input=false", "-lock=false", "-no-color", check=False)
        assert result.returncode == 1, result.stdout + result.stderr
        refusals[name] = said(result)
    return refusals


# Two plans, so that two xdist workers make them at once: each costs seconds of CPU.
@pytest.fixture(scope="module")
def diamond(tmp_path_factory: pytest.TempPathFactory, once: Any) -> dict[str, Any]:  # noqa: F811
    return dict(once("pipeline-diamond", lambda: plan_diamond(tmp_path_factory.mktemp("pipe"))))


@pytest.fixture(scope="module")
def refused(tmp_path_factory: pytest.TempPathFactory, once: Any) -> dict[str, str]:  # noqa: F811
    return dict(once("pipeline-refused", lambda: plan_refused(tmp_path_factory.mktemp("pipe"))))


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
