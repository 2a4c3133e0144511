"""The HTTP API's lists against a live `sqsjkr web` on moto: each page starts where the last one
ended in the data, so items arriving between two pages move none; cursors fit one list alone;
readers of the dead letters at once see the same letters.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from sqsjkr.backends.audit import AuditEntry, DynamoAudit
from sqsjkr.backends.locks import DynamoLocker
from sqsjkr.contract.run import RunOutcome
from tests.api_fleet import Served, aws_environment, serve_api, tokens_file
from tests.test_api import problem
from tests.web_fleet import WebFleet, dead_letter, make_fleet, module_env, record


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("api-pages"))


@pytest.fixture(scope="module")
def served(
    fleet: WebFleet, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("api-pages-web")
    tokens = tokens_file(directory)
    with serve_api(
        fleet, aws_environment(moto_endpoint), directory, "--api-tokens", str(tokens)
    ) as s:
        yield s


def walk(
    served: Served, path: str, key: str, between: Callable[[], None], **params: Any
) -> list[str]:
    """Every item's key, page by page (2 a page), between() called after the first page."""
    seen: list[str] = []
    cursor = None
    for n in range(50):
        asked = {**params, "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = served.call("GET", path, token="reader", params=asked)
        assert page.status_code == 200, page.text
        seen += [item[key] for item in page.json()["items"]]
        cursor = page.json()["next"]
        if n == 0:
            between()
        if cursor is None:
            return seen
    raise AssertionError(f"{path}: no last page")


def audit(fleet: WebFleet, target: str, at: float) -> None:
    entry = AuditEntry(at, "pause", target, "paged", "tester@host", "arn:aws:iam::1:user/t")
    DynamoAudit(fleet.dynamodb, fleet.table).write(entry)


def test_audit_pages_neither_repeat_nor_skip_when_entries_arrive_between_them(
    served: Served, fleet: WebFleet
) -> None:
    now = time.time()
    for n in range(5):
        audit(fleet, f"before-{n}", now - 60 + n)
    whole = served.call("GET", "api/v1/audit", token="reader", params={"limit": 500}).json()
    assert whole["next"] is None
    before = [entry["target"] for entry in whole["items"]]

    def two_new() -> None:
        audit(fleet, "new-1", time.time())
        audit(fleet, "new-2", time.time())

    seen = walk(served, "api/v1/audit", "target", two_new)
    # Newest first: the new entries come before the first page's, and move none after it.
    assert seen == before, seen


def test_run_pages_neither_repeat_nor_skip_when_runs_end_between_them(
    served: Served, fleet: WebFleet
) -> None:
    event = f"paged-{uuid.uuid4().hex[:6]}"
    now = time.time()
    for n in range(5):
        fleet.history().finished(record(event, now - 100 + n, RunOutcome.SUCCEEDED))
    before = [
        run["message_id"]
        for run in served.call("GET", f"api/v1/events/{event}/runs").json()["items"]
    ]

    def two_ended() -> None:
        for n in range(2):
            fleet.history().finished(record(event, time.time() + n, RunOutcome.SUCCEEDED))

    seen = walk(served, f"api/v1/events/{event}/runs", "message_id", two_ended)
    assert len(before) == 5 and seen == before, seen


def test_a_cursor_answers_only_the_route_and_filters_that_gave_it(
    served: Served, fleet: WebFleet
) -> None:
    event = f"bound-{uuid.uuid4().hex[:6]}"
    now = time.time()
    for n in range(3):
        fleet.history().finished(record(event, now - 100 + n, RunOutcome.ERRORED))
        audit(fleet, f"bound-{n}", now - 30 + n)
    runs = f"api/v1/events/{event}/runs"
    runs_cursor = served.call("GET", runs, params={"limit": 1}).json()["next"]
    audit_cursor = served.call("GET", "api/v1/audit", params={"limit": 1}).json()["next"]
    assert runs_cursor and audit_cursor
    foreign = [
        ("api/v1/events", {"cursor": audit_cursor}),
        ("api/v1/events/another-event/runs", {"cursor": runs_cursor}),
        (runs, {"cursor": runs_cursor, "failed": "true"}),
        ("api/v1/audit", {"cursor": audit_cursor, "since": 3600}),
        ("api/v1/locks", {"cursor": runs_cursor}),
    ]
    for path, params in foreign:
        refused = served.call("GET", path, params=params)
        detail = problem(refused, 400, "bad-cursor")["detail"]
        assert str(detail).startswith("cursor: was given by another list"), (path, detail)
    # The right route and filters take it, whatever the page's size.
    again = served.call("GET", runs, params={"cursor": runs_cursor, "limit": 5})
    assert again.status_code == 200 and len(again.json()["items"]) == 2
    # Its position altered (the list's own binding kept): refused, not read as another position.
    data = json.loads(base64.urlsafe_b64decode(runs_cursor + "=" * (-len(runs_cursor) % 4)))
    for altered in ([5], ["not-a-run"], [1.5, "x"]):
        text = json.dumps({**data, "p": altered}).encode()
        forged = base64.urlsafe_b64encode(text).decode().rstrip("=")
        refused = served.call("GET", runs, params={"cursor": forged})
        assert str(problem(refused, 400, "bad-cursor")["detail"]).startswith("cursor: ")


def test_locks_are_a_paged_list_of_each_holding(served: Served, fleet: WebFleet) -> None:
    locker = DynamoLocker(fleet.dynamodb, fleet.table, lease_seconds=600)
    taken = sorted(f"paged-lock-{n}" for n in range(3))
    for lock_id in taken:
        locker.try_lock(lock_id, "locked-event")
    seen = walk(served, "api/v1/locks", "lock_id", lambda: None)
    assert seen == taken
    first = served.call("GET", "api/v1/locks", params={"limit": 2}).json()
    assert [item["kind"] for item in first["items"]] == ["lock", "lock"] and first["next"]


def test_readers_of_the_dead_letters_at_once_see_the_same_letters(
    served: Served, fleet: WebFleet
) -> None:
    """SQS has no true peek: a read hides what it holds from another. Reads at once take turns
    in the listener and share one read, which raised each letter's receive count once."""
    sent = {dead_letter(fleet, {"command": f"echo {n}", "event_id": "dead"}) for n in range(3)}
    with ThreadPoolExecutor(3) as pool:
        reads = [pool.submit(served.call, "GET", "api/v1/dead-letters") for _ in range(3)]
        answers = [read.result() for read in reads]
    assert [a.status_code for a in answers] == [200] * 3, answers[0].text
    first = answers[0].json()["items"]
    assert {letter["message_id"] for letter in first} == sent
    assert all(a.json()["items"] == first for a in answers[1:])
    assert {letter["receive_count"] for letter in first} == {1}
