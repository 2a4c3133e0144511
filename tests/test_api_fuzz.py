"""The HTTP API fuzzed by schemathesis against a live `sqsjkr web` on moto: no answer is a 5xx,
and every answer (status, content type, headers, body) matches the OpenAPI document.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api_fleet import TOKENS, Served, aws_environment, serve_api, tokens_file
from tests.web_fleet import WebFleet, make_fleet, module_env

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
#: Examples per route: about 25 routes, each call a few ms against moto.
EXAMPLES = 12


@pytest.fixture(scope="module")
def served(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("api-fuzz")
    with module_env(moto_endpoint):
        fleet: WebFleet = make_fleet(directory)
    args = ("--api-tokens", str(tokens_file(directory)))
    with serve_api(fleet, aws_environment(moto_endpoint), directory, *args) as s:
        yield s


@pytest.fixture(scope="module")
def api_schema(served: Served) -> Any:
    return schemathesis.openapi.from_url(served.url + "api/v1/openapi.json")


@pytest.mark.slow
def test_no_answer_is_a_5xx_and_every_answer_matches_the_document(api_schema: Any) -> None:
    failed: dict[str, str] = {}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 20, "the document lost its routes"
    for operation in operations:
        try:
            _fuzz(operation)
        except Exception as exc:  # every route's failure, not the first one alone
            failed[operation.label] = str(exc)[:2000]
    assert not failed, "\n\n".join(f"{label}:\n{why}" for label, why in failed.items())


def _fuzz(operation: Any) -> None:
    headers = {"Authorization": f"Bearer {TOKENS['all'][0]}"}

    @given(case=operation.as_strategy())
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    def calls(case: Any) -> None:
        if operation.path.endswith("/wait"):
            # A long poll of a job no daemon runs lasts its whole timeout: keep each one short.
            case.query = {**(case.query or {}), "timeout": 0.2}
        case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

    calls()
