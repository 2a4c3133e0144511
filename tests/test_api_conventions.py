"""The HTTP API's conventions against a live `sqsjkr web` on moto: ids bounded as the daemon bounds
them, an action whole or not at all, strict types, and what a token may reach and learn.
"""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.api.app import document
from sqsjkr.api.models import MAX_ID
from sqsjkr.local.endpoint import LOCAL_ACCOUNT
from tests.api_fleet import TOKENS, Served, aws_environment, serve_api, tokens_file
from tests.conftest import REGION
from tests.test_api import problem
from tests.web_fleet import WebFleet, make_fleet, module_env


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("api-conv"))


@pytest.fixture(scope="module")
def served(
    fleet: WebFleet, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("api-conv-web")
    args = ("--api-tokens", str(tokens_file(directory)))
    with serve_api(fleet, aws_environment(moto_endpoint), directory, *args) as s:
        yield s


def audited(served: Served, prefix: str) -> list[dict[str, Any]]:
    entries = served.call("GET", "api/v1/audit", token="reader", params={"limit": 500})
    return [e for e in entries.json()["items"] if str(e["target"]).startswith(prefix)]


def paused_ids(fleet: WebFleet) -> set[str]:
    item = fleet.pauses_item() or {}
    return {name.removeprefix("Pause:") for name in item if name.startswith("Pause:")}


def test_an_id_longer_than_the_daemon_takes_is_refused_before_anything_is_done(
    served: Served, fleet: WebFleet
) -> None:
    prefix = f"long-{uuid.uuid4().hex[:6]}-"
    for long_id in (prefix + "x" * 9000, prefix + "é" * MAX_ID):
        events = [prefix + "short", long_id]
        refused = served.call("POST", "api/v1/pauses", token="actor", json={"events": events})
        assert "events.1" in problem(refused, 400, "invalid-request")["detail"]
        for path in (f"api/v1/events/{long_id}", f"api/v1/jobs/{long_id}"):
            problem(served.call("GET", path, token="reader"), 400, "invalid-request")
        unlock = served.call("POST", f"api/v1/locks/{long_id}/unlock", token="actor", json={})
        problem(unlock, 400, "invalid-request")
    nul = served.call("POST", "api/v1/pauses", token="actor", json={"events": [prefix + "\0"]})
    problem(nul, 400, "invalid-request")
    assert audited(served, prefix) == []
    assert not {p for p in paused_ids(fleet) if p.startswith(prefix)}


def test_a_pause_of_many_events_is_made_whole_or_audited_as_refused_and_leaves_nothing(
    served: Served, fleet: WebFleet
) -> None:
    """A pause too large for the controls item (100 events of the longest ids, each with the
    longest reason) pauses none of them, and each audit item says it was refused."""
    prefix = f"many-{uuid.uuid4().hex[:6]}-"
    events = [f"{prefix}{n:03d}".ljust(MAX_ID, "e") for n in range(100)]
    body = {"events": events, "reason": "r" * 1000}
    refused = served.call("POST", "api/v1/pauses", token="actor", json=body)
    assert "nothing written" in problem(refused, 400, "bad-request")["detail"]
    assert not {p for p in paused_ids(fleet) if p.startswith(prefix)}
    entries = audited(served, prefix)
    assert len(entries) == len(events)
    assert {(e["action"], e["detail"].split(":")[0]) for e in entries} == {
        ("pause (refused)", "not paused")
    }
    # A pause that fits is made whole, each event audited as paused.
    made = served.call("POST", "api/v1/pauses", token="actor", json={"events": events[:3]})
    assert made.status_code == 200, made.text
    assert set(events[:3]) <= paused_ids(fleet)
    done = [e for e in audited(served, prefix) if e["action"] == "pause"]
    assert sorted(e["target"] for e in done) == events[:3]
    served.call("POST", "api/v1/pauses/resume", token="actor", json={"events": events[:3]})


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("api/v1/jobs", {"job": {"command": "true"}, "delay": True}, "delay"),
        ("api/v1/jobs", {"job": {"command": "true"}, "delay": "5"}, "delay"),
        ("api/v1/jobs", {"job": {"command": "true"}, "delay": 5.0}, "delay"),
        ("api/v1/locks/strict-lock/unlock", {"force": 0}, "force"),
        ("api/v1/events/strict/firings", {"at": "2030-01-01T00:00:00Z", "force": "true"}, "force"),
        ("api/v1/events/strict/route", {"queue": "q", "force": 1}, "force"),
    ],
)
def test_a_body_field_of_the_wrong_type_is_refused_not_coerced(
    served: Served, path: str, body: dict[str, Any], field: str
) -> None:
    refused = served.call("POST", path, json=body)
    assert problem(refused, 400, "invalid-request")["detail"].startswith(f"{field}: ")


def queued(fleet: WebFleet, url: str) -> int:
    counts = fleet.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(counts["ApproximateNumberOfMessages"])


def test_a_send_reaches_the_fleets_job_queues_alone(served: Served, fleet: WebFleet) -> None:
    """Not the dead-letter queue nor another queue of the account: those are answered as a queue
    that does not exist; a queue a route names is the fleet's."""
    dlq = f"{fleet.queue_name}-dlq"
    other = f"other-{uuid.uuid4().hex[:8]}"
    fleet.sqs.create_queue(QueueName=other)
    before = queued(fleet, fleet.dlq_url)
    job = {"command": "true", "event_id": "confined"}
    details = []
    for queue in (dlq, other, f"none-{uuid.uuid4().hex[:8]}"):
        sent = served.call("POST", "api/v1/jobs", token="sender", json={"job": job, "queue": queue})
        details.append(problem(sent, 404, "not-found")["detail"].replace(queue, "Q"))
    assert len(set(details)) == 1, details
    assert queued(fleet, fleet.dlq_url) == before
    routed = served.call(
        "POST",
        "api/v1/events/confined/route",
        token="actor",
        json={"queue": other, "force": True},
    )
    assert routed.status_code == 200, routed.text
    sent = served.call("POST", "api/v1/jobs", token="sender", json={"job": job, "queue": other})
    assert sent.status_code == 201, sent.text
    served.call("POST", "api/v1/events/confined/route/clear", token="actor", json={})


def test_a_read_token_learns_no_queue_that_is_not_the_fleets(
    served: Served, fleet: WebFleet
) -> None:
    other = f"exists-{uuid.uuid4().hex[:8]}"
    fleet.sqs.create_queue(QueueName=other)
    answers = set()
    for queue in (f"{fleet.queue_name}-dlq", other, f"none-{uuid.uuid4().hex[:8]}"):
        for path in ("api/v1/dead-letters", "api/v1/dead-letters/some-id"):
            read = served.call("GET", path, token="reader", params={"queue": queue})
            answers.add((path, read.status_code, read.text.replace(queue, "Q")))
    assert len(answers) == 2, answers  # one answer per route, whatever the queue
    assert {status for _, status, _ in answers} == {404}


def test_problems_name_no_account_region_table_or_schedule_group(
    served: Served, fleet: WebFleet
) -> None:
    where = (LOCAL_ACCOUNT, REGION, fleet.table)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    routed = served.call(
        "POST", "api/v1/events/anywhere/route", token="actor", json={"queue": missing}
    )
    detail = problem(routed, 404, "not-found")["detail"]
    assert missing in detail and not [w for w in where if w in detail], detail
    unscheduled = served.call("POST", "api/v1/events/unscheduled/trigger", token="actor", json={})
    assert unscheduled.status_code >= 400, unscheduled.text
    detail = unscheduled.json()["detail"]
    assert "unscheduled" in detail and not [w for w in where if w in detail], detail


def test_an_id_no_queue_can_hold_is_unknown_and_the_docs_poll_loop_stops_on_it(
    served: Served, tmp_path: Path
) -> None:
    state = served.call("GET", "api/v1/jobs/a-mistyped-id", token="reader").json()
    assert (state["phase"], state["traced"]) == ("unknown", False), state
    # An id of SQS's shape may be a job not taken yet: still queued.
    shaped = served.call("GET", f"api/v1/jobs/{uuid.uuid4()}", token="reader").json()
    assert (shaped["phase"], shaped["traced"]) == ("queued", False), shaped
    text = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    block = re.search(r"## Submit and poll.*?```bash\n(.*?)```", text, re.S)
    assert block, "docs/api.md lost its curl example"
    # The loop as written, its submit's id mistyped: it ends at its first call.
    script = block[1].replace("id=$(", "id=a-mistyped-id\n: $(", 1)
    env = {**os.environ, "SQSJKR_API": served.url + "api/v1", "SQSJKR_TOKEN": TOKENS["sender"][0]}
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=25,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "unknown"


def test_an_idempotency_key_answers_a_retry_as_the_first_and_refuses_another_body(
    served: Served, fleet: WebFleet
) -> None:
    key = {"Idempotency-Key": f'"{uuid.uuid4()}"'}
    body = {"job": {"command": "echo once", "event_id": "idempotent"}}
    before = queued(fleet, fleet.queue_url)
    first = served.call("POST", "api/v1/jobs", token="sender", json=body, headers=key)
    assert first.status_code == 201, first.text
    again = served.call("POST", "api/v1/jobs", token="sender", json=body, headers=key)
    assert (again.status_code, again.json()) == (201, first.json())
    assert queued(fleet, fleet.queue_url) == before + 1
    other = {"job": {"command": "echo twice", "event_id": "idempotent"}}
    reused = served.call("POST", "api/v1/jobs", token="sender", json=other, headers=key)
    assert "Idempotency-Key" in problem(reused, 422, "idempotency-key-reused")["detail"]
    # Each token's keys are its own: another's same key is another request.
    theirs = served.call("POST", "api/v1/jobs", token="all", json=body, headers=key)
    assert theirs.status_code == 201 and theirs.json() != first.json(), theirs.text
    assert queued(fleet, fleet.queue_url) == before + 2


def test_a_unique_key_is_the_tokens_own(served: Served) -> None:
    """Another token that guesses a token's unique_key does not suppress its job."""
    unique = {"unique_key": f"tenant-{uuid.uuid4().hex[:6]}", "unique_for": "10m"}
    mine = {"job": {"command": "echo mine", "event_id": "keyed"}, **unique}
    sent = served.call("POST", "api/v1/jobs", token="sender", json=mine)
    assert sent.status_code == 201, sent.text
    theirs = {"job": {"command": "echo theirs", "event_id": "keyed"}, **unique}
    guessed = served.call("POST", "api/v1/jobs", token="all", json=theirs)
    assert guessed.status_code == 201 and guessed.json()["deduplicated"] is False, guessed.text
    assert guessed.json()["message_id"] != sent.json()["message_id"]
    repeat = served.call("POST", "api/v1/jobs", token="sender", json=mine)
    assert repeat.status_code == 200 and repeat.json() == {**sent.json(), "deduplicated": True}


def test_the_document_types_a_job_links_submit_to_state_and_wait_and_names_its_bearer() -> None:
    doc = document()
    # Imported here: the validator costs every xdist worker's collection half a second.
    from openapi_spec_validator import validate

    validate(doc)
    job = doc["components"]["schemas"]["Submit"]["properties"]["job"]
    table = (Path(__file__).parent.parent / "docs" / "messages.md").read_text()
    rows = re.search(r"\| field \| type \| meaning \|\n\|---\|---\|---\|\n(.*?)\n\n", table, re.S)
    assert rows, "docs/messages.md lost its table of fields"
    listed = set(re.findall(r"`(\w+)`", "".join(r.split("|")[1] for r in rows[1].splitlines())))
    assert listed >= {"command", "event_id", "retries", "firing"}, listed
    assert set(job["properties"]) == listed, set(job["properties"]) ^ listed
    assert job["additionalProperties"] is True  # the parser ignores a field it does not know
    operations = {
        op["operationId"]: (path, op)
        for path, methods in doc["paths"].items()
        for op in methods.values()
    }
    submitted = doc["paths"]["/api/v1/jobs"]["post"]["responses"]
    for status in ("200", "201"):
        links = submitted[status]["links"]
        targets = {operations[link["operationId"]][0] for link in links.values()}
        assert targets == {"/api/v1/jobs/{message_id}", "/api/v1/jobs/{message_id}/wait"}
        for link in links.values():
            _, target = operations[link["operationId"]]
            taken = {f"{p['in']}.{p['name']}" for p in target["parameters"]}
            assert set(link["parameters"]) <= taken, (link, taken)
    state = doc["paths"]["/api/v1/jobs/{message_id}"]["get"]["responses"]["200"]
    assert operations[state["links"]["wait"]["operationId"]][0].endswith("/wait")
    headers = doc["paths"]["/api/v1/jobs"]["post"]["parameters"]
    assert [p["name"] for p in headers if p["in"] == "header"] == ["Idempotency-Key"]
    scheme = doc["components"]["securitySchemes"]["Authorization"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert "Authorization: Bearer" in scheme["description"]


def test_a_201_says_where_the_job_is_and_a_read_answers_304_to_its_etag(served: Served) -> None:
    sent = served.call("POST", "api/v1/jobs", token="sender", json={"job": {"command": "true"}})
    assert sent.status_code == 201, sent.text
    where = sent.headers["Location"]
    assert where == f"/api/v1/jobs/{sent.json()['message_id']}"
    first = served.call("GET", where.lstrip("/"), token="reader")
    assert first.status_code == 200 and first.headers["ETag"]
    again = served.call(
        "GET", where.lstrip("/"), token="reader", headers={"If-None-Match": first.headers["ETag"]}
    )
    assert again.status_code == 304 and again.content == b""
    stale = served.call("GET", where.lstrip("/"), token="reader", headers={"If-None-Match": '"x"'})
    assert stale.status_code == 200 and stale.json() == first.json()


def test_nothing_to_do_is_one_answer_across_kill_resume_and_redrive(served: Served) -> None:
    nothing = f"idle-{uuid.uuid4().hex[:6]}"
    calls = (
        ("api/v1/pauses/resume", {"events": [nothing]}),
        (f"api/v1/events/{nothing}/kill", {}),
        ("api/v1/dead-letters/redrive", {"message_ids": [str(uuid.uuid4())]}),
    )
    for path, body in calls:
        answer = served.call("POST", path, token="actor", json=body)
        assert "nothing changed" in problem(answer, 409, "nothing-to-do")["detail"], path
