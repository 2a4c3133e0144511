"""Measure one `sqsjkr status --check` over many events: its AWS calls by action and its time.

Seeds an embedded moto table with N scheduled events (a summary and a few runs each) and runs the
check in this process; benchmarks/README.md records the figures.
"""

from __future__ import annotations

import argparse
import json
import logging
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
from api_calls import Calls

import sqsjkr.backends.aws
from sqsjkr.backends.history import RUN_TYPE_PREFIX, SUMMARY_TYPE
from sqsjkr.contract.config import load_config
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.status import CheckPolicy, check_verdict
from sqsjkr.local.endpoint import (
    LOCAL_ACCOUNT,
    LOCAL_REGION,
    create_table,
    local_endpoint,
    use_endpoint,
)

#: Runs kept per event: enough for the learned interval of the check as it was.
RUNS_PER_EVENT = 3
#: The events fire hourly, at minute 0.
EXPRESSION = "cron(0 * * * ? *)"
HOUR = 3600.0


def run_record(event_id: str, fired: float) -> dict[str, Any]:
    """A successful run of the event's firing at fired."""
    return {
        "event_id": event_id,
        "message_id": str(uuid.uuid4()),
        "host": "bench",
        "owner": "bench:1:x",
        "command": "true",
        "sent_at": fired,
        "claimed_at": fired + 1,
        "started_at": fired + 1,
        "ended_at": fired + 3,
        "outcome": "succeeded",
        "version": "bench",
        "exit_code": 0,
        "firing_at": fired,
        "firing_schedule": f"sched-{event_id}",
        "origin": "schedule",
    }


def event_items(event_id: str, last_fired: float) -> list[dict[str, Any]]:
    """The summary a daemon leaves after the event's last firing ran (its schedule known), and
    the items of its last RUNS_PER_EVENT runs."""
    last_run = run_record(event_id, last_fired)
    ended = last_run["ended_at"]
    summary = {
        "Id": {"S": event_id},
        "Type": {"S": SUMMARY_TYPE},
        "Expired": {"N": str(int(ended + 400 * 86400))},
        "LastRun": {"S": json.dumps(last_run)},
        "LastSuccessAt": {"N": str(int(ended))},
        "ConsecutiveFailures": {"N": "0"},
        "Schedule": {"S": f"sched-{event_id}"},
        "ScheduleExpression": {"S": EXPRESSION},
        "ScheduleTimezone": {"S": "UTC"},
        "LastFiringAt": {"N": str(int(last_fired))},
        "NextFiringAt": {"N": str(int(last_fired + HOUR))},
    }
    runs = []
    for i in range(RUNS_PER_EVENT):
        record = run_record(event_id, last_fired - i * HOUR)
        runs.append(
            {
                "Id": {"S": event_id},
                "Type": {"S": f"{RUN_TYPE_PREFIX}{int(record['ended_at'] * 1000):013d}#m{i}"},
                "Expired": {"N": str(int(record["ended_at"] + 30 * 86400))},
                "Record": {"S": json.dumps(record)},
            }
        )
    return [summary, *runs]


def seed(dynamodb: Any, table: str, events: int, now: float) -> None:
    """events hourly events whose last firing (this hour's) ran, with their earlier runs."""
    last_fired = now - now % HOUR
    items = [item for n in range(events) for item in event_items(f"event-{n:05d}", last_fired)]
    for i in range(0, len(items), 25):
        batch = [{"PutRequest": {"Item": item}} for item in items[i : i + 25]]
        pending: dict[str, Any] = {table: batch}
        while pending:
            pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args()
    # The embedded moto answers a query of thousands of items in seconds, where DynamoDB takes
    # milliseconds: the daemon's read timeout is not what is measured here.
    sqsjkr.backends.aws.DYNAMODB_READ_TIMEOUT = 300
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with local_endpoint() as endpoint, tempfile.TemporaryDirectory() as tmp:
        use_endpoint(endpoint)
        table = "sqsjkr-check-bench"
        dynamodb = boto3.client("dynamodb", region_name=LOCAL_REGION)
        create_table(dynamodb, table)
        now = time.time()
        started = time.perf_counter()
        seed(dynamodb, table, args.events, now)
        print(f"seeded {args.events} events in {time.perf_counter() - started:.1f}s")
        conf = Path(tmp) / "config.toml"
        conf.write_text(
            f'[account]\nid = "{LOCAL_ACCOUNT}"\nregion = "{LOCAL_REGION}"\n'
            f'[sqs]\nqueue_name = "jobs"\n[lock]\ntable = "{table}"\n'
        )
        config = load_config(conf)
        calls = Calls()
        with calls.counting():
            started = time.perf_counter()
            level, line = check_verdict(lambda: store_of(config), CheckPolicy(), time.time())
            took = time.perf_counter() - started
        counts, _ = calls.take()
        print(f"check: {level.name} {line[:100]}")
        print(f"{args.events} events: {sum(counts.values())} calls in {took:.2f}s: {dict(counts)}")


if __name__ == "__main__":
    main()
