"""Seeing a pipeline against moto over HTTP: Fleet.pipeline, `sqsjkr pipeline` and `sqsjkr firings`
(text and --json) and the stuck line of `status --check`, each from a run's state item and its
steps' records and runs in progress written through the backends as the daemons write them.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import requests

import sqsjkr
from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.backends.pipeline import DynamoPipelines, PipelineState
from sqsjkr.commands.options import load
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.pipeline import Pipeline, PipelineRun, Step
from sqsjkr.contract.pipeline_progress import pending
from sqsjkr.contract.run import RunOutcome, RunStart
from sqsjkr.fleet.pipeline_steps import StepStatus, stuck_reasons, view_of
from sqsjkr.fleet.wording import format_span
from sqsjkr.observability.health import Health
from sqsjkr.observability.metrics import Metrics
from sqsjkr.observability.stats import Stats
from sqsjkr.web.app import create_app
from sqsjkr.web.cache import FRESH_SECONDS, Cache
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.guard import Guard
from tests.conftest import Aws, Cli, Start, config_text, http_get_text, wait_until
from tests.test_firings import HOUR, create_schedule, hour_mark
from tests.web_fleet import HOSTILE_ID, WebFleet, make_fleet, module_env, record


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("pipeview"))


def nightly(name: str) -> Pipeline:
    """extract -> (transform-a, transform-b) -> load; notify on transform-a's failure."""
    job = {"command": "true"}
    return Pipeline(
        name,
        "extract",
        {
            "extract": Step("extract"),
            "transform-a": Step("transform-a", ("extract",), ("notify",), job),
            "transform-b": Step("transform-b", ("extract",), (), job),
            "load": Step("load", ("transform-a", "transform-b"), (), job),
            "notify": Step("notify", (), (), job),
        },
    )


class Seeder:
    """Writes one run of a pipeline as its daemons would: the state item as each step ends, each
    step's record, and a step's run in progress in its event's summary."""

    def __init__(
        self,
        fleet: WebFleet,
        pipeline: Pipeline,
        root_event: str,
        at: float,
        *,
        prefix: str | None = None,
        expression: str | None = None,
    ) -> None:
        """prefix: of the steps' events (several runs of one pipeline share it); expression:
        the root's schedule's, which its firing carries into every step's message."""
        self.fleet, self.pipeline, self.root_event, self.at = fleet, pipeline, root_event, at
        self.schedule = f"sqsjkr-{root_event}"
        self.firing = Firing(at, self.schedule, expression, "UTC" if expression else None)
        self.key = self.firing.key
        self.store = DynamoPipelines(fleet.dynamodb, fleet.table, lives_seconds=86400)
        self.prefix = prefix or uuid.uuid4().hex[:6]
        # Each step's job names its own event, as the module's do: the kept graph says which.
        steps = {
            n: s if s.job is None else replace(s, job={**s.job, "event_id": self.event(n)})
            for n, s in pipeline.steps.items()
        }
        self.pipeline = replace(pipeline, steps=steps)

    def event(self, step: str) -> str:
        # A step's job names its own event (the diamond of test_pipelines does).
        return self.root_event if step == self.pipeline.root else f"{self.prefix}-{step}"

    def ended(self, step: str, outcome: RunOutcome, at: float, host: str = "host-a") -> None:
        run = PipelineRun(self.pipeline, step, self.key)
        self.fleet.history().finished(
            record(
                self.event(step),
                at,
                outcome,
                host=host,
                firing_at=self.at,
                firing_schedule=self.schedule,
                origin="schedule" if step == self.pipeline.root else "pipeline",
                pipeline_key=self.key,
                pipeline_step=step,
            ),
            firing=self.firing if self.firing.expression else None,
        )
        self.store.step_ended(run, outcome is RunOutcome.SUCCEEDED, at, self.at)

    def running(self, step: str, host: str, since: float) -> str:
        claim = PipelineRun(self.pipeline, step, self.key).claim_key()
        start = RunStart(
            self.event(step), uuid.uuid4().hex, host, f"{host}:1:x", since, since, "true"
        )
        self.fleet.history().started(RunStart(**{**start.__dict__, "claim_id": claim}))
        # Its claim, leased as a live daemon keeps it.
        self.fleet.dynamodb.put_item(
            TableName=self.fleet.table,
            Item={
                "Id": {"S": claim},
                "Type": {"S": THROTTLE_TYPE},
                "LeaseUntil": {"N": str(time.time() + 600)},
            },
        )
        return claim


def test_a_runs_state_says_what_is_pending() -> None:
    """The graph's arithmetic the faces and the gauge share: what is still to end."""
    graph = nightly("p")
    assert pending(graph, {"extract"}, ()) == ["transform-a", "transform-b", "load"]
    assert pending(graph, {"extract", "transform-b"}, {"transform-a"}) == ["notify"]
    assert pending(graph, {"extract", "transform-b", "notify"}, {"transform-a"}) == []
    everything = {"extract", "transform-a", "transform-b", "load"}
    assert pending(graph, everything, ()) == []


def test_a_failed_step_run_again_shows_running() -> None:
    graph = nightly("p")
    state = PipelineState(
        "k",
        "p",
        "extract",
        graph.graph_fields(),
        frozenset({"extract"}),
        frozenset({"transform-a"}),
    )
    start = RunStart(
        "transform-a", "m", "host-z", "o", 1.0, 1.0, "true", claim_id="k#step-transform-a#rerun-1"
    )
    view = view_of(state, {}, {"transform-a": [start]}, {n: (n,) for n in graph.steps})
    step = view.step("transform-a")
    assert step is not None and step.status is StepStatus.RUNNING
    assert step.detail.endswith("(again: it failed before)")
    load = view.step("load")
    assert load is not None and load.status is StepStatus.SKIPPED


def test_a_step_due_for_long_is_stuck_and_named_with_its_cause() -> None:
    graph = nightly("p")
    at = 1_800_000_000.0
    state = PipelineState(
        "k",
        "p",
        "extract",
        graph.graph_fields(),
        frozenset(graph.steps) - {"load", "notify"},
        frozenset(),
        at,
        at + 600,
        at,
    )
    records = {
        n: [record(n, at + 300 * i, RunOutcome.SUCCEEDED, pipeline_key="k", pipeline_step=n)]
        for i, n in enumerate(("extract", "transform-a", "transform-b"))
    }
    view = view_of(state, records, {}, {n: (n,) for n in graph.steps})
    load = view.step("load")
    assert load is not None and load.status is StepStatus.WAITING and load.due_since == at + 600
    assert stuck_reasons(view, at + 600 + 1800) == []
    [reason] = stuck_reasons(view, at + 600 + 2 * HOUR)
    assert reason.startswith("load has not started 2h after transform-b succeeded for the ")
    assert "firing" in reason


def test_fleet_and_the_pipeline_command_show_each_steps_state(
    fleet: WebFleet, cli: Cli, aws_env: dict[str, str]
) -> None:
    """A run in progress: extract and transform-a ran, transform-b runs on host-b, load waits for
    it, notify is not needed; Fleet.pipeline, `sqsjkr pipeline` and --json say so, and --firing
    picks an older run."""
    now = time.time()
    older = Seeder(fleet, nightly("nightly"), "nightly-show", hour_mark(now) - 2 * HOUR)
    older.ended("extract", RunOutcome.SUCCEEDED, older.at + 60)
    older.ended("transform-a", RunOutcome.ERRORED, older.at + 120)
    seed = Seeder(fleet, nightly("nightly"), "nightly-show", hour_mark(now) - HOUR)
    seed.ended("extract", RunOutcome.SUCCEEDED, seed.at + 60)
    seed.ended("transform-a", RunOutcome.SUCCEEDED, seed.at + 120, host="host-c")
    claim = seed.running("transform-b", "host-b", seed.at + 70)

    view = sqsjkr.Fleet(str(fleet.conf)).pipeline("nightly-show")
    states = {s.name: (s.status, s.detail) for s in view.steps}
    assert view.key == seed.key and view.in_progress
    assert states["extract"][0] is StepStatus.SUCCEEDED
    assert states["transform-a"][0] is StepStatus.SUCCEEDED and "host-c" in states["transform-a"][1]
    assert states["transform-b"] == (StepStatus.RUNNING, states["transform-b"][1])
    assert "running on host-b" in states["transform-b"][1]
    assert "stale" not in states["transform-b"][1]
    assert states["load"] == (StepStatus.WAITING, "waiting for transform-b")
    assert states["notify"][0] is StepStatus.NOT_NEEDED

    shown = cli("pipeline", "nightly-show", "-c", str(fleet.conf))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert (
        lines[0].startswith("pipeline nightly (root extract), firing ")
        and "in progress" in lines[0]
    )
    assert lines[1].split() == ["LAYER", "STEP", "EDGES", "STATE"]
    load = next(line for line in lines if " load " in line)
    assert load.split()[:4] == ["2", "load", "after", "transform-a,"]
    assert load.endswith("waiting for transform-b")
    on = cli("pipeline", "nightly-show", "--json", "-c", str(fleet.conf))
    data = json.loads(on.stdout)
    assert data["key"] == seed.key and data["in_progress"] is True
    by_step = {s["step"]: s for s in data["steps"]}
    assert by_step["load"]["waiting_for"] == ["transform-b"]
    assert by_step["transform-b"]["running"]["host"] == "host-b"

    earlier = Firing(older.at, "").iso
    old = cli("pipeline", "nightly-show", "--firing", earlier, "--json", "-c", str(fleet.conf))
    steps = {s["step"]: s for s in json.loads(old.stdout)["steps"]}
    assert steps["transform-a"]["status"] == "failed"
    assert steps["load"]["status"] == "skipped" and steps["load"]["skipped_by"] == "transform-a"
    assert steps["load"]["detail"] == "skipped: transform-a failed"
    assert steps["notify"]["status"] == "waiting"  # called for, not started yet
    # Its daemon died: its claim's lease is no longer renewed.
    fleet.dynamodb.delete_item(
        TableName=fleet.table, Key={"Id": {"S": claim}, "Type": {"S": THROTTLE_TYPE}}
    )
    stale = sqsjkr.Fleet(str(fleet.conf)).pipeline("nightly-show").step("transform-b")
    assert stale is not None and stale.status is StepStatus.RUNNING
    assert "(stale: its daemon stopped renewing its claim" in stale.detail
    missing = cli(
        "pipeline", "nightly-show", "--firing", "2001-01-01T00:00:00Z", "-c", str(fleet.conf)
    )
    assert missing.returncode == 1 and "2001-01-01T00:00:00Z firing" in missing.stderr


def test_firings_shows_each_firings_steps(
    fleet: WebFleet, cli: Cli, aws_env: dict[str, str]
) -> None:
    """`sqsjkr firings` lists each step of the pipeline a firing started under it, --json too."""
    now = time.time()
    create_schedule(fleet, "nightly-ledger", "cron(0 * * * ? *)", age=3 * HOUR)
    seed = Seeder(fleet, nightly("ledger"), "nightly-ledger", hour_mark(now) - HOUR)
    seed.ended("extract", RunOutcome.SUCCEEDED, seed.at + 60)
    seed.ended("transform-a", RunOutcome.SUCCEEDED, seed.at + 100)
    seed.ended("transform-b", RunOutcome.SUCCEEDED, seed.at + 110)
    seed.ended("load", RunOutcome.SUCCEEDED, seed.at + 200, host="host-d")

    shown = cli("firings", "nightly-ledger", "--since", "150m", "-c", str(fleet.conf))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "    pipeline ledger (root extract)" in text and ": over" in text
    load = next(line for line in text.splitlines() if " load " in line)
    assert line_indented(load) and "succeeded on host-d" in load
    on = cli("firings", "nightly-ledger", "--since", "150m", "--json", "-c", str(fleet.conf))
    [row] = [r for r in json.loads(on.stdout) if r["pipeline"] is not None]
    assert row["pipeline"]["key"] == seed.key and row["pipeline"]["in_progress"] is False
    assert {s["step"]: s["status"] for s in row["pipeline"]["steps"]} == {
        "extract": "succeeded",
        "transform-a": "succeeded",
        "transform-b": "succeeded",
        "load": "succeeded",
        "notify": "not needed",
    }
    # The event's page draws it, and links to each firing's run.
    served = fleet.serve()
    try:
        page = requests.get(f"{served.url}event", params={"id": "nightly-ledger"}, timeout=10)
    finally:
        served.close()
    assert page.status_code == 200
    assert 'data-step="load" data-status="succeeded"' in page.text
    assert f'pipeline={seed.key}#pipeline" aria-current="true"' in page.text
    # A step's event has no schedule: its firings are its root's, with the same run under each.
    step = cli("firings", seed.event("load"), "--since", "150m", "-c", str(fleet.conf))
    assert step.returncode == 0, step.stderr
    assert "is a step of a pipeline, with no schedule of its own" in step.stderr
    assert "    pipeline ledger (root extract)" in step.stdout and ": over" in step.stdout


def line_indented(line: str) -> bool:
    return line.startswith("    ")


def test_status_check_names_a_stuck_pipeline(
    fleet: WebFleet, cli: Cli, aws_env: dict[str, str]
) -> None:
    """load's parents succeeded 3h ago and it never started: the check is critical and says so
    (in its root's verdict, the run being its last); a run whose last step ended a minute ago is
    not stuck."""
    now = time.time()
    stuck = Seeder(fleet, nightly("stuck"), "nightly-stuck", hour_mark(now) - 5 * HOUR)
    stuck.ended("extract", RunOutcome.SUCCEEDED, now - 4 * HOUR)
    stuck.ended("transform-a", RunOutcome.SUCCEEDED, now - 3.5 * HOUR)
    stuck.ended("transform-b", RunOutcome.SUCCEEDED, now - 3 * HOUR - 60)
    fresh = Seeder(fleet, nightly("fresh"), "nightly-fresh", hour_mark(now) - HOUR)
    fresh.ended("extract", RunOutcome.SUCCEEDED, now - 60)

    shown = cli("status", "--check", "-c", str(fleet.conf))
    assert shown.returncode == 2, shown.stdout + shown.stderr
    line = shown.stdout.strip()
    assert line.startswith("SQSJKR CRITICAL - ")
    # Its root's verdict names its last run stuck, and the run is not named a second time.
    said = "nightly-stuck: pipeline stuck is stuck: load has not started 3h1m after transform-b "
    assert said + "succeeded for the " in line
    assert line.count("load has not started 3h1m") == 1
    assert "pipeline fresh" not in line


#: A step's name as a hand-written state item could carry it (the contract refuses it in a
#: message): the page must show it as text.
HOSTILE_STEP = '<img src=x onerror="alert(1)">'


def hostile_run(fleet: WebFleet, root_event: str, at: float) -> str:
    """A run's state item written by hand, with a hostile pipeline and step name; its key."""
    key = f"hand-{uuid.uuid4().hex[:8]}"
    graph = {
        "name": HOSTILE_ID,
        "root": "extract",
        "steps": {
            "extract": {"after": [], "on_failure": []},
            HOSTILE_STEP: {"after": ["extract"], "on_failure": []},
        },
    }
    fleet.dynamodb.put_item(
        TableName=fleet.table,
        Item={
            "Id": {"S": f"pipeline|{key}"},
            "Type": {"S": "pipeline"},
            "Name": {"S": HOSTILE_ID},
            "Root": {"S": "extract"},
            "Graph": {"S": json.dumps(graph)},
            "Succeeded": {"SS": ["extract"]},
            "StartedAt": {"N": str(at)},
            "UpdatedAt": {"N": str(at)},
            "Expired": {"N": str(int(at + 86400))},
        },
    )
    fleet.history().finished(
        record(root_event, at, RunOutcome.SUCCEEDED, pipeline_key=key, pipeline_step="extract")
    )
    return key


def test_the_event_page_draws_a_firings_pipeline_in_chromium(fleet: WebFleet) -> None:
    """The event page draws the run: each step's box coloured by its state, the legend, a step's
    run page linking back to its firing's pipeline; a hostile pipeline or step name is text."""
    from tests.test_web_e2e import CHROMIUM, CHROMIUM_ARGS  # skips without a browser

    sync_api = pytest.importorskip("playwright.sync_api")
    now = time.time()
    seed = Seeder(fleet, nightly("drawn"), "nightly-web", hour_mark(now) - HOUR)
    seed.ended("extract", RunOutcome.SUCCEEDED, now - 300)
    seed.ended("transform-a", RunOutcome.ERRORED, now - 200)
    seed.running("transform-b", "host-b", now - 100)
    hostile_key = hostile_run(fleet, "nightly-evil", now - 50)
    served = fleet.serve()
    dialogs: list[str] = []
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page()
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                page.goto(f"{served.url}event?id=nightly-web")
                svg = page.locator("svg.pipeline-graph")
                sync_api.expect(svg).to_be_visible()
                fills = {
                    step: svg.locator(f'g.step[data-step="{step}"] rect').evaluate(
                        "(r) => getComputedStyle(r).fill"
                    )
                    for step in ("extract", "transform-a", "transform-b", "load", "notify")
                }
                assert fills["extract"] == "rgb(230, 244, 234)"  # succeeded
                assert fills["transform-a"] == "rgb(253, 232, 238)"  # failed
                assert fills["transform-b"] == "rgb(232, 240, 254)"  # running
                statuses = svg.locator("g.step").evaluate_all(
                    "(gs) => gs.map((g) => g.dataset.step + ':' + g.dataset.status)"
                )
                assert sorted(statuses) == [
                    "extract:succeeded",
                    "load:skipped",
                    "notify:waiting",
                    "transform-a:failed",
                    "transform-b:running",
                ]
                if os.environ.get("SQSJKR_SCREENSHOTS"):
                    page.screenshot(path=os.environ["SQSJKR_SCREENSHOTS"] + "/pipeline.png")
                assert svg.locator("path.edge.on_failure").count() == 1
                assert svg.locator("path.edge.after").count() == 4
                sync_api.expect(page.locator("#pipeline .legend")).to_contain_text("not needed")
                # The failed step's box links to its run, whose page links back here.
                svg.locator('g.step[data-step="transform-a"] a').click()
                sync_api.expect(page.locator("h1")).to_contain_text("Run of")
                page.get_by_role("link", name="its firing's pipeline").click()
                sync_api.expect(page.locator("#pipeline h2")).to_contain_text("drawn")

                page.goto(f"{served.url}event?id=nightly-evil&pipeline={hostile_key}")
                shown = page.locator("#pipeline")
                sync_api.expect(shown.locator("h2")).to_contain_text(HOSTILE_ID)
                sync_api.expect(shown.locator(".pipeline-steps")).to_contain_text(HOSTILE_STEP)
                assert page.locator("#pipeline img, #pipeline script").count() == 0
            finally:
                browser.close()
    finally:
        served.close()
    assert dialogs == []


def metric(port: int, name: str, pipeline: str) -> float | None:
    """The value of a pipeline's gauge on the daemon's /metrics (None: no such series)."""
    for line in http_get_text(port, "/metrics").splitlines():
        if line.startswith(f'{name}{{pipeline="{pipeline}"}} '):
            return float(line.split()[-1])
    return None


def test_a_real_daemons_pipeline_seen_by_its_gauges_and_the_faces(
    aws: Aws, start_daemon: Start, tmp_path: Path, cli: Cli
) -> None:
    """One daemon runs extract -> load, load waiting on a file: while it runs, the gauge says in
    progress and `sqsjkr pipeline` names load running on its host (its claim found by the run
    key); once it ends, the gauge says over and every step succeeded."""
    go = tmp_path / "go"
    name = f"seen-{uuid.uuid4().hex[:6]}"
    wait = f"while [ ! -f {go} ]; do sleep 0.05; done"
    body = {
        "event_id": f"{name}-extract",
        "command": "true",
        "origin": "send",
        "pipeline": {
            "name": name,
            "root": "extract",
            "steps": {
                "extract": {},
                "load": {
                    "after": ["extract"],
                    "job": {"command": wait, "event_id": f"{name}-load"},
                },
            },
        },
    }
    conf = tmp_path / "seen.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    daemon = start_daemon("run", "-c", str(conf))
    port = daemon.stats_port
    key = aws.send(body)
    wait_until(lambda: metric(port, "sqsjkr_pipeline_in_progress", name) == 1.0, what="in progress")

    def load_running() -> str | None:
        shown = cli("pipeline", f"{name}-extract", "-c", str(conf))
        return shown.stdout if "running on" in shown.stdout else None

    text = wait_until(load_running, what="load running")
    row = next(line for line in text.splitlines() if " load " in line)
    assert f"run {key} (sent by hand): in progress" in text.splitlines()[0]
    assert "after extract" in row and "running on " in row
    go.touch()
    wait_until(lambda: metric(port, "sqsjkr_pipeline_in_progress", name) == 0.0, what="over")
    ended = metric(port, "sqsjkr_pipeline_last_step_end_timestamp_seconds", name)
    assert ended is not None and ended > time.time() - 60
    view = sqsjkr.Fleet(str(conf)).pipeline(f"{name}-load")  # a step's event finds it too
    assert [(s.name, s.status) for s in view.steps] == [
        ("extract", StepStatus.SUCCEEDED),
        ("load", StepStatus.SUCCEEDED),
    ]
    assert not view.in_progress and view.key == key
    assert daemon.stop() == 0


def test_the_gauges_follow_the_newest_step_end() -> None:
    """An older state (a redelivery's, a late write) never moves the gauges back."""
    metrics = Metrics(Stats(1), Health())
    metrics.pipeline_step_ended("nightly", 200.0, True)
    metrics.pipeline_step_ended("nightly", 100.0, False)
    text = metrics.exposition().decode()
    assert 'sqsjkr_pipeline_in_progress{pipeline="nightly"} 1.0' in text
    assert 'sqsjkr_pipeline_last_step_end_timestamp_seconds{pipeline="nightly"} 200.0' in text
    metrics.pipeline_step_ended("nightly", 300.0, False)
    assert 'sqsjkr_pipeline_in_progress{pipeline="nightly"} 0.0' in metrics.exposition().decode()


def test_the_event_page_draws_a_step_run_again_within_the_freshness_window(
    fleet: WebFleet,
) -> None:
    """A failed step is run again and succeeds: the root's event page draws it so once the
    cache's FRESH_SECONDS have passed, as every other read of the page, not a minute later with
    the firings' ledger; what the page shows from a read older than that says how old it is."""
    ticks = [0.0]
    wall = time.time()
    shown = Fleet(
        load(str(fleet.conf)), Cache(clock=lambda: ticks[0]), clock=lambda: wall + ticks[0]
    )
    client = create_app(shown, Guard("127.0.0.1", 8080)).test_client()

    def steps() -> tuple[dict[str, str], str]:
        page = client.get(
            "/event", query_string={"id": "nightly-rerun"}, base_url="http://127.0.0.1:8080"
        )
        assert page.status_code == 200
        return dict(re.findall(r'data-step="([^"]+)" data-status="([^"]+)"', page.text)), page.text

    create_schedule(fleet, "nightly-rerun", "cron(0 * * * ? *)", age=3 * HOUR)
    seed = Seeder(fleet, nightly("rerun"), "nightly-rerun", hour_mark(wall) - HOUR)
    seed.ended("extract", RunOutcome.SUCCEEDED, seed.at + 60)
    seed.ended("transform-a", RunOutcome.ERRORED, seed.at + 100)
    seed.ended("transform-b", RunOutcome.SUCCEEDED, seed.at + 110)
    before, text = steps()
    assert before["transform-a"] == "failed" and before["load"] == "skipped"
    assert "as of" not in text
    overview = client.get("/", base_url="http://127.0.0.1:8080")
    assert overview.status_code == 200 and "as of" not in overview.text
    seed.ended("transform-a", RunOutcome.SUCCEEDED, seed.at + 600)
    seed.ended("load", RunOutcome.SUCCEEDED, seed.at + 700)
    ticks[0] = FRESH_SECONDS - 1
    assert steps()[0] == before  # within one freshness: the same read serves every view
    ticks[0] = FRESH_SECONDS + 1
    after, text = steps()
    assert after["transform-a"] == after["load"] == "succeeded"
    assert after == {
        s.name: s.status.value
        for s in sqsjkr.Fleet(str(fleet.conf)).pipeline("nightly-rerun").steps
    }
    # The firings and the schedules are read once a minute: the page says how old they are.
    age = f'<span class="as-of muted">(as of {format_span(FRESH_SECONDS + 1)} ago)</span>'
    assert f"<dt>Firings {age}</dt>" in text and f"<h2>Schedule {age}</h2>" in text
    overview = client.get("/", base_url="http://127.0.0.1:8080")
    assert f"</b> missed firings {age}</a>" in overview.text
