"""The deployment-like benchmark: the real `sqsjkr run` daemon, with AWS (moto) a network round trip away.

moto and a latency proxy share one core, the daemon has another. Run `.venv/bin/python benchmarks/deployment.py --help`.
"""

from __future__ import annotations

import argparse
import compileall
import json
import logging
import multiprocessing
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import boto3
import botocore
import latency_proxy
import moto
import proc_stats
import profile_summary

from sqsjkr import __version__
from sqsjkr.contract.job import build_body
from sqsjkr.local.endpoint import (
    LOCAL_ACCOUNT,
    LOCAL_REGION,
    create_queue,
    create_table,
    serialize_moto_writes,
)
from sqsjkr.local.queues import install_fair_queues
from sqsjkr.local.transactions import install_fair_transactions

#: How long the daemon may take to make its first ReceiveMessage.
STARTUP_TIMEOUT = 60.0
#: After the first ReceiveMessage: let start-up work (imports finishing, first poll) settle.
SETTLE_SECONDS = 2.0
#: How long the daemon may take to exit after SIGTERM with no job running.
STOP_TIMEOUT = 30.0
#: How a log line says an error: ours (" ERROR ", " CRITICAL ") and the Go daemon's ("[error] ").
ERROR_MARKS = (" ERROR ", " CRITICAL ", "[error] ")
#: Between the jobs sent one at a time: the job ends and its worker comes free meanwhile.
TRICKLE_GAP = 0.2
#: Polling interval of the benchmark itself (it reads files and the proxy, never the daemon).
POLL = 0.02


@dataclass(frozen=True)
class Scenario:
    key: str
    title: str
    workers: int | None  # None: --workers
    lock: bool = False  # a distinct lock_id per job
    burst: bool = True  # False: the idle window
    prefetch: int | None = None  # [kicker] prefetch; None: the daemon's default


SCENARIOS = {
    s.key: s
    for s in (
        Scenario("no-lock", "no lock_id", None),
        Scenario("lock", "with lock_id", None, lock=True),
        Scenario("single", "max_concurrent_num = 1", 1),
        Scenario("prefetch", "max_concurrent_num = 1, prefetch = 9", 1, prefetch=9),
        Scenario("idle", "idle", None, burst=False),
    )
}


@dataclass(frozen=True)
class Target:
    """A row of issue 13's table: the Go original's figure and the target."""

    figure: str
    go: str
    target: float
    unit: str
    fmt: str = "{:.2f}"


TARGETS = {
    "cpu_no_lock": Target("daemon CPU per job, no lock_id", "~2.6", 3.5, "ms"),
    "cpu_lock": Target("daemon CPU per job, with lock_id", "~4.2", 6.0, "ms"),
    "cpu_single": Target("daemon CPU per job, max_concurrent_num = 1", "~2.7", 4.0, "ms"),
    "idle_cpu": Target("idle CPU", "0.02", 0.1, "%", "{:.3f}"),
    "idle_calls": Target("AWS calls per idle minute (20 s long polls)", "~4", 6.0, "", "{:.1f}"),
    "calls_single": Target("calls per job, max_concurrent_num = 1", "2.1", 2.3, ""),
    "calls_prefetch": Target("calls per job, max_concurrent_num = 1, prefetch = 9", "2.1", 2.3, ""),
    "startup": Target("start-up to first ReceiveMessage", "0.05", 0.3, "s"),
    "rss_peak": Target("RSS peak", "18", 45.0, "MiB", "{:.1f}"),
}


#: --moto: how the endpoint does TransactWriteItems and its queues, as the report labels it.
MOTO_MODES = {
    "fair": "fair transactions (conditions checked, then written; no table copy; no 500 race) "
    "and queues (one clock read a count of their messages)",
    "stock": "stock transactions (moto's: the whole table copied per item; writes serialized) "
    "and queues (moto's: a clock read per message of the queue, for each one sent or received)",
}


# -- the AWS side: moto and the proxy, in processes of their own ------------------------------------


def serve_moto(conn: Connection, cpus: set[int] | None, moto_mode: str = "fair") -> None:
    """Process entry: moto's server on 127.0.0.1; sends its port, stops when conn closes."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request, whatever `verbose` says: moto's own cost, not a deployment's.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    if moto_mode == "fair":
        # A transaction costs what DynamoDB's does, not a copy of the table, and a message sent
        # or received no clock read per message of its queue: the figures are ours, not moto's.
        install_fair_transactions()
        install_fair_queues()
    else:
        serialize_moto_writes()  # the figures of before --moto, and moto's cost in them
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    conn.send(server.get_host_and_port()[1])
    with suppress(EOFError):
        conn.recv()
    server.stop()


class Aws:
    """moto behind the latency proxy, and the benchmark's own clients (straight to moto)."""

    def __init__(self, moto_port: int, proxy_port: int, proxy: Connection) -> None:
        self.moto_endpoint = f"http://127.0.0.1:{moto_port}"
        self.proxy_endpoint = f"http://127.0.0.1:{proxy_port}"
        self._proxy = proxy
        self.connections = 0  # that the daemons opened to the proxy, as of the last calls()
        session = boto3.session.Session(
            aws_access_key_id="bench", aws_secret_access_key="bench", region_name=LOCAL_REGION
        )
        self.sqs = session.client("sqs", endpoint_url=self.moto_endpoint)
        self.dynamodb = session.client("dynamodb", endpoint_url=self.moto_endpoint)
        self.scheduler = session.client("scheduler", endpoint_url=self.moto_endpoint)

    def calls(self, since: int = 0) -> list[latency_proxy.Call]:
        """The daemon's calls through the proxy, from the since-th on."""
        self._proxy.send(since)
        calls, self.connections = self._proxy.recv()
        return [latency_proxy.Call(*c) for c in calls]

    def call_count(self) -> int:
        return len(self.calls(0))


@contextmanager
def aws_side(
    cpus: set[int] | None, latency_ms: float, jitter_ms: float, moto_mode: str = "fair"
) -> Iterator[Aws]:
    context = multiprocessing.get_context("spawn")
    moto_conn, moto_child = context.Pipe()
    proxy_conn, proxy_child = context.Pipe()
    moto_proc = context.Process(target=serve_moto, args=(moto_child, cpus, moto_mode), daemon=True)
    moto_proc.start()
    procs = [moto_proc]
    try:
        moto_port = moto_conn.recv()
        proxy_proc = context.Process(
            target=latency_proxy.serve_proxy,
            args=(proxy_child, moto_port, latency_ms, jitter_ms, cpus),
            daemon=True,
        )
        proxy_proc.start()
        procs.append(proxy_proc)
        yield Aws(moto_port, proxy_conn.recv(), proxy_conn)
    finally:
        for conn in (proxy_conn, moto_conn):
            with suppress(OSError):
                conn.send(None)
        for proc in procs:
            proc.join(10)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


# -- the daemon ---------------------------------------------------------------------------------

LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) (\w+) ")


def log_time(line: str) -> tuple[float, str] | None:
    """(epoch seconds, level) of a log line in the daemon's format, or None."""
    match = LOG_TIME.match(line)
    if match is None:
        return None
    seconds = time.mktime(time.strptime(match[1], "%Y-%m-%d %H:%M:%S"))
    return seconds + int(match[2]) / 1000, match[3]


class LogWatch:
    """Follows sqsjkr's log: its ready line and its succeeded jobs. Information only: the
    benchmark measures through the proxy and the jobs' own files, so that any daemon fits."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = ""
        self.receiving_at: float | None = None
        self.succeeded = 0

    def poll(self) -> None:
        with self.path.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", "replace")
        *lines, self._partial = text.split("\n")
        for line in lines:
            parsed = log_time(line)
            if parsed is None:
                continue
            at, _ = parsed
            if ") succeeded in " in line:
                self.succeeded += 1
            elif "receiving with" in line and self.receiving_at is None:
                self.receiving_at = at


def write_config(
    path: Path,
    *,
    queue: str,
    table: str,
    workers: int,
    prefetch: int | None = None,
    group: str = "sqsjkr",
) -> Path:
    """A deployment's config: every timing at its default (20 s long polls, 60 s leases, a
    catch-up look every 10 minutes over the schedules of group)."""
    path.write_text(
        f"""[account]
id = "{LOCAL_ACCOUNT}"
region = "{LOCAL_REGION}"

[sqs]
queue_name = "{queue}"

[kicker]
max_concurrent_num = {workers}
{"" if prefetch is None else f"prefetch = {prefetch}"}
stats_port = 0

[lock]
table = "{table}"

[schedule]
group = "{group}"
"""
    )
    return path


def daemon_env(endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ENDPOINT_URL=endpoint,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION=LOCAL_REGION,
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def default_daemon_command() -> str:
    script = Path(sys.executable).with_name("sqsjkr")
    sqsjkr = shlex.quote(str(script)) if script.exists() else f"{sys.executable} -m sqsjkr"
    return f"{sqsjkr} run -c {{conf}} --log-level info"


class Daemon:
    """The daemon (command: a template with {conf} and {table}) as a subprocess pinned to cpus,
    its output going to a log file."""

    def __init__(
        self,
        command: str,
        conf: Path,
        log: Path,
        endpoint: str,
        cpus: set[int] | None,
        table: str = "",
    ) -> None:
        pin = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] if cpus else []
        argv = [
            arg.replace("{conf}", str(conf)).replace("{table}", table)
            for arg in shlex.split(command)
        ]
        self.log = LogWatch(log)
        self.hang = ""
        with log.open("wb") as out:
            self.started = time.time()
            self.proc = subprocess.Popen(
                [*pin, *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=daemon_env(endpoint),
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int | None:
        """SIGTERM, as systemd stops it; its exit status, or None if it would not stop (then
        self.hang says what its threads were doing)."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.hang = describe_hang(self.pid)
            self.proc.kill()
            self.proc.wait()
            return None


def describe_hang(pid: int) -> str:
    """The states of a process's threads, and their Python stacks if py-spy can tell."""
    states = []
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        with suppress(OSError):
            status = dict(
                line.split(":\t", 1)
                for line in (task / "status").read_text().splitlines()
                if ":\t" in line
            )
            states.append(f"{task.name} {status.get('State', '?').strip()}")
    stacks = ""
    with suppress(SystemExit, OSError, subprocess.TimeoutExpired):
        stacks = subprocess.run(
            [py_spy(), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    return "threads: " + ", ".join(states) + ("\n" + stacks if stacks else "")


class PySpy:
    """py-spy sampling the daemon from outside (on the AWS side's cores), written as raw stacks."""

    def __init__(self, pid: int, output: Path, rate: int, cpus: set[int] | None) -> None:
        self.output = output
        self.proc = subprocess.Popen(
            [
                py_spy(),
                "record",
                # Only the thread holding the GIL: the others wait (for sockets, locks, the
                # GIL), and without --nonblocking's pauses py-spy cannot tell them apart.
                "--gil",
                "--pid",
                str(pid),
                "--rate",
                str(rate),
                "--format",
                "raw",
                "--nonblocking",
                "--output",
                str(output),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        _, err = self.proc.communicate(timeout=30)
        if not self.output.exists():
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')}")


def py_spy() -> str:
    found = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    if found is None:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    return found


def thread_names(pid: int, tries: int = 3) -> dict[int, str]:
    """Native thread id -> Python thread name, from py-spy dump (empty without py-spy). A dump
    that named no thread (seen once in a run of three scenarios) is tried again."""
    for _ in range(tries):
        try:
            out = subprocess.run(
                [py_spy(), "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
            ).stdout
        except (SystemExit, OSError, subprocess.TimeoutExpired):
            return {}
        found = re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)
        names = {int(m[1]): m[2] for m in found}
        if names:
            return names
    return {}


# -- scenarios ----------------------------------------------------------------------------------


@dataclass
class Options:
    jobs: int
    workers: int
    idle_seconds: float
    trickle: int
    timeout: float
    workdir: Path
    daemon_cpus: set[int] | None
    aws_cpus: set[int] | None
    profile_dir: Path | None
    profile_rate: int
    daemon_command: str


@dataclass
class Run:
    """One scenario's daemon: its queue, table and files."""

    scenario: Scenario
    aws: Aws
    options: Options
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dir = self.options.workdir / f"{self.scenario.key}-{self.run_id}"
        self.dir.mkdir()
        self.starts = self.dir / "starts"
        self.starts.touch()
        name = f"bench-{self.scenario.key}-{self.run_id}"
        self.table = name
        self.queue_url = create_queue(self.aws.sqs, name)
        create_table(self.aws.dynamodb, name)
        catch_up_schedule(self.aws.scheduler, name, self.queue_url)
        self.workers = self.scenario.workers or self.options.workers
        self.conf = write_config(
            self.dir / "config.toml",
            queue=name,
            table=name,
            workers=self.workers,
            prefetch=self.scenario.prefetch,
            group=name,
        )

    def body(self, i: int) -> str:
        return build_body(
            f"echo {i} $(date +%s.%N) >> {self.starts}",
            event_id=f"bench-{self.run_id}-{i}",
            lock_id=f"bench-{self.run_id}-{i}" if self.scenario.lock else None,
        )

    def started_jobs(self) -> dict[int, float]:
        """Job index -> when the job wrote its line (it ends right after)."""
        found = {}
        # A line still being written has no newline yet.
        for line in self.starts.read_text().split("\n")[:-1]:
            index, _, at = line.partition(" ")
            if index.isdigit() and at:
                found[int(index)] = float(at)
        return found


def catch_up_schedule(scheduler: Any, group: str, queue_url: str) -> None:
    """A schedule group as the module makes it, with a job with catch_up: catch-up on, as a
    deployment has it. It fires on 1 January only, so that no catch-up runs a job meanwhile
    (moto never fires it): the idle figures are the looks' own calls."""
    scheduler.create_schedule_group(Name=group)
    account, name = queue_url.rstrip("/").split("/")[-2:]
    scheduler.create_schedule(
        Name=f"{group}-yearly",
        GroupName=group,
        ScheduleExpression="cron(0 3 1 1 ? *)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": f"arn:aws:sqs:{LOCAL_REGION}:{account}:{name}",
            "RoleArn": f"arn:aws:iam::{account}:role/scheduler",
            "Input": json.dumps({"event_id": "yearly", "command": "true", "catch_up": "1h"}),
        },
    )


def start_daemon(run: Run) -> tuple[Daemon, dict[str, Any]]:
    """The daemon, up and polling; with its start-up figures."""
    mark = run.aws.call_count()
    daemon = Daemon(
        run.options.daemon_command,
        run.conf,
        run.dir / "daemon.log",
        run.aws.proxy_endpoint,
        run.options.daemon_cpus,
        run.table,
    )
    deadline = time.time() + STARTUP_TIMEOUT
    first_receive = None
    while first_receive is None:
        receives = [c for c in run.aws.calls(mark) if c.action == "ReceiveMessage"]
        if receives:
            first_receive = receives[0].at
        elif not daemon.alive() or time.time() > deadline:
            daemon.stop()
            raise RuntimeError(
                f"the daemon did not start receiving: see {daemon.log.path}\n"
                + daemon.log.path.read_text()[-2000:]
            )
        else:
            time.sleep(POLL)
    daemon.log.poll()
    startup_calls = Counter(c.action for c in run.aws.calls(mark) if c.at < first_receive)
    figures = {
        "startup_s": round(first_receive - daemon.started, 3),
        "startup_to_log_line_s": (
            round(daemon.log.receiving_at - daemon.started, 3) if daemon.log.receiving_at else None
        ),
        "startup_calls": dict(sorted(startup_calls.items())),
    }
    time.sleep(SETTLE_SECONDS)
    return daemon, figures


def send_burst(run: Run) -> dict[int, float]:
    """All jobs, ten a call, as fast as moto takes them; index -> time its call was made."""
    sent = {}
    for first in range(0, run.options.jobs, 10):
        indexes = range(first, min(first + 10, run.options.jobs))
        at = time.time()
        response = run.aws.sqs.send_message_batch(
            QueueUrl=run.queue_url,
            Entries=[{"Id": str(i), "MessageBody": run.body(i)} for i in indexes],
        )
        if response.get("Failed"):
            raise RuntimeError(f"could not send jobs: {response['Failed']}")
        sent.update(dict.fromkeys(indexes, at))
    return sent


def deleted(calls: list[latency_proxy.Call]) -> int:
    return sum(
        c.entries if c.action == "DeleteMessageBatch" else 1
        for c in calls
        if c.action in ("DeleteMessageBatch", "DeleteMessage") and c.status == 200
    )


def wait_burst(run: Run, daemon: Daemon, mark: int) -> float | None:
    """Until every job has run and its message is deleted: the daemon's CPU seconds when the last
    job had run (before the last deletes), or None on a timeout or the daemon's death."""
    deadline = time.time() + run.options.timeout
    jobs = run.options.jobs
    cpu_at_last_start = None
    while True:
        if len(run.started_jobs()) >= jobs:
            if cpu_at_last_start is None:
                cpu_at_last_start = proc_stats.cpu_seconds(daemon.pid)
            if deleted(run.aws.calls(mark)) >= jobs:
                return cpu_at_last_start
        if not daemon.alive():
            run.errors.append(f"the daemon died (exit {daemon.proc.returncode})")
            return None
        if time.time() > deadline:
            run.errors.append(
                f"timed out after {run.options.timeout:.0f}s: {len(run.started_jobs())}/{jobs} "
                f"jobs ran, {deleted(run.aws.calls(mark))} messages deleted"
            )
            return None
        time.sleep(POLL)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def latency_figures(latencies: list[float]) -> dict[str, float | None]:
    if not latencies:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "p50_ms": round(1000 * statistics.median(latencies), 1),
        "p99_ms": round(1000 * percentile(latencies, 0.99), 1),
        "max_ms": round(1000 * max(latencies), 1),
    }


def trickle(run: Run, daemon: Daemon) -> list[float]:
    """Jobs sent one at a time to the idle daemon: send-to-start latency of each."""
    latencies = []
    for n in range(run.options.trickle):
        i = run.options.jobs + n
        at = time.time()
        run.aws.sqs.send_message(QueueUrl=run.queue_url, MessageBody=run.body(i))
        deadline = at + 30
        while time.time() < deadline and daemon.alive():
            started = run.started_jobs().get(i)
            if started is not None:
                latencies.append(started - at)
                break
            time.sleep(POLL / 4)
        else:
            run.errors.append(f"trickle job {i} did not run within 30s")
            break
        # The job ends and its worker comes free (one worker: the next job needs it).
        time.sleep(TRICKLE_GAP)
    return latencies


def calls_by_action(calls: list[latency_proxy.Call]) -> tuple[Counter[str], Counter[str]]:
    """(calls, calls that the endpoint answered with an error), by action."""
    return Counter(c.action for c in calls), Counter(c.action for c in calls if c.status >= 400)


@dataclass
class Usage:
    """What the daemon used in a window: CPU seconds, AWS calls, new connections, seconds."""

    user: float
    system: float
    calls: list[latency_proxy.Call]
    connections: int
    seconds: float

    @property
    def cpu(self) -> float:
        return self.user + self.system


class Window:
    """Measures the daemon from now until close()."""

    def __init__(self, aws: Aws, pid: int) -> None:
        self._aws = aws
        self._pid = pid
        self.mark = aws.call_count()
        self._connections = aws.connections
        self._user, self._system = proc_stats.cpu_times(pid)
        self.began_cpu = self._user + self._system
        self.began = time.time()

    def close(self) -> Usage:
        user, system = proc_stats.cpu_times(self._pid)
        seconds = time.time() - self.began
        calls = [c for c in self._aws.calls(self.mark) if c.at <= self.began + seconds]
        return Usage(
            user - self._user,
            system - self._system,
            calls,
            self._aws.connections - self._connections,
            seconds,
        )


def burst(run: Run) -> dict[str, Any]:
    daemon, figures = start_daemon(run)
    try:
        figures["rss_idle_mib"] = round(proc_stats.memory_kib(daemon.pid)["VmRSS"] / 1024, 1)
        spy = None
        if run.options.profile_dir is not None:
            output = run.options.profile_dir / f"{run.scenario.key}-{run.run_id}.txt"
            spy = PySpy(daemon.pid, output, run.options.profile_rate, run.options.aws_cpus)
            time.sleep(1.0)  # py-spy attaches
        threads_before = proc_stats.threads(daemon.pid)
        window = Window(run.aws, daemon.pid)
        sent = send_burst(run)
        cpu_at_last_job = wait_burst(run, daemon, window.mark)
        usage = window.close()
        threads_after = proc_stats.threads(daemon.pid)
        if spy is not None:
            spy.stop()
            figures["profile"] = str(spy.output)
        daemon.log.poll()
        figures.update(burst_figures(run, sent, usage, cpu_at_last_job, window))
        figures["by_thread"] = by_thread(
            threads_before, threads_after, thread_names(daemon.pid), run.options.jobs
        )
        figures["succeeded_in_log"] = daemon.log.succeeded
        single = trickle(run, daemon) if cpu_at_last_job is not None else []
        figures["dispatch_single"] = latency_figures(single)
        figures["rss_peak_mib"] = round(proc_stats.memory_kib(daemon.pid)["VmHWM"] / 1024, 1)
    finally:
        figures["exit_status"] = daemon.stop()
        if daemon.hang:
            figures["hang"] = daemon.hang
    return figures


def burst_figures(
    run: Run,
    sent: dict[int, float],
    usage: Usage,
    cpu_at_last_job: float | None,
    window: Window,
) -> dict[str, Any]:
    jobs = run.options.jobs
    starts = run.started_jobs()
    first_send = min(sent.values())
    # Jobs write their line as they end: the last line is the last job's end.
    last_end = max(starts.values(), default=first_send)
    by_action, failed = calls_by_action(usage.calls)
    figures: dict[str, Any] = {
        "jobs": jobs,
        "workers": run.workers,
        "ran": len(starts),
        "jobs_per_s": None,
        "burst_seconds": round(last_end - first_send, 2),
        "delete_tail_s": round(window.began + usage.seconds - last_end, 2),
        "dispatch_burst": latency_figures([starts[i] - sent[i] for i in sent if i in starts]),
        "cpu_ms_per_job": round(1000 * usage.cpu / jobs, 2),
        "cpu_seconds": round(usage.cpu, 3),
        "cpu_user_ms_per_job": round(1000 * usage.user / jobs, 2),
        "cpu_system_ms_per_job": round(1000 * usage.system / jobs, 2),
        "cpu_ms_per_job_to_last_job": None,
        "calls_per_job": round(sum(by_action.values()) / jobs, 3),
        "calls_per_job_by_action": {a: round(n / jobs, 3) for a, n in sorted(by_action.items())},
        "error_responses": dict(sorted(failed.items())),
        "connections_opened": usage.connections,
    }
    if cpu_at_last_job is not None:
        figures["jobs_per_s"] = round(jobs / (last_end - first_send), 1)
        to_last_job = cpu_at_last_job - window.began_cpu
        figures["cpu_ms_per_job_to_last_job"] = round(1000 * to_last_job / jobs, 2)
    return figures


#: Which part of a job a daemon thread does, by its Python name (the queue's name inside
#: sqsjkr's thread names varies by run).
THREAD_ROLES = (
    (re.compile(r"sqsjkr-worker.*-close_[0-9]+"), "closers"),
    (re.compile(r"sqsjkr-worker.*_[0-9]+"), "workers"),
    (re.compile(r"sqsjkr-receiver.*"), "receiver"),
    (re.compile(r"sqsjkr-deletes.*"), "deletes"),
)


def thread_role(name: str) -> str:
    return next((role for pattern, role in THREAD_ROLES if pattern.fullmatch(name)), "other")


def by_thread(
    before: dict[int, proc_stats.ThreadSample],
    after: dict[int, proc_stats.ThreadSample],
    names: dict[int, str],
    jobs: int,
) -> dict[str, dict[str, float]] | None:
    """On-CPU ms and wake-ups per job of each part's threads (thread_role) over the burst; a
    thread started in it counts from its start. None without names (no py-spy, another daemon)."""
    if not names:
        return None
    cpu_ns: Counter[str] = Counter()
    woke: Counter[str] = Counter()
    for tid, sample in after.items():
        prior = before.get(tid, proc_stats.ThreadSample(tid, 0, 0, 0))
        role = thread_role(names.get(tid, ""))
        cpu_ns[role] += sample.cpu_ns - prior.cpu_ns
        woke[role] += sample.voluntary - prior.voluntary
    return {
        role: {
            "cpu_ms": round(cpu_ns[role] / 1e6 / jobs, 3),
            "wakeups": round(woke[role] / jobs, 2),
        }
        for role in sorted(cpu_ns, key=cpu_ns.__getitem__, reverse=True)
    }


def idle(run: Run) -> dict[str, Any]:
    daemon, figures = start_daemon(run)
    try:
        threads_before = proc_stats.threads(daemon.pid)
        window = Window(run.aws, daemon.pid)
        time.sleep(run.options.idle_seconds)
        threads_after = proc_stats.threads(daemon.pid)
        usage = window.close()
        figures.update(idle_figures(usage, threads_before, threads_after, daemon.pid))
        figures["workers"] = run.workers
    finally:
        figures["exit_status"] = daemon.stop()
        if daemon.hang:
            figures["hang"] = daemon.hang
    return figures


def idle_figures(
    usage: Usage,
    before: dict[int, proc_stats.ThreadSample],
    after: dict[int, proc_stats.ThreadSample],
    pid: int,
) -> dict[str, Any]:
    seconds = usage.seconds
    names = thread_names(pid)
    wakeups = {}
    thread_ns = 0
    for tid, sample in sorted(after.items()):
        if tid not in before:
            continue
        thread_ns += sample.cpu_ns - before[tid].cpu_ns
        woke = sample.voluntary - before[tid].voluntary
        # By name, so that runs of different daemons line up.
        name = names.get(tid, f"thread {tid}")
        if name in wakeups:
            name = f"{name} ({tid})"
        wakeups[name] = round(60 * woke / seconds, 1)
    by_action, _ = calls_by_action(usage.calls)
    memory = proc_stats.memory_kib(pid)
    return {
        "idle_seconds": round(seconds, 1),
        # schedstat's nanoseconds: far finer than the 10 ms ticks of utime and stime.
        "idle_cpu_percent": round(100 * thread_ns / 1e9 / seconds, 4),
        "idle_cpu_percent_ticks": round(100 * usage.cpu / seconds, 3),
        "calls_per_minute": round(60 * len(usage.calls) / seconds, 2),
        "calls_per_minute_by_action": {
            a: round(60 * n / seconds, 2) for a, n in sorted(by_action.items())
        },
        "threads": len(after),
        "wakeups_per_minute": round(sum(wakeups.values()), 1),
        "wakeups_per_minute_by_thread": wakeups,
        "rss_idle_mib": round(memory["VmRSS"] / 1024, 1),
        "rss_peak_mib": round(memory["VmHWM"] / 1024, 1),
    }


def run_scenario(scenario: Scenario, aws: Aws, options: Options) -> dict[str, Any]:
    run = Run(scenario, aws, options)
    try:
        figures = burst(run) if scenario.burst else idle(run)
    except Exception as exc:
        run.errors.append(f"{type(exc).__name__}: {exc}")
        figures = {}
    if scenario.burst and "ran" in figures and figures["ran"] < options.jobs:
        run.errors.append(f"{figures['ran']}/{options.jobs} jobs ran")
    if "exit_status" in figures and figures["exit_status"] != 0:
        status = figures["exit_status"]
        run.errors.append(
            f"the daemon did not exit within {STOP_TIMEOUT:.0f}s of SIGTERM: {figures['hang']}"
            if status is None
            else f"the daemon exited with status {status}"
        )
    log = run.dir / "daemon.log"
    lines = log.read_text().splitlines() if log.exists() else []
    problems = [line for line in lines if any(mark in line for mark in ERROR_MARKS)]
    if problems:
        run.errors.append(f"{len(problems)} ERROR line(s) in the daemon's log, e.g. {problems[0]}")
    if scenario.lock:
        left = count_locks(aws, run.table)
        if left:
            run.errors.append(f"{left} lock(s) left in the table")
    return {"key": scenario.key, "scenario": scenario.title, **figures, "errors": run.errors}


def count_locks(aws: Aws, table: str) -> int:
    pages = aws.dynamodb.get_paginator(
        "scan"
    ).paginate(
        TableName=table,
        FilterExpression="#t = :lock AND attribute_exists(EventId)",  # a released lock keeps its item
        ExpressionAttributeNames={"#t": "Type"},
        ExpressionAttributeValues={":lock": {"S": "lock"}},
    )
    return sum(int(page["Count"]) for page in pages)


# -- report -------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "cpu": proc_stats.cpu_model(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "sqsjkr": __version__,
        "boto3": boto3.__version__,
        "botocore": botocore.__version__,
        "moto": moto.__version__,
    }


def measured(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """The figures of issue 13's table, from the scenarios that ran."""
    by_key = {r["key"]: r for r in results}

    def get(key: str, name: str) -> float | None:
        value = by_key.get(key, {}).get(name)
        return float(value) if isinstance(value, (int, float)) else None

    starts = [r["startup_s"] for r in results if "startup_s" in r]
    peaks = [r["rss_peak_mib"] for r in results if "rss_peak_mib" in r]
    return {
        "cpu_no_lock": get("no-lock", "cpu_ms_per_job"),
        "cpu_lock": get("lock", "cpu_ms_per_job"),
        "cpu_single": get("single", "cpu_ms_per_job"),
        "idle_cpu": get("idle", "idle_cpu_percent"),
        "idle_calls": get("idle", "calls_per_minute"),
        "calls_single": get("single", "calls_per_job"),
        "calls_prefetch": get("prefetch", "calls_per_job"),
        "startup": statistics.median(starts) if starts else None,
        "rss_peak": max(peaks) if peaks else None,
    }


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for n, row in enumerate([header, *rows]):
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return lines


def show(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def render(report: dict[str, Any]) -> str:
    setup, results = report["setup"], report["results"]
    m = report["machine"]
    out = [
        f"sqsjkr {m['sqsjkr']} on {m['cpu']} ({m['cpus']} cpus), Python {m['python']}, "
        f"botocore {m['botocore']}, moto {m['moto']}",
        f"round trip {setup['latency_ms']} ms +- {setup['jitter_ms']} ms; daemon on cpus "
        f"{setup['daemon_cpus']}, moto and the proxy on {setup['aws_cpus']}",
        f"moto: {moto_label(setup)}; load average at the end {setup.get('load_average')}",
    ]
    bursts = [r for r in results if "cpu_ms_per_job" in r]
    if bursts:
        out += ["", *render_bursts(bursts)]
    for r in bursts:
        if r.get("error_responses"):
            answers = ", ".join(f"{a} {n}" for a, n in r["error_responses"].items())
            out.append(f"the endpoint's error answers in {r['scenario']}: {answers}")
    for r in results:
        if "idle_cpu_percent" in r:
            out += ["", *render_idle(r)]
    out += ["", "Issue 13's figures", *render_targets(measured(results))]
    for r in results:
        for error in r["errors"]:
            out.append(f"ERROR {r['key']}: {error}")
    return "\n".join(out)


def moto_label(setup: dict[str, Any]) -> str:
    """--moto as the report names it (a report of before --moto had stock transactions)."""
    return MOTO_MODES[setup.get("moto_mode", "stock")]


def render_bursts(bursts: list[dict[str, Any]]) -> list[str]:
    def pair(figures: dict[str, Any]) -> str:
        return f"{show(figures['p50_ms'])}/{show(figures['p99_ms'])}"

    header = ["scenario", "jobs", "workers", "jobs/s", "burst p50/p99 ms", "single p50/p99 ms"]
    header += ["CPU ms/job (user+sys)", "calls/job", "start-up s", "RSS idle/peak MiB"]
    rows = [
        [
            r["scenario"],
            str(r["jobs"]),
            str(r["workers"]),
            show(r["jobs_per_s"]),
            pair(r["dispatch_burst"]),
            pair(r["dispatch_single"]),
            f"{r['cpu_ms_per_job']:.2f} ({r['cpu_user_ms_per_job']:.2f}"
            f"+{r['cpu_system_ms_per_job']:.2f})",
            f"{r['calls_per_job']:.3f}",
            f"{r['startup_s']:.2f}",
            f"{r['rss_idle_mib']:.0f}/{r['rss_peak_mib']:.0f}",
        ]
        for r in bursts
    ]
    actions = sorted({a for r in bursts for a in r["calls_per_job_by_action"]})
    by_action = [
        [r["scenario"], *(show(r["calls_per_job_by_action"].get(a), "{:.3f}") for a in actions)]
        for r in bursts
    ]
    return [
        *table(header, rows),
        "",
        "AWS calls per job, by action",
        *table(["scenario", *actions], by_action),
        *render_by_thread(bursts),
    ]


def render_by_thread(bursts: list[dict[str, Any]]) -> list[str]:
    """Each part's threads' CPU and wake-ups per job (needs py-spy for the threads' names)."""
    shown = [r for r in bursts if r.get("by_thread")]
    if not shown:
        return []
    roles = ["workers", "closers", "receiver", "deletes", "other"]
    rows = [
        [
            r["scenario"],
            *(
                show(part["cpu_ms"], "{:.2f}") + " / " + show(part["wakeups"], "{:.1f}")
                if (part := r["by_thread"].get(role))
                else "-"
                for role in roles
            ),
        ]
        for r in shown
    ]
    return ["", "CPU ms / wake-ups per job, by thread", *table(["scenario", *roles], rows)]


def render_idle(r: dict[str, Any]) -> list[str]:
    calls = ", ".join(f"{a} {n}" for a, n in r["calls_per_minute_by_action"].items())
    busy = {t: n for t, n in r["wakeups_per_minute_by_thread"].items() if n}
    return [
        f"idle ({r['idle_seconds']:.0f} s, {r['workers']} workers, {r['threads']} threads): "
        f"CPU {r['idle_cpu_percent']:.3f} % ({r['idle_cpu_percent_ticks']:.2f} % by ticks), "
        f"{r['calls_per_minute']} AWS calls/min ({calls or 'none'}), "
        f"{r['wakeups_per_minute']} wake-ups/min, RSS {r['rss_idle_mib']:.0f} MiB",
        "  wake-ups/min by thread: " + (", ".join(f"{t}: {n}" for t, n in busy.items()) or "none"),
    ]


def render_targets(figures: dict[str, float | None]) -> list[str]:
    rows = []
    for key, target in TARGETS.items():
        value = figures[key]
        verdict = "-" if value is None else ("ok" if value <= target.target else "over")
        rows.append(
            [
                target.figure,
                target.go,
                show(value, target.fmt),
                f"{target.target:g}",
                target.unit,
                verdict,
            ]
        )
    return table(["figure", "Go", "sqsjkr", "target", "unit", "verdict"], rows)


def pick_cpus(args: argparse.Namespace) -> tuple[set[int] | None, set[int] | None]:
    """(daemon's, AWS side's): the last allowed cpu for the daemon, the rest for everything else."""
    if args.no_pin:
        return None, None
    allowed = sorted(os.sched_getaffinity(0))
    daemon = {int(c) for c in args.daemon_cpus.split(",")} if args.daemon_cpus else {allowed[-1]}
    rest = set(allowed) - daemon
    if not rest or shutil.which("taskset") is None:
        print(
            "warning: cannot pin (one cpu, or no taskset): daemon and moto share cpus",
            file=sys.stderr,
        )
        return None, None
    return daemon, rest


def harness_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the harness (AWS side, jobs, cpus), shared with side_by_side.py."""
    parser.add_argument("--jobs", type=int, help="jobs per burst (default 200; --quick 60)")
    parser.add_argument("--workers", type=int, default=20, help="max_concurrent_num (default 20)")
    parser.add_argument("--latency-ms", type=float, default=10.0, help="round trip (default 10)")
    parser.add_argument(
        "--jitter-ms", type=float, default=2.0, help="round trip varies by up to this (default 2)"
    )
    parser.add_argument("--idle-seconds", type=float, help="idle window (default 90; --quick 15)")
    parser.add_argument(
        "--trickle",
        type=int,
        help="jobs sent one at a time after each burst (default 20; --quick 5)",
    )
    parser.add_argument("--quick", action="store_true", help="fewer jobs, a shorter idle window")
    parser.add_argument("--timeout", type=float, default=300.0, help="per burst (default 300 s)")
    parser.add_argument(
        "--moto",
        choices=list(MOTO_MODES),
        default="fair",
        help="the endpoint's TransactWriteItems and queues: fair (DynamoDB's and SQS's cost, the "
        "default) or stock (moto's own: a copy of the whole table per item, a clock read per "
        "message of the queue for each message sent or received)",
    )
    parser.add_argument("--daemon-cpus", help="cpus for the daemon, e.g. 1 (default: the last one)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cpus")
    parser.add_argument(
        "--keep", action="store_true", help="keep the work directory (configs, daemon logs)"
    )


def harness_defaults(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The defaults that depend on --quick, and the checks of harness_arguments' options."""
    args.jobs = args.jobs or (60 if args.quick else 200)
    args.idle_seconds = args.idle_seconds or (15.0 if args.quick else 90.0)
    args.trickle = args.trickle if args.trickle is not None else (5 if args.quick else 20)
    if min(args.jobs, args.workers) < 1 or args.idle_seconds <= 0 or args.trickle < 0:
        parser.error("--jobs and --workers must be at least 1, --idle-seconds above 0")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness_arguments(parser)
    parser.add_argument(
        "--scenario", action="append", choices=list(SCENARIOS), help="repeatable; default: all"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every scenario this many times, interleaved; report medians (default 1)",
    )
    parser.add_argument(
        "--daemon-command",
        default=default_daemon_command(),
        help="the daemon to measure, {conf} standing for its config file and {table} for its "
        "table (default: %(default)s)",
    )
    parser.add_argument(
        "--profile", type=Path, metavar="DIR", help="record the bursts with py-spy into DIR"
    )
    parser.add_argument("--profile-rate", type=int, default=250, help="py-spy samples/s (250)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    harness_defaults(parser, args)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One scenario's runs as one: the median of each number, every run's errors."""
    combined = median_of(runs)
    combined["errors"] = [error for run in runs for error in run["errors"]]
    combined["profile"] = [run["profile"] for run in runs if "profile" in run]
    return combined


def median_of(values: list[Any]) -> Any:
    present = [v for v in values if v is not None]
    if not present:
        return None
    first = present[0]
    if isinstance(first, bool) or not isinstance(first, (int, float, dict)):
        return first
    if isinstance(first, dict):
        keys = dict.fromkeys(k for v in present if isinstance(v, dict) for k in v)
        return {k: median_of([v.get(k) for v in present if isinstance(v, dict)]) for k in keys}
    numbers = [v for v in present if isinstance(v, (int, float))]
    if all(isinstance(v, int) for v in numbers):
        return statistics.median_low(numbers)
    return round(statistics.median(numbers), 4)


def summarize_profiles(results: list[dict[str, Any]]) -> dict[str, str]:
    """Each profiled scenario's summary; its shares also go into its results."""
    profiles = {}
    for r in results:
        if r.get("profile"):
            profile = profile_summary.load([Path(path) for path in r["profile"]])
            profiles[r["scenario"]] = profile_summary.render(profile)
            r["profile_share_percent"] = {
                where: round(100 * n / profile.samples, 1)
                for where, n in profile.categories.most_common()
            }
    return profiles


def compile_sqsjkr() -> None:
    """Write the bytecode of sqsjkr's modules, as installing the package does.

    Under PYTHONDONTWRITEBYTECODE (set in some shells and CI), a daemon run from a source tree would
    compile its modules from source at every start: about 0.15 s of start-up that an installed
    daemon never pays, and a few MiB of memory.
    """
    import sqsjkr

    compileall.compile_dir(str(Path(sqsjkr.__file__).parent), quiet=1)


@contextmanager
def harness(
    args: argparse.Namespace, daemon_command: str, profile_dir: Path | None = None
) -> Iterator[tuple[Aws, Options]]:
    """The AWS side up, the benchmark off the daemon's cpu, a work directory: what every run of
    a daemon needs, with the options of harness_arguments."""
    compile_sqsjkr()
    daemon_cpus, aws_cpus = pick_cpus(args)
    if aws_cpus:
        os.sched_setaffinity(0, aws_cpus)  # the benchmark itself stays off the daemon's cpu
    workdir = Path(tempfile.mkdtemp(prefix="sqsjkr-deployment-"))
    options = Options(
        jobs=args.jobs,
        workers=args.workers,
        idle_seconds=args.idle_seconds,
        trickle=args.trickle,
        timeout=args.timeout,
        workdir=workdir,
        daemon_cpus=daemon_cpus,
        aws_cpus=aws_cpus,
        profile_dir=profile_dir,
        profile_rate=getattr(args, "profile_rate", 250),
        daemon_command=daemon_command,
    )
    try:
        with aws_side(aws_cpus, args.latency_ms, args.jitter_ms, args.moto) as aws:
            yield aws, options
    finally:
        if args.keep:
            print(f"work directory kept: {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def harness_setup(args: argparse.Namespace, options: Options) -> dict[str, Any]:
    """The report's account of the set-up."""
    return {
        "latency_ms": args.latency_ms,
        "jitter_ms": args.jitter_ms,
        "moto_mode": args.moto,
        "daemon_cpus": sorted(options.daemon_cpus) if options.daemon_cpus else None,
        "aws_cpus": sorted(options.aws_cpus) if options.aws_cpus else None,
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        py_spy()
        args.profile.mkdir(parents=True, exist_ok=True)
    keys = args.scenario or list(SCENARIOS)
    runs: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    with harness(args, args.daemon_command, args.profile) as (aws, options):
        # Interleaved, so that a slow spell of a shared machine spreads over every scenario.
        for n in range(args.repeat):
            for key in keys:
                print(f"running {key} ({n + 1}/{args.repeat}) ...", file=sys.stderr, flush=True)
                runs[key].append(run_scenario(SCENARIOS[key], aws, options))
        setup = harness_setup(args, options)
    results = [median_run(runs[key]) for key in keys]
    report = {
        "machine": machine(),
        "setup": {**setup, "daemon_command": args.daemon_command},
        "repeat": args.repeat,
        "results": results,
        "runs": runs if args.repeat > 1 else None,
        "targets": {
            key: {"go": t.go, "target": t.target, "unit": t.unit, "sqsjkr": value}
            for (key, t), value in zip(TARGETS.items(), measured(results).values(), strict=True)
        },
    }
    profiles = summarize_profiles(results)
    print(json.dumps(report, indent=2) if args.json else render(report))
    for scenario, text in profiles.items():
        # On stderr: stdout stays one JSON document with --json.
        print(f"\nprofile of {scenario}:\n{text}", file=sys.stderr)
    return 1 if any(r["errors"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
