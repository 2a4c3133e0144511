"""What the dashboard's tests share: a fleet of their module's own on the moto server (queue,
dead-letter queue, table, seeded history), and dashboards served by waitress on free ports.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from sqsjkr.backends.history import DynamoHistory, run_type
from sqsjkr.commands.options import load
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.local.endpoint import LOCAL_ACCOUNT, create_queue, create_table
from sqsjkr.web.server import Dashboard, WebOptions, dashboard
from tests.conftest import REGION

#: An event id and output that would run script in a page that did not escape them.
HOSTILE_ID = '<script>alert("id")</script>&"\''
HOSTILE_OUTPUT = (
    "\x1b[31mred text\x1b[0m\n</pre><script>alert('output')</script>\n"
    "\x1b]0;title\x07bell\x1b[2Kcleared\n"
)


@dataclass
class WebFleet:
    """A queue with a dead-letter queue, a table, and the config that names them."""

    sqs: Any
    dynamodb: Any
    queue_name: str
    queue_url: str
    dlq_url: str
    table: str
    conf: Path

    def history(self) -> DynamoHistory:
        return DynamoHistory(self.dynamodb, self.table, retention_seconds=30 * 86400)

    def pauses_item(self) -> dict[str, Any] | None:
        key = {"Id": {"S": "sqsjkr:pauses"}, "Type": {"S": "pause"}}
        return self.dynamodb.get_item(TableName=self.table, Key=key).get("Item")

    def item(self, id_: str, type_: str) -> dict[str, Any] | None:
        key = {"Id": {"S": id_}, "Type": {"S": type_}}
        found: dict[str, Any] | None = self.dynamodb.get_item(
            TableName=self.table, Key=key, ConsistentRead=True
        ).get("Item")
        return found

    def serve(self, **options: Any) -> Dashboard:
        options.setdefault("port", 0)
        served = dashboard(load(str(self.conf)), WebOptions(**options))
        served.start()
        return served


def config_text(queue: str, table: str, stats_port: int = 0) -> str:
    return f"""
[account]
id = "{LOCAL_ACCOUNT}"
region = "{REGION}"

[sqs]
queue_name = "{queue}"
wait_time_seconds = 1

[kicker]
max_concurrent_num = 2
stats_port = {stats_port}

[lock]
table = "{table}"
retry_interval = "0.1s"
lease = "3s"

[history]
live_output_interval = "1s"

[schedule]
group = "{table}"
"""


@contextmanager
def module_env(endpoint: str) -> Iterator[None]:
    """The AWS environment of a module's fleet (conftest's aws_env is a test's own)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AWS_ENDPOINT_URL", endpoint)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", REGION)
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            patch.delenv(name, raising=False)
        yield


def make_fleet(directory: Path) -> WebFleet:
    suffix = uuid.uuid4().hex[:10]
    sqs = boto3.client("sqs", region_name=REGION)
    dynamodb = boto3.client("dynamodb", region_name=REGION)
    name = f"web-{suffix}"
    url = create_queue(sqs, name, dead_letter=True)
    dlq_url = sqs.get_queue_url(QueueName=f"{name}-dlq")["QueueUrl"]
    table = f"sqsjkr-web-{suffix}"
    create_table(dynamodb, table)
    boto3.client("scheduler", region_name=REGION).create_schedule_group(Name=table)
    conf = directory / f"{name}.toml"
    conf.write_text(config_text(name, table))
    return WebFleet(sqs, dynamodb, name, url, dlq_url, table, conf)


def record(event_id: str, ended_at: float, outcome: RunOutcome, **fields: Any) -> RunRecord:
    values: dict[str, Any] = {
        "event_id": event_id,
        "message_id": fields.pop("message_id", uuid.uuid4().hex),
        "host": "host-a",
        "owner": "host-a:1:x",
        "command": "echo hi",
        "sent_at": ended_at - 12,
        "claimed_at": ended_at - 11,
        "started_at": ended_at - 10,
        "ended_at": ended_at,
        "outcome": outcome,
        "version": "test",
        "exit_code": 0 if outcome is RunOutcome.SUCCEEDED else 1,
    }
    values.update(fields)
    return RunRecord(**values)


def seed(fleet: WebFleet, now: float) -> dict[str, str]:
    """A history to show: a healthy hourly event, a failing one with a hostile id and output, a
    run in progress whose claim is gone (stale); the permalink key of the hostile run."""
    history = fleet.history()
    for hour in range(6, 0, -1):
        history.finished(record("hourly", now - hour * 3600, RunOutcome.SUCCEEDED))
    hostile = record(HOSTILE_ID, now - 60, RunOutcome.ERRORED, output=HOSTILE_OUTPUT)
    history.finished(record(HOSTILE_ID, now - 3600, RunOutcome.SUCCEEDED))
    history.finished(hostile)
    history.started(
        RunStart("stuck", "m-stuck", "host-b", "host-b:2:y", now - 300, now - 301, "sleep 1000")
    )
    return {"hostile_key": run_type(hostile)}


def dead_letter(fleet: WebFleet, body: dict[str, Any]) -> str:
    return str(
        fleet.sqs.send_message(QueueUrl=fleet.dlq_url, MessageBody=json.dumps(body))["MessageId"]
    )


def now() -> float:
    return time.time()
