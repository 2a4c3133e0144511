"""A pipeline's steps checked where it enters: each step's job parsed as the daemon will parse
its message, the fields a step's job may not carry, and step names matched whole.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sqsjkr.contract.job import parse_job
from sqsjkr.contract.pipeline import parse_pipeline, step_fields
from sqsjkr.errors import InvalidJobError


def root(**step_job: Any) -> dict[str, Any]:
    """A root a whose one step b runs after it, b's job the command x with step_job's fields."""
    return {
        "command": "a",
        "pipeline": {
            "name": "p",
            "root": "a",
            "steps": {"a": {}, "b": {"after": ["a"], "job": {"command": "x", **step_job}}},
        },
    }


def refusal(body: dict[str, Any], **parsing: Any) -> str:
    with pytest.raises(InvalidJobError) as refused:
        parse_job(json.dumps(body), message_id="m", sent_at=0.0, **parsing)
    return str(refused.value)


@pytest.mark.parametrize(
    ("step_job", "field", "says"),
    [
        ({"timeout": "soon"}, "timeout", 'invalid duration "soon"'),
        ({"life_time": -1}, "life_time", "must not be negative"),
        ({"retries": 101}, "retries", "must be between 0 and 100"),
        ({"concurrency_limit": 2}, "concurrency_limit", 'needs a "concurrency_key"'),
        ({"envs": {"A=B": "1"}}, "envs.A=B", 'must not contain "="'),
        ({"lock_id": "x\u0000"}, "lock_id", "NUL"),
        ({"command": ""}, "command", "must not be empty"),
        ({"http": {"url": "ftp://h/"}}, "http", 'give either "command" or "http"'),
    ],
)
def test_a_malformed_steps_job_is_refused_with_its_root_naming_its_place(
    step_job: dict[str, Any], field: str, says: str
) -> None:
    said = refusal(root(**step_job))
    assert said.startswith(f'field "pipeline.steps.b.job.{field}": ') and says in said


def test_a_steps_http_call_is_held_to_the_daemons_allow_with_its_root() -> None:
    body = root()
    body["pipeline"]["steps"]["b"]["job"] = {"http": {"url": "http://10.0.0.1/run"}}
    allowed = parse_job(
        json.dumps(body), message_id="m", sent_at=0.0, http_allow=["http://10.0.0.1/"]
    )
    assert allowed.pipeline is not None
    said = refusal(body, http_allow=["http://127.0.0.1/"])
    assert said.startswith('field "pipeline.steps.b.job.http.url"'), said


#: What the daemon writes into a step's message (and a step has no schedule to catch up): a
#: step's job that carried one would forge it, or start a pipeline of its own.
DAEMONS_OWN = {
    "pipeline": root()["pipeline"],
    "step": "b",
    "pipeline_key": "forged",
    "firing": {"time": "2030-01-01T00:00:00Z", "schedule": "forged"},
    "catch_up": "6h",
}


@pytest.mark.parametrize("field", sorted(DAEMONS_OWN))
def test_a_steps_job_may_not_carry_what_the_daemon_writes_into_a_steps_message(
    field: str,
) -> None:
    said = refusal(root(**{field: DAEMONS_OWN[field]}))
    assert said.startswith(f'field "pipeline.steps.b.job.{field}": '), said


def test_a_step_message_the_daemon_sends_still_parses() -> None:
    pipeline = parse_pipeline(root(timeout="30s", envs={"A": "1"}))
    assert pipeline is not None
    message = step_fields(pipeline, "run-1", "b", None, "pipeline")
    job = parse_job(json.dumps(message), message_id="m2", sent_at=0.0)
    assert job.pipeline is not None and (job.pipeline.step, job.pipeline.key) == ("b", "run-1")
    assert job.timeout is not None and job.timeout.seconds == 30


@pytest.mark.parametrize("name", ["b\n", "\nb", "b\r", "b c", "", "x" * 63])
def test_a_step_name_is_matched_whole(name: str) -> None:
    body = root()
    body["pipeline"]["steps"][name] = body["pipeline"]["steps"].pop("b")
    assert refusal(body).startswith(f"field {json.dumps('pipeline.steps.' + name)}: ")
