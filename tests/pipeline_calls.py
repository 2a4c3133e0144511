"""The pipeline module calls tests/test_terraform.py's shared plans make for test_terraform_pipelines.py:
the diamond, planned beside the example, and the malformed graphs, planned with the other refusals.
"""

from __future__ import annotations

import json
from typing import Any

from sqsjkr.contract.pipeline import MAX_STEPS


def hcl(value: Any) -> str:
    """value as an HCL expression: JSON's strings, numbers and lists are HCL's; objects take =."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {hcl(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(hcl(v) for v in value) + "]"
    return json.dumps(value)


def call(name: str, jobs: str, source: str, **arguments: object) -> str:
    """A module call of the module at source, with jobs an HCL expression."""
    extra = "".join(f"  {k} = {json.dumps(v)}\n" for k, v in arguments.items())
    return f'module "{name}" {{\n  source = "{source}"\n{extra}  jobs = {jobs}\n}}\n'


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


def diamond_calls(source: str) -> str:
    """The diamond with either engine (modules scheduler and rules), and outputs of the
    scheduler's pipelines and job_messages."""
    return (
        call("scheduler", hcl(DIAMOND), source)
        + call("rules", hcl(DIAMOND), source, schedule_engine="rules")
        + 'output "pipelines" {\n  value = module.scheduler.pipelines\n}\n'
        + 'output "bodies" {\n  value     = module.scheduler.job_messages\n  sensitive = true\n}\n'
    )


#: A step of 200 characters, 40 times after one root: a root message over 8192 characters.
LONG: dict[str, dict[str, Any]] = {
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

#: The jobs of module calls a plan refuses, by call. Those of pipeline_jobs and steps fail
#: var.jobs's validations; the others pass them and fail the graph's checks (the output's and the
#: schedules' preconditions).
REFUSED: dict[str, dict[str, dict[str, Any]]] = {
    "pipeline_jobs": {
        "a": {"schedule_expression": "rate(1 day)", "command": "x"},
        "b": {"after": ["a", "nope"], "command": "x", "on_failure": ["gone"]},
        "both": {"schedule_expression": "rate(1 day)", "after": ["a"], "command": "x"},
        "f": {"after": ["a"], "command": "x", "on_failure": ["a"]},
        "lost": {"command": "x"},
        "zoned": {"after": ["a"], "command": "x", "schedule_expression_timezone": "UTC"},
    },
    "cycle": {
        "a": {"schedule_expression": "rate(1 day)", "command": "x"},
        "b": {"after": ["a", "d"], "command": "x"},
        "c": {"after": ["b"], "command": "x"},
        "d": {"after": ["c"], "command": "x"},
        # A cycle no scheduled job leads to, and a job after it.
        "p": {"after": ["q"], "command": "x"},
        "q": {"after": ["p"], "command": "x"},
        "r": {"after": ["q"], "command": "x"},
    },
    "roots": {
        "a": {"schedule_expression": "rate(1 day)", "command": "x"},
        "x": {"schedule_expression": "rate(1 hour)", "command": "x"},
        "d": {"after": ["a", "x"], "command": "x"},
    },
    "big": {
        "a": {"schedule_expression": "rate(1 day)", "command": "x"},
        **{f"s{n}": {"after": ["a"], "command": "x"} for n in range(MAX_STEPS)},
    },
    "long": LONG,
    "steps": {
        "a": {"schedule_expression": "rate(1 day)", "command": "x"},
        # At the limits, and accepted: 2048 bytes of UTF-8, and Go's longest duration.
        "edge": {"after": ["a"], "command": "x", "event_id": "\u00e9" * 1024},
        "most": {"after": ["a"], "command": "x", "timeout": "2562047h47m16.854775807s"},
        **BAD_STEPS,
    },
}
