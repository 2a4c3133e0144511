"""AWS calls and server time per page view of the web dashboard, on a fleet with a long history.

500 events with 30 days of hourly runs (360,000 run items) are written straight into the table of
an embedded moto endpoint; the dashboard then serves the overview, the events page, an event and
a run over HTTP. Run `python benchmarks/dashboard.py --help`; benchmarks/README.md has figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import requests
from api_calls import Calls
from moto.dynamodb.models import dynamodb_backends

import sqsjkr.backends.aws
from sqsjkr.backends.history import SUMMARY_TYPE, run_type
from sqsjkr.contract.config import load_config
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.local.endpoint import (
    LOCAL_ACCOUNT,
    LOCAL_REGION,
    create_queue,
    create_table,
    local_endpoint,
    use_endpoint,
)
from sqsjkr.web.cache import Cache
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.server import WebOptions, dashboard

QUEUE = "bench-dashboard"
TABLE = "bench-dashboard"
HOUR = 3600.0


def record(event: int, ended_at: float, failed: bool) -> RunRecord:
    return RunRecord(
        event_id=f"event-{event:04d}",
        message_id=f"m-{event:04d}-{int(ended_at)}",
        host=f"host-{event % 8}",
        owner=f"host-{event % 8}:100:abc",
        command=f"/usr/local/bin/job-{event:04d} --verbose",
        sent_at=ended_at - 40,
        claimed_at=ended_at - 39.5,
        started_at=ended_at - 39,
        ended_at=ended_at,
        outcome=RunOutcome.ERRORED if failed else RunOutcome.SUCCEEDED,
        version="bench",
        exit_code=1 if failed else 0,
        output="line of output\n" * 20,
    )


def seed(events: int, days: int, now: float) -> str:
    """Write every run item and summary in batches of 25; the key of one run for its page."""
    retention = 30 * 86400
    writes: list[dict[str, Any]] = []
    one_run = ""
    for event in range(events):
        runs = [
            record(event, now - hour * HOUR - event, event % 10 == 0 and hour < 3)
            for hour in range(days * 24, 0, -1)
        ]
        for run in runs:
            data = {k: v for k, v in run.as_dict().items() if k not in ("stdout", "stderr")}
            item = {
                "Id": {"S": run.event_id},
                "Type": {"S": run_type(run)},
                "Expired": {"N": str(int(run.ended_at + retention))},
                "Outcome": {"S": run.outcome.value},
                "Record": {"S": json.dumps(data)},
            }
            writes.append({"PutRequest": {"Item": item}})
        last = runs[-1]
        succeeded = [r for r in runs if r.outcome is RunOutcome.SUCCEEDED]
        summary = {
            "Id": {"S": last.event_id},
            "Type": {"S": SUMMARY_TYPE},
            "Expired": {"N": str(int(last.ended_at + 400 * 86400))},
            "LastRun": {
                "S": json.dumps({**last.as_dict(), "output": "", "stdout": "", "stderr": ""})
            },
            "LastSuccessAt": {"N": str(succeeded[-1].ended_at)},
            "ConsecutiveFailures": {"N": "3" if event % 10 == 0 else "0"},
        }
        writes.append({"PutRequest": {"Item": summary}})
        one_run = one_run or run_type(last)
    # Into moto's backend in this process, item by item: 14,400 BatchWriteItem calls over HTTP
    # take a quarter of an hour, and the pages' reads are what is measured.
    backend = dynamodb_backends[LOCAL_ACCOUNT][LOCAL_REGION]
    for write in writes:
        backend.put_item(TABLE, write["PutRequest"]["Item"])
    return one_run


@dataclass
class Clock:
    """The cache's clock, moved on by hand: "a view 6 s later" without waiting."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def view(base: str, path: str, calls: Calls) -> dict[str, Any]:
    calls.take()
    started = time.perf_counter()
    response = requests.get(base + path, timeout=600)
    elapsed = time.perf_counter() - started
    problem = response.text.split('class="error">', 1)[-1][:300]
    assert response.status_code == 200, (path, response.status_code, problem)
    counts, aws_seconds = calls.take()
    unread = re.search(r"The runs of (\d+) events are read at the next refreshes", response.text)
    return {
        "unread": int(unread[1]) if unread else 0,
        "path": path,
        "calls": sum(counts.values()),
        "by_operation": dict(sorted(counts.items())),
        "server_ms": round(elapsed * 1000, 1),
        "aws_ms": round(aws_seconds * 1000, 1),
        "own_ms": round((elapsed - aws_seconds) * 1000, 1),
    }


def measure(events: int, days: int) -> dict[str, Any]:
    # moto answers a query of TypeExpiredIndex by reading every item of the table (DynamoDB reads
    # the index's own entries), and an event's runs slowly: give it time, counted apart.
    sqsjkr.backends.aws.DYNAMODB_READ_TIMEOUT = 600
    calls = Calls()
    with local_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        use_endpoint(endpoint)
        sqs = boto3.client("sqs", region_name=LOCAL_REGION)
        dynamodb = boto3.client("dynamodb", region_name=LOCAL_REGION)
        create_queue(sqs, QUEUE, dead_letter=True)
        create_table(dynamodb, TABLE)
        now = time.time()
        started = time.perf_counter()
        one_run = seed(events, days, now)
        seeded = time.perf_counter() - started
        conf = Path(tmp) / "config.toml"
        conf.write_text(
            f'[account]\nid = "{LOCAL_ACCOUNT}"\nregion = "{LOCAL_REGION}"\n'
            f'[sqs]\nqueue_name = "{QUEUE}"\n[lock]\ntable = "{TABLE}"\n'
        )
        clock = Clock()
        config = load_config(conf)
        served = dashboard(config, WebOptions(port=0), Fleet(config, Cache(clock)))
        served.start()
        base = served.url.rstrip("/")
        results: list[dict[str, Any]] = []
        with calls.counting():

            def later(label: str, path: str) -> dict[str, Any]:
                clock.now += 6  # past the cache's 5 s: what a refresh or another tab costs
                results.append({"view": label, **view(base, path, calls)})
                return results[-1]

            shown = later("overview, first view", "/")
            views = 1
            while shown["unread"]:
                shown = later("overview, next refresh", "/")
                views += 1
            later("overview, every interval learned", "/")
            later("events, page 1", "/events")
            later("events, state=failing", "/events?state=failing")
            later("event", "/event?id=event-0001")
            key = one_run.replace("#", "%23")
            later("run", f"/run?event=event-0000&key={key}")
        served.close()
    return {
        "events": events,
        "days": days,
        "run_items": events * days * 24,
        "seed_seconds": round(seeded, 1),
        "overview_views_to_learn_every_interval": views,
        "views": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="Print the results as JSON.")
    args = parser.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # moto's line per request
    result = measure(args.events, args.days)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['events']} events, {result['run_items']} run items "
        f"(written in {result['seed_seconds']}s); the overview learned every interval after "
        f"{result['overview_views_to_learn_every_interval']} views"
    )
    print(f"{'view':36} {'calls':>5} {'server ms':>10} {'in AWS ms':>10} {'own ms':>8}  operations")
    for row in result["views"]:
        ops = ", ".join(f"{k} {v}" for k, v in row["by_operation"].items())
        print(
            f"{row['view']:36} {row['calls']:>5} {row['server_ms']:>10} {row['aws_ms']:>10} "
            f"{row['own_ms']:>8}  {ops}"
        )


if __name__ == "__main__":
    main()
