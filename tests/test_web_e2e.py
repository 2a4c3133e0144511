"""The dashboard end to end in headless Chromium (Debian's, driven by Playwright): `sqsjkr local --demo`
runs a real daemon on moto with the demo's jobs and serves the dashboard; the browser goes from
the overview to an event to a run, pauses and resumes, runs an event now, watches a run's live
output stay at its newest line, kills it, watches a page refresh itself, and measures every
page at 1400 and 800 px and the overview at 375 px.

SQSJKR_SCREENSHOTS=DIR saves the overview, an event and a run as PNG files there (docs/ for
the README's pictures).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.conftest import Daemon, Result, run_main, wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = os.environ.get("SQSJKR_SCREENSHOTS")

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing in CI: .ci/run installs Debian's chromium")
    pytest.skip(
        f"no browser: {CHROMIUM} is not installed (apt-get install chromium)",
        allow_module_level=True,
    )

sync_api = pytest.importorskip("playwright.sync_api")


class Demo:
    """`sqsjkr local --demo` once its demo has run: its dashboard, endpoint and config."""

    def __init__(self, daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
        self.daemon = daemon
        log = daemon.log
        dashboard = re.search(r"^Dashboard: (http://127\.0\.0\.1:\d+/)$", log, re.M)
        endpoint = re.search(r"AWS endpoint (http://127\.0\.0\.1:\d+) \(moto\)", log)
        conf = re.search(r" -c (\S+/config\.toml)", log)
        assert dashboard and endpoint and conf, log
        self.url = dashboard[1]
        self.endpoint = endpoint[1]
        self.conf = conf[1]
        for name, value in (
            ("AWS_ENDPOINT_URL", self.endpoint),
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
        ):
            monkeypatch.setenv(name, value)

    def cli(self, *args: str) -> Result:
        """`sqsjkr COMMAND -c CONF ARGS` against the demo's endpoint, in this process."""
        return run_main(args[0], "-c", self.conf, *args[1:])


@pytest.fixture
def demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Demo]:
    workdir = tmp_path
    # A 15 s lease: the demo's kill waits for a heartbeat of 5 s, not of local mode's 20 s.
    argv = ["local", "--demo", "--stats-port", "0", "--web-port", "0", "--lease", "15s"]
    daemon = Daemon(argv, {}, workdir)
    try:
        daemon.wait_for_log("The daemon keeps running", timeout=90)
        running = Demo(daemon, monkeypatch)
        more_runs(running)
        yield running
    finally:
        daemon.kill()


def more_runs(demo: Demo) -> None:
    """A few more runs of demo-fail, of several lengths, most of them successes: its strip and
    chart have something to show. The last one fails, so that it still needs someone."""
    for step, (sleep, code) in enumerate([(0.2, 0), (0.5, 0), (0.3, 1), (0.8, 0), (0.4, 0)]):
        command = f"sleep {sleep}; echo 'step {step}'; exit {code}"
        sent = demo.cli("send", "--event-id", "demo-fail", "--command", command)
        assert sent.returncode == 0, sent.stderr
    wait_until(lambda: runs_of(demo, "demo-fail") == 6, timeout=30, what="5 more runs")
    demo.cli("send", "--event-id", "demo-fail", "--command", "echo 'about to fail' >&2; exit 3")
    wait_until(lambda: runs_of(demo, "demo-fail") == 7, timeout=30, what="a last failure")


def runs_of(demo: Demo, event_id: str) -> int:
    shown = demo.cli("history", event_id, "--json", "--limit", "20")
    return len(json.loads(shown.stdout)) if shown.returncode == 0 else 0


@pytest.fixture
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    opened = context.new_page()
    violations: list[str] = []
    opened.on(
        "console",
        lambda message: (
            violations.append(message.text)
            if "Content Security Policy" in message.text or message.type == "error"
            else None
        ),
    )
    yield opened
    context.close()
    # htmx, uPlot and app.js run under the page's CSP: nothing of theirs is refused.
    assert violations == []


def shot(page: Any, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / name), full_page=True)


@pytest.mark.timeout(300)  # the demo's run, a few more runs, and the browser's steps
@pytest.mark.slow
def test_the_dashboard_in_a_browser(demo: Demo, page: Any) -> None:
    """One test, so that xdist runs the demo and the browser once, on one worker."""
    overview_to_event_to_run(demo, page)
    pause_and_resume_an_event_with_a_confirm_step(demo, page)
    run_now_and_kill_with_a_confirm_step(demo, page)
    run_a_failed_step_again_within_its_run(demo, page)
    a_page_refreshes_itself_without_a_reload(demo, page)
    every_page_fits_its_screen(demo, page)


def overview_to_event_to_run(demo: Demo, page: Any) -> None:
    expect = sync_api.expect
    page.goto(demo.url)
    expect(page.locator("h1")).to_have_text("What is wrong now")
    expect(page.locator(".count.state-failing b")).not_to_have_text("0")
    # A fresh demo has missed no firing: its schedules' firings start when they were made.
    expect(page.locator(".count.state-missed b")).to_have_text("0")
    attention = page.locator("table.attention")
    expect(attention).to_contain_text("demo-fail")
    shot(page, "dashboard-overview.png")

    attention.get_by_role("link", name="demo-fail").click()
    expect(page.locator("h1")).to_contain_text("demo-fail")
    expect(page.locator("#chart .uplot")).to_be_visible()  # drawn by app.js under the CSP
    expect(page.locator("table.runs tbody tr").first).to_contain_text("errored")
    shot(page, "dashboard-event.png")

    page.locator("table.runs tbody tr").first.get_by_role("link").click()
    expect(page.locator("h1")).to_contain_text("Run of")
    expect(page.locator("pre.output")).not_to_be_empty()
    expect(page.get_by_role("link", name="Download as text")).to_be_visible()
    shot(page, "dashboard-run.png")


def pause_and_resume_an_event_with_a_confirm_step(demo: Demo, page: Any) -> None:
    expect = sync_api.expect
    page.goto(demo.url + "event?id=demo-hello")
    form = page.locator("form.action", has=page.get_by_role("button", name="Pause this event"))
    form.get_by_label("Reason").fill("e2e check")
    form.get_by_label("Until").fill("1h")
    form.get_by_role("button", name="Pause this event").click()
    expect(page.locator("h1")).to_have_text("Confirm: Pause demo-hello")
    page.get_by_role("button", name="Yes, pause").click()
    expect(page.locator(".flash")).to_contain_text('paused event "demo-hello"')
    expect(page.locator(".facts")).to_contain_text("e2e check")
    assert "demo-hello" in demo.cli("status").stdout.split("PAUSED", 1)[1]

    page.get_by_role("button", name="Resume this event").click()
    page.get_by_role("button", name="Yes, resume").click()
    expect(page.locator(".flash")).to_contain_text('resumed event "demo-hello"')
    audit = demo.cli("audit").stdout
    assert re.search(r"pause\s+demo-hello\s+web:\S+@", audit), audit
    assert re.search(r"resume\s+demo-hello\s+web:\S+@", audit), audit


def run_now_and_kill_with_a_confirm_step(demo: Demo, page: Any) -> None:
    expect = sync_api.expect
    page.goto(demo.url + "event?id=demo-hello")
    form = page.locator("form.action", has=page.get_by_role("button", name="Run now"))
    form.get_by_label("Reason").fill("e2e run now")
    form.get_by_role("button", name="Run now").click()
    expect(page.locator("h1")).to_have_text("Confirm: Run demo-hello now")
    page.get_by_role("button", name="Yes, run demo-hello now").click()
    expect(page.locator(".flash")).to_contain_text("sent message")

    sent = demo.cli("send", "--event-id", "demo-e2e-kill", "--command", PRINTER)
    assert sent.returncode == 0, sent.stderr
    live_output_stays_at_its_newest_line(demo, page, sent.stdout.strip())
    page.goto(demo.url + "running")
    # The page reads its live part again every few seconds: the run appears in place.
    row = page.locator("table.running tbody tr", has_text="demo-e2e-kill")
    row.get_by_role("button", name="Kill").click(timeout=30_000)
    expect(page.locator("h1")).to_contain_text("Confirm: Kill the run of message")
    page.get_by_label("Reason").fill("e2e kill")
    page.get_by_role("button", name="Yes, kill").click()
    expect(page.locator(".flash")).to_contain_text("kill requested")
    audit = demo.cli("audit").stdout
    assert re.search(r"trigger\s+demo-hello\s+web:\S+@", audit), audit
    assert re.search(r"kill\s+\S+\s+web:\S+@", audit), audit


def run_a_failed_step_again_within_its_run(demo: Demo, page: Any) -> None:
    """The demo pipeline's first firing fails c: its drawing's Run this step again resumes it."""
    expect = sync_api.expect
    first = re.search(r"fires every minute from (\S+) on queue", demo.daemon.log)
    assert first, demo.daemon.log

    def failed_run() -> str | None:
        shown = demo.cli("pipeline", "demo-pipeline", "--firing", first[1], "--json")
        run = json.loads(shown.stdout) if shown.returncode == 0 else {"steps": []}
        states = {s["step"]: s["status"] for s in run["steps"]}
        over = states.get("c") == "failed" and states.get("notify") == "succeeded"
        return str(run["key"]) if over else None

    key = wait_until(failed_run, timeout=90, what="the first firing's c to fail")
    page.goto(demo.url + "event?" + urlencode({"id": "demo-pipeline", "pipeline": key}))
    step = page.locator('ul.pipeline-steps li[data-step="c"]')
    step.get_by_label("Reason").fill("e2e resume")
    step.get_by_role("button", name="Run this step again").click()
    expect(page.locator("h1")).to_have_text(f"Confirm: Run step c of pipeline run {key} again")
    page.get_by_role("button", name="Yes, run step c").click()
    expect(page.locator(".flash")).to_contain_text(f"asked step c of run {key}")

    def d_ran() -> bool:
        shown = demo.cli("pipeline", "demo-pipeline", "--firing", first[1], "--json")
        return any(
            s["step"] == "d" and s["status"] == "succeeded"
            for s in json.loads(shown.stdout)["steps"]
        )

    wait_until(d_ran, timeout=60, what="d after c ran again")
    assert re.search(r"trigger\s+demo-pipeline-c\s+web:\S+@", demo.cli("audit").stdout)


#: More lines at once than the live output box shows, then a line a second.
PRINTER = "seq -f 'line %g' 1 120; i=120; while true; do i=$((i+1)); echo line $i; sleep 1; done"

AT_END = "box => box.scrollHeight > box.clientHeight + 50 && " + (
    "box.scrollHeight - box.scrollTop - box.clientHeight < 8"
)


def next_refresh(page: Any) -> None:
    """Wait until htmx has replaced the page's live part (and the boxes in it)."""
    page.evaluate("window.oldLive = document.querySelector('#live')")
    page.wait_for_function("() => !window.oldLive.isConnected", timeout=20_000)


def live_output_stays_at_its_newest_line(demo: Demo, page: Any, message_id: str) -> None:
    """On "Running now" and on the run's own page, each refresh leaves the live output box at
    its newest line, unless its reader scrolled up."""
    page.goto(demo.url + "running")
    box = page.locator(f'pre[data-tail="{message_id}"]')
    box.wait_for(timeout=30_000)  # its daemon writes the live output every 10 s
    next_refresh(page)
    assert box.evaluate(AT_END), box.evaluate("b => [b.scrollTop, b.scrollHeight]")
    box.evaluate("b => { b.scrollTop = 0; }")
    next_refresh(page)
    assert box.evaluate("b => b.scrollTop") < 8  # the reader's place is kept
    page.goto(demo.url + f"run?event=demo-e2e-kill&message={message_id}")
    expect = sync_api.expect
    expect(page.locator("h1")).to_contain_text("Run in progress of")
    next_refresh(page)
    assert box.evaluate(AT_END)


def a_page_refreshes_itself_without_a_reload(demo: Demo, page: Any) -> None:
    expect = sync_api.expect
    page.goto(demo.url)
    page.evaluate("window.notReloaded = true")
    expect(page.locator(".count.state-paused b")).to_have_text("0")
    paused = demo.cli("pause", "--all", "--until", "10m", "--reason", "refresh check")
    assert paused.returncode == 0, paused.stderr
    try:
        # htmx reads the live part again every few seconds: the count changes in place.
        expect(page.locator(".count.state-paused b")).not_to_have_text("0", timeout=20_000)
        assert page.evaluate("window.notReloaded") is True
    finally:
        demo.cli("resume", "--all")


#: Each page at each width; the overview on a phone too.
PAGES = ["", "events", "running", "daemons", "locks", "dead-letters", "audit", "event?id=demo-fail"]
#: Where a page is wider than its screen, where a time wraps, where the header stops short, where
#: the overview squeezes its reasons, and the audit rows taller than five lines.
LAYOUT = """() => ({
  overflow: document.documentElement.scrollWidth - window.innerWidth,
  wrapped: Array.from(document.querySelectorAll("time"))
    .filter(t => t.getClientRects().length > 1).map(t => t.textContent),
  header: document.documentElement.scrollWidth - document.querySelector("header").offsetWidth,
  loose: Array.from(document.querySelectorAll("main table:not(.u-legend)"))
    .filter(t => !t.closest(".scroll")).length,
  squeezed: Array.from(document.querySelectorAll("td.why")).filter(td => td.offsetWidth < 200)
    .length,
  tall: Array.from(document.querySelectorAll("table.audit tbody tr"))
    .filter(tr => tr.offsetHeight > 120).map(tr => tr.offsetHeight + ": " + tr.textContent),
})"""


def every_page_fits_its_screen(demo: Demo, page: Any) -> None:
    """No page is wider than 1400 or 800 px (the overview than a 375 px phone): wide tables
    scroll inside their box; no time breaks over two lines; the header spans the page; the
    overview's reasons keep a readable width and an audit row is a few lines at most."""
    run = page.locator("table.runs tbody tr a")
    for width, paths in ((1400, PAGES), (800, PAGES), (375, [""])):
        page.set_viewport_size({"width": width, "height": 900})
        for path in paths + (["run"] if width == 800 else []):
            if path == "run":
                page.goto(demo.url + "event?id=demo-fail")
                run.first.click()
                sync_api.expect(page.locator("h1")).to_contain_text("Run of")
            else:
                page.goto(demo.url + path)
            found = page.evaluate(LAYOUT)
            assert found == {
                "overflow": 0,
                "wrapped": [],
                "header": 0,
                "loose": 0,
                "squeezed": 0,
                "tall": [],
            }, (width, path)
