"""The shipped alert rules and Grafana queries against Debian's Prometheus: promtool's unit tests of
the rules, and one real Prometheus scraping one real daemon for the whole module.
"""

from __future__ import annotations

import functools
import json
import math
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .conftest import Daemon, config_text, counted, new_aws, wait_until
from .web_fleet import module_env

DOCS = Path(__file__).parent.parent / "docs"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
ABSENT = "Debian's prometheus package is not installed (.ci/run installs it): no {} on PATH"

#: The events run once each: their commands started (so they have durations); "late" never
#: runs (older than its life_time), a failure all the same.
SUCCEEDING = ("quick", "sleepy")
STARTED = (*SUCCEEDING, "broken")

#: What Grafana puts in place of its variables: all daemons, and windows that a 1 s scrape fills.
GRAFANA_VARIABLES = {"$instance": ".*", "$__rate_interval": "30s", "$__range": "1h"}

#: Panels that show nothing while all is well: no AWS call has failed in this test.
QUIET_PANELS = {"AWS errors"}


@pytest.mark.skipif(PROMTOOL is None, reason=ABSENT.format("promtool"))
def test_each_alert_fires_on_its_case_and_stays_quiet_on_the_others() -> None:
    tests = DOCS / "prometheus-alerts.test.yml"
    done = subprocess.run(
        [str(PROMTOOL), "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Scraped:
    """A Prometheus (its HTTP API on port) that has scraped a daemon which ran the events."""

    port: int

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector expr gives now."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def ready(self) -> bool:
        """Whether Prometheus answers queries: it listens before its storage is open (503)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=5):
                return True
        except urllib.error.HTTPError:
            return False

    def alerts(self) -> dict[str, str]:
        """The alerts of the loaded rules, by name, with their state (pending or firing)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/alerts"
        with urllib.request.urlopen(url, timeout=10) as response:
            found = json.load(response)["data"]["alerts"]
        return {alert["labels"]["alertname"]: alert["state"] for alert in found}


def start_prometheus(directory: Path, target: int) -> tuple[subprocess.Popen[bytes], Path]:
    """Prometheus scraping 127.0.0.1:target every second, with the shipped alert rules."""
    shutil.copy(DOCS / "prometheus-alerts.yml", directory / "alerts.yml")
    (directory / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [alerts.yml]\n"
        "scrape_configs:\n"
        f"  - {{job_name: sqsjkr, static_configs: [{{targets: ['127.0.0.1:{target}']}}]}}\n"
    )
    log = directory / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(PROMETHEUS),
                "--config.file=prometheus.yml",
                "--storage.tsdb.path=data",
                "--web.listen-address=127.0.0.1:0",
            ],
            cwd=directory,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return proc, log


def listening(proc: subprocess.Popen[bytes], log: Path) -> int | None:
    """Prometheus' port, from its log, once it listens (it was given port 0)."""
    assert proc.poll() is None, log.read_text()
    match = re.search(r'msg="Listening on" address=127\.0\.0\.1:(\d+)', log.read_text())
    return int(match[1]) if match else None


@pytest.fixture(scope="module")
def scraped(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scraped]:
    if PROMETHEUS is None:
        pytest.skip(ABSENT.format("prometheus"))
    directory = tmp_path_factory.mktemp("prometheus")
    with module_env(moto_endpoint):
        aws = new_aws()
        conf = directory / "config.toml"
        conf.write_text(config_text(aws, stats="stats_port = 0", kill_grace="1s"))
        daemon = Daemon(["run", "-c", str(conf)], {}, directory)
        prometheus = None
        try:
            daemon.wait_for_log("receiving with")
            prometheus, log = start_prometheus(directory, daemon.stats_port)
            port = wait_until(lambda: listening(prometheus, log), what="Prometheus listening")
            found = Scraped(port)
            wait_until(found.ready, what="Prometheus ready")
            # A counter's first sample must come before its rise, or increase() sees none.
            wait_until(lambda: found.query('up{job="sqsjkr"} == 1'), what="a first scrape")
            aws.send({"command": "true", "event_id": "quick", "lock_id": "quick"})
            aws.send({"command": "sleep 1.2", "event_id": "sleepy"})
            aws.send({"command": "exit 3", "event_id": "broken"})
            aws.send({"command": "true", "event_id": "late", "life_time": 1}, delay=2)
            done = counted(daemon.stats_port, succeeded=2, errored=1, failed=1)
            wait_until(done, timeout=30, what="the four jobs")
            yield found
        finally:
            if prometheus is not None:
                prometheus.terminate()
                prometheus.wait(20)
            daemon.stop()


def grafana_panels() -> dict[str, list[str]]:
    """Each panel's queries, as Grafana sends them with the variables above."""
    board = json.loads((DOCS / "grafana-dashboard.json").read_text())
    panels = {}
    for panel in board["panels"]:
        queries = []
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            assert "$" not in expr, expr
            queries.append(expr)
        panels[panel["title"]] = queries
    return panels


def by_event(result: list[dict[str, Any]]) -> dict[str, float]:
    return {
        s["metric"]["event_id"]: float(s["value"][1]) for s in result if "event_id" in s["metric"]
    }


def test_the_grafana_panels_and_the_alerts_on_a_real_prometheus(scraped: Scraped) -> None:
    """One test, so that xdist never starts a second Prometheus and daemon for another worker."""
    every_panel_shows_each_event_that_ran_once(scraped)
    the_failure_panel_and_alert_count_the_failures_and_nothing_else(scraped)


def every_panel_shows_each_event_that_ran_once(scraped: Scraped) -> None:
    """Every query of every panel answers; those by event answer for each event, each of which
    ran once, with a finite value (a rate over a series born at its first run answers nothing)."""
    wanted = {
        "Last run's duration by event": STARTED,
        "Job duration p50 / p95 by event, since each daemon started": STARTED,
        "Hours since each event's last success": SUCCEEDING,
    }
    panels = grafana_panels()
    assert set(wanted) <= set(panels)

    def answered(expr: str, events: tuple[str, ...]) -> list[dict[str, Any]] | None:
        result = scraped.query(expr)
        values = by_event(result)
        if not result or not all(math.isfinite(values.get(e, math.nan)) for e in events):
            return None
        return result

    for title, queries in panels.items():
        if title in QUIET_PANELS:
            continue
        events = wanted.get(title, ())
        for expr in queries:
            wait_until(functools.partial(answered, expr, events), what=f"{title}: {expr}")
    [last] = panels["Last run's duration by event"]
    took = by_event(scraped.query(last))
    assert took["sleepy"] >= 1.2 and took["quick"] < 1.2


def the_failure_panel_and_alert_count_the_failures_and_nothing_else(scraped: Scraped) -> None:
    """An errored run and a life_time cancel are failures (docs/semantics.md, Outcomes): the
    panel counts them by outcome, and SqsjkrJobFailing fires, alone of the shipped alerts."""
    [failed] = grafana_panels()["Failed jobs (last hour)"]

    def counts() -> dict[str, float] | None:
        found = {s["metric"]["outcome"]: float(s["value"][1]) for s in scraped.query(failed)}
        return found if found.get("errored", 0) > 0 and found.get("cancelled", 0) > 0 else None

    found = wait_until(counts, what="the failures counted")
    assert found["timed_out"] == found["failed_to_start"] == 0
    assert set(found) == {"errored", "timed_out", "failed_to_start", "cancelled"}
    firing = wait_until(
        lambda: (a := scraped.alerts()).get("SqsjkrJobFailing") == "firing" and a,
        what="SqsjkrJobFailing firing",
    )
    assert set(firing) == {"SqsjkrJobFailing"}
