"""The floor under a job's CPU: each part of a job's path alone, in one thread, by its thread CPU.

`python benchmarks/job_floor.py` prints what the daemon's own claim and end writes, a bare
GetItem and a job's command cost, with moto behind deployment.py's proxy (connections kept open).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from typing import Any

import deployment

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.dedupe import DynamoDedupe
from sqsjkr.backends.history import DynamoHistory, running_update
from sqsjkr.backends.locks import DynamoLocker
from sqsjkr.backends.sqs import Message
from sqsjkr.backends.transactions import Transactions
from sqsjkr.contract.job import build_body, parse_job
from sqsjkr.contract.run import RunOutcome
from sqsjkr.daemon.runner import ShellRunner, StopSwitch
from sqsjkr.daemon.runs import DELETE, Ending, RunProgress
from sqsjkr.local.endpoint import LOCAL_REGION, create_table

COMMAND = "echo {i} $(date +%s.%N) >> /dev/null"


class Stores:
    """The daemon's stores on one table, wired as service.py wires them."""

    def __init__(self, dynamodb: Any, table: str) -> None:
        transactions = Transactions(dynamodb)
        locker = DynamoLocker(dynamodb, table, lease_seconds=60)
        self.dedupe = DynamoDedupe(
            dynamodb,
            table,
            retention_seconds=4 * 86400,
            lease_seconds=60,
            note_running=running_update,
            take_lock=locker.take_put,
            transactions=transactions,
        )
        self.history = DynamoHistory(
            dynamodb,
            table,
            retention_seconds=30 * 86400,
            claims=self.dedupe,
            locks=locker,
            transactions=transactions,
        )


def cpu_ms(work: Callable[[], object]) -> float:
    """The CPU this thread spent in work(), in milliseconds."""
    began = time.thread_time()
    work()
    return 1000 * (time.thread_time() - began)


def measure(stores: Stores, runner: ShellRunner, index: int) -> dict[str, float]:
    """One job's claim, command and end, each alone, as the daemon's own code writes them."""
    message_id = str(uuid.uuid4())
    body = build_body(COMMAND.format(i=index), event_id=f"floor-{index}")
    message = Message(message_id, f"rh-{index}", body, time.time())
    job = parse_job(body, message_id=message_id, sent_at=message.sent_at)
    progress = RunProgress(job, message, time.time())
    claims: list[Any] = []
    figures = {
        "claim (TransactWriteItems: claim, running note)": cpu_ms(
            lambda: claims.append(
                stores.dedupe.claim(
                    progress.claim_id, message_id=message_id, running=progress.note()
                )
            )
        )
    }
    lease = claims[0].lease
    progress.claimed(lease.owner, claims[0].attempt)
    figures["command (ShellRunner: sh -c, output read)"] = cpu_ms(
        lambda: setattr(
            progress,
            "result",
            runner.run(job, timeout=None, stop=StopSwitch(), context=progress.context()),
        )
    )
    record = progress.record(Ending(DELETE, run=RunOutcome.SUCCEEDED), time.time())
    figures["end (TransactWriteItems: record, summary, claim)"] = cpu_ms(
        lambda: stores.history.finished(record, claim=lease)
    )
    return figures


def bare(dynamodb: Any, table: str, env: dict[str, str], index: int) -> dict[str, float]:
    """What botocore and subprocess cost with none of sqsjkr's work around them."""
    key = {"Id": {"S": f"floor-{index}"}, "Type": {"S": "summary"}}
    command = ["/bin/sh", "-c", COMMAND.format(i=index)]

    def updates(count: int) -> list[dict[str, Any]]:
        return [
            {
                "Update": {
                    "TableName": table,
                    "Key": {"Id": {"S": f"floor-{index}-{n}"}, "Type": {"S": "summary"}},
                    "UpdateExpression": "SET LastRun = :run, Expired = :expired",
                    "ExpressionAttributeValues": {
                        ":run": {"S": "x" * 1000},
                        ":expired": {"N": str(2_000_000_000 + n)},
                    },
                }
            }
            for n in range(count)
        ]

    one, eleven = updates(1), updates(11)
    return {
        "TransactWriteItems of 1 Update (botocore alone)": cpu_ms(
            lambda: dynamodb.transact_write_items(TransactItems=one)
        ),
        "TransactWriteItems of 11 Updates (botocore alone)": cpu_ms(
            lambda: dynamodb.transact_write_items(TransactItems=eleven)
        ),
        "GetItem (botocore alone)": cpu_ms(lambda: dynamodb.get_item(TableName=table, Key=key)),
        "Popen and communicate (subprocess alone)": cpu_ms(
            lambda: subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            ).communicate()
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=300, help="jobs measured (default 300)")
    parser.add_argument("--moto", choices=list(deployment.MOTO_MODES), default="fair")
    options = parser.parse_args()
    # Moto and the proxy on the other cpus, as deployment.py pins them; this thread on the last.
    cpus = os.sched_getaffinity(0)
    mine = {max(cpus)} if len(cpus) > 1 else cpus
    with deployment.aws_side(cpus - mine or None, 0.0, 0.0, options.moto) as aws:
        os.sched_setaffinity(0, mine)
        os.environ.update(deployment.daemon_env(aws.proxy_endpoint))
        dynamodb = make_client(make_session(region=LOCAL_REGION), "dynamodb")
        table = f"floor-{uuid.uuid4().hex[:8]}"
        create_table(dynamodb, table)
        stores, runner = Stores(dynamodb, table), ShellRunner()
        samples: dict[str, list[float]] = {}
        for index in range(options.jobs + 20):
            figures = measure(stores, runner, index) | bare(
                dynamodb, table, dict(os.environ), index
            )
            if index >= 20:  # the first calls warm caches and connections
                for name, ms in figures.items():
                    samples.setdefault(name, []).append(ms)
    print(f"{options.jobs} jobs, one thread on cpu {sorted(mine)}, moto {options.moto}, no latency")
    print(f"{'part':52s} {'p50 ms':>7s} {'mean ms':>8s}")
    for name, values in samples.items():
        print(f"{name:52s} {statistics.median(values):7.3f} {statistics.fmean(values):8.3f}")


if __name__ == "__main__":
    main()
