"""/metrics (read with prometheus_client's own parser), /healthz and /readyz of the real daemon,
and the JSON stats kept as they were."""

from __future__ import annotations

import http.client
import json
import time
import tracemalloc
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import boto3
import pytest
from prometheus_client import CollectorRegistry, Gauge, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sqsjkr import __version__
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.local.endpoint import create_table
from sqsjkr.observability.health import Health
from sqsjkr.observability.metrics import _BUCKETS as BUCKETS
from sqsjkr.observability.metrics import Metrics
from sqsjkr.observability.stats import Stats

from .conftest import REGION, Aws, Outage, Start, counted, run_daemon, wait_until
from .faults import Fault, FaultProxy

GO_LOCK = {"Id": {"S": "held"}, "Type": {"S": "lock"}, "EventId": {"S": "go-daemon"}}


def get(port: int, path: str) -> tuple[int, str, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.getheader("Content-Type") or "", response.read().decode()
    finally:
        conn.close()


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, by name and labels, as prometheus_client parses them."""
    status, content_type, text = get(port, "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found[(name, tuple(sorted(labels.items())))]


def test_metrics_after_jobs_of_each_outcome(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    aws.dynamodb.put_item(TableName=aws.table, Item=GO_LOCK)
    # "ok" is a schedule's firing (as the Scheduler substitutes it): its next one is exported.
    fired = Firing(float(int(time.time()) - 60), "arn:ok", "cron(0 2 * * ? *)", "Europe/Berlin")
    aws.send({"command": "true", "event_id": "ok", "lock_id": "free", "firing": fired.as_fields()})
    aws.send({"command": "exit 1", "event_id": "bad"})
    aws.send({"command": "sleep 30", "event_id": "slow", "timeout": "1s"})
    aws.send({"command": "true", "event_id": "late", "life_time": 1}, delay=2)
    aws.send({"command": "true", "lock_id": "held", "abort_if_locked": True})
    aws.send("not json")
    daemon, port = run_daemon(start_daemon, tmp_path, aws, kill_grace="1s")
    wait_until(counted(port, succeeded=1, errored=2, failed=3), timeout=30, what="all ended")
    found = samples(port)
    for outcome, count in [("succeeded", 1), ("errored", 1), ("timed_out", 1), ("cancelled", 1),
                           ("aborted", 1), ("invalid", 1), ("duplicate", 0), ("stopped", 0)]:  # fmt: skip
        assert value(found, "sqsjkr_jobs_total", outcome=outcome) == count, outcome
    assert value(found, "sqsjkr_job_duration_seconds_count", event_id="ok") == 1
    assert value(found, "sqsjkr_job_duration_seconds_count", event_id="bad") == 1
    # Failures as contract.run.FAILURES says: a life_time cancel is one, a lock abort is not.
    for outcome, count in [("errored", 1), ("timed_out", 1), ("cancelled", 1),
                           ("failed_to_start", 0)]:  # fmt: skip
        assert value(found, "sqsjkr_job_failures_total", outcome=outcome) == count, outcome
    failures = {dict(k[1])["outcome"] for k in found if k[0] == "sqsjkr_job_failures_total"}
    assert failures == {"errored", "timed_out", "cancelled", "failed_to_start"}
    # Each event's last run that started its command, kept between runs: a rate of the
    # histogram above shows nothing for a series that appears at its first run.
    for event in ("ok", "bad", "slow"):
        took = value(found, "sqsjkr_job_last_duration_seconds", event_id=event)
        ended = value(found, "sqsjkr_job_last_run_timestamp_seconds", event_id=event)
        assert abs(ended - runs_end(aws, event)) < 0.01 and 0 <= took < 30, event
    assert value(found, "sqsjkr_job_last_duration_seconds", event_id="slow") >= 1  # its timeout
    assert ("sqsjkr_job_last_duration_seconds", (("event_id", "late"),)) not in found
    assert value(found, "sqsjkr_job_queue_delay_seconds_count") == 3  # the three that started
    assert value(found, "sqsjkr_lock_wait_seconds_count") == 2  # "free" and "held"
    last_success = value(found, "sqsjkr_job_last_success_timestamp_seconds", event_id="ok")
    assert abs(last_success - runs_end(aws, "ok")) < 0.01
    two = datetime.fromtimestamp(fired.at, ZoneInfo("Europe/Berlin")).replace(
        hour=2, minute=0, second=0
    )
    expected = (
        two.timestamp() if two.timestamp() > fired.at else (two + timedelta(days=1)).timestamp()
    )
    assert value(found, "sqsjkr_event_next_firing_timestamp_seconds", event_id="ok") == expected
    assert ("sqsjkr_event_next_firing_timestamp_seconds", (("event_id", "bad"),)) not in found
    assert value(found, "sqsjkr_workers", state="idle") == 4
    assert value(found, "sqsjkr_workers", state="busy") == 0
    assert value(found, "sqsjkr_leases_lost_total") == 0
    assert value(found, "sqsjkr_receive_loop_last_turn_timestamp_seconds") > last_success - 60
    build = [labels for (name, labels) in found if name == "sqsjkr_build_info"]
    assert dict(build[0])["version"] == __version__
    # The JSON stats are as they were: mackerel-plugin-sqsjkr reads v1.
    assert json.loads(get(port, "/stats/metrics")[2]) == {"idle_worker": 4, "busy_worker": 0}
    assert set(json.loads(get(port, "/stats/metrics/v2")[2])) == {"workers", "invocations"}
    assert daemon.stop() == 0


def test_one_off_jobs_add_no_series_per_message(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """Jobs sent without an event_id share one duration series (event_id="") and have no last
    success: each send would otherwise add series for ever, and age into SqsjkrNoSuccessForADay."""
    for _ in range(3):
        aws.send({"command": "true"})
    aws.send({"command": "true", "event_id": "named"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=4), what="all four jobs")
    found = samples(port)
    durations = {
        dict(labels)["event_id"]: count
        for (name, labels), count in found.items()
        if name == "sqsjkr_job_duration_seconds_count"
    }
    assert durations == {"": 3, "named": 1}
    last_success = [
        dict(labels)["event_id"]
        for (name, labels) in found
        if name == "sqsjkr_job_last_success_timestamp_seconds"
    ]
    assert last_success == ["named"]
    last_duration = [
        dict(labels)["event_id"]
        for (name, labels) in found
        if name == "sqsjkr_job_last_duration_seconds"
    ]
    assert last_duration == ["named"]
    assert daemon.stop() == 0


def runs_end(aws: Aws, event_id: str) -> float:
    from sqsjkr.backends.history import DynamoHistory

    [record] = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(event_id, 1)
    return record.ended_at


def test_aws_errors_are_counted_by_service_and_code(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    with FaultProxy(moto_endpoint) as proxy:
        # The claim is a TransactWriteItems (with its event's "running now").
        claim = Fault(
            lambda c: c.action == "TransactWriteItems", error=(500, "InternalServerError"), times=2
        )
        proxy.add(claim)
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        daemon, port = run_daemon(start_daemon, tmp_path, aws)
        aws.send({"command": "true"})
        wait_until(counted(port, succeeded=1), what="the job, after two failed attempts")
        found = samples(port)
        assert value(found, "sqsjkr_aws_errors_total", service="dynamodb",
                     code="InternalServerError") == 2  # fmt: skip
        assert daemon.stop() == 0


def test_health_follows_the_endpoint_down_and_back(
    own_endpoint: Outage, start_daemon: Start, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    sqs = boto3.client("sqs", region_name=REGION, endpoint_url=own_endpoint.url)
    dynamodb = boto3.client("dynamodb", region_name=REGION, endpoint_url=own_endpoint.url)
    queue_url = sqs.create_queue(QueueName=f"health-{suffix}")["QueueUrl"]
    create_table(dynamodb, f"health-{suffix}")
    aws = Aws(sqs, dynamodb, f"health-{suffix}", queue_url, f"health-{suffix}")
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(lambda: get(port, "/readyz")[0] == 200, what="ready")
    assert json.loads(get(port, "/readyz")[2])["status"] == "ok"
    assert get(port, "/healthz")[0] == 200
    own_endpoint.down()
    wait_until(lambda: get(port, "/readyz")[0] == 503, timeout=30, what="not ready")
    reason = json.loads(get(port, "/readyz")[2])
    assert reason["status"] == "unavailable" and "receive failed" in reason["reason"]
    assert get(port, "/healthz")[0] == 200  # alive: the loop turns, retrying
    own_endpoint.up()
    wait_until(lambda: get(port, "/readyz")[0] == 200, timeout=60, what="ready again")
    assert daemon.stop() == 0


def test_a_stopping_daemon_is_not_ready(start_daemon: Start, tmp_path: Path, aws: Aws) -> None:
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "touch started; while [ ! -f release ]; do sleep 0.05; done"})
    wait_until((tmp_path / "started").exists, what="a job running")
    wait_until(lambda: get(port, "/readyz")[0] == 200, what="ready")
    daemon.proc.terminate()
    daemon.wait_for_log("waiting for 1 in-flight job(s)")
    status, _, body = get(port, "/readyz")
    assert (status, json.loads(body)["reason"]) == (503, "stopping: no longer receiving")
    (tmp_path / "release").touch()
    assert daemon.stop() == 0


def grafana_queries() -> dict[str, str]:
    """Each query of docs/grafana-dashboard.json (its panels' and its variables'), by where it is."""
    board = json.loads((Path(__file__).parent.parent / "docs/grafana-dashboard.json").read_text())
    queries = {
        f"panel {panel['title']!r} {target['refId']}": target["expr"]
        for panel in board["panels"]
        for target in panel["targets"]
    }
    for variable in board["templating"]["list"]:
        queries[f"variable {variable['name']!r}"] = variable["query"]["query"]
    # Importable: the data source is an input that Grafana's import asks for.
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert {p["datasource"]["uid"] for p in board["panels"]} == {"${DS_PROMETHEUS}"}
    return queries


def test_the_sample_alert_rules_and_the_grafana_dashboard_use_metrics_the_daemon_exports(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    import re

    import yaml

    rules = yaml.safe_load(
        (Path(__file__).parent.parent / "docs/prometheus-alerts.yml").read_text()
    )
    alerts = {rule["alert"]: rule["expr"] for rule in rules["groups"][0]["rules"]}
    # The four the issue asks for: failing jobs, no success for a day, leases lost, loop stalled.
    assert {"SqsjkrJobFailing", "SqsjkrNoSuccessForADay", "SqsjkrLeasesLost",
            "SqsjkrReceiveLoopStalled"} <= set(alerts)  # fmt: skip
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    aws.send({"command": "true"})
    wait_until(counted(port, succeeded=1), what="a job")
    families = text_string_to_metric_families(get(port, "/metrics")[2])
    # A family's samples may be none yet (no AWS error so far): go by the families.
    suffixes = ("", "_total", "_count", "_bucket", "_info")
    exported = {f"{f.name}{s}" for f in families for s in suffixes}
    queries = grafana_queries()
    # What the issue asks the dashboard to show.
    for wanted in ("sqsjkr_jobs_total", "sqsjkr_job_duration_seconds_bucket",
                   "sqsjkr_job_queue_delay_seconds_bucket", "sqsjkr_lock_wait_seconds_bucket",
                   "sqsjkr_workers", "sqsjkr_aws_errors_total", "sqsjkr_leases_lost_total"):  # fmt: skip
        assert any(wanted in query for query in queries.values()), wanted
    for name, expr in {**alerts, **queries}.items():
        for metric in re.findall(r"sqsjkr_\w+", expr):
            assert metric in exported, f"{name} uses {metric}, which /metrics does not have"
    # What a failure is, is said once (contract.run.FAILURES) and exported as a metric: no rule
    # or panel lists outcomes of its own.
    assert "sqsjkr_job_failures_total" in alerts["SqsjkrJobFailing"]
    assert "sqsjkr_job_failures_total" in queries["panel 'Failed jobs (last hour)' A"]
    for name, expr in {**alerts, **queries}.items():
        assert "outcome=" not in expr, name
    assert daemon.stop() == 0


def next_firings(metrics: Metrics) -> dict[tuple[str, ...], float]:
    """The next-firing gauge's series in metrics' exposition, by their label values."""
    return {
        tuple(sample.labels.values()): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        if family.name == "sqsjkr_event_next_firing_timestamp_seconds"
        for sample in family.samples
    }


def test_a_firing_run_sets_its_events_next_firing() -> None:
    metrics = Metrics(Stats(1), Health())
    due = datetime(2030, 6, 1, 2, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    nightly = Firing(due, "arn:nightly", "cron(0 2 * * ? *)", "Europe/Berlin")
    metrics.fired("nightly", nightly)
    metrics.fired("by-hand", Firing(due, "arn:by-hand"))  # no expression: no series
    assert next_firings(metrics) == {("nightly",): due + 86400}


def test_a_forged_expression_never_moves_a_next_firing_to_come_later() -> None:
    now = [0.0]
    metrics = Metrics(Stats(1), Health(), clock=lambda: now[0])
    due = datetime(2030, 6, 1, 2, 0, tzinfo=ZoneInfo("Europe/Berlin")).timestamp()
    now[0] = due + 10
    metrics.fired("nightly", Firing(due, "arn:nightly", "cron(0 2 * * ? *)", "Europe/Berlin"))
    forged = Firing(due + 20, "arn:nightly", "rate(1000000 days)", "UTC")
    metrics.fired("nightly", forged)
    metrics.fired("nightly", Firing(due + 30, "arn:nightly", "at(2030-01-01T00:00:00)", "UTC"))

    assert next_firings(metrics) == {
        ("nightly",): due + 86400
    }  # still tomorrow's, not in 2,739 years
    # Once that firing has come, the next run's message sets the gauge again.
    now[0] = due + 86400 + 10
    metrics.fired(
        "nightly", Firing(due + 86400, "arn:nightly", "cron(0 2 * * ? *)", "Europe/Berlin")
    )
    assert next_firings(metrics) == {("nightly",): due + 2 * 86400}


def test_events_past_the_cap_share_the_other_series(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """With [kicker] metrics_max_events = 2, the first two events get series of their own and
    the third event's run is counted under event_id="(other)": a host running ever new
    event_ids keeps its memory and its scrapes bounded."""
    aws.send({"command": "true", "event_id": "first"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws, metrics_max_events=2)
    wait_until(counted(port, succeeded=1), what="the first job")
    aws.send({"command": "true", "event_id": "second"})
    wait_until(counted(port, succeeded=2), what="the second job")
    aws.send({"command": "exit 3", "event_id": "third"})
    aws.send({"command": "true", "event_id": "first"})  # an event with series keeps them
    wait_until(counted(port, succeeded=3, errored=1), what="the last two jobs")
    found = samples(port)
    durations = {
        dict(labels)["event_id"]: count
        for (name, labels), count in found.items()
        if name == "sqsjkr_job_duration_seconds_count"
    }
    assert durations == {"first": 2, "second": 1, "(other)": 1}
    last_ends = {
        dict(labels)["event_id"]
        for (name, labels) in found
        if name == "sqsjkr_job_last_run_timestamp_seconds"
    }
    assert last_ends == {"first", "second", "(other)"}
    assert value(found, "sqsjkr_job_failures_total", outcome="errored") == 1
    assert daemon.stop() == 0
    assert 'counted under event_id="(other)"' in daemon.log


def test_an_event_past_the_cap_has_no_next_firing_of_its_own() -> None:
    metrics = Metrics(Stats(1), Health(), max_events=1)
    due = datetime(2030, 6, 1, 2, 0, tzinfo=ZoneInfo("UTC")).timestamp()
    for event in ("nightly", "hourly"):
        metrics.fired(event, Firing(due, f"arn:{event}", "cron(0 2 * * ? *)", "UTC"))
    assert next_firings(metrics) == {("nightly",): due + 86400}


def record(event_id: str, duration: float, outcome: RunOutcome = RunOutcome.SUCCEEDED) -> RunRecord:
    return RunRecord(
        event_id=event_id,
        message_id=uuid.uuid4().hex,
        host="host",
        owner="owner",
        command="true",
        sent_at=1000.0,
        claimed_at=1000.5,
        ended_at=1001.0 + duration,
        outcome=outcome,
        version=__version__,
        started_at=1001.0,
    )


def test_per_event_durations_read_as_prometheus_clients_own_histogram() -> None:
    """The per-event series are plain numbers written out at each scrape: the same samples as a
    prometheus_client Histogram and Gauges fed the same runs (its _created times apart)."""
    runs = [("a", 0.7), ("a", 4.3), ("b", 0.005), ("b", 86400.0), ("c", 1e6), ("a", 0.1)]
    metrics = Metrics(Stats(1), Health())
    registry = CollectorRegistry()
    reference = Histogram(
        "sqsjkr_job_duration_seconds", "", ["event_id"], buckets=BUCKETS, registry=registry
    )
    last_duration = Gauge("sqsjkr_job_last_duration_seconds", "", ["event_id"], registry=registry)
    for event_id, duration in runs:
        run = record(event_id, duration, RunOutcome.ERRORED)
        metrics.report(run)
        reference.labels(event_id).observe(run.duration)
        last_duration.labels(event_id).set(run.duration)
    ours = {s for s in parsed(metrics.exposition().decode()) if s[0].startswith(PER_EVENT)}
    theirs = {s for s in parsed(generate_latest(registry).decode()) if s[0].startswith(PER_EVENT)}
    assert {s[0] for s in ours} >= {
        "sqsjkr_job_duration_seconds_bucket",
        "sqsjkr_job_duration_seconds_created",
        "sqsjkr_job_last_run_timestamp_seconds",
    }
    shared = {"sqsjkr_job_duration_seconds_bucket", "sqsjkr_job_duration_seconds_count"}
    shared |= {"sqsjkr_job_duration_seconds_sum", "sqsjkr_job_last_duration_seconds"}
    assert {s for s in ours if s[0] in shared} == {s for s in theirs if s[0] in shared}
    # Errored runs: no last success yet, as before the first success.
    assert not any(s[0] == "sqsjkr_job_last_success_timestamp_seconds" for s in ours)


@pytest.mark.parametrize("flag", ["true", "1", "T"])
def test_per_event_series_leave_out_created_as_prometheus_client_is_told(
    monkeypatch: pytest.MonkeyPatch, flag: str
) -> None:
    """PROMETHEUS_DISABLE_CREATED_SERIES, which prometheus_client's own histograms honour."""

    def created_samples() -> list[str]:
        metrics = Metrics(Stats(1), Health())
        metrics.report(record("a", 0.7))
        names = [sample[0] for sample in parsed(metrics.exposition().decode())]
        return [name for name in names if name == "sqsjkr_job_duration_seconds_created"]

    assert created_samples() == ["sqsjkr_job_duration_seconds_created"]
    monkeypatch.setenv("PROMETHEUS_DISABLE_CREATED_SERIES", flag)
    assert created_samples() == []


def test_the_series_of_500_events_take_under_half_a_mebibyte() -> None:
    """prometheus_client's children (a lock and an object per bucket) took 3.2 MiB for the
    default cap of 500 events: a fifteenth of the daemon's memory. Plain numbers take 0.2."""
    metrics = Metrics(Stats(1), Health(), max_events=500)
    records = [record(f"event-{n}", 0.01) for n in range(600)]
    metrics.report(record("warm-up", 0.01))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for each in records:
            metrics.report(each)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 512 * 1024, f"{grown / 2**20:.2f} MiB"
    counts = {
        s[1]: s[2]
        for s in parsed(metrics.exposition().decode())
        if s[0] == "sqsjkr_job_duration_seconds_count"
    }
    assert len(counts) == 501 and counts[(("event_id", "(other)"),)] == 101


PER_EVENT = ("sqsjkr_job_duration_seconds", "sqsjkr_job_last_")


def parsed(text: str) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {
        (sample.name, tuple(sorted(sample.labels.items())), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
