"""Count the AWS API calls the sqsjkr daemon makes per job, against an embedded moto server.

Run `python benchmarks/aws_calls.py --help`; benchmarks/README.md explains what is counted and why.
"""

from __future__ import annotations

import argparse
import http.client
import json
import logging
import socket
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

import sqsjkr.backends.aws
import sqsjkr.daemon.service
from sqsjkr.backends.live import LIVE_TYPE_PREFIX
from sqsjkr.contract.config import load_config
from sqsjkr.contract.firing import Firing, Origin
from sqsjkr.contract.job import build_body
from sqsjkr.local.endpoint import (
    LOCAL_ACCOUNT,
    LOCAL_REGION,
    create_queue,
    create_table,
    local_endpoint,
    use_endpoint,
)

REGION = LOCAL_REGION

#: Calls the daemon makes once when it starts, whatever the number of jobs.
STARTUP_OPERATIONS = frozenset({"GetQueueUrl", "GetQueueAttributes", "GetItem"})
#: Of those, the GetItems a daemon makes as it starts (its pauses' and routes' item); more are
#: per job (a pipeline step's read of its run, before it is admitted).
STARTUP_GET_ITEMS = 2

#: How long one scenario may take before the benchmark gives up on it.
SCENARIO_TIMEOUT = 120.0


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    lock: str  # "none": no lock_id; "distinct": one lock_id per job; "same": one for all jobs
    go_calls_per_job: float | None
    #: The most calls per job allowed with crash safety (leases, delete on finish); None: no limit.
    budget: float | None
    note: str = ""
    varied: bool = False  # jobs sleep 0.0 to 0.9s instead of running `true`
    history: bool = True  # [history] backend = "dynamodb" (the default) or "none"
    #: Each job prints a line every half second for this long (live output is written every
    #: [history] live_output_interval, 10 s by default); 0: the job is `true`.
    prints_for: float = 0.0
    #: Jobs of the scenario, whatever --jobs says (None: --jobs).
    jobs: int | None = None
    #: Each message is a schedule's firing (as the module's schedules send): claimed by it.
    firing: bool = False
    #: Each firing's message is the root of a pipeline of this shape (its steps count as jobs):
    #: "chain" a -> b, "diamond" a -> (b, c) -> d.
    pipeline: str | None = None

    @property
    def steps(self) -> int:
        """The jobs each message sent makes: one, or its pipeline's steps."""
        return {None: 1, "chain": 2, "diamond": 4}[self.pipeline]

    def pipeline_of(self, run_id: str, i: int) -> dict[str, Any] | None:
        """The `pipeline` object of root message i, if the scenario has one."""
        if self.pipeline is None:
            return None
        after = (
            {"b": ["a"]} if self.pipeline == "chain" else {"b": ["a"], "c": ["a"], "d": ["b", "c"]}
        )
        steps: dict[str, Any] = {"a": {"after": []}}
        for name, parents in after.items():
            steps[name] = {
                "after": parents,
                "job": {"command": "true", "event_id": f"bench-{run_id}-{name}"},
            }
        return {"name": f"bench-{run_id}-{i}", "root": "a", "steps": steps}

    def command(self, i: int) -> str:
        if self.prints_for:
            return f"for i in $(seq {int(self.prints_for * 2)}); do echo tick $i; sleep 0.5; done"
        return f"sleep 0.{i * 7 % 10}" if self.varied else "true"

    def firing_of(self, run_id: str, i: int) -> Firing | None:
        """Job i's firing: its own schedule's, due at the start of this minute."""
        if not self.firing:
            return None
        at = float(int(time.time()) // 60 * 60)
        return Firing(at, f"bench-{run_id}-{i}", "rate(1 minute)", "UTC")

    def lock_id(self, run_id: str, i: int) -> str | None:
        if self.lock == "distinct":
            return f"bench-{run_id}-{i}"
        return f"bench-{run_id}" if self.lock == "same" else None


#: The long-printing scenario: its jobs, and how long each prints (three live writes at 10 s).
LONG_JOBS = 4
LONG_JOB_SECONDS = 30.5

SCENARIOS = {
    s.key: s
    for s in (
        Scenario("no-lock", "no lock_id", "none", 2.1, 2.3),
        Scenario(
            "varied",
            "no lock_id, varied",
            "none",
            2.1,
            2.3,
            "jobs run `sleep 0.0` to `sleep 0.9`, so workers come free one at a time",
            varied=True,
        ),
        Scenario("lock", "with lock_id", "distinct", 4.1, 2.3, "a distinct lock_id per job"),
        Scenario(
            "firing",
            "firings, no lock_id",
            "none",
            2.1,
            2.3,
            "each message a schedule's firing: its claim is keyed by the firing",
            firing=True,
        ),
        Scenario(
            "chain",
            "pipelines a -> b",
            "none",
            None,
            None,
            "each message a firing and the root of a two-step pipeline: b sent by a's daemon",
            firing=True,
            pipeline="chain",
        ),
        Scenario(
            "diamond",
            "pipelines a -> (b, c) -> d",
            "none",
            None,
            None,
            "each message a firing and the root of a diamond: four steps, four edges",
            firing=True,
            pipeline="diamond",
        ),
        Scenario(
            "no-lock-no-history",
            "no lock_id, no history",
            "none",
            2.1,
            2.3,
            '[history] backend = "none"',
            history=False,
        ),
        Scenario(
            "lock-no-history",
            "with lock_id, no history",
            "distinct",
            4.1,
            4.3,
            '[history] backend = "none"',
            history=False,
        ),
        Scenario(
            "same-lock",
            "same lock_id",
            "same",
            None,
            None,
            "every job shares one lock_id: failed lock attempts (one PutItem each per "
            "retry_interval) depend on contention, so there is no fixed figure to compare with",
        ),
        Scenario(
            "long-printing",
            "long, printing",
            "none",
            None,
            None,
            f"{LONG_JOBS} jobs at once, each printing a line every 0.5 s for "
            f"{LONG_JOB_SECONDS:g} s: live output (PutItem live#) every 10 s, and a heartbeat",
            prints_for=LONG_JOB_SECONDS,
            jobs=LONG_JOBS,
        ),
    )
}


class CallCounter:
    """Counts API calls (before-call) and HTTP attempts (before-send) by operation, thread-safely."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self.live_writes = 0  # PutItems of running jobs' live output items (Type live#...)

    def attach(self, client: Any) -> None:
        client.meta.events.register("before-call.*.*", self._on_call)
        client.meta.events.register("before-send.*.*", self._on_send)
        client.meta.events.register("before-parameter-build.dynamodb.PutItem", self._on_put)

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        with self._lock:
            return Counter(self.calls), Counter(self.attempts)

    # Both handlers must return None: a value would short-circuit the call.
    def _on_call(self, model: Any = None, **kwargs: Any) -> None:
        with self._lock:
            self.calls[model.name] += 1

    def _on_put(self, params: Any = None, **kwargs: Any) -> None:
        item_type = (params or {}).get("Item", {}).get("Type", {}).get("S", "")
        if item_type.startswith(LIVE_TYPE_PREFIX):
            with self._lock:
                self.live_writes += 1

    def _on_send(self, event_name: str = "", **kwargs: Any) -> None:
        with self._lock:
            self.attempts[event_name.rsplit(".", 1)[-1]] += 1


@contextmanager
def counting_clients(counter: CallCounter) -> Iterator[None]:
    """Make every client the daemon builds (through make_client) report to counter."""
    original = sqsjkr.backends.aws.make_client

    def make_client(session: Any, service: str, *, max_pool: int = 10) -> Any:
        client = original(session, service, max_pool=max_pool)
        counter.attach(client)
        return client

    sqsjkr.backends.aws.make_client = make_client
    sqsjkr.daemon.service.make_client = make_client  # the name service.py imported
    try:
        yield
    finally:
        sqsjkr.backends.aws.make_client = original
        sqsjkr.daemon.service.make_client = original


@dataclass
class Result:
    scenario: Scenario
    jobs: int
    workers: int
    seconds: float
    calls: Counter[str]  # from daemon start until the last job finished
    attempts: Counter[str]
    after: Counter[str]  # calls between the last job finishing and the daemon stopping
    outcomes: dict[str, int]
    locks_left: int
    errors: list[str] = field(default_factory=list)
    live_writes: int = 0  # PutItems of live output items, among calls' PutItems

    @property
    def live_writes_per_minute(self) -> float | None:
        """Live output writes per minute of a job that prints all along; None for short jobs."""
        seconds = self.scenario.prints_for
        return self.live_writes / self.jobs / (seconds / 60) if seconds else None

    @property
    def startup(self) -> dict[str, int]:
        return {
            op: n - self._later(op)
            for op, n in sorted(self.calls.items())
            if op in STARTUP_OPERATIONS
        }

    @property
    def per_job(self) -> dict[str, float]:
        return {
            op: (n if op not in STARTUP_OPERATIONS else self._later(op)) / self.jobs
            for op, n in sorted(self.calls.items())
            if op not in STARTUP_OPERATIONS or self._later(op)
        }

    def _later(self, op: str) -> int:
        """The calls of a startup operation made beyond those of the start."""
        return max(0, self.calls[op] - STARTUP_GET_ITEMS) if op == "GetItem" else 0

    @property
    def calls_per_job(self) -> float:
        return sum(self.per_job.values())

    @property
    def retries(self) -> int:
        return sum(self.attempts.values()) - sum(self.calls.values())

    @property
    def verdict(self) -> str:
        if self.errors:
            return "FAILED RUN"
        budget = self.scenario.budget
        if budget is None:
            return "n/a"
        # Rounded as the budget is: 2.3 stands for 2 + 3/10 exactly.
        return "ok (<= budget)" if round(self.calls_per_job, 6) <= budget else "OVER budget"

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario.title,
            "key": self.scenario.key,
            "note": self.scenario.note,
            "jobs": self.jobs,
            "workers": self.workers,
            "calls": dict(sorted(self.calls.items())),
            "startup_calls": self.startup,
            "calls_per_job_by_operation": {k: round(v, 4) for k, v in self.per_job.items()},
            "calls_per_job": round(self.calls_per_job, 4),
            "go_calls_per_job": self.scenario.go_calls_per_job,
            "budget_calls_per_job": self.scenario.budget,
            "verdict": self.verdict,
            "http_retries": self.retries,
            "calls_after_last_job": dict(sorted(self.after.items())),
            "outcomes": self.outcomes,
            "locks_left_in_table": self.locks_left,
            "wall_seconds": round(self.seconds, 3),
            "jobs_per_second": round(self.jobs / self.seconds, 1) if self.seconds else None,
            "live_output_writes_per_job": round(self.live_writes / self.jobs, 4),
            "live_output_writes_per_job_minute": self.live_writes_per_minute,
            "errors": self.errors,
        }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def invocations(port: int) -> dict[str, int] | None:
    """The invocations counters from the daemon's stats endpoint, or None while it is not up."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/stats/metrics/v2")
        response = conn.getresponse()
        if response.status != 200:
            return None
        return dict(json.loads(response.read())["invocations"])
    except OSError:
        return None
    finally:
        conn.close()


def write_config(
    path: Path, *, queue: str, table: str, workers: int, stats_port: int, history: bool
) -> Path:
    history_section = "" if history else '\n[history]\nbackend = "none"\n'
    path.write_text(
        f"""
[account]
id = "{LOCAL_ACCOUNT}"
region = "{REGION}"

[sqs]
queue_name = "{queue}"
wait_time_seconds = 1

[kicker]
max_concurrent_num = {workers}
stats_port = {stats_port}

[lock]
table = "{table}"
retry_interval = "0.1s"
{history_section}"""
    )
    return path


def fill_queue(sqs: Any, queue_url: str, scenario: Scenario, jobs: int, run_id: str) -> None:
    """Send the jobs ten at a time (with the benchmark's own client: not counted)."""
    bodies = [
        build_body(
            scenario.command(i),
            event_id=f"bench-{run_id}-{i}",
            lock_id=scenario.lock_id(run_id, i),
            firing=scenario.firing_of(run_id, i),
            origin=Origin.SCHEDULE if scenario.firing else None,
        )
        for i in range(jobs // scenario.steps)
    ]
    for i, body in enumerate(bodies):
        pipeline = scenario.pipeline_of(run_id, i)
        if pipeline is not None:
            bodies[i] = json.dumps({**json.loads(body), "pipeline": pipeline})
    for start in range(0, len(bodies), 10):
        entries = [
            {"Id": str(n), "MessageBody": body} for n, body in enumerate(bodies[start : start + 10])
        ]
        response = sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"could not fill the queue: {response['Failed']}")


def count_locks(dynamodb: Any, table: str) -> int:
    """Locks still held in the table (a released one keeps its item, without EventId)."""
    count = 0
    for page in dynamodb.get_paginator("scan").paginate(
        TableName=table,
        FilterExpression="#t = :lock AND attribute_exists(EventId)",
        ExpressionAttributeNames={"#t": "Type"},
        ExpressionAttributeValues={":lock": {"S": "lock"}},
    ):
        count += int(page["Count"])
    return count


def run_scenario(scenario: Scenario, *, jobs: int, workers: int, workdir: Path) -> Result:
    jobs = scenario.jobs or jobs
    jobs -= jobs % scenario.steps  # whole pipelines
    run_id = uuid.uuid4().hex[:8]
    queue, table = f"bench-{scenario.key}-{run_id}", f"bench-{scenario.key}-{run_id}"
    session = boto3.session.Session(region_name=REGION)
    sqs, dynamodb = session.client("sqs"), session.client("dynamodb")
    queue_url = create_queue(sqs, queue)
    create_table(dynamodb, table)
    fill_queue(sqs, queue_url, scenario, jobs, run_id)

    port = free_port()
    config = load_config(
        write_config(
            workdir / f"{scenario.key}.toml",
            queue=queue,
            table=table,
            workers=workers,
            stats_port=port,
            history=scenario.history,
        )
    )
    counter = CallCounter()
    stop = threading.Event()
    errors: list[str] = []

    def serve() -> None:
        try:
            sqsjkr.daemon.service.serve(config, stop)
        except Exception as exc:  # reported with the result
            errors.append(f"daemon failed: {type(exc).__name__}: {exc}")

    outcomes: dict[str, int] = {}
    with counting_clients(counter):
        thread = threading.Thread(target=serve, name=f"sqsjkr-{scenario.key}", daemon=True)
        started = time.monotonic()
        thread.start()
        deadline = started + SCENARIO_TIMEOUT
        while True:
            outcomes = invocations(port) or outcomes
            if sum(outcomes.values()) >= jobs:
                break
            if errors or not thread.is_alive():
                errors.append("the daemon stopped before all jobs were done")
                break
            if time.monotonic() > deadline:
                errors.append(f"timed out after {SCENARIO_TIMEOUT:.0f}s: {outcomes}")
                break
            time.sleep(0.01)
        seconds = time.monotonic() - started
        calls, attempts = counter.snapshot()
        live_writes = counter.live_writes
        stop.set()
        thread.join(timeout=30)
        if thread.is_alive():
            errors.append("the daemon did not stop within 30s")
        final_calls, _ = counter.snapshot()

    if outcomes.get("succeeded", 0) != jobs:
        errors.append(f"expected {jobs} succeeded jobs, stats say {outcomes}")
    return Result(
        scenario=scenario,
        jobs=jobs,
        workers=workers,
        seconds=seconds,
        calls=calls,
        attempts=attempts,
        after=final_calls - calls,
        outcomes=outcomes,
        locks_left=count_locks(dynamodb, table),
        errors=errors,
        live_writes=live_writes,
    )


def render_table(results: list[Result]) -> str:
    operations = sorted({op for r in results for op in r.per_job})
    header = ["scenario", "jobs", *operations, "calls/job", "budget", "Go", "verdict"]
    rows = [header]
    for r in results:
        go, budget = r.scenario.go_calls_per_job, r.scenario.budget
        rows.append(
            [
                r.scenario.title,
                str(r.jobs),
                *(f"{r.per_job[op]:.3f}" if op in r.per_job else "-" for op in operations),
                f"{r.calls_per_job:.3f}",
                "-" if budget is None else f"{budget:.1f}",
                "-" if go is None else f"{go:.1f}",
                r.verdict,
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for n, row in enumerate(rows):
        cells = [
            cell.ljust(width) if i == 0 or i == len(row) - 1 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def report(results: list[Result], endpoint: str) -> str:
    out = [
        f"AWS API calls per job of the sqsjkr daemon (in-process, moto at {endpoint})",
        "",
        render_table(results),
        "",
    ]
    for r in results:
        startup = ", ".join(f"{op} {n}" for op, n in r.startup.items()) or "none"
        after = ", ".join(f"{op} {n}" for op, n in sorted(r.after.items())) or "none"
        out.append(
            f"{r.scenario.title}: {r.workers} workers; startup (once, not per job): {startup}; "
            f"HTTP retries: {r.retries}; calls after the last job: {after}; "
            f"locks left: {r.locks_left}; outcomes: {r.outcomes}"
        )
        out.append(
            f"  wall {r.seconds:.2f}s, {r.jobs / r.seconds:.0f} jobs/s "
            "(moto on this host, not AWS: information only)"
        )
        if r.scenario.note:
            out.append(f"  note: {r.scenario.note}")
        per_minute = r.live_writes_per_minute
        out.append(
            f"  live output: {r.live_writes / r.jobs:.3f} PutItem (live#) per job"
            + ("" if per_minute is None else f", {per_minute:.1f} a minute of a printing job")
        )
        for error in r.errors:
            out.append(f"  ERROR: {error}")
    out.append("")
    out.append(
        "Go original, at-most-once: ReceiveMessage 0.1 (10 per call) + DeleteMessage 1 + "
        "PutItem dedupe 1 (+ PutItem lock 1 + DeleteItem lock 1 with a lock_id)"
    )
    out.append(
        "Budget, at-least-once: without history, the Go calls plus UpdateItem 1 (claim finished), "
        "+ 0.2 for batching slack; with history, at most two TransactWriteItems a job (the claim, "
        "which takes a free lock and notes the run; the run's end, which records it, finishes the "
        "claim and gives the lock back) + ReceiveMessage and DeleteMessageBatch 0.1 each + 0.1 "
        "slack, whatever the sharing of calls (a run's end rides on the next claim's call)"
    )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per scenario (default 200)")
    parser.add_argument(
        "--workers", type=int, default=20, help="max_concurrent_num of the daemon (default 20)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=sorted(SCENARIOS),
        help="run only this scenario (repeatable; default: all)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show the daemon's log")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.workers < 1:
        parser.error("--jobs and --workers must be at least 1")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # moto's server logs every request through werkzeug.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    scenarios = [SCENARIOS[key] for key in (args.scenario or SCENARIOS)]

    with local_endpoint(0) as endpoint, tempfile.TemporaryDirectory(prefix="sqsjkr-bench-") as tmp:
        use_endpoint(endpoint)
        results = [
            run_scenario(s, jobs=args.jobs, workers=args.workers, workdir=Path(tmp))
            for s in scenarios
        ]

    if args.json:
        print(json.dumps([r.as_dict() for r in results], indent=2))
    else:
        print(report(results, endpoint))
    failed = any(r.errors or r.verdict == "OVER budget" for r in results)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
