"""The HTTP API fuzzed by schemathesis against a live `sqsjkr web` on moto: no answer is a 5xx,
every answer (status, content type, headers, body) matches the OpenAPI document, and a request the
document forbids (a field, a parameter, a body) is refused.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sqsjkr.backends.live import DynamoLive, LiveOutput
from sqsjkr.contract.run import RunOutcome
from tests.api_fleet import TOKENS, Served, aws_environment, serve_api, tokens_file
from tests.test_firings import create_schedule
from tests.web_fleet import WebFleet, dead_letter, make_fleet, module_env, record, seed

if TYPE_CHECKING:
    from schemathesis import GenerationMode


def checks() -> list[Any]:
    """What every answer must pass. schemathesis is imported here, not at the top: importing it
    costs each xdist worker's collection a second, and one worker runs these tests."""
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    return [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]


#: Examples per route of valid requests, and of requests the document forbids.
EXAMPLES = 10
NEGATIVE_EXAMPLES = 3
#: The dead-letter routes peek at the dead-letter queue, a second a call: fewer examples.
PEEKING_EXAMPLES = 3
#: Ids the seeded fleet holds, which half the examples use so that the routes answer 2xx too.
KNOWN = {"event_id": "hourly", "message_id": "m-fuzzed", "lock_id": "hourly"}
JOB = {"command": "true", "event_id": "fuzzed"}


@pytest.fixture(scope="module")
def served(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("api-fuzz")
    with module_env(moto_endpoint):
        fleet: WebFleet = make_fleet(directory)
        now = time.time()
        seed(fleet, now)
        fleet.history().finished(
            record("hourly", now - 60, RunOutcome.SUCCEEDED, message_id="m-fuzzed")
        )
        live = LiveOutput("hourly", "m-fuzzed", "so far\n", 7, now, "host-a")
        DynamoLive(fleet.dynamodb, fleet.table).write(live)
        create_schedule(fleet, "hourly", "cron(0 * * * ? *)")
        dead_letter(fleet, {"command": "false", "event_id": "hourly"})
    # No --enable-actions: that is the dashboard's buttons; the act scope alone lets a token act.
    args = ("--api-tokens", str(tokens_file(directory)))
    with serve_api(fleet, aws_environment(moto_endpoint), directory, *args) as s:
        yield s


@pytest.fixture(scope="module")
def api_schema(served: Served) -> Any:
    import schemathesis

    return schemathesis.openapi.from_url(served.url + "api/v1/openapi.json")


@pytest.mark.slow
def test_no_answer_is_a_5xx_and_every_answer_matches_the_document(api_schema: Any) -> None:
    failed: dict[str, str] = {}
    answered: Counter[tuple[str, int]] = Counter()
    from schemathesis import GenerationMode

    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20, "the document lost its routes"
    for operation in operations:
        for mode in GenerationMode:
            try:
                _fuzz(operation, mode, answered)
            except Exception as exc:  # every route's failure, not the first one alone
                failed[f"{operation.label} ({mode.value})"] = str(exc)[:2000]
    assert not failed, "\n\n".join(f"{label}:\n{why}" for label, why in failed.items())
    # The known ids reach past the checks: each kind of answer was seen, not refusals alone.
    assert {200, 201, 400, 404, 409} <= {status for _, status in answered}, answered
    # A token of the act scope acts without --enable-actions (the dashboard's buttons).
    assert answered["POST /api/v1/events/{event_id}/trigger", 200], answered


def _fuzz(operation: Any, mode: GenerationMode, answered: Counter[tuple[str, int]]) -> None:
    headers = {"Authorization": f"Bearer {TOKENS['all'][0]}"}
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi.checks import negative_data_rejection

    negative = mode is GenerationMode.NEGATIVE
    waits = operation.path.endswith("/wait")
    if negative and waits:
        return  # its timeout is set below, which would make a forbidden request allowed
    examples = NEGATIVE_EXAMPLES if negative else EXAMPLES
    if "/dead-letters" in operation.path:
        examples = min(examples, PEEKING_EXAMPLES)
    answer_checks = [*checks(), negative_data_rejection] if negative else checks()

    @given(case=operation.as_strategy(generation_mode=mode), known=st.booleans())
    @settings(
        max_examples=examples,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        # The same examples on every run: a failure in `make test` is one to reproduce, not luck.
        derandomize=True,
        database=None,
    )
    def calls(case: Any, known: bool) -> None:
        if waits:
            # A long poll of a job no daemon runs lasts its whole timeout: keep each one short.
            case.query = {**(case.query or {}), "timeout": 0.2}
        if known and not negative:
            _use_known(case)
        response = case.call(headers=headers, timeout=30)
        answered[operation.label, response.status_code] += 1
        case.validate_response(response, checks=answer_checks, headers=headers)

    calls()


def _use_known(case: Any) -> None:
    """The case aimed at what the fleet holds: its ids, and a job the daemon would take."""
    case.path_parameters = {
        name: KNOWN.get(name, value) for name, value in case.path_parameters.items()
    }
    if case.operation.label == "POST /api/v1/jobs":
        case.body = {"job": JOB, "unique_key": "fuzzed", "unique_for": "10m"}


@pytest.mark.slow
def test_the_linked_operations_hold_in_sequence(api_schema: Any) -> None:
    """schemathesis's stateful phase over the document's links (submit -> state -> wait): each
    step's answer matches the document, and an id a 201 named leads to a job the next step finds."""
    headers = {"Authorization": f"Bearer {TOKENS['all'][0]}"}
    machine = api_schema.as_state_machine()

    class Workflow(machine):  # type: ignore[misc,valid-type]
        def before_call(self, case: Any) -> None:
            if case.operation.path.endswith("/wait"):
                case.query = {**(case.query or {}), "timeout": 0.2}
            if case.operation.label == "POST /api/v1/jobs":
                case.body = {"job": JOB}

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers, "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=checks(), headers=headers)

    Workflow.run(
        settings=settings(
            max_examples=8,
            stateful_step_count=4,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
    )
