"""The dashboard over HTTP: real waitress servers on free ports against a seeded fleet on moto.

Escaping of hostile ids and output, masked secrets, headers, the Host check, CSRF, read-only
refusals, each kind of sign-in, and the actions' effects and audit entries.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import bcrypt
import boto3
import pytest
import requests

from sqsjkr.backends.audit import DynamoAudit
from sqsjkr.backends.dedupe import DynamoDedupe
from sqsjkr.backends.locks import LOCK_TYPE
from sqsjkr.backends.sqs import TRIGGERED_BY_ATTRIBUTE
from sqsjkr.commands.options import load
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.errors import RequestError
from sqsjkr.fleet.pause import parse_until
from sqsjkr.web import views
from sqsjkr.web.cache import Cache
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.server import Dashboard
from tests.conftest import REGION, Daemon, wait_until
from tests.test_schedules import backdate
from tests.web_fleet import (
    HOSTILE_ID,
    WebFleet,
    dead_letter,
    make_fleet,
    module_env,
    record,
    seed,
)


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        made = make_fleet(tmp_path_factory.mktemp("web"))
        yield made


@pytest.fixture(scope="module")
def seeded(fleet: WebFleet) -> dict[str, str]:
    # A disabled schedule of an event that ran, before any dashboard reads the schedules.
    schedule_of(fleet, "weekly-off", '{"event_id": "weekly-off", "command": "true"}', False)
    fleet.history().finished(record("weekly-off", time.time() - 7200, RunOutcome.SUCCEEDED))
    return seed(fleet, time.time())


@pytest.fixture(scope="module")
def read_only(fleet: WebFleet, seeded: dict[str, str]) -> Iterator[Dashboard]:
    served = fleet.serve()
    yield served
    served.close()


@pytest.fixture(scope="module")
def with_actions(fleet: WebFleet, seeded: dict[str, str]) -> Iterator[Dashboard]:
    served = fleet.serve(enable_actions=True)
    yield served
    served.close()


def get(served: Dashboard, path: str, **kwargs: Any) -> requests.Response:
    return requests.get(served.url.rstrip("/") + path, timeout=30, **kwargs)


def form_token(page: str) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert match, page
    return match[1]


# -- reading ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/events", "/running", "/daemons", "/locks", "/dead-letters", "/audit"]
)
def test_each_page_is_served_with_its_security_headers(read_only: Dashboard, path: str) -> None:
    response = get(read_only, path)
    assert response.status_code == 200, response.text
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-store"
    assert "<script>" not in re.sub(
        r'<script src="/static/[^"]+" defer></script>', "", response.text
    )


def test_hostile_event_id_and_output_are_escaped(
    read_only: Dashboard, seeded: dict[str, str]
) -> None:
    pages = [
        get(read_only, "/").text,
        get(read_only, "/events").text,
        get(read_only, "/event", params={"id": HOSTILE_ID}).text,
        get(read_only, "/run", params={"event": HOSTILE_ID, "key": seeded["hostile_key"]}).text,
    ]
    for page in pages:
        assert HOSTILE_ID not in page
        assert "alert(" not in page or "&lt;script&gt;alert(" in page
        assert "<script>alert" not in page
    run_page = pages[3]
    assert "red text" in run_page and "cleared" in run_page
    assert "\x1b" not in run_page
    assert "&lt;/pre&gt;&lt;script&gt;alert(&#39;output&#39;)&lt;/script&gt;" in run_page


def test_run_downloads_as_text_without_colour_codes(
    read_only: Dashboard, seeded: dict[str, str]
) -> None:
    response = get(
        read_only, "/run.txt", params={"event": HOSTILE_ID, "key": seeded["hostile_key"]}
    )
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.headers["Content-Disposition"].startswith("attachment;")
    assert response.text.startswith("red text\n</pre><script>")
    assert "\x1b" not in response.text
    assert response.headers["Cache-Control"] == "no-store"


def test_overview_counts_failing_and_stale_and_lists_them_worst_first(read_only: Dashboard) -> None:
    page = get(read_only, "/").text
    assert re.search(r"<b>1</b> failing", page)
    assert re.search(r"<b>1</b> stale", page)
    attention = page.split("Events that need someone")[1]
    assert "&lt;script&gt;alert(&#34;id&#34;)" in attention  # the failing one
    assert "stale run on host-b" in attention
    assert "hourly" not in attention


def test_events_filter_by_state_and_text_from_the_query_string(read_only: Dashboard) -> None:
    failing = get(read_only, "/events", params={"state": "failing"}).text
    assert "hourly" not in failing and "&lt;script&gt;" in failing
    found = get(read_only, "/events", params={"q": "hour"}).text
    assert ">hourly</a>" in found and "&lt;script&gt;" not in found
    # The strip links each cell to its run's permalink.
    assert found.count('<a class="cell succeeded"') == 6


def test_event_runs_are_paged_newest_first(read_only: Dashboard, fleet: WebFleet) -> None:
    now = time.time()
    history = fleet.history()
    for minute in range(30):
        history.finished(record("paged", now - 3600 + minute * 60, RunOutcome.SUCCEEDED))
    first = get(read_only, "/event", params={"id": "paged"}).text
    runs = first.split('<table class="runs">')[1].split("</table>")[0]
    assert runs.count('href="/run?event=paged') == 25
    older = re.search(r'href="(/event\?id=paged&amp;before=[^"]+)">older runs', first)
    assert older, first
    second = get(read_only, older[1].replace("&amp;", "&")).text
    runs = second.split('<table class="runs">')[1].split("</table>")[0]
    assert runs.count('href="/run?event=paged') == 5
    assert 'data-chart="{&#34;delay&#34;: [' in first


def test_overview_says_what_failed_where_with_a_link_and_strips_have_a_legend(
    read_only: Dashboard, seeded: dict[str, str]
) -> None:
    page = get(read_only, "/").text
    why = page.split('<td class="why">')[1].split("</td>")[0]
    assert "1 failure in a row" in why
    assert 'href="/run?event=' in why and seeded["hostile_key"].replace("#", "%23") in why
    assert '<span class="outcome errored">errored</span>' in why and "on host-a" in why
    assert "exit code 1" in why and "<code>bellcleared</code>" in why  # its last line, plain
    assert re.search(r"<time datetime=[^>]+>\d{4}-\d\d-\d\dT[\d:]+[+-]\d\d:\d\d</time>", why)
    for path in ("/", "/events", "/event?id=hourly"):
        assert 'class="legend' in get(read_only, path).text, path


def test_run_page_headline_then_output_then_fields_grouped_in_words(
    read_only: Dashboard, seeded: dict[str, str]
) -> None:
    page = get(read_only, "/run", params={"event": HOSTILE_ID, "key": seeded["hostile_key"]}).text
    headline = page.split('<p class="headline">')[1].split("</p>")[0]
    for part in ("errored", "exit code 1", "10.0s", "on host-a", "<time", "not triggered"):
        assert part in headline, part
    assert page.index('<pre class="output">') < page.index("<h2>Timing</h2>")
    assert page.index("<h2>Timing</h2>") < page.index("<h2>Placement</h2>")
    assert page.index("<h2>Placement</h2>") < page.index("<h2>The job</h2>")
    assert "<th>final (settles its message)</th><td>yes</td>" in page
    assert "True" not in page and "None" not in page
    assert not re.search(r"\b1\d{9}(\.\d+)?\b", page)  # no unix times


def test_a_disabled_schedule_is_marked_on_the_events_list_and_its_event(
    read_only: Dashboard,
) -> None:
    events = get(read_only, "/events", params={"q": "weekly-off"}).text
    row = events.split(">weekly-off</a>")[1].split("</tr>")[0]
    assert '<span class="disabled">disabled</span>' in row and "never: disabled" in row
    hourly = get(read_only, "/events", params={"q": "hourly"}).text
    assert "disabled" not in hourly.split(">hourly</a>")[1].split("</tr>")[0]
    event = get(read_only, "/event", params={"id": "weekly-off"}).text
    schedule = event.split("<h2>Schedule</h2>")[1].split("</table>")[0]
    assert '<span class="disabled">disabled</span>' in schedule and "never: disabled" in schedule


def test_an_event_that_has_not_ended_a_run_shows_the_lock_its_run_holds(
    read_only: Dashboard, fleet: WebFleet
) -> None:
    claim = DynamoDedupe(fleet.dynamodb, fleet.table, retention_seconds=3600, lease_seconds=600)
    taken = claim.claim("m-web-locked")
    assert taken.lease is not None
    now = time.time()
    start = RunStart(
        "locked-web", "m-web-locked", "host-l", taken.lease.owner, now, now, "sleep 1", "lk-web"
    )
    fleet.history().started(start)
    fleet.dynamodb.put_item(
        TableName=fleet.table,
        Item={
            "Id": {"S": "lk-web"},
            "Type": {"S": LOCK_TYPE},
            "EventId": {"S": "locked-web"},
            "Owner": {"S": taken.lease.owner},
            "LeaseUntil": {"N": str(now + 600)},
        },
    )

    def lock_line() -> str | None:
        page = get(read_only, "/event", params={"id": "locked-web"})
        return page.text.split("<dt>Lock</dt>")[1] if page.status_code == 200 else None

    shown = wait_until(lock_line, what="the event's page")
    assert shown.startswith(f"<dd><code>lk-web</code>: held by {taken.lease.owner}")


def test_an_event_page_is_one_read_header_strip_table_and_chart_agree(
    fleet: WebFleet, seeded: dict[str, str]
) -> None:
    """The overview reads the summaries at 0 s and the event page at 3 s; a run ends; at 5.5 s
    the summaries are read again while a page read at 3 s would still be fresh."""
    ticks = [0.0]
    shown = Fleet(load(str(fleet.conf)), Cache(clock=lambda: ticks[0]))
    history = fleet.history()
    history.finished(record("one-read", time.time() - 60, RunOutcome.ERRORED))
    shown.summaries()
    ticks[0] = 3.0
    before = views.event_page(shown, "one-read", None)
    assert before is not None and len(before.runs) == 1
    history.finished(record("one-read", time.time() - 1, RunOutcome.ERRORED))
    ticks[0] = 5.5
    page = views.event_page(shown, "one-read", None)
    assert page is not None and page.row is not None
    assert page.row.summary.consecutive_failures == 2
    assert len(page.row.strip) == len(page.runs) == 2
    assert len(views.chart_data(page.runs, time.time())["t"]) == 2


def test_unknown_run_and_event_are_404(read_only: Dashboard) -> None:
    assert get(read_only, "/run", params={"event": "x", "key": "run#1#m"}).status_code == 404
    assert get(read_only, "/event", params={"id": "never-ran"}).status_code == 404
    assert get(read_only, "/event", params={"id": ""}).status_code == 404
    assert get(read_only, "/event", params={"id": "hourly", "before": "<x>"}).status_code == 404


def test_dead_letters_show_reasons_and_mask_secrets_and_environments(
    read_only: Dashboard, fleet: WebFleet
) -> None:
    body = {
        "event_id": "leaky",
        "command": "deploy",
        "envs": {"AWS_SECRET_ACCESS_KEY": "env-secret-value"},
        "http": {"headers": {"Authorization": "Bearer header-secret", "Accept": "json"}},
        "db_password": "password-secret",
        "apiToken": "token-secret",
    }
    dead_letter(fleet, body)

    # Another test's view may have left the page in the cache for a few seconds.
    def shown() -> str | None:
        text = get(read_only, "/dead-letters").text
        return text if "leaky" in text else None

    page = wait_until(shown, what="the dead letter on its page")
    for secret in ("env-secret-value", "header-secret", "password-secret", "token-secret"):
        assert secret not in page
    assert "(1 variable, not shown)" in page
    assert "&#34;Accept&#34;: &#34;••••••&#34;" in page  # every header's value is masked
    assert "moved by SQS after maxReceiveCount receives" in page


# -- refusals -----------------------------------------------------------------------------------


def test_a_host_header_not_its_own_is_refused(fleet: WebFleet, read_only: Dashboard) -> None:
    port = read_only.guard.port
    refused = get(read_only, "/", headers={"Host": f"rebound.example:{port}"})
    assert refused.status_code == 421
    assert "rebound.example" in refused.text and "--allowed-host" in refused.text
    assert get(read_only, "/", headers={"Host": f"localhost:{port}"}).status_code == 200
    allowed = fleet.serve(allowed_hosts=("dash.example",))
    try:
        assert get(allowed, "/", headers={"Host": "dash.example"}).status_code == 200
        assert get(allowed, "/", headers={"Host": "other.example"}).status_code == 421
    finally:
        allowed.close()


def test_read_only_dashboard_refuses_actions_and_changes_nothing(
    read_only: Dashboard, fleet: WebFleet
) -> None:
    before = fleet.pauses_item()
    for name in ("pause", "resume", "unlock", "redrive"):
        response = requests.post(
            read_only.url + f"actions/{name}",
            data={"scope": "all", "confirmed": "yes", "lock_id": "l"},
            timeout=30,
        )
        assert response.status_code == 403, name
        assert "--enable-actions" in response.text
    assert fleet.pauses_item() == before
    assert '<form class="action"' not in get(read_only, "/").text
    assert requests.get(read_only.url + "actions/pause", timeout=30).status_code == 405


def test_an_action_without_its_csrf_token_is_refused(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    before = fleet.pauses_item()
    response = requests.post(
        with_actions.url + "actions/pause",
        data={"scope": "all", "confirmed": "yes"},
        timeout=30,
    )
    assert response.status_code == 400
    assert "CSRF" in response.text
    # A token of another session (no cookie) is refused too.
    token = form_token(get(with_actions, "/").text)
    response = requests.post(
        with_actions.url + "actions/pause",
        data={"scope": "all", "confirmed": "yes", "csrf_token": token},
        timeout=30,
    )
    assert response.status_code == 400
    assert fleet.pauses_item() == before


def test_pause_and_resume_confirm_first_then_act_audited_as_the_web_user(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    session = requests.Session()
    token = form_token(session.get(with_actions.url + "event?id=hourly", timeout=30).text)
    form = {
        "csrf_token": token,
        "event_id": "hourly",
        "reason": "<b>maintenance</b>",
        "until": "2h",
    }
    form["next"] = "/event?id=hourly"
    confirm = session.post(with_actions.url + "actions/pause", data=form, timeout=30)
    assert confirm.status_code == 200 and "Confirm: Pause" in confirm.text
    assert "&lt;b&gt;maintenance&lt;/b&gt;" in confirm.text
    assert fleet.pauses_item() is None or "Pause:hourly" not in fleet.pauses_item()  # type: ignore[operator]
    form["csrf_token"] = form_token(confirm.text)
    done = session.post(
        with_actions.url + "actions/pause", data={**form, "confirmed": "yes"}, timeout=30
    )
    assert done.url.endswith("/event?id=hourly")
    assert "paused event &#34;hourly&#34;" in done.text
    assert "Pause:hourly" in (fleet.pauses_item() or {})
    entries = DynamoAudit(fleet.dynamodb, fleet.table).entries(time.time() - 60)
    pause = next(e for e in entries if e.action == "pause" and e.target == "hourly")
    assert pause.user.startswith("web:") and pause.reason == "<b>maintenance</b>"
    assert pause.identity.startswith("arn:aws:")
    token = form_token(done.text)
    resumed = session.post(
        with_actions.url + "actions/resume",
        data={"csrf_token": token, "event_id": "hourly", "confirmed": "yes", "next": "/"},
        timeout=30,
    )
    assert "resumed event &#34;hourly&#34;" in resumed.text
    assert "Pause:hourly" not in (fleet.pauses_item() or {})


def test_an_open_redirect_through_next_is_refused(with_actions: Dashboard) -> None:
    session = requests.Session()
    token = form_token(session.get(with_actions.url, timeout=30).text)
    done = session.post(
        with_actions.url + "actions/resume",
        data={
            "csrf_token": token,
            "event_id": "none",
            "confirmed": "yes",
            "next": "//evil.example/",
        },
        allow_redirects=False,
        timeout=30,
    )
    assert done.status_code == 303 and done.headers["Location"] == "/"


def test_a_live_lock_is_unlocked_only_after_typing_its_lock_id(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    item = {
        "Id": {"S": "nightly-lock"},
        "Type": {"S": "lock"},
        "EventId": {"S": "nightly"},
        "Owner": {"S": "host-c:3:z"},
        "LeaseUntil": {"N": str(time.time() + 3600)},
    }
    fleet.dynamodb.put_item(TableName=fleet.table, Item=item)
    session = requests.Session()
    page = session.get(with_actions.url + "locks", timeout=30).text
    assert "Live lease: type its lock_id" in page
    data = {"csrf_token": form_token(page), "lock_id": "nightly-lock", "confirmed": "yes"}
    refused = session.post(with_actions.url + "actions/unlock", data=data, timeout=30)
    assert "type its lock_id to remove a live lease" in refused.text
    key = {"Id": {"S": "nightly-lock"}, "Type": {"S": "lock"}}
    assert "Item" in fleet.dynamodb.get_item(TableName=fleet.table, Key=key)
    data["typed_lock_id"] = "nightly-lock"
    data["csrf_token"] = form_token(refused.text)
    done = session.post(with_actions.url + "actions/unlock", data=data, timeout=30)
    assert "removed lock &#34;nightly-lock&#34;" in done.text
    assert "Item" not in fleet.dynamodb.get_item(TableName=fleet.table, Key=key)


def test_redrive_moves_a_dead_letter_back(with_actions: Dashboard, fleet: WebFleet) -> None:
    message_id = dead_letter(fleet, {"event_id": "back", "command": "true"})
    session = requests.Session()
    page = session.get(with_actions.url + "dead-letters", timeout=30).text
    data = {
        "csrf_token": form_token(page),
        "queue": fleet.queue_name,
        "message_ids": message_id,
        "confirmed": "yes",
    }
    done = session.post(with_actions.url + "actions/redrive", data=data, timeout=30)
    assert f"moved {message_id}" in done.text
    received = fleet.sqs.receive_message(QueueUrl=fleet.queue_url, WaitTimeSeconds=1)
    assert any('"back"' in m["Body"] for m in received.get("Messages", []))


def act(
    served: Dashboard, session: requests.Session, name: str, page: str, data: dict[str, str]
) -> tuple[requests.Response, requests.Response]:
    """Post action name from page as its form does: the confirm step, then the action."""
    form = {"csrf_token": form_token(session.get(served.url + page[1:], timeout=30).text)}
    form.update(data, next=page)
    confirm = session.post(served.url + f"actions/{name}", data=form, timeout=30)
    assert confirm.status_code == 200 and "Confirm: " in confirm.text, confirm.text
    form["csrf_token"] = form_token(confirm.text)
    done = session.post(
        served.url + f"actions/{name}", data={**form, "confirmed": "yes"}, timeout=30
    )
    assert done.status_code == 200, done.text
    return confirm, done


def audit_of(fleet: WebFleet, action: str, target: str) -> list[Any]:
    entries = DynamoAudit(fleet.dynamodb, fleet.table).entries(time.time() - 120)
    return [e for e in entries if e.action == action and e.target == target]


def schedule_of(fleet: WebFleet, event_id: str, body: str, enabled: bool = True) -> None:
    """An EventBridge Scheduler schedule in the fleet's group that sends body to its queue."""
    arn = fleet.sqs.get_queue_attributes(QueueUrl=fleet.queue_url, AttributeNames=["QueueArn"])
    boto3.client("scheduler", region_name=REGION).create_schedule(
        Name=f"{event_id}-schedule",
        GroupName=fleet.table,
        State="ENABLED" if enabled else "DISABLED",
        ScheduleExpression="cron(0 3 * * ? *)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": arn["Attributes"]["QueueArn"],
            "RoleArn": "arn:aws:iam::123456789012:role/sqsjkr-scheduler",
            "Input": body,
        },
    )


def take_message(fleet: WebFleet, message_id: str) -> dict[str, Any]:
    """The message of that id, received from the fleet's queue and deleted."""

    def received() -> dict[str, Any] | None:
        messages = fleet.sqs.receive_message(
            QueueUrl=fleet.queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
        ).get("Messages", [])
        mine = next((m for m in messages if m["MessageId"] == message_id), None)
        if mine is not None:
            fleet.sqs.delete_message(QueueUrl=fleet.queue_url, ReceiptHandle=mine["ReceiptHandle"])
        return mine

    return wait_until(received, what=f"message {message_id} on the queue")  # type: ignore[no-any-return]


def test_run_now_confirms_then_sends_the_schedule_s_message_audited_as_the_web_user(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    body = '{"event_id": "nightly-web",  "command": "echo triggered"}'
    schedule_of(fleet, "nightly-web", body)
    fleet.history().finished(record("nightly-web", time.time() - 600, RunOutcome.SUCCEEDED))
    session = requests.Session()
    page = "/event?id=nightly-web"
    assert ">Run now</button>" in session.get(with_actions.url + page[1:], timeout=30).text
    confirm, done = act(with_actions, session, "trigger", page, {"event_id": "nightly-web"})
    assert done.url.endswith(page)
    sent = re.search(r"sent message (\S+) to queue " + re.escape(fleet.queue_name), done.text)
    assert sent, done.text
    [entry] = audit_of(fleet, "trigger", "nightly-web")
    assert entry.user.startswith("web:") and "to queue " + fleet.queue_name in entry.detail
    message = take_message(fleet, sent[1])
    # The schedule's message, marked triggered.
    assert json.loads(message["Body"]) == {**json.loads(body), "origin": "trigger"}
    by = message["MessageAttributes"][TRIGGERED_BY_ATTRIBUTE]["StringValue"]
    assert by == entry.user


def test_kill_confirms_then_marks_the_run_s_claim_audited_as_the_web_user(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    claim = DynamoDedupe(fleet.dynamodb, fleet.table, retention_seconds=3600, lease_seconds=600)
    taken = claim.claim("m-web-kill")
    assert taken.lease is not None
    now = time.time()
    start = RunStart("killable", "m-web-kill", "host-k", taken.lease.owner, now, now, "sleep 600")
    fleet.history().started(start)
    session = requests.Session()
    page = "/run?event=killable&message=m-web-kill"

    # Another test's view may have left the summaries in the cache for a few seconds.
    def shown_in_progress() -> str | None:
        text = session.get(with_actions.url + page[1:], timeout=30).text
        return text if "Run in progress of" in text else None

    shown = wait_until(shown_in_progress, what="the run in progress on its page")
    assert ">Kill</button>" in shown and "host-k" in shown
    for other in ("/running", "/event?id=killable"):
        form = get(with_actions, other).text.split('value="m-web-kill"')
        assert len(form) == 2 and ">Kill</button>" in form[1].split("</form>")[0], other
    confirm = session.post(
        with_actions.url + "actions/kill",
        data={"csrf_token": form_token(shown), "target": "m-web-kill", "reason": "", "next": page},
        timeout=30,
    )
    assert 'name="reason"' in confirm.text  # the confirm step asks why
    # and shows which run it stops: its event, host, start and command.
    run = confirm.text.split('<dl class="run-to-kill">')[1].split("</dl>")[0]
    for part in ("<code>killable</code>", "host-k", "<time", "<code>sleep 600</code>"):
        assert part in run, part
    assert "KillAt" not in (fleet.item("m-web-kill", "throttle") or {})
    done = act(with_actions, session, "kill", page, {"target": "m-web-kill", "reason": "hung"})[1]
    assert "kill requested: the run of event &#34;killable&#34;" in done.text
    item = fleet.item("m-web-kill", "throttle") or {}
    [entry] = audit_of(fleet, "kill", "killable")  # by its event, as the CLI's kill
    assert entry.detail == "message m-web-kill"
    assert item["KillBy"]["S"] == entry.user and entry.user.startswith("web:")
    again = act(with_actions, session, "kill", page, {"target": "m-web-kill"})[1]
    assert "kill already requested by web:" in again.text and "nothing changed" in again.text


def test_route_and_clear_confirm_then_act_audited_and_show_on_the_event_pages(
    with_actions: Dashboard, fleet: WebFleet
) -> None:
    session = requests.Session()
    page = "/event?id=hourly"
    event_page = get(with_actions, page).text
    assert "none: its jobs run from the queue they are sent to" in event_page
    # The refusal of a queue no live daemon serves can be overridden from the page too.
    assert '<input type="checkbox" name="force" value="yes">' in event_page
    other = fleet.queue_name + "-dlq"
    data = {"event_id": "hourly", "queue": other, "reason": "heavy <b>"}
    refused = act(with_actions, session, "route", page, data)[1]
    assert f"queue &#34;{other}&#34; is the dead-letter queue of queue " in refused.text
    assert audit_of(fleet, "route", "hourly") == []
    confirm, done = act(with_actions, session, "route", page, {**data, "force": "yes"})
    assert "routed event &#34;hourly&#34; to queue " + other in done.text
    assert "daemons honour it within 1m ([kicker] pause_refresh)" in done.text
    [entry] = audit_of(fleet, "route", "hourly")
    assert entry.user.startswith("web:") and entry.detail == f"forced: to queue {other}"
    facts = done.text.split('<dd class="route">')[1].split("</dd>")[0]
    assert f"routed to {other}" in facts and "heavy &lt;b&gt;" in facts
    events = get(with_actions, "/events", params={"q": "hourly"}).text
    assert '<span class="routed" title="routed by web:' in events
    missing = act(with_actions, session, "route", page, {**data, "queue": "no-such-queue"})[1]
    assert "queue &#34;no-such-queue&#34; does not exist" in missing.text
    cleared = act(with_actions, session, "route", page, {"event_id": "hourly", "clear": "yes"})[1]
    assert "cleared the route of event &#34;hourly&#34;" in cleared.text
    assert "before a `sqsjkr dlq redrive` of them" in cleared.text
    assert "none: its jobs run from the queue they are sent to" in cleared.text
    assert [e.detail for e in audit_of(fleet, "route", "hourly")].count("cleared") == 1


#: A job that prints a numbered, coloured line (with markup) every fifth of a second for a minute.
PRINTER = (
    "i=0; while [ $i -lt 300 ]; do i=$((i+1)); "
    "printf '\\033[32mline %d\\033[0m <b>\\n' \"$i\"; sleep 0.2; done"
)


def live_tail(served: Dashboard) -> str | None:
    """The live output the running page shows (None: none yet)."""
    page = get(served, "/running").text
    found = re.search(r'<pre class="output live"[^>]*>(.*?)</pre>', page, re.S)
    return found[1] if found and "line " in found[1] else None


@pytest.mark.slow  # a daemon's start, two of the cache's periods and a heartbeat: about 20 s
def test_running_page_shows_a_real_daemon_s_live_output_growing_then_kills_it(
    with_actions: Dashboard, fleet: WebFleet, tmp_path: Path
) -> None:
    daemon = Daemon(["run", "-c", str(fleet.conf)], {}, tmp_path)
    try:
        daemon.wait_for_log("receiving with")
        body = json.dumps({"event_id": "printer", "command": PRINTER})
        fleet.sqs.send_message(QueueUrl=fleet.queue_url, MessageBody=body)
        first = wait_until(lambda: live_tail(with_actions), 30, "a live tail")
        second = wait_until(
            lambda: (tail := live_tail(with_actions)) != first and tail, 30, "the tail grown"
        )
        numbers = [int(n) for n in re.findall(r"line (\d+)", f"{first}\n{second}")]
        assert max(numbers) > max(int(n) for n in re.findall(r"line (\d+)", first))
        assert "\x1b" not in second and "[32m" not in second
        assert "&lt;b&gt;" in second and "<b>" not in second
        page = get(with_actions, "/running").text
        row = page.split(">printer</a>")[1].split("</tr>")[0]
        assert "running" in row and "expired" not in row
        message_id = re.search(r"event=printer&amp;message=([^\"&]+)", page)
        assert message_id, page
        session = requests.Session()
        act(with_actions, session, "kill", "/running", {"target": message_id[1], "reason": "e"})

        def killed() -> RunRecord | None:
            runs = fleet.history().runs("printer", 5)
            return next((r for r in runs if r.outcome is RunOutcome.KILLED), None)

        assert wait_until(killed, 30, "the run killed").error
        daemon.stop()
    finally:
        daemon.kill()  # a failed test's job dies of SIGPIPE at its next line


@pytest.mark.parametrize("name", ["trigger", "kill", "route"])
def test_fleet_control_actions_are_refused_without_csrf_or_without_enable_actions(
    with_actions: Dashboard, read_only: Dashboard, fleet: WebFleet, name: str
) -> None:
    data = {
        "event_id": "refused",
        "target": "refused",
        "queue": fleet.queue_name,
        "confirmed": "yes",
    }
    refused = requests.post(with_actions.url + f"actions/{name}", data=data, timeout=30)
    assert refused.status_code == 400 and "CSRF" in refused.text
    off = requests.post(read_only.url + f"actions/{name}", data=data, timeout=30)
    assert off.status_code == 403 and "--enable-actions" in off.text
    assert audit_of(fleet, name, "refused") == []
    assert ">Run now</button>" not in get(read_only, "/event", params={"id": "hourly"}).text


# -- signing in ---------------------------------------------------------------------------------


def test_basic_auth_against_a_prometheus_web_config_file(fleet: WebFleet, tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    users = tmp_path / "web.yml"
    users.write_text(f"basic_auth_users:\n  alice: {hashed}\n")
    served = fleet.serve(basic_auth_file=str(users))
    try:
        anonymous = get(served, "/")
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic")
        assert get(served, "/", auth=("alice", "wrong")).status_code == 401
        assert get(served, "/", auth=("mallory", "s3cret")).status_code == 401
        signed_in = get(served, "/", auth=("alice", "s3cret"))
        assert signed_in.status_code == 200 and "alice" in signed_in.text
        garbled = get(served, "/", headers={"Authorization": "Basic !!"})
        assert garbled.status_code == 401
    finally:
        served.close()


def test_a_bad_basic_auth_file_is_named(fleet: WebFleet, tmp_path: Path) -> None:
    from sqsjkr.errors import ConfigError
    from sqsjkr.web.guard import load_users

    bad = tmp_path / "bad.yml"
    bad.write_text("basic_auth_users:\n  bob: plaintext\n")
    with pytest.raises(ConfigError, match=r"user \"bob\" has no bcrypt hash"):
        load_users(str(bad))
    bad.write_text("tls_server_config: {}\nbasic_auth_users: {}\n")
    with pytest.raises(ConfigError, match="tls_server_config"):
        load_users(str(bad))


def test_identity_header_is_trusted_from_the_trusted_proxy_only(fleet: WebFleet) -> None:
    trusting = fleet.serve(trusted_proxies=("127.0.0.1",), auth_header="X-Forwarded-User")
    distrusting = fleet.serve(trusted_proxies=("10.9.9.9",), auth_header="X-Forwarded-User")
    try:
        signed_in = get(trusting, "/", headers={"X-Forwarded-User": "carol@example.com"})
        assert signed_in.status_code == 200 and "carol@example.com" in signed_in.text
        assert get(trusting, "/").status_code == 401
        forged = get(distrusting, "/", headers={"X-Forwarded-User": "carol@example.com"})
        assert forged.status_code == 403 and "--trusted-proxy" in forged.text
    finally:
        trusting.close()
        distrusting.close()


def test_actions_need_a_user_when_the_listener_is_not_loopback(fleet: WebFleet) -> None:
    served = fleet.serve(host="0.0.0.0", enable_actions=True, allowed_hosts=("127.0.0.1",))
    try:
        session = requests.Session()
        token = form_token(session.get(served.url, timeout=30).text)
        refused = session.post(
            served.url + "actions/pause",
            data={"csrf_token": token, "scope": "all", "confirmed": "yes"},
            timeout=30,
        )
        assert refused.status_code == 403 and "signed-in user" in refused.text
        assert "Pause:*" not in (fleet.pauses_item() or {})
    finally:
        served.close()


# -- the command --------------------------------------------------------------------------------


def test_web_command_names_the_extra_when_flask_is_missing(tmp_path: Path) -> None:
    code = (
        "import sys; sys.modules['flask'] = None\n"
        "from sqsjkr.commands.cli import main\n"
        "main(['web', '--conf', 'none.toml'])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert "pip install 'sqsjkr[web]'" in result.stderr


def test_web_command_serves_and_prints_its_url(fleet: WebFleet, seeded: dict[str, str]) -> None:
    from tests.conftest import sqsjkr_argv

    proc = subprocess.Popen(
        sqsjkr_argv("web", "--conf", str(fleet.conf), "--listen", "127.0.0.1:0"),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        match = re.search(r"sqsjkr web: (http://127\.0\.0\.1:\d+/) \(read-only\)", line)
        assert match, line
        assert "hourly" in requests.get(match[1] + "events", timeout=30).text
    finally:
        proc.terminate()
        proc.wait(10)


def test_web_command_refuses_a_header_without_a_trusted_proxy() -> None:
    from sqsjkr.commands.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["web", "--auth-header", "X-User"])
    assert exit_.value.code == 2


def test_overview_reads_summaries_through_the_index_and_never_scans(
    fleet: WebFleet, seeded: dict[str, str]
) -> None:
    from sqsjkr.commands.options import load
    from sqsjkr.web.fleet import Fleet
    from sqsjkr.web.views import overview

    reads = Fleet(load(str(fleet.conf)))
    calls: list[str] = []
    reads.store.client.meta.events.register(
        "before-call.dynamodb", lambda model, **_: calls.append(model.name)
    )
    overview(reads)
    assert "Scan" not in calls
    assert calls.count("Query") <= 1 + 50  # the index, then runs within the view's budget
    assert calls.count("GetItem") == 1  # the controls item: its pauses and its routes
    calls.clear()
    overview(reads)  # within the cache's few seconds: no call at all
    assert calls == []


def test_the_command_list_and_the_daemon_do_not_import_the_web_extra() -> None:
    code = (
        "import sys\n"
        "from sqsjkr.commands.cli import cli\n"
        "for name in cli.list_commands(None):\n"
        "    cli.get_command(None, name)\n"
        "print(sorted(m for m in ('flask', 'waitress', 'bcrypt', 'flask_wtf') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


# -- firings ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ledgered(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fleet of its own with an hourly schedule made a day ago, whose last hour's firing ran:
    the day's other firings are missed (no daemon ran), and a dashboard on it."""
    with module_env(moto_endpoint):
        own = make_fleet(tmp_path_factory.mktemp("ledger"))
        arn = own.sqs.get_queue_attributes(QueueUrl=own.queue_url, AttributeNames=["QueueArn"])
        now = time.time()
        # An hourly schedule, and a daily one whose event never ran (it fired 2 to 3 hours ago).
        daily = f"cron(0 {(time.gmtime(now).tm_hour - 2) % 24} * * ? *)"
        for event_id, expression in [("ledgered", "cron(0 * * * ? *)"), ("never-ran", daily)]:
            boto3.client("scheduler", region_name=REGION).create_schedule(
                Name=f"sqsjkr-{event_id}",
                GroupName=own.table,
                ScheduleExpression=expression,
                FlexibleTimeWindow={"Mode": "OFF"},
                Target={
                    "Arn": arn["Attributes"]["QueueArn"],
                    "RoleArn": "arn:aws:iam::123456789012:role/sqsjkr-scheduler",
                    "Input": json.dumps({"event_id": event_id, "command": "true"}),
                },
            )
            backdate(own.table, f"sqsjkr-{event_id}", 2 * 86400)
        last = now - now % 3600
        ran = record("ledgered", last + 20, RunOutcome.SUCCEEDED, firing_at=last, origin="schedule")
        own.history().finished(ran)
        served = own.serve(enable_actions=True)
        yield own, served, last
        served.close()


def test_the_event_strip_draws_firings_and_the_overview_counts_missed_ones(
    ledgered: Any,
) -> None:
    _, served, last = ledgered
    page = get(served, "/event?id=ledgered").text
    strip = page.split('class="strip firings"')[1].split('<p class="legend')[0]
    # A day of hourly firings: the last one ran (a link to its run), the 23 before are missed.
    assert strip.count('class="cell missed"') == 23
    assert strip.count('class="cell succeeded"') == 1
    hour_before = datetime.fromtimestamp(last - 3600, timezone.utc).isoformat()
    assert f'title="{hour_before}: missed: no live daemon then"' in strip
    assert "missed (its reason in its title)" in page  # the legend's entry
    assert page.count("Run this firing") == 23
    overview = get(served, "/").text
    # 23 of the hourly one, and the daily one's firing: the card links to them all.
    assert re.search(r'href="/firings" title="[^"]*"><b>24</b> missed firings', overview)
    listed = get(served, "/firings").text
    assert listed.count("no live daemon then") == 24 and "never-ran" in listed


def test_a_scheduled_event_that_never_ran_has_its_page_row_and_verdict(ledgered: Any) -> None:
    _, served, _ = ledgered
    page = get(served, "/event?id=never-ran")
    assert page.status_code == 200
    assert "firing of never-ran has not run" in page.text
    assert 'class="cell missed"' in page.text and "Run this firing" in page.text
    assert 'href="/event?id=never-ran"' in get(served, "/events").text
    overview = get(served, "/").text
    attention = overview.split("need someone")[1]
    assert "never-ran" in attention and "has not run" in attention
    # The late card counts what the rows say is late.
    late = re.search(r"<b>(\d+)</b> late", overview)
    assert late is not None and int(late.group(1)) == attention.count("has not run") >= 1


def test_run_this_firing_sends_the_schedules_message_as_that_firing_audited(
    ledgered: Any,
) -> None:
    own, served, last = ledgered
    firing = datetime.fromtimestamp(last - 7200, timezone.utc).isoformat().replace("+00:00", "Z")
    session = requests.Session()
    confirm, done = act(
        served, session, "trigger_firing", "/event?id=ledgered",
        {"event_id": "ledgered", "firing": firing, "reason": "missed in the outage"},
    )  # fmt: skip
    assert f"Confirm: Run the {firing} firing of ledgered" in confirm.text  # in words
    assert f"as the {firing} firing" in done.text
    [message] = own.sqs.receive_message(QueueUrl=own.queue_url, WaitTimeSeconds=1)["Messages"]
    body = json.loads(message["Body"])
    assert body["firing"]["time"] == firing and body["origin"] == "trigger"
    # The schedule named as the Scheduler names it in a firing: by its ARN.
    assert body["firing"]["schedule"].startswith("arn:aws:scheduler:")
    assert body["firing"]["schedule"].endswith("/sqsjkr-ledgered")
    [entry] = audit_of(own, "trigger", "ledgered")
    assert entry.user.startswith("web:") and entry.reason == "missed in the outage"
    assert firing in entry.detail


def test_a_pause_until_the_fleet_would_refuse_is_refused_on_the_form_and_said_in_its_words(
    with_actions: Dashboard,
) -> None:
    session = requests.Session()
    page = session.get(with_actions.url + "event?id=hourly", timeout=30).text
    found = re.search(r'name="until"[^>]*pattern="([^"]*)"', page)
    assert found, "the until field has no pattern"
    pattern, now = html.unescape(found.group(1)), time.time()
    for good in ("2h", "90m", "1d", "1h30m", "2030-01-31 09:30", "2030-01-31T09:30:00+09:00"):
        assert re.fullmatch(pattern, good) and parse_until(good, now) > now, good
    for bad in ("soon", "tomorrow", "in 2h", "31/01/2030 09:30", "2h ago"):
        assert not re.fullmatch(pattern, bad), bad
        with pytest.raises(RequestError):
            parse_until(bad, now)
    # Sent all the same (no browser): refused, in the page's words, not the command line's.
    form = {"csrf_token": form_token(page), "event_id": "hourly", "until": "soon"}
    done = session.post(
        with_actions.url + "actions/pause",
        data={**form, "confirmed": "yes", "next": "/event?id=hourly"},
        timeout=30,
    )
    assert "until &#34;soon&#34;: give a time" in done.text, done.text
    assert "--until" not in done.text
