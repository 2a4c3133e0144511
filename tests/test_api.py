"""The HTTP API under /api/v1 against a live `sqsjkr web` on moto: the contract, tokens and scopes,
submit and poll (with a real daemon), pages, actions audited as the token, and the API off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests

from sqsjkr.api.app import document
from sqsjkr.api.slots import MAX_WAITS, RETRY_AFTER, WAITS_PER_TOKEN, WaitRefused, WaitSlots
from sqsjkr.api.tokens import (
    FAILURE_WINDOW,
    FAILURES_ALLOWED,
    MAX_AUTHORIZATION,
    Tokens,
    Unauthorized,
)
from sqsjkr.backends.pipeline import DynamoPipelines
from sqsjkr.commands.dashboard import listening
from sqsjkr.commands.options import load
from sqsjkr.contract.pipeline import PipelineRun, parse_pipeline
from sqsjkr.contract.run import RunOutcome
from sqsjkr.contract.tokens import Token, read_tokens, token_digest
from sqsjkr.errors import ConfigError
from tests.api_fleet import TOKENS, Served, aws_environment, serve_api, tokens_file
from tests.conftest import wait_until
from tests.test_firings import create_schedule
from tests.test_pipelines import diamond
from tests.test_web import form_token, take_message
from tests.web_fleet import WebFleet, make_fleet, module_env, record

PROBLEM = "application/problem+json"


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("api"))


@pytest.fixture(scope="module")
def served(
    fleet: WebFleet, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("api-web")
    tokens = tokens_file(directory)
    with serve_api(
        fleet,
        aws_environment(moto_endpoint),
        directory,
        "--api-tokens",
        str(tokens),
        "--enable-actions",
    ) as s:
        yield s


def problem(response: requests.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == PROBLEM
    body = response.json()
    assert body["status"] == status and body["code"] == code, body
    assert body["detail"] and body["title"]
    return body


def test_the_openapi_document_is_valid_3_1_with_the_three_fixed_routes(served: Served) -> None:
    doc = served.call("GET", "api/v1/openapi.json", token=None).json()
    # Imported here: the validator costs every xdist worker's collection half a second.
    from openapi_spec_validator import validate

    validate(doc)
    assert doc["openapi"].startswith("3.1")
    assert "post" in doc["paths"]["/api/v1/jobs"]
    assert "get" in doc["paths"]["/api/v1/jobs/{message_id}"]
    wait = doc["paths"]["/api/v1/jobs/{message_id}/wait"]["get"]
    assert {p["name"] for p in wait["parameters"]} >= {"message_id", "timeout"}
    answered = doc["paths"]["/api/v1/jobs"]["post"]["responses"]
    assert {"200", "201", "400", "401", "403"} <= set(answered)
    assert PROBLEM in answered["403"]["content"]


def test_without_a_token_or_with_an_unknown_one_the_api_answers_401(served: Served) -> None:
    refused = served.call("GET", "api/v1/events", token=None)
    problem(refused, 401, "unauthorized")
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    assert refused.headers["Cache-Control"] == "no-store"
    assert refused.headers["X-Content-Type-Options"] == "nosniff"
    bad = served.call("GET", "api/v1/events", token=None, headers={"Authorization": "Bearer no"})
    problem(bad, 401, "unauthorized")
    basic = served.call(
        "GET", "api/v1/events", token=None, headers={"Authorization": "Basic dXNlcjpwYXNz"}
    )
    problem(basic, 401, "unauthorized")


def test_every_route_but_the_contract_refuses_a_request_without_a_token(served: Served) -> None:
    routes = [
        (method, re.sub(r"\{\w+\}", "x", path))
        for path, methods in document()["paths"].items()
        for method in methods
    ]
    assert len(routes) >= 20
    for method, path in routes:
        refused = served.call(method.upper(), path.lstrip("/"), token=None, json={})
        problem(refused, 401, "unauthorized")


def test_the_dashboards_session_cookie_does_not_reach_the_api(
    served: Served, fleet: WebFleet
) -> None:
    fleet.history().finished(record("cookie-event", time.time(), RunOutcome.SUCCEEDED))
    session = requests.Session()
    page = session.get(served.url + "event?id=cookie-event", timeout=30)
    assert page.status_code == 200 and session.cookies, "the dashboard set no session cookie"
    token = form_token(page.text)
    for path in ("api/v1/events", "api/v1/pauses"):
        answer = session.post(served.url + path, data={"csrf_token": token}, timeout=30)
        assert answer.status_code in (401, 405), answer.text
    problem(session.get(served.url + "api/v1/events", timeout=30), 401, "unauthorized")
    paused = session.post(served.url + "api/v1/pauses", json={}, headers={"X-CSRFToken": token})
    problem(paused, 401, "unauthorized")


def test_a_token_without_the_scope_gets_403_and_nothing_is_done(
    served: Served, fleet: WebFleet
) -> None:
    event = f"scoped-{uuid.uuid4().hex[:6]}"
    sent = served.call(
        "POST", "api/v1/jobs", token="reader", json={"job": {"command": "true", "event_id": event}}
    )
    assert problem(sent, 403, "scope-missing")["detail"].startswith("token 'reader' has no 'send'")
    paused = served.call("POST", "api/v1/pauses", token="sender", json={"events": [event]})
    problem(paused, 403, "scope-missing")
    # The scope is checked before the request is read: no hint of what a right body would be.
    malformed = served.call("POST", "api/v1/jobs", token="reader", json={"jobs": 1})
    problem(malformed, 403, "scope-missing")
    bad_pause = served.call("POST", "api/v1/pauses", token="sender", json={"events": 5})
    problem(bad_pause, 403, "scope-missing")
    audit = served.call("GET", "api/v1/audit", token="reader").json()["items"]
    assert not [entry for entry in audit if entry["target"] == event]
    queued = fleet.sqs.get_queue_attributes(
        QueueUrl=fleet.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]["ApproximateNumberOfMessages"]
    shown = served.call("GET", "api/v1/events", token="reader").json()["items"]
    assert event not in {e["event_id"] for e in shown} and queued == "0"


def test_a_submit_answers_201_then_200_for_an_identical_unfinished_job(served: Served) -> None:
    body = {
        "job": {"command": "echo twice", "event_id": "api-unique"},
        "unique_key": "nightly-42",
        "unique_for": "10m",
    }
    first = served.call("POST", "api/v1/jobs", token="sender", json=body)
    assert first.status_code == 201, first.text
    assert first.json()["deduplicated"] is False and first.json()["event_id"] == "api-unique"
    again = served.call("POST", "api/v1/jobs", token="sender", json=body)
    assert again.status_code == 200, again.text
    assert again.json() == {**first.json(), "deduplicated": True}
    state = served.call("GET", f"api/v1/jobs/{first.json()['message_id']}", token="reader")
    assert state.json()["phase"] == "queued" and state.json()["traced"] is False


def test_a_job_the_daemon_would_refuse_is_400_naming_the_field(served: Served) -> None:
    refused = served.call(
        "POST", "api/v1/jobs", json={"job": {"command": "x", "life_time": "soon"}}
    )
    assert "life_time" in problem(refused, 400, "invalid-job")["detail"]
    malformed = served.call("POST", "api/v1/jobs", json={"jobs": {}})
    assert "job" in problem(malformed, 400, "invalid-request")["detail"]
    window = served.call("POST", "api/v1/jobs", json={"job": {"command": "x"}, "unique_for": "1y"})
    assert problem(window, 400, "invalid-duration")["detail"].startswith("unique_for: ")
    text = served.call("POST", "api/v1/jobs", data="command=x")
    assert "JSON object" in problem(text, 400, "invalid-request")["detail"]
    huge = {"job": {"command": "echo " + "x" * 1024 * 1024}}
    problem(served.call("POST", "api/v1/jobs", json=huge), 413, "http-413")
    method = served.call("DELETE", "api/v1/jobs")
    problem(method, 405, "http-405")
    assert "POST" in method.headers["Allow"]


def test_a_submit_may_not_set_a_runs_fields_nor_carry_a_malformed_step(served: Served) -> None:
    steps = {"a": {}, "b": {"after": ["a"], "job": {"command": "x", "timeout": "soon"}}}
    root = {"command": "true", "pipeline": {"name": "p", "root": "a", "steps": steps}}
    bad_step = served.call("POST", "api/v1/jobs", token="sender", json={"job": root})
    detail = problem(bad_step, 400, "invalid-job")["detail"]
    assert 'field "pipeline.steps.b.job.timeout"' in str(detail)
    steps["b"]["job"] = {"command": "x"}
    firing = {"time": "2030-01-15T01:00:00Z", "schedule": "nightly"}
    minted = (("firing", firing), ("step", "b"), ("pipeline_key", "forged"), ("rerun", "r1"))
    for field, value in minted:
        job = {**root, field: value}
        refused = served.call("POST", "api/v1/jobs", token="sender", json={"job": job})
        detail = problem(refused, 400, "invalid-job")["detail"]
        assert f'field "{field}": is set by the fleet\'s daemons, not by a sender' in str(detail)


def test_wait_answers_after_its_timeout_and_once_the_job_has_ended(
    served: Served, fleet: WebFleet, start_daemon
) -> None:
    made = served.call(
        "POST", "api/v1/jobs", json={"job": {"command": "echo waited", "event_id": "api-wait"}}
    )
    message_id = made.json()["message_id"]
    early = served.call("GET", f"api/v1/jobs/{message_id}/wait", params={"timeout": 0.5})
    assert early.status_code == 200 and early.json()["phase"] == "queued"
    daemon = start_daemon("run", "-c", str(fleet.conf))
    ended = served.call(
        "GET", f"api/v1/jobs/{message_id}/wait", params={"timeout": 60, "event_id": "api-wait"}
    ).json()
    daemon.stop()
    assert ended["phase"] == "ended" and ended["outcome"] == "succeeded", ended
    assert "waited" in ended["record"]["output"]
    run = served.call("GET", f"api/v1/events/api-wait/runs/{message_id}", token="reader").json()
    assert run["outcome"] == "succeeded" and "waited" in run["output"]
    too_long = served.call("GET", f"api/v1/jobs/{message_id}/wait", params={"timeout": 61})
    assert "timeout" in problem(too_long, 400, "invalid-request")["detail"]


def held_wait(served: Served, path: str, token: str, timeout: float) -> requests.Response:
    """A wait that holds one of token's slots until it answers: called again while refused (a
    probe of the test's may hold the slot for a moment)."""

    def served_wait() -> list[requests.Response]:
        answer = served.call("GET", path, token=token, params={"timeout": timeout})
        return [] if answer.status_code == 429 else [answer]

    (answer,) = wait_until(served_wait, 30, f"a wait slot for {token}")
    return answer  # type: ignore[no-any-return]


def refused_wait(served: Served, path: str, token: str) -> list[requests.Response]:
    """A wait's answer when it was refused (in a list: a 4xx Response is falsy), else none."""
    answer = served.call("GET", path, token=token, params={"timeout": 0})
    return [answer] if answer.status_code == 429 else []


def test_wait_slots_are_bounded_per_token_and_in_all(served: Served) -> None:
    """Each wait holds one of the listener's threads: a token holds WAITS_PER_TOKEN at most, so
    that another token is still served, and the listener MAX_WAITS in all; each refusal is 429
    with Retry-After (no daemon runs the job: the holders wait their whole timeout)."""
    # An id of SQS's shape: one of another shape is unknown, and answered at once.
    path = f"api/v1/jobs/{uuid.uuid4()}/wait"
    tokens = ["reader", "sender"]
    assert len(tokens) * WAITS_PER_TOKEN == MAX_WAITS
    with ThreadPoolExecutor(MAX_WAITS) as pool:
        held = []
        for token in tokens:
            held += [pool.submit(held_wait, served, path, token, 6) for _ in range(WAITS_PER_TOKEN)]
            (own,) = wait_until(
                lambda token=token: refused_wait(served, path, token), 10, f"{token}'s share"
            )
        (full,) = wait_until(lambda: refused_wait(served, path, "actor"), 10, "the listener full")
        answers = [call.result() for call in held]
    assert [a.status_code for a in answers] == [200] * MAX_WAITS
    for answer, says in ((own, "as many as one token may"), (full, "waits at once")):
        assert says in problem(answer, 429, "too-many-waits")["detail"]
        assert answer.headers["Retry-After"] == str(RETRY_AFTER)
    # Every slot was given back.
    assert served.call("GET", path, token="reader", params={"timeout": 0}).status_code == 200


def test_one_token_cannot_hold_every_wait_slot() -> None:
    slots = WaitSlots(total=3, per_token=2)
    first, second = slots.take("a"), slots.take("a")
    with pytest.raises(WaitRefused, match="as many as one token may"):
        slots.take("a")
    other = slots.take("b")
    with pytest.raises(WaitRefused, match="3 waits at once"):
        slots.take("c")
    first.release()
    first.release()  # once only: a slot is not given back twice
    assert slots.held("a") == 1
    third = slots.take("c")
    for slot in (second, other, third):
        slot.release()
    assert slots.held("a") == slots.held("b") == slots.held("c") == 0


def test_a_cursor_walks_a_list_page_by_page(served: Served, fleet: WebFleet) -> None:
    event = f"paged-{uuid.uuid4().hex[:6]}"
    now = time.time()
    for n in range(5):
        fleet.history().finished(record(event, now - 100 + n, RunOutcome.SUCCEEDED))
    seen: list[str] = []
    cursor = None
    for _ in range(5):
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = served.call("GET", f"api/v1/events/{event}/runs", params=params).json()
        seen += [run["message_id"] for run in page["items"]]
        cursor = page["next"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5
    bad = served.call("GET", f"api/v1/events/{event}/runs", params={"cursor": "not-ours"})
    problem(bad, 400, "bad-cursor")
    twice = served.call("GET", f"api/v1/events/{event}/runs", params={"cursor": ["", "a"]})
    assert "cursor: given 2 times" in problem(twice, 400, "invalid-request")["detail"]


def test_actions_are_audited_as_the_tokens_name(served: Served, fleet: WebFleet) -> None:
    event = f"acted-{uuid.uuid4().hex[:6]}"
    create_schedule(fleet, event, "cron(0 * * * ? *)")
    paused = served.call(
        "POST", "api/v1/pauses", token="actor", json={"events": [event], "reason": "deploy"}
    )
    assert paused.status_code == 200 and paused.json()["pauses"][0]["by"] == "api:actor"
    resumed = served.call("POST", "api/v1/pauses/resume", token="actor", json={"events": [event]})
    assert [p["event_id"] for p in resumed.json()["pauses"]] == [event]
    nothing = served.call("POST", f"api/v1/events/{event}/kill", token="actor", json={})
    problem(nothing, 409, "nothing-to-do")
    ran = served.call("POST", f"api/v1/events/{event}/trigger", token="actor", json={})
    assert ran.status_code == 200 and ran.json()["queue"] == fleet.queue_name, ran.text
    routed = served.call(
        "POST",
        f"api/v1/events/{event}/route",
        token="actor",
        json={"queue": fleet.queue_name, "force": True},
    )
    assert routed.json()["queue"] == fleet.queue_name and routed.json()["by"] == "api:actor"
    cleared = served.call("POST", f"api/v1/events/{event}/route/clear", token="actor", json={})
    assert cleared.json()["queue"] is None, cleared.text
    job = {"job": {"command": "true", "event_id": event}}
    assert served.call("POST", "api/v1/jobs", token="sender", json=job).status_code == 201
    audit = served.call("GET", "api/v1/audit", token="reader").json()["items"]
    mine = sorted((e["action"], e["user"]) for e in audit if e["target"] == event)
    assert mine == [
        ("pause", "api:actor"),
        ("resume", "api:actor"),
        ("route", "api:actor"),  # the route made, then cleared
        ("route", "api:actor"),
        ("send", "api:sender"),
        ("trigger", "api:actor"),
    ], mine


def test_a_pipelines_failed_step_is_run_again_within_its_run_and_refusals_are_problems(
    served: Served, fleet: WebFleet
) -> None:
    prefix, key = f"api-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    pipeline = parse_pipeline(diamond(Path("/tmp/never"), prefix, c="true"))
    assert pipeline is not None
    store = DynamoPipelines(fleet.dynamodb, fleet.table, lives_seconds=3600)
    for step, ok in (("a", True), ("b", True), ("c", False)):
        store.step_ended(PipelineRun(pipeline, step, key), ok, time.time())
    path = f"api/v1/events/{prefix}-c/reruns"
    ran = served.call("POST", path, token="actor", json={"run": key, "reason": "fixed"})
    assert ran.status_code == 200, ran.text
    sent = ran.json()
    assert (sent["run"], sent["step"], sent["event_id"]) == (key, "c", f"{prefix}-c")
    assert sent["queue"] == fleet.queue_name and sent["firing"] is None
    assert sent["rerun"] is None  # its run never claimed it: sent as itself
    assert json.loads(take_message(fleet, sent["message_id"])["Body"])["pipeline_key"] == key
    again = {"run": key}
    problem(
        served.call("POST", f"api/v1/events/{prefix}-b/reruns", token="actor", json=again),
        409,
        "already-done",
    )
    missing = {"run": "no-such-run"}
    problem(served.call("POST", path, token="actor", json=missing), 404, "not-found")
    problem(served.call("POST", path, token="reader", json=again), 403, "scope-missing")


def test_an_unknown_event_is_a_404_problem(served: Served) -> None:
    problem(served.call("GET", "api/v1/events/no-such-event"), 404, "not-found")
    problem(served.call("GET", "api/v1/no-such-route"), 404, "http-404")


def test_without_api_tokens_every_api_route_is_404(fleet: WebFleet, moto_endpoint: str) -> None:
    with module_env(moto_endpoint):
        off = listening(load(str(fleet.conf)), port=0)
    off.start()
    try:
        for path in ("api/v1/openapi.json", "api/v1/jobs/x", "api/v1"):
            problem(requests.get(off.url + path, timeout=30), 404, "api-off")
        assert requests.get(off.url, timeout=30).status_code == 200  # the dashboard is on
    finally:
        off.close()


def test_failed_token_checks_are_bounded_and_never_lock_a_right_token_out() -> None:
    now = [1000.0]
    tokens = Tokens({token_digest("good"): Token("ci", frozenset({"read"}))}, clock=lambda: now[0])
    for _ in range(FAILURES_ALLOWED):
        with pytest.raises(Unauthorized) as refused:
            tokens.check("Bearer guess")
        assert refused.value.status == 401
    with pytest.raises(Unauthorized) as bounded:
        tokens.check("Bearer another-guess")
    assert bounded.value.status == 429 and "Retry-After" in bounded.value.headers
    assert tokens.check("Bearer good").name == "ci"
    with pytest.raises(Unauthorized) as unread:
        tokens.check("Bearer " + "x" * (MAX_AUTHORIZATION + 1))
    assert unread.value.status == 429
    now[0] += FAILURE_WINDOW + 1
    with pytest.raises(Unauthorized) as forgotten:
        tokens.check("Bearer guess")
    assert forgotten.value.status == 401


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[tokens.ci]\nscopes = ['read']\n", "tokens.ci.sha256"),
        (f"[tokens.ci]\nsha256 = '{'a' * 64}'\nscopes = ['write']\n", "tokens.ci.scopes"),
        (
            f"[tokens.ci]\nsha256 = '{'a' * 64}'\nscopes = ['read']\nexpires = 1\n",
            "tokens.ci.expires",
        ),
        ("[tokens.'a b']\n", "a b"),
        # Matched whole: a name or a digest may not end in a newline (which "$" lets through).
        (f'[tokens."ci\\n"]\nsha256 = "{"a" * 64}"\nscopes = ["read"]\n', 'tokens."ci\\n"'),
        (f'[tokens.ci]\nsha256 = "{"a" * 64}\\n"\nscopes = ["read"]\n', "tokens.ci.sha256"),
        ("[users]\n", "users"),
        ("not toml", "tokens.toml"),
    ],
)
def test_a_bad_tokens_file_names_the_file_and_the_field(
    tmp_path: Path, text: str, named: str
) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as refused:
        read_tokens(str(path))
    assert str(path) in str(refused.value) and named in str(refused.value)


def test_sqsjkr_web_refuses_to_start_on_a_bad_tokens_file(
    cli, fleet: WebFleet, tmp_path: Path, aws_env
) -> None:
    bad = tmp_path / "tokens.toml"
    bad.write_text("[tokens.ci]\nsha256 = 'short'\nscopes = ['read']\n")
    result = cli("web", "-c", str(fleet.conf), "--listen", "127.0.0.1:0", "--api-tokens", str(bad))
    assert result.returncode != 0 and "tokens.ci.sha256" in result.stderr


def test_token_new_prints_a_token_that_the_lines_it_prints_accept(cli, tmp_path: Path) -> None:
    result = cli("token", "new", "deploy-bot", "--scope", "read,send")
    assert result.returncode == 0, result.stderr
    secret = result.stderr.strip()
    path = tmp_path / "tokens.toml"
    path.write_text(result.stdout)
    assert secret not in path.read_text()
    found = Tokens(read_tokens(str(path))).check(f"Bearer {secret}")
    assert found == Token("deploy-bot", frozenset({"read", "send"}))
    refused = cli("token", "new", "ci", "--scope", "read,admin")
    assert refused.returncode == 2 and "--scope" in refused.stderr
    # A '.' would make [tokens.deploy.bot] two nested tables, a file it could not read back.
    dotted = cli("token", "new", "deploy.bot")
    assert dotted.returncode == 2 and 'NAME "deploy.bot"' in dotted.stderr
    ending = cli("token", "new", "deploy-bot\n")
    assert ending.returncode == 2 and 'NAME "deploy-bot\\n"' in ending.stderr


def test_the_docs_curl_submit_and_poll_runs_as_written_and_backs_off_on_429(
    served: Served, fleet: WebFleet, start_daemon: Any, tmp_path: Path
) -> None:
    """The docs' loop, run while its token's wait slots are all held (by waits of a job that
    ends once the daemon starts): its first wait is 429, it waits out Retry-After and goes on."""
    text = (Path(__file__).parent.parent / "docs" / "api.md").read_text()
    block = re.search(r"## Submit and poll.*?```bash\n(.*?)```", text, re.S)
    assert block, "docs/api.md lost its curl example"
    held = served.call(
        "POST", "api/v1/jobs", token="sender", json={"job": {"command": "true"}}
    ).json()["message_id"]
    env = {
        **os.environ,
        "SQSJKR_API": served.url + "api/v1",
        "SQSJKR_TOKEN": TOKENS["sender"][0],
    }
    errors = tmp_path / "stderr"
    with ThreadPoolExecutor(WAITS_PER_TOKEN) as pool:
        wait = f"api/v1/jobs/{held}/wait"
        holders = [
            pool.submit(held_wait, served, wait, "sender", 60) for _ in range(WAITS_PER_TOKEN)
        ]
        wait_until(lambda: refused_wait(served, wait, "sender"), 30, "the sender's slots held")
        with errors.open("w") as stderr:
            loop = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", block[1]],
                env=env,
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
            try:
                wait_until(lambda: "busy:" in errors.read_text(), 30, "the loop's 429")
                daemon = start_daemon("run", "-c", str(fleet.conf))
                out, _ = loop.communicate(timeout=120)
            finally:
                loop.kill()
        daemon.stop()
        assert all(h.result().json()["phase"] == "ended" for h in holders)
    assert loop.returncode == 0, errors.read_text()
    assert out.strip() == "succeeded"
    assert f"busy: waiting {RETRY_AFTER}s" in errors.read_text()
    job = json.loads((tmp_path / "job.json").read_text())
    assert "hello from curl" in job["record"]["output"]


def test_the_committed_openapi_document_is_the_one_the_code_makes() -> None:
    committed = Path(__file__).parent.parent / "docs" / "reference" / "openapi.json"
    assert json.loads(committed.read_text()) == document(), (
        "docs/reference/openapi.json is stale: run `make openapi`"
    )
