"""The faces tell the truth about a pipeline, against moto over HTTP: a step's event judged through
its pipeline's runs (never by its root's schedule), a root's verdict carrying its pipeline's last
run (failed, with the steps it skipped, or stuck) in `status --check` and on the dashboard.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import requests

import sqsjkr
from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.contract.pipeline import Pipeline, Step
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import ResourceMissingError
from sqsjkr.fleet.pipeline_steps import StepStatus, StepView, stuck_reasons
from sqsjkr.fleet.wording import local_time
from tests.conftest import Aws, Cli, Start, config_text, wait_until
from tests.test_firings import HOUR, hour_mark
from tests.test_pipeline_view import Seeder
from tests.web_fleet import WebFleet, make_fleet, record

HOURLY = "cron(0 * * * ? *)"


@pytest.fixture
def fleet(aws_env: dict[str, str], tmp_path: Path) -> WebFleet:
    """A fleet of the test's own: `status --check` judges every event of its table."""
    made = make_fleet(tmp_path)
    made.conf.write_text(made.conf.read_text() + '\n[check]\ngrace = "1s"\n')
    return made


def chain(name: str) -> Pipeline:
    """root -> work -> report; notify on work's failure."""
    job = {"command": "true"}
    return Pipeline(
        name,
        "root",
        {
            "root": Step("root"),
            "work": Step("work", ("root",), ("notify",), job),
            "report": Step("report", ("work",), (), job),
            "notify": Step("notify", (), (), job),
        },
    )


def firing_of(fleet: WebFleet, root_event: str, at: float, prefix: str) -> Seeder:
    """A firing's run of the hourly pipeline, its steps' events shared by every firing's."""
    return Seeder(fleet, chain("hourly"), root_event, at, prefix=prefix, expression=HOURLY)


def test_a_steps_event_is_never_late_by_its_roots_schedule(fleet: WebFleet, cli: Cli) -> None:
    """A healthy hourly pipeline: notify (on_failure) ran for a failed firing 3h ago, report
    waits for work, which runs now. Neither is late by the root's schedule: the check is OK.
    (Before, both were CRITICAL: "the ... firing of ...-notify has not run".)"""
    now = time.time()
    root, prefix = "hourly", uuid.uuid4().hex[:6]
    top = hour_mark(now)
    old = firing_of(fleet, root, top - 3 * HOUR, prefix)
    old.ended("root", RunOutcome.SUCCEEDED, old.at + 5)
    old.ended("work", RunOutcome.ERRORED, old.at + 60)
    old.ended("notify", RunOutcome.SUCCEEDED, old.at + 70)
    for k in (2, 1):
        run = firing_of(fleet, root, top - k * HOUR, prefix)
        run.ended("root", RunOutcome.SUCCEEDED, run.at + 5)
        run.ended("work", RunOutcome.SUCCEEDED, run.at + 60)
        run.ended("report", RunOutcome.SUCCEEDED, run.at + 70)
    latest = firing_of(fleet, root, top, prefix)
    latest.ended("root", RunOutcome.SUCCEEDED, min(top + 0.5, now))
    latest.running("work", "host-b", min(top + 0.6, now))
    # Past the root's grace (1s) for the newest firing, which report has not reached yet.
    time.sleep(max(0.0, top + 2.5 - time.time()))

    shown = cli("status", "--check", "-c", str(fleet.conf))
    assert shown.stdout.strip() == "SQSJKR OK - 4 events", shown.stdout + shown.stderr
    assert shown.returncode == 0


def test_a_failed_run_shows_in_its_roots_verdict_and_the_failed_steps_row(
    fleet: WebFleet, cli: Cli
) -> None:
    """The pipeline's last run failed at work and skipped report: the root's verdict is a
    WARNING naming both (status --check, the overview, the root's event page), and work's row
    names its pipeline and the step it skipped."""
    now = time.time()
    seed = Seeder(fleet, chain("hourly"), "nightly-root", hour_mark(now) - HOUR)
    seed.ended("root", RunOutcome.SUCCEEDED, now - 600)
    seed.ended("work", RunOutcome.ERRORED, now - 300)
    seed.ended("notify", RunOutcome.SUCCEEDED, now - 200)

    shown = cli("status", "--check", "-c", str(fleet.conf))
    assert shown.returncode == 2, shown.stdout + shown.stderr
    line = shown.stdout.strip()
    work = seed.event("work")
    assert f"{work}: 1 failure in a row, a step of pipeline hourly's run of the " in line
    assert "firing, which skipped report" in line
    failed_at = "pipeline hourly's run of the {} firing failed at work, skipped report"
    root_said = "nightly-root: " + failed_at.format(local_time(seed.at))
    assert root_said in line, line

    drawn = cli("pipeline", "nightly-root", "-c", str(fleet.conf)).stdout.splitlines()[0]
    assert drawn.endswith(": over, failed at work, skipped report"), drawn

    served = fleet.serve()
    try:
        page = requests.get(f"{served.url}event", params={"id": "nightly-root"}, timeout=10)
        overview = requests.get(served.url, timeout=10)
    finally:
        served.close()
    assert page.status_code == 200 and overview.status_code == 200
    verdict = page.text.split("<dt>Verdict</dt>", 1)[1].split("</dd>", 1)[0]
    assert 'class="level warning">WARNING' in verdict
    assert ": over, failed at work, skipped report; last step ended" in page.text
    assert failed_at.format(local_time(seed.at)).replace("'", "&#39;") in verdict
    rows = overview.text.split('class="attention"', 1)[1]
    assert "nightly-root" in rows and "failed at work, skipped report" in rows
    assert "which skipped report" in rows.split(work, 1)[1]


def test_a_step_waiting_for_its_retry_is_told_so_and_not_stuck(fleet: WebFleet, cli: Cli) -> None:
    """work's first attempt errored 90 minutes ago with `retries = 1, retry_delay = "2h"`: its
    claim counts the attempt and names the retry's time. The faces say it waits for its retry
    (not "sent, not started yet"), and the check does not call it stuck before that retry is
    due (plus the hour a sent step may wait)."""
    now = time.time()
    seed = Seeder(fleet, chain("retrying"), "retry-root", hour_mark(now) - 2 * HOUR)
    seed.ended("root", RunOutcome.SUCCEEDED, now - 95 * 60)
    errored_at = now - 90 * 60
    fleet.history().finished(
        record(
            seed.event("work"),
            errored_at,
            RunOutcome.ERRORED,
            final=False,
            attempt=1,
            firing_at=seed.at,
            origin="pipeline",
            pipeline_key=seed.key,
            pipeline_step="work",
        )
    )
    retry_at = errored_at + 2 * HOUR
    fleet.dynamodb.put_item(
        TableName=fleet.table,
        Item={
            "Id": {"S": f"{seed.key}#step-work"},
            "Type": {"S": THROTTLE_TYPE},
            "Owner": {"S": "host-a:1:x"},
            "Attempts": {"N": "1"},
            "RetryAt": {"N": str(retry_at)},
            "Expired": {"N": str(int(now + 86400))},
        },
    )

    view = sqsjkr.Fleet(str(fleet.conf)).pipeline("retry-root")
    work = view.step("work")
    assert work is not None and work.status is StepStatus.WAITING
    assert work.detail.startswith("waiting for its retry: attempt 1 errored on host-a at ")
    assert work.detail.endswith(f"; attempt 2 at {local_time(retry_at)}")
    assert work.retry_at == retry_at and work.due_since == retry_at
    assert stuck_reasons(view, retry_at + 1800) == []
    [late] = stuck_reasons(view, retry_at + 2 * HOUR)
    assert late.startswith("work has not started 2h after its retry was due for the ")
    shown = cli("pipeline", "retry-root", "-c", str(fleet.conf))
    row = next(line for line in shown.stdout.splitlines() if " work " in line)
    assert "waiting for its retry" in row and "not started" not in row

    checked = cli("status", "--check", "-c", str(fleet.conf))
    assert checked.stdout.strip() == "SQSJKR OK - 2 events", checked.stdout + checked.stderr


def mark(fleet: WebFleet, at: float, **more: dict[str, str]) -> None:
    """A throttle item of a message taken at `at`, as a Go daemon writes it ({Id, Type, Expired:
    taken + the queue's retention}), with `more` as a sqsjkr daemon's would carry."""
    retention = int(
        fleet.sqs.get_queue_attributes(
            QueueUrl=fleet.queue_url, AttributeNames=["MessageRetentionPeriod"]
        )["Attributes"]["MessageRetentionPeriod"]
    )
    fleet.dynamodb.put_item(
        TableName=fleet.table,
        Item={
            "Id": {"S": uuid.uuid4().hex},
            "Type": {"S": THROTTLE_TYPE},
            "Expired": {"N": str(int(at) + retention)},
            **more,
        },
    )


def test_a_step_a_go_daemon_took_is_said_so(fleet: WebFleet, cli: Cli) -> None:
    """work's message was sent as root ended, and no sqsjkr daemon claimed it; a Go daemon
    marked a message of the queue 2 seconds later. The faces say what is known: taken by a Go
    daemon, which runs a step but does not move its pipeline on (not "has not started"). An
    older run whose step no Go daemon took near its send still has not started."""
    now = time.time()
    older = Seeder(fleet, chain("mixed"), "mixed-root", hour_mark(now) - 4 * HOUR)
    older.ended("root", RunOutcome.SUCCEEDED, now - 3 * HOUR)
    seed = Seeder(fleet, chain("mixed"), "mixed-root", hour_mark(now) - 3 * HOUR)
    sent = now - 2 * HOUR
    seed.ended("root", RunOutcome.SUCCEEDED, sent)
    # A sqsjkr daemon's claim of another message and its mark of a firing's message, first:
    # neither is a Go daemon's.
    mark(fleet, sent + 0.5, Owner={"S": "host-b:1:x"})
    mark(fleet, sent + 1, Firing={"S": "sqsjkr-x@2030-01-01T00:00:00Z"})
    mark(fleet, sent + 2)

    view = sqsjkr.Fleet(str(fleet.conf)).pipeline("mixed-root")
    work = view.step("work")
    assert view.key == seed.key and work is not None
    assert work.detail.startswith(
        "taken by a Go daemon, which runs a step but does not move its pipeline on (no sqsjkr "
        "daemon claimed it; a Go daemon took a message of the queue "
    )
    assert work.taken_by_go is not None and sent < work.taken_by_go <= sent + 2
    shown = cli("pipeline", "mixed-root", "--json", "-c", str(fleet.conf))
    steps = {s["step"]: s for s in json.loads(shown.stdout)["steps"]}
    assert steps["work"]["taken_by_go"] == work.taken_by_go

    checked = cli("status", "--check", "-c", str(fleet.conf))
    line = checked.stdout.strip()
    assert checked.returncode == 2, line + checked.stderr
    assert (
        "mixed-root: pipeline mixed is stuck: work was taken by a Go daemon, which runs a " in line
    )
    assert "pipeline mixed: work has not started 3h after root succeeded for the " in line
    # The root's page says so in its verdict, as the check does.
    served = fleet.serve()
    try:
        page = requests.get(f"{served.url}event", params={"id": "mixed-root"}, timeout=10)
    finally:
        served.close()
    verdict = page.text.split("<dt>Verdict</dt>", 1)[1].split("</dd>", 1)[0]
    assert 'class="level critical">CRITICAL' in verdict
    assert "pipeline mixed is stuck: work was taken by a Go daemon" in verdict


def test_a_real_daemons_step_waiting_for_its_retry(
    aws: Aws, start_daemon: Start, tmp_path: Path, cli: Cli
) -> None:
    """A daemon runs root, then work, whose first attempt fails with `retries = 1, retry_delay =
    "2h"`: `sqsjkr pipeline` reads its record and its claim as the daemon wrote them, and says it
    waits for its retry, attempt 2 two hours on."""
    name = f"retry-{uuid.uuid4().hex[:6]}"
    body = {
        "event_id": f"{name}-root",
        "command": "true",
        "origin": "send",
        "pipeline": {
            "name": name,
            "root": "root",
            "steps": {
                "root": {},
                "work": {
                    "after": ["root"],
                    "job": {
                        "command": "exit 1",
                        "event_id": f"{name}-work",
                        "retries": 1,
                        "retry_delay": "2h",
                    },
                },
            },
        },
    }
    conf = tmp_path / "retry.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    daemon = start_daemon("run", "-c", str(conf))
    sent_at = time.time()
    aws.send(body)

    def waiting() -> StepView | None:
        try:
            step = sqsjkr.Fleet(str(conf)).pipeline(f"{name}-root").step("work")
        except ResourceMissingError:
            return None
        # Both the claim's retry and attempt 1's record: a read between the daemon's two writes
        # (or a claim read after them and records before) sees the one alone.
        told = step is not None and step.retry_at is not None and step.run is not None
        return step if told else None

    work = wait_until(waiting, what="work waiting for its retry, attempt 1 recorded")
    assert work.detail.startswith("waiting for its retry: attempt 1 errored on ")
    assert "; attempt 2 at " in work.detail
    assert sent_at + HOUR < work.retry_at < time.time() + 3 * HOUR  # 2h, jittered
    shown = cli("pipeline", f"{name}-work", "-c", str(conf))
    row = next(line for line in shown.stdout.splitlines() if " work " in line)
    assert "waiting for its retry" in row
    assert daemon.stop() == 0
