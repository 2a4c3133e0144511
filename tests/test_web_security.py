"""The dashboard under attack: refusals in the layout, secrets in dead letters, hostile bodies and
ids, the order of the request checks, who may act behind a proxy, sign-in, redirects and cookies.

One fleet on moto and a few dashboards serve the whole module; the sign-in bounds are checked in
this process (bcrypt's calls counted), and one check runs in Chromium.
"""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bcrypt
import pytest
import requests

from sqsjkr.backends.audit import AuditEntry, DynamoAudit
from sqsjkr.backends.history import run_type
from sqsjkr.contract.masking import MASK, secret_key, shown_body
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import quote
from sqsjkr.web.app import _local_path
from sqsjkr.web.guard import PASSWORD_CHECKS, Guard, Refused
from sqsjkr.web.server import Dashboard
from tests.conftest import run_main, wait_until
from tests.test_web import form_token, get
from tests.web_fleet import WebFleet, dead_letter, make_fleet, module_env, record

#: An event id that reads "bidi-exe.png" when its override is not escaped, and one with controls.
BIDI_ID = "bidi-\u202egnp.exe"
CONTROL_ID = "ctl-\x1b[2J\x07id"
#: What a dead-lettered HTTP job carries that no page may show.
SECRETS = (
    "userinfo-pass",
    "path-secret",
    "query-token",
    "client-secret-value",
    "authn-secret",
    "passphrase-secret",
    "bearer-secret",
    "dsn-secret",
    "attribute-secret",
)
LEAKY_HTTP_JOB = {
    "event_id": "leaky-http",
    "http": {
        "url": "https://ops:userinfo-pass@api.example.com/path-secret/hook?api_token=query-token",
        "method": "POST",
        "body": "client_secret=client-secret-value&grant_type=client_credentials",
        "headers": {"Authentication": "authn-secret", "X-Passphrase": "passphrase-secret"},
    },
    "bearer": "bearer-secret",
    "dsn": "postgres://app:dsn-secret@db.internal/app",
}


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("websec"))


@pytest.fixture(scope="module")
def seeded(fleet: WebFleet) -> dict[str, str]:
    """Runs and an audit entry of hostile ids; the run keys by event id."""
    now = time.time()
    keys = {}
    for event_id in (BIDI_ID, CONTROL_ID):
        run = record(event_id, now - 60, RunOutcome.SUCCEEDED, message_id=f"m-{event_id}")
        fleet.history().finished(run)
        keys[event_id] = run_type(run)
    entry = AuditEntry(now - 30, "pause", BIDI_ID, "", "web:" + CONTROL_ID, "arn:aws:iam::1:user/x")
    DynamoAudit(fleet.dynamodb, fleet.table).write(entry)
    return keys


def serving(fleet: WebFleet, **options: Any) -> Iterator[Dashboard]:
    served = fleet.serve(**options)
    yield served
    served.close()


@pytest.fixture(scope="module")
def with_actions(fleet: WebFleet, seeded: dict[str, str]) -> Iterator[Dashboard]:
    yield from serving(fleet, enable_actions=True)


@pytest.fixture(scope="module")
def proxied(fleet: WebFleet) -> Iterator[Dashboard]:
    """A loopback listener that a proxy serves as dash.example.com, with no sign-in."""
    yield from serving(fleet, enable_actions=True, allowed_hosts=("dash.example.com",))


@pytest.fixture(scope="module")
def users_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    path = tmp_path_factory.mktemp("users") / "web.yml"
    path.write_text(f"basic_auth_users:\n  alice: {hashed}\n")
    return path


@pytest.fixture(scope="module")
def basic(fleet: WebFleet, users_file: Path) -> Iterator[Dashboard]:
    yield from serving(fleet, enable_actions=True, basic_auth_file=str(users_file))


@pytest.fixture(scope="module")
def trusting(fleet: WebFleet) -> Iterator[Dashboard]:
    yield from serving(fleet, trusted_proxies=("127.0.0.1",), auth_header="X-Forwarded-User")


def post(served: Dashboard, path: str, **kwargs: Any) -> requests.Response:
    return requests.post(served.url.rstrip("/") + path, timeout=30, **kwargs)


def pause_form(served: Dashboard, session: requests.Session, **headers: str) -> dict[str, str]:
    """A pause of every event as the overview's form posts it, with a token of session's."""
    token = form_token(session.get(served.url, headers=headers, timeout=30).text)
    return {"csrf_token": token, "scope": "all", "confirmed": "yes", "reason": "websec"}


#: A body nested 5,000 levels deep inside a field the daemon ignores, and one not JSON.
DEEP_BODY = '{"event_id": "deep", "command": "true", "junk": ' + "[" * 5000 + "]" * 5000 + "}"
NOT_JSON_BODY = "not-json <script>alert(1)</script> \u202e!"


@pytest.fixture(scope="module")
def letters(with_actions: Dashboard, fleet: WebFleet) -> tuple[str, str]:
    """The hostile dead letters, sent once; the dead letters page once it shows them all, and
    the DLQ id of the HTTP job."""
    leaky = fleet.sqs.send_message(
        QueueUrl=fleet.dlq_url,
        MessageBody=json.dumps(LEAKY_HTTP_JOB),
        MessageAttributes={
            "Authorization": {"DataType": "String", "StringValue": "attribute-secret"}
        },
    )["MessageId"]
    for body in (DEEP_BODY, NOT_JSON_BODY):
        fleet.sqs.send_message(QueueUrl=fleet.dlq_url, MessageBody=body)
    dead_letter(fleet, {"event_id": "last-letter", "command": "true"})

    # Another test's view may have left the page in the cache for a few seconds.
    def shown() -> str | None:
        page = get(with_actions, "/dead-letters")
        assert page.status_code == 200, page.text
        return page.text if "last-letter" in page.text else None

    return str(wait_until(shown, what="the letters on the dead letters page")), leaky


# -- 18: refusals and not-found pages -----------------------------------------------------------


def test_a_csrf_refusal_says_what_was_refused_and_to_reload(with_actions: Dashboard) -> None:
    form = with_actions.url + "event?id=hourly"
    refused = post(
        with_actions,
        "/actions/pause",
        data={"scope": "all", "confirmed": "yes"},
        headers={"Referer": form},
    )
    assert refused.status_code == 400
    assert "<h1>Action refused</h1>" in refused.text
    assert "CSRF token is missing" in refused.text and "reload it" in refused.text
    assert '<a href="/event?id=hourly">Back to the form</a>' in refused.text
    assert "could not be read" not in refused.text
    elsewhere = post(with_actions, "/actions/pause", headers={"Referer": "http://evil.example/"})
    assert elsewhere.status_code == 400 and "Back to the form" not in elsewhere.text


@pytest.mark.parametrize("path", ["/no-such-page", "/event?id=never-ran", "/run?event=x&key=y"])
def test_not_found_pages_use_the_layout(with_actions: Dashboard, path: str) -> None:
    missing = get(with_actions, path)
    assert missing.status_code == 404
    assert "<h1>Not found</h1>" in missing.text
    assert '<a href="/dead-letters">Dead letters</a>' in missing.text  # the navigation
    assert missing.headers["Content-Security-Policy"]
    assert "hx-trigger" not in missing.text  # a missing page is not polled again and again


# -- 19, 20: dead letters -----------------------------------------------------------------------


def test_secret_looking_names_are_one_rule() -> None:
    # The names of the issue: header names, a body's keys, bare words.
    for key in ("Authentication", "X-Passphrase", "bearer", "dsn", "client_secret", "api_token"):
        assert secret_key(key), key
    for key in ("event_id", "lock_id", "concurrency_key", "command", "Accept", "method", "url"):
        assert not secret_key(key), key


def test_a_shown_body_names_the_call_by_method_and_origin_and_masks_the_rest() -> None:
    shown = shown_body(json.dumps(LEAKY_HTTP_JOB))
    assert shown is not None
    for secret in SECRETS:
        assert secret not in shown
    call = json.loads(shown)["http"]
    assert call["method"] == "POST"
    assert call["url"] == "https://api.example.com (path not shown)"
    assert call["headers"] == {"Authentication": MASK, "X-Passphrase": MASK}
    assert call["body"] == MASK


def test_a_dead_lettered_http_job_shows_no_secret(
    letters: tuple[str, str], fleet: WebFleet
) -> None:
    page, message_id = letters
    for secret in SECRETS:
        assert secret not in page
    assert "https://api.example.com (path not shown)" in page
    # The CLI shows it by the same rule.
    for args in (
        ("show", message_id),
        ("list",),
        ("list", "--json"),
        ("show", "--json", message_id),
    ):
        shown = run_main("dlq", *args, "-c", str(fleet.conf))
        assert shown.returncode == 0, shown.stderr
        assert "leaky-http" in shown.stdout
        for secret in SECRETS:
            assert secret not in shown.stdout, (args, secret)


def test_a_body_nested_thousands_deep_shows_as_text(letters: tuple[str, str]) -> None:
    page = letters[0]
    assert "[[[[[[[[" in page and "&#34;deep&#34;" in page
    assert "would be refused again: body nests deeper than 64 arrays and objects" in page


def test_a_body_not_json_shows_as_escaped_text(letters: tuple[str, str]) -> None:
    assert "not-json &lt;script&gt;alert(1)&lt;/script&gt; \\x202e!" in letters[0]


# -- 21: who may act ----------------------------------------------------------------------------


def test_behind_an_allowed_host_actions_need_a_signed_in_user(
    proxied: Dashboard, fleet: WebFleet
) -> None:
    session = requests.Session()
    host = {"Host": "dash.example.com"}
    form = pause_form(proxied, session, **host)
    refused = session.post(proxied.url + "actions/pause", data=form, headers=host, timeout=30)
    assert refused.status_code == 403 and "signed-in user" in refused.text
    assert "Pause:*" not in (fleet.pauses_item() or {})


def test_the_start_up_line_says_who_may_act() -> None:
    loopback = Guard("127.0.0.1", 8070)
    assert loopback.may_act(None)
    assert "anyone on this host" in loopback.who_may_act()
    behind = Guard("127.0.0.1", 8070, allowed_hosts=("dash.example.com",))
    assert not behind.may_act(None) and behind.may_act("alice")
    assert behind.who_may_act().startswith("actions refused: no sign-in")
    signed = Guard("0.0.0.0", 8070, ("dash.example.com",), ("10.0.0.5",), "X-User")
    assert signed.who_may_act() == "actions on, for signed-in users"


def test_web_help_names_every_action() -> None:
    shown = run_main("web", "--help")
    text = " ".join(shown.stdout.split())
    assert (
        "run now, run a past firing, kill, pause, resume, route (and clear a route), unlock and "
        "redrive" in text
    )


# -- 22: basic auth -----------------------------------------------------------------------------


def basic_header(user: str, password: str) -> Any:
    import base64

    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}.get


def test_an_unknown_name_is_checked_by_bcrypt_too(
    users_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqsjkr.web.guard import load_users

    guard = Guard("127.0.0.1", 0, users=load_users(str(users_file)))
    checks: list[bytes] = []
    real = bcrypt.checkpw
    monkeypatch.setattr(bcrypt, "checkpw", lambda p, h: checks.append(h) or real(p, h))
    for user in ("mallory", "alice"):
        with pytest.raises(Refused) as refused:
            guard.user("127.0.0.1", basic_header(user, "guess"))
        assert refused.value.status == 401
    assert len(checks) == 2 and checks[0].startswith(b"$2b$04$")  # a dummy of the users' cost


def test_password_checks_at_once_are_bounded_and_a_signed_in_user_passes(
    users_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sqsjkr.web.guard import load_users

    guard = Guard("127.0.0.1", 0, users=load_users(str(users_file)))
    assert guard.user("127.0.0.1", basic_header("alice", "s3cret")) == "alice"
    release, inside, most = threading.Event(), [0], [0]
    lock = threading.Lock()

    def slow_check(password: bytes, hashed: bytes) -> bool:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        release.wait(30)
        with lock:
            inside[0] -= 1
        return False

    monkeypatch.setattr(bcrypt, "checkpw", slow_check)
    outcomes: list[int] = []

    def guess(n: int) -> None:
        try:
            guard.user("127.0.0.1", basic_header("mallory", f"guess-{n}"))
        except Refused as exc:
            outcomes.append(exc.status)

    guessers = [threading.Thread(target=guess, args=(n,)) for n in range(PASSWORD_CHECKS)]
    for thread in guessers:
        thread.start()
    wait_until(lambda: inside[0] == PASSWORD_CHECKS, what="the checks under way")
    with pytest.raises(Refused) as busy:
        guard.user("127.0.0.1", basic_header("mallory", "one-more"))
    assert busy.value.status == 429 and busy.value.headers["Retry-After"]
    # A signed-in user's check is remembered: it waits for no bcrypt.
    assert guard.user("127.0.0.1", basic_header("alice", "s3cret")) == "alice"
    release.set()
    for thread in guessers:
        thread.join(30)
    assert most[0] == PASSWORD_CHECKS and outcomes == [401] * PASSWORD_CHECKS


# -- 23: order of checks ------------------------------------------------------------------------


def test_a_foreign_host_is_refused_before_the_csrf_check(with_actions: Dashboard) -> None:
    port = with_actions.guard.port
    refused = post(
        with_actions, "/actions/pause", data={"scope": "all"}, headers={"Host": f"evil:{port}"}
    )
    assert refused.status_code == 421 and "--allowed-host" in refused.text


def test_a_stranger_is_refused_before_the_csrf_check(basic: Dashboard) -> None:
    refused = post(basic, "/actions/pause", data={"scope": "all"})
    assert refused.status_code == 401 and "CSRF" not in refused.text
    assert refused.headers["WWW-Authenticate"].startswith("Basic")


def test_a_post_from_another_origin_is_refused(with_actions: Dashboard, fleet: WebFleet) -> None:
    session = requests.Session()
    form = {**pause_form(with_actions, session), "confirmed": "no"}
    evil = session.post(
        with_actions.url + "actions/pause",
        data=form,
        headers={"Origin": "http://evil.example"},
        timeout=30,
    )
    assert evil.status_code == 403 and "evil.example" in evil.text
    own = with_actions.url.rstrip("/")
    confirm = session.post(
        with_actions.url + "actions/pause", data=form, headers={"Origin": own}, timeout=30
    )
    assert confirm.status_code == 200 and "Confirm: Pause" in confirm.text
    assert "Pause:*" not in (fleet.pauses_item() or {})


# -- 24: redirects and page numbers -------------------------------------------------------------


def test_next_must_be_a_path_of_the_dashboard() -> None:
    # Browsers read a backslash as a slash: each of these leads to evil.com.
    for target in ("/\\evil.com", "/\\\\evil.com", "/\\/evil.com", "/\x01/evil.com"):
        assert _local_path(target) is None, target
    assert _local_path("/events?state=failing&page=2") == "/events?state=failing&page=2"


@pytest.mark.parametrize("page", ["²", "9" * 5000])
def test_any_page_number_is_served(with_actions: Dashboard, page: str) -> None:
    assert get(with_actions, "/events", params={"page": page}).status_code == 200


def test_cancel_stays_on_the_dashboard_in_chromium(with_actions: Dashboard) -> None:
    from tests.test_web_e2e import CHROMIUM, CHROMIUM_ARGS  # skips without a browser

    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(with_actions.url)
            # The overview's pause form, sent with a hostile next.
            form = page.locator("form.action").first
            form.locator('input[name="next"]').evaluate("(e) => { e.value = '/\\\\evil.com'; }")
            form.locator('button[type="submit"]').click()
            sync_api.expect(page.locator("h1")).to_contain_text("Confirm:")
            cancel = page.get_by_role("link", name="Cancel")
            assert cancel.evaluate("(a) => a.href") == with_actions.url
        finally:
            browser.close()


# -- 25: hostile ids and identity headers -------------------------------------------------------


def test_bidi_overrides_and_controls_in_ids_are_shown_escaped(
    with_actions: Dashboard, seeded: dict[str, str]
) -> None:
    pages = {
        "events": get(with_actions, "/events", params={"q": "-"}).text,
        "event": get(with_actions, "/event", params={"id": BIDI_ID}).text,
        "run": get(with_actions, "/run", params={"event": BIDI_ID, "key": seeded[BIDI_ID]}).text,
        "control": get(
            with_actions, "/run", params={"event": CONTROL_ID, "key": seeded[CONTROL_ID]}
        ).text,
        "audit": get(with_actions, "/audit").text,
    }
    for name, page in pages.items():
        # A form's hidden value keeps the id as it is: the action needs it, and no one sees it.
        page = re.sub(r'(value|href)="[^"]*"', "", page)
        assert "\u202e" not in page and "\x1b" not in page and "\x07" not in page, name
    for name in ("events", "event", "run", "audit"):
        assert "bidi-\\x202egnp.exe" in pages[name], name
    assert "ctl-\\x1b[2J\\x07id" in pages["control"] and "ctl-\\x1b[2J\\x07id" in pages["audit"]


def test_an_action_on_a_hostile_id_confirms_and_reports_it_escaped(
    with_actions: Dashboard,
) -> None:
    from tests.test_web import act

    confirm, done = act(with_actions, requests.Session(), "pause", "/", {"event_id": BIDI_ID})
    assert "<code>bidi-\\x202egnp.exe</code>" in confirm.text
    assert "paused event &#34;bidi-\\u202egnp.exe&#34;" in done.text  # quoted as JSON quotes
    for page in (confirm.text, done.text):
        assert "\u202e" not in re.sub(r'value="[^"]*"', "", page)
    assert quote(CONTROL_ID + "\x85") == '"ctl-\\u001b[2J\\u0007id\\u0085"'


def identity_request(served: Dashboard, *values: Any, fold: bool = False) -> tuple[int, str]:
    """A GET with the identity header sent once per value (or once, folded over lines)."""
    connection = http.client.HTTPConnection("127.0.0.1", served.guard.port, timeout=30)
    try:
        connection.putrequest("GET", "/")
        if fold:
            connection.putheader("X-Forwarded-User", *values)
        else:
            for value in values:
                connection.putheader("X-Forwarded-User", value)
        connection.endheaders()
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def test_a_utf8_identity_header_is_read_as_utf8(trusting: Dashboard) -> None:
    status, page = identity_request(trusting, "zoë@example.com".encode())
    assert status == 200 and "zoë@example.com" in page and "zoÃ«" not in page


def test_an_ambiguous_identity_header_is_refused(trusting: Dashboard) -> None:
    for values, fold in ((("alice", "mallory"), False), (("alice", "mallory"), True)):
        status, text = identity_request(trusting, *values, fold=fold)
        assert status == 400 and "ambiguous" in text, (values, fold)
    assert identity_request(trusting, b"\xff\xfe")[0] == 400  # not UTF-8


# -- 26: one cookie per listener ----------------------------------------------------------------


def test_a_second_dashboard_does_not_break_the_first_one_s_session(
    with_actions: Dashboard, proxied: Dashboard
) -> None:
    session = requests.Session()
    form = {**pause_form(with_actions, session), "confirmed": "no"}
    # The other dashboard on this host sets its session cookie in the same jar (ports ignored).
    session.get(proxied.url, timeout=30)
    names = {cookie.name for cookie in session.cookies}
    assert names == {f"sqsjkr-{with_actions.guard.port}", f"sqsjkr-{proxied.guard.port}"}
    confirm = session.post(with_actions.url + "actions/pause", data=form, timeout=30)
    assert confirm.status_code == 200 and "Confirm: Pause" in confirm.text
