"""The demo's scheduled part: a pipeline fired every minute whose first firing fails a step, and a
schedule with catch_up made "late", whose missed firing the daemon's catch-up sends at start.

Both target a queue of their own (SCHEDULED_QUEUE), so that their on-going runs are counted apart
from the demo's jobs (stats v2 "queues"), whose summary counts stay those of DEMO_JOBS.
"""

from __future__ import annotations

import json
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing
from sqsjkr.local.site import DemoTimes, LocalSite

#: The queue of the demo's scheduled pipeline and late schedule, with workers of its own.
SCHEDULED_QUEUE = "sqsjkr-local-scheduled"
PIPELINE = "demo-pipeline"
PIPELINE_SCHEDULE = "sqsjkr-local-pipeline"
PIPELINE_EXPRESSION = "rate(1 minute)"
#: How long after setting up the pipeline fires first: the demo's jobs have mostly ended by then.
PIPELINE_FIRST_SECONDS = 20
LATE_EVENT = "demo-catch-up"
LATE_SCHEDULE = "sqsjkr-local-catch-up"
LATE_EXPRESSION = "rate(1 hour)"
LATE_CATCH_UP = "15m"
#: How long before local mode started the late schedule fired, with no daemon to run it: past
#: [check] grace (5 minutes), which catch-up waits before it sends a missed firing.
MISSED_AGO_SECONDS = 6 * 60
#: The marker file, in the demo's directory, that c makes when it fails: it fails only once.
MARKER = "demo-pipeline-c-failed-once"


@dataclass(frozen=True)
class DemoScheduled:
    """When the demo's scheduled pipeline first fires and the late schedule's missed firing,
    with the messages of their schedules."""

    times: DemoTimes
    pipeline_body: str
    late_body: str


def demo_scheduled(
    now: float, directory: Path, first_in: float = PIPELINE_FIRST_SECONDS
) -> DemoScheduled:
    """The demo's scheduled part as set up at `now`, its marker file in directory; its pipeline
    first fires first_in seconds later."""
    first = float(math.ceil(now) + first_in)
    missed = float(math.floor(now) - MISSED_AGO_SECONDS)
    return DemoScheduled(DemoTimes(first, missed), pipeline_body(directory / MARKER), late_body())


def _firing(expression: str) -> dict[str, str]:
    """A schedule's firing as the terraform module writes it, for the Scheduler to fill in."""
    return {
        "time": SCHEDULED_TIME,
        "schedule": SCHEDULE_ARN,
        "expression": expression,
        "timezone": "UTC",
    }


def pipeline_body(marker: Path) -> str:
    """The diamond a -> (b, c) -> d, c's on_failure notify: c fails while marker is missing,
    and makes it, so that only the first firing fails (and its forced re-run succeeds)."""

    def job(step: str, command: str) -> dict[str, str]:
        return {"command": command, "event_id": f"{PIPELINE}-{step}"}

    path = shlex.quote(str(marker))
    fails_once = (
        f"if [ -e {path} ]; then echo 'c: ran'; else touch {path}; "
        "echo 'c: failing on the first firing only' >&2; exit 3; fi"
    )
    steps = {
        "a": {"after": []},
        "b": {"after": ["a"], "job": job("b", "echo 'b: ran'")},
        "c": {"after": ["a"], "job": job("c", fails_once), "on_failure": ["notify"]},
        "d": {"after": ["b", "c"], "job": job("d", "echo 'd: ran after b and c'")},
        "notify": {"job": job("notify", "echo 'notify: c failed'")},
    }
    root = {
        **job("a", "echo 'a: ran'"),
        "firing": _firing(PIPELINE_EXPRESSION),
        "origin": "schedule",
        "pipeline": {"name": PIPELINE, "root": "a", "steps": steps},
    }
    root["event_id"] = PIPELINE
    return json.dumps(root)


def late_body() -> str:
    """The late schedule's message: a job with catch_up, as the terraform module writes one."""
    return json.dumps(
        {
            "command": "echo 'caught up: the firing missed before local mode started'",
            "event_id": LATE_EVENT,
            "firing": _firing(LATE_EXPRESSION),
            "origin": "schedule",
            "catch_up": LATE_CATCH_UP,
        }
    )


def scheduled_commands(site: LocalSite, times: DemoTimes, dashboard: str = "") -> str:
    """How to look at the scheduled pipeline and the caught-up firing: the commands to paste."""
    first = Firing(times.first, "").iso
    missed = Firing(times.missed, "").iso
    lines = [
        f"The scheduled pipeline {PIPELINE} (a -> (b, c) -> d, c's on_failure notify) fires "
        f"every minute from {first} on queue {SCHEDULED_QUEUE}; its first firing fails c "
        "(notify runs, d is skipped). Its firings, counted apart from the demo's jobs (stats v2 "
        f'"queues"), and its drawing:',
        site.pasteable("firings", PIPELINE),
        site.pasteable("pipeline", PIPELINE, "--firing", first),
        "What status --check makes of the fleet, the failed step included:",
        site.pasteable("status", "--check"),
        "Run the failed step again for that firing (c succeeds now, then d runs):",
        site.pasteable("trigger", f"{PIPELINE}-c", "--firing", first, "--force"),
    ]
    if dashboard.startswith("http"):
        url = dashboard.split(" ", 1)[0]
        lines.append(f"Its drawing on the dashboard: {url}event?id={PIPELINE}")
    lines += [
        f"The schedule {LATE_SCHEDULE} ({LATE_EXPRESSION}, catch_up {LATE_CATCH_UP}) fired at "
        f"{missed}, before local mode started: the daemon's catch-up sent that firing at start. "
        "The ledger shows it caught up:",
        site.pasteable("firings", LATE_EVENT),
    ]
    return "\n".join(lines)
