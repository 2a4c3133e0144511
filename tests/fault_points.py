"""The fault-point walk: each AWS call of a path, recorded in a clean run, refused, its answer lost
or followed by SIGKILL; then the path's invariants (tests/test_fault_points.py, benchmarks/).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import io
import json
import os
import random
import re
import signal
import socket
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

from sqsjkr.backends.aws import ATTEMPTS
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.pipeline import DynamoPipelines
from sqsjkr.commands.cli import main
from sqsjkr.contract.config import load_config
from sqsjkr.contract.firing import Origin
from sqsjkr.contract.pipeline import PipelineRun as StepOfRun
from sqsjkr.contract.pipeline import parse_pipeline
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.pipeline_steps import STUCK_AFTER
from sqsjkr.fleet.status import CheckPolicy, check_verdict
from tests.api_fleet import TOKENS, tokens_file
from tests.conftest import Daemon, config_text, new_aws, wait_until
from tests.faults import Call, Fault, FaultProxy
from tests.test_catchup import HOUR, hourly, module_message
from tests.test_schedules import scheduler

#: The lease of claims and locks: a killed daemon's are taken over within seconds (the queue's
#: visibility timeout follows from it: 4 s).
LEASE = "2s"
#: How long a replay may take to settle after its fault before what it left is judged.
SETTLE_SECONDS = 30.0
#: The event ids of every path start so: the steps a call names are read from its text.
PREFIX = "fpx"

#: What idle daemons call whatever the path: the items of their presence, of the catch-up
#: look's lease, of running jobs' output tails (written on a timer, not by the path), and the
#: scheduler's REST calls (the catch-up look).
BACKGROUND = frozenset({"daemon", "catchup", "live", "scheduler"})
#: A catch-up send's path is the look: only presence and output tails are not on it.
LOOKING = frozenset({"daemon", "live"})


class Kind(enum.Enum):
    """What befalls the call at a point."""

    REFUSED = "refused"  # a 500 at each of botocore's tries: the call fails, nothing written
    LOST = "lost"  # applied, then the connection closed unanswered (botocore tries again)
    KILLED = "killed"  # applied, then SIGKILL of its daemon and its jobs, as a host dies


# -- points: the calls of a path, by identities stable from one run to the next -------------------


@dataclass(frozen=True, order=True)
class Point:
    """One call of a path: its action, the Types or queue it writes, the steps it names, and
    its ordinal among the path's calls of that identity."""

    action: str
    shape: str
    subject: str
    ordinal: int

    def __str__(self) -> str:
        subject = f" [{self.subject}]" if self.subject else ""
        return f"{self.action} {self.shape}{subject} #{self.ordinal}"

    @property
    def identity(self) -> tuple[str, str, str]:
        return (self.action, self.shape, self.subject)


STEP_NAMES = re.compile(rf"{PREFIX}-(\w+)|#step-(\w+)")


def names_in(text: str) -> set[str]:
    """The steps (or events) text names by their event ids or their claims' keys."""
    return {next(g for g in m.groups() if g) for m in STEP_NAMES.finditer(text)}


def step_of_message(body: str) -> str:
    """The step a message is (its root's, for a pipeline's first), else the event it is of."""
    try:
        job = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(job, dict):
        return ""
    if job.get("step"):
        return str(job["step"])
    if isinstance(job.get("pipeline"), dict):
        return str(job["pipeline"].get("root", ""))
    return ",".join(sorted(names_in(str(job.get("event_id", "")))))


def subject_of(call: Call, answer: bytes | None) -> str:
    """The steps (or events) a call is about, sorted: how the calls of b and c, made in either
    order, are told apart from one run to the next."""
    request = call.json
    if call.action == "ReceiveMessage":
        messages = json.loads(answer or b"{}").get("Messages") or []
        return ",".join(sorted(step_of_message(m.get("Body", "")) for m in messages))
    if call.action == "SendMessage":
        return step_of_message(str(request.get("MessageBody", "")))
    step = request.get("ExpressionAttributeValues", {}).get(":step", {}).get("SS")
    if step:  # a step's end noted in its run's item
        return ",".join(sorted(step))
    return ",".join(sorted(names_in(call.body.decode(errors="replace"))))


def kind_of_item(type_: str | None) -> str:
    """An item's Type without its per-run part (run#<time>#<id> is a run record)."""
    return (type_ or "").split("#", 1)[0]


def shape_of(call: Call) -> str:
    """What a call writes or reads: its item's Type, a transaction's writes, or its queue."""
    request = call.json
    if call.action == "TransactWriteItems":
        writes = []
        for write in request.get("TransactItems", []):
            op, body = next(iter(write.items()))
            item = body.get("Item") or body.get("Key") or {}
            writes.append(f"{op}:{kind_of_item(item.get('Type', {}).get('S'))}")
        return "+".join(writes)
    if call.item_type() is not None:
        return kind_of_item(call.item_type())
    queue = str(request.get("QueueUrl") or request.get("QueueName") or "")
    return "queue" if queue else ""


def identity(
    call: Call, answer: bytes | None, quiet: frozenset[str] = BACKGROUND
) -> tuple[str, str, str] | None:
    """The call's identity on the path, or None for a call that idle daemons make anyway (an
    empty ReceiveMessage, and what quiet names)."""
    if not call.action:  # the scheduler's REST API
        return None if "scheduler" in quiet else (call.route, "scheduler", "")
    if kind_of_item(call.item_type()) in quiet:
        return None
    if call.action == "ReceiveMessage":
        if not json.loads(answer or b"{}").get("Messages"):
            return None
        return (call.action, "queue", subject_of(call, answer))
    if call.action in ("GetQueueAttributes", "ChangeMessageVisibilityBatch", "GetQueueUrl"):
        # Made on timers (the backlog gauge, visibility kept up) or once per process.
        return None
    return (call.action, shape_of(call), subject_of(call, None))


def path_points(
    answers: Sequence[tuple[Call, int, bytes | None]], quiet: frozenset[str] = BACKGROUND
) -> list[Point]:
    """The points of a clean run's calls (answered after the path began), retries left out."""
    seen: Counter[tuple[str, str, str]] = Counter()
    last: dict[tuple[str, str, str], str] = {}
    points = []
    for call, _, answer in answers:
        ident = identity(call, answer, quiet)
        if ident is None or (
            call.action != "ReceiveMessage" and last.get(ident) == call.request_key()
        ):
            continue
        last[ident] = call.request_key()
        seen[ident] += 1
        points.append(Point(*ident, seen[ident]))
    return points


class Aim:
    """Finds a point's call among a replay's calls as they come, and the tries of it after."""

    def __init__(self, point: Point, retries: int, quiet: frozenset[str] = BACKGROUND) -> None:
        self.point = point
        self._quiet = quiet
        self._seen: Counter[tuple[str, str, str]] = Counter()
        self._last: dict[tuple[str, str, str], str] = {}
        self._hit: str | None = None
        self._retries = retries
        #: Set when the path begins: the calls before it (daemons starting, a prepared run)
        #: are not counted. A receive asked before may bring the path's first message.
        self.armed = threading.Event()
        self.reached = threading.Event()

    def first(self, call: Call) -> bool:
        """Whether call is the point's (for a ReceiveMessage: may be; answered() decides)."""
        if self._hit is not None or (call.action or call.route) != self.point.action:
            return False
        if call.action == "ReceiveMessage":  # answered() decides, once it is answered
            return True
        ident = identity(call, None, self._quiet)
        if not self.armed.is_set() or ident is None or self._last.get(ident) == call.request_key():
            return False
        self._last[ident] = call.request_key()
        self._seen[ident] += 1
        return self._take(call, ident)

    def answered(self, call: Call, status: int, answer: bytes) -> bool:
        """Whether the ReceiveMessage that took effect was the point's."""
        ident = identity(call, answer, self._quiet)
        if not self.armed.is_set() or ident is None or self._hit is not None:
            return False
        self._seen[ident] += 1
        return self._take(call, ident)

    def _take(self, call: Call, ident: tuple[str, str, str]) -> bool:
        if ident != self.point.identity or self._seen[ident] != self.point.ordinal:
            return False
        self._hit = call.request_key()
        self.reached.set()
        return True

    def retry(self, call: Call) -> bool:
        """Whether call is a further try of the point's call, to be refused as the first was."""
        if self._hit is None or self._retries <= 0 or call.request_key() != self._hit:
            return False
        if call.action == "ReceiveMessage":
            return False  # every receive has the same request: the next one is no retry
        self._retries -= 1
        return True


def faults_for(kind: Kind, aim: Aim, kill: Callable[[], None]) -> list[Fault]:
    """The proxy's faults that do kind to aim's call (and, refused, to botocore's tries of it)."""
    receive = aim.point.action == "ReceiveMessage"
    confirm = aim.answered if receive else None
    if kind is Kind.REFUSED:
        error = (500, "InternalError")
        return [
            Fault(aim.retry, error=error),
            Fault(aim.first, error=error, confirm=confirm),
        ]
    if kind is Kind.LOST:
        return [Fault(aim.first, drop=True, confirm=confirm)]
    return [Fault(aim.first, drop=True, after=lambda _: kill(), confirm=confirm)]


# -- a replay's world: a queue and a table of its own, the daemons on them ------------------------


def children_of(pid: int) -> list[int]:
    """The processes pid started (a daemon's jobs, each the leader of a session of its own)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def die_with_parent() -> None:
    """In a daemon's process before it runs: SIGKILL when the walk that started it ends, however
    it ends (a walk stopped with SIGTERM runs no cleanup; its daemons would poll a dead proxy)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


#: prctl(2)'s option: the signal a process gets when the thread that started it ends.
PR_SET_PDEATHSIG = 1


class World:
    """One replay's queue, table, directory and daemons behind one proxy."""

    def __init__(
        self,
        proxy: FaultProxy,
        env: dict[str, str],
        directory: Path,
        kicker: dict[str, Any] | None = None,
    ) -> None:
        self.proxy = proxy
        self.aws = new_aws()
        self.dir = directory
        self.out = directory / "out"
        self.env = {**env, "AWS_ENDPOINT_URL": proxy.url}
        self.daemons: list[Daemon] = []
        self.kills = 0
        self._lock = threading.Lock()
        text = config_text(self.aws, stats="stats_port = 0", **(kicker or {}))
        self.conf = directory / "config.toml"
        self.conf.write_text(text.replace("[lock]\n", f'[lock]\nlease = "{LEASE}"\n'))

    def start(self) -> Daemon:
        daemon = Daemon(["run", "-c", str(self.conf)], self.env, self.dir, die_with_parent)
        with self._lock:
            self.daemons.append(daemon)
        # A fault may kill it while it starts (a catch-up look's path begins there): tend()
        # starts another.
        wait_until(
            lambda: "receiving with" in daemon.log or daemon.proc.poll() is not None,
            30,
            "the daemon receiving",
        )
        return daemon

    def kill_host(self) -> None:
        """SIGKILL the live daemons and their jobs, as when their host dies."""
        with self._lock:
            for daemon in self.daemons:
                if daemon.proc.poll() is None:
                    jobs = children_of(daemon.proc.pid)
                    daemon.proc.send_signal(signal.SIGKILL)
                    for job in jobs:
                        with contextlib.suppress(ProcessLookupError, PermissionError):
                            os.killpg(job, signal.SIGKILL)
                    self.kills += 1

    def tend(self) -> None:
        """Start a daemon in place of a killed one, as an autoscaling group would."""
        if not any(d.proc.poll() is None for d in self.daemons if d.args[0] == "run"):
            self.start()

    def lines(self) -> list[str]:
        return self.out.read_text().split() if self.out.exists() else []

    def records(self, event_id: str) -> list[RunRecord]:
        return self._history().runs(event_id, 100)

    def shown_running(self, event_id: str) -> list[str]:
        """The messages whose runs event_id's summary shows in progress."""
        summary = self._history().summary(event_id)
        return [] if summary is None else [run.message_id for run in summary.running]

    def _history(self) -> DynamoHistory:
        return DynamoHistory(self.aws.dynamodb, self.aws.table, retention_seconds=1)

    def close(self) -> None:
        for daemon in self.daemons:
            daemon.kill()
        with contextlib.suppress(Exception):
            self.aws.sqs.delete_queue(QueueUrl=self.aws.queue_url)
        with contextlib.suppress(Exception):
            self.aws.dynamodb.delete_table(TableName=self.aws.table)


#: run_main redirects this process's stdout: one check at a time.
_CHECK_LOCK = threading.Lock()


def status_check(world: World) -> tuple[int, str]:
    """`sqsjkr status --check` on the world's table, in this process: (exit code, its line)."""
    out, err = io.StringIO(), io.StringIO()
    with _CHECK_LOCK, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(["status", "-c", str(world.conf), "--check", "--include-one-off"])
        except SystemExit as exited:
            return int(exited.code or 0), (out.getvalue() + err.getvalue()).strip()
    return 0, out.getvalue().strip()


def check_later(world: World) -> tuple[int, str]:
    """What `status --check` will say once a step left unstarted has been due STUCK_AFTER (an
    hour): the check, judged at that moment, on what the table holds now."""
    policy = CheckPolicy(include_one_off=True)
    level, line = check_verdict(
        lambda: store_of(load_config(world.conf)), policy, time.time() + STUCK_AFTER + 60
    )
    return int(level), line


# -- the paths ----------------------------------------------------------------------------------


@dataclass
class JobPath:
    """A path: what is set up before it (no fault yet), the send that starts it, when it has
    settled, and what must then hold (a list of what does not)."""

    name: str
    send: Callable[[World], None]
    settled: Callable[[World], bool]
    check: Callable[[World], list[str]]
    prepare: Callable[[World], None] = lambda world: None
    #: Runs beyond one per step that a crash may cause: counted, not failed.
    reruns: Callable[[World], int] = lambda world: 0
    #: The path begins as a daemon starts (a catch-up look): prepare comes before it.
    begins_with_daemon: bool = False
    #: Start again what a kill took beside the daemons (the web server).
    tend: Callable[[World], None] = lambda world: None
    quiet: frozenset[str] = BACKGROUND
    #: [kicker] keys of the daemons' config, beside the tests' defaults.
    kicker: dict[str, Any] = field(default_factory=dict)


def firing_fields(at: float) -> dict[str, str]:
    moment = datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")
    return {"time": moment.replace("+00:00", "Z"), "schedule": "nightly"}


def final_records(world: World, event_id: str) -> list[RunRecord]:
    return [r for r in world.records(event_id) if r.final and r.duplicate_of is None]


def succeeded(records: list[RunRecord]) -> list[RunRecord]:
    return [r for r in records if r.outcome is RunOutcome.SUCCEEDED]


def single_job(name: str, **fields: Any) -> JobPath:
    """A job (plain, with a lock, or of a firing): it runs at least once, its message is not
    left, a record says it succeeded, its lock is given back, and its event is not left shown
    running."""
    event = f"{PREFIX}-{name}"

    def send(world: World) -> None:
        more = dict(fields)
        if "firing" in more:
            more["firing"] = firing_fields(time.time() - 5)
        world.aws.send({"command": f"echo ran >> {world.out}", "event_id": event, **more})

    def settled(world: World) -> bool:
        return (
            world.aws.queue_counts() == (0, 0)
            and bool(world.lines())
            and bool(succeeded(final_records(world, event)))
            and ("lock_id" not in fields or world.aws.lock_free(fields["lock_id"]))
        )

    def check(world: World) -> list[str]:
        problems = []
        ran = world.lines().count("ran")
        queued = world.aws.queue_counts()
        if ran == 0:
            problems.append(
                "never ran, and no message of it is left"
                if queued == (0, 0)
                else f"never ran ({queued})"
            )
        elif queued != (0, 0):
            problems.append(f"its message left on the queue (visible, in flight: {queued})")
        ok = succeeded(final_records(world, event))
        if not ok:
            problems.append(f"no record of a success: {outcomes(world.records(event))}")
        if "firing" in fields and len(ok) > 1:
            problems.append(f"the firing recorded as run {len(ok)} times")
        if "lock_id" in fields and not world.aws.lock_free(fields["lock_id"]):
            problems.append(f"lock {fields['lock_id']} still held")
        # A note of a run's start that landed after its end (ahead.LateNote) stays there.
        running = world.shown_running(event)
        if running:
            problems.append(f"still shown running, by {running}")
        return problems

    def reruns(world: World) -> int:
        return max(0, world.lines().count("ran") - 1)

    return JobPath(name, send, settled, check, reruns=reruns)


def batch_path(
    name: str = "batch", jobs: int = 2, prefetch: int | None = 0, seconds: float = 0.0
) -> JobPath:
    """jobs on a daemon of one worker, each seconds long. With no prefetch (batch) each receive
    comes back full, so a run's end, written behind its worker, waits for the next job's claim
    and goes in its call. With the default prefetch of one worker (prefetch: None) the jobs are
    sent before the daemon starts, and its first receive takes them all: they are claimed in
    one write, those that wait for the worker stay in flight, and the runs' ends share
    calls (daemon/ahead.py). Each runs at least once, no message is left, each has a record of
    its success, and none is left shown running."""
    events = [f"{PREFIX}-{name}-{n}" for n in range(jobs)]
    sleep = f"; sleep {seconds:g}" if seconds else ""

    def send(world: World) -> None:
        for event in events:
            command = f"echo {event} >> {world.out}{sleep}"
            world.aws.send({"command": command, "event_id": event})

    def settled(world: World) -> bool:
        return (
            world.aws.queue_counts() == (0, 0)
            and set(events) <= set(world.lines())
            and all(succeeded(final_records(world, event)) for event in events)
        )

    def check(world: World) -> list[str]:
        problems = []
        lines = world.lines()
        queued = world.aws.queue_counts()
        if queued != (0, 0):
            problems.append(f"messages left on the queue (visible, in flight: {queued})")
        for event in events:
            if event not in lines:
                problems.append(f"{event} never ran")
            if not succeeded(final_records(world, event)):
                problems.append(
                    f"{event}: no record of a success: {outcomes(world.records(event))}"
                )
            # A note of a run's start that landed after its end (ahead.LateNote) stays there.
            running = world.shown_running(event)
            if running:
                problems.append(f"{event}: still shown running, by {running}")
        return problems

    def reruns(world: World) -> int:
        lines = world.lines()
        return sum(max(0, lines.count(event) - 1) for event in events)

    kicker: dict[str, Any] = {"max_concurrent_num": 1}
    if prefetch is not None:
        kicker["prefetch"] = prefetch
        return JobPath(name, send, settled, check, reruns=reruns, kicker=kicker)
    # Sent first, the daemon's start then part of the path: one receive takes them all.
    return JobPath(
        name,
        lambda world: None,
        settled,
        check,
        prepare=send,
        reruns=reruns,
        begins_with_daemon=True,
        kicker=kicker,
    )


def outcomes(records: list[RunRecord]) -> list[str]:
    return [f"{r.outcome.value}{'' if r.final else ' (not final)'}" for r in records]


STEPS = ("a", "b", "c", "d")


def diamond(out: Path, c_command: str | None = None) -> dict[str, Any]:
    """A -> (B, C) -> D, each step noting its start and end in out; c may fail, and notify
    runs then."""

    def job(name: str) -> dict[str, Any]:
        command = f"echo start-{name} >> {out}; echo end-{name} >> {out}"
        if name == "c" and c_command:
            command = c_command
        return {"command": command, "event_id": f"{PREFIX}-{name}"}

    steps: dict[str, Any] = {
        "a": {"after": []},
        "b": {"after": ["a"], "job": job("b")},
        "c": {"after": ["a"], "job": job("c"), "on_failure": ["notify"]},
        "d": {"after": ["b", "c"], "job": job("d")},
        "notify": {"job": {"command": f"echo notified >> {out}", "event_id": f"{PREFIX}-notify"}},
    }
    return {**job("a"), "pipeline": {"name": PREFIX, "root": "a", "steps": steps}}


class PipelineRun:
    """A diamond fired once (its run key the firing's): every step ran once for it, d after b
    and c, notify never, and its run's item says so."""

    def __init__(self, at: float, c_command: str | None = None) -> None:
        self.at = at
        self.firing = firing_fields(at)
        self.key = f"nightly@{self.firing['time']}"
        self.c_command = c_command

    def body(self, world: World) -> dict[str, Any]:
        return {**diamond(world.out, self.c_command), "firing": self.firing}

    def state(self, world: World) -> Any:
        store = DynamoPipelines(world.aws.dynamodb, world.aws.table, lives_seconds=60)
        try:
            return store.state(self.key)
        except KeyError:
            # moto (not DynamoDB) can show an UpdateItem's item half made to a read at the same
            # moment; the next read sees it whole.
            time.sleep(0.05)
            return store.state(self.key)

    def done(self, world: World) -> bool:
        state = self.state(world)
        return (
            state is not None
            and set(STEPS) <= set(state.succeeded)
            and world.aws.queue_counts() == (0, 0)
        )

    def check(self, world: World, notified: int = 0) -> list[str]:
        problems = []
        ran = world.lines()
        for step in STEPS:
            if f"end-{step}" not in ran:
                problems.append(
                    f"{step} never ended" + (" (never started)" * (f"start-{step}" not in ran))
                )
            records = [
                r
                for r in succeeded(final_records(world, f"{PREFIX}-{step}"))
                if r.pipeline_key == self.key
            ]
            if len(records) != 1:
                problems.append(f"{step} recorded as succeeded {len(records)} times for the run")
        if "start-d" in ran:
            first_d = ran.index("start-d")
            for parent in ("b", "c"):
                ends = [i for i, line in enumerate(ran) if line == f"end-{parent}"]
                if not ends or ends[0] > first_d:
                    problems.append(f"d started before {parent} ended")
        if ran.count("notified") != notified:
            problems.append(f"notify ran {ran.count('notified')} times")
        state = self.state(world)
        if state is None:
            problems.append("no item of the run")
        else:
            if not set(STEPS) <= set(state.succeeded):
                problems.append(f"the run's item notes as succeeded only {sorted(state.succeeded)}")
            if state.failed:
                problems.append(f"the run's item notes as failed {sorted(state.failed)}")
        queued = world.aws.queue_counts()
        if queued != (0, 0):
            problems.append(f"messages left on the queue (visible, in flight: {queued})")
        return problems

    def reruns(self, world: World, before: Counter[str] | None = None) -> int:
        ran = Counter(world.lines())
        return sum(
            max(0, ran[f"start-{s}"] - 1 - (before or Counter())[f"start-{s}"]) for s in STEPS
        )


def pipeline_path() -> JobPath:
    run = PipelineRun(time.time() - 5)

    def send(world: World) -> None:
        world.aws.send(run.body(world))

    return JobPath(
        "pipeline",
        send,
        run.done,
        run.check,
        reruns=run.reruns,
    )


def rerun_path() -> JobPath:
    """A diamond whose c failed (notify ran, d skipped), re-run by `trigger STEP --firing T
    --force` once c is fixed: c again, then d, each once."""
    run = PipelineRun(time.time() - 5)
    rerun_id = uuid.uuid4().hex

    def prepare(world: World) -> None:
        fixed = world.dir / "fixed"
        run.c_command = (
            f"echo start-c >> {world.out}; test -f {fixed} || exit 3; echo end-c >> {world.out}"
        )
        world.aws.send(run.body(world))
        deadline = time.monotonic() + SETTLE_SECONDS
        while not failed_and_quiet(world):
            if time.monotonic() > deadline:
                raise AssertionError(f"the failed run did not settle: {world.lines()}")
            time.sleep(0.1)
        fixed.touch()
        # As trigger does before it sends: the re-run is asked for in the run's item, or the
        # daemons refuse the step's message as no operator's.
        pipeline = parse_pipeline(run.body(world))
        assert pipeline is not None
        asked = StepOfRun(pipeline, "c", run.key).asked(rerun_id)
        assert DynamoPipelines(world.aws.dynamodb, world.aws.table, lives_seconds=60).ask(
            run.key, asked
        )

    def failed_and_quiet(world: World) -> bool:
        state = run.state(world)
        return (
            state is not None
            and state.failed == {"c"}
            and "notified" in world.lines()
            and world.aws.queue_counts() == (0, 0)
        )

    def send(world: World) -> None:
        body = run.body(world)
        pipeline = parse_pipeline(body)
        assert pipeline is not None
        job = dict(pipeline.steps["c"].job or {})
        message = {**job, "pipeline": pipeline.as_fields(), "step": "c"}
        firing = {**body["firing"], "rerun": rerun_id}
        world.aws.send({**message, "pipeline_key": run.key, "firing": firing})

    def check(world: World) -> list[str]:
        problems = run.check(world, notified=1)
        if world.lines().count("start-c") < 2:
            problems.append("c was not run again")
        return problems

    def reruns(world: World) -> int:
        ran = Counter(world.lines())
        return sum(max(0, ran[f"start-{s}"] - 1) for s in "abd") + max(0, ran["start-c"] - 2)

    return JobPath("rerun", send, run.done, check, prepare=prepare, reruns=reruns)


def catch_up_path() -> JobPath:
    """An hourly schedule with catch_up whose last firing (30 minutes ago) no daemon took: the
    daemon that starts looks, sends it as that firing, and runs it once."""
    event = f"{PREFIX}-catchup"
    group = f"fp-{uuid.uuid4().hex[:8]}"

    def prepare(world: World) -> None:
        scheduler().create_schedule_group(Name=group)
        body = module_message(event, f"echo ran >> {world.out}", catch_up="1h")
        hourly(world.aws, group, event, time.time() - 2.5 * HOUR, body)
        section = f'\n[schedule]\ngroup = "{group}"\ncatch_up_interval = "3s"\n'
        world.conf.write_text(world.conf.read_text() + section)

    def settled(world: World) -> bool:
        return world.aws.queue_counts() == (0, 0) and bool(succeeded(final_records(world, event)))

    def check(world: World) -> list[str]:
        problems = []
        if "ran" not in world.lines():
            problems.append("the missed firing never ran")
        ok = succeeded(final_records(world, event))
        if len(ok) != 1:
            problems.append(
                f"the firing recorded as run {len(ok)} times: {outcomes(world.records(event))}"
            )
        elif ok[0].origin != Origin.CATCH_UP.value:
            problems.append(f"its run's origin is {ok[0].origin}, not catch-up")
        queued = world.aws.queue_counts()
        if queued != (0, 0):
            problems.append(f"messages left on the queue (visible, in flight: {queued})")
        return problems

    def reruns(world: World) -> int:
        return max(0, world.lines().count("ran") - 1)

    return JobPath(
        "catchup",
        lambda world: None,
        settled,
        check,
        prepare=prepare,
        reruns=reruns,
        begins_with_daemon=True,
        quiet=LOOKING,
    )


#: The longest Retry-After the walk's API client waits: a send-busy's, the unique item's
#: pending time.
RETRY_AFTER_BOUND = 70.0


class Web:
    """`sqsjkr web` with the HTTP API on, its calls through the world's proxy: a host's second
    process, killed with the daemon when the host dies."""

    def __init__(self) -> None:
        self.process: Daemon | None = None
        self.url = ""
        self.answers: list[int | str] = []

    def start(self, world: World) -> None:
        tokens = tokens_file(world.dir)
        args = [
            "web",
            "-c",
            str(world.conf),
            "--listen",
            "127.0.0.1:0",
            "--api-tokens",
            str(tokens),
        ]
        process = Daemon([*args, "--enable-actions"], world.env, world.dir, die_with_parent)
        world.daemons.append(process)  # killed with them when the host dies
        self.process = process
        found = wait_until(
            lambda: re.search(r"sqsjkr web: (http://127\.0\.0\.1:\d+/)", process.log),
            30,
            "sqsjkr web's start-up line",
        )
        self.url = found.group(1)

    def tend(self, world: World) -> None:
        if self.process is not None and self.process.proc.poll() is not None:
            self.start(world)

    def _answering_or_gone(self) -> bool:
        assert self.process is not None
        if self.process.proc.poll() is not None:
            return True
        address = urllib.parse.urlsplit(self.url)
        try:
            socket.create_connection((address.hostname, address.port or 80), timeout=1).close()
        except OSError:
            return False
        return True

    def submit(self, world: World, body: dict[str, Any], tries: int = 4) -> None:
        """POST the job as a client does: again after an error or no answer, with the same
        unique_for, until an answer says it was sent; after a 409 (a send of it under way,
        which may be one the listener's death cut short), once its Retry-After has passed."""
        secret = TOKENS["all"][0]
        for _ in range(tries):
            self.tend(world)
            try:
                answer = requests.post(
                    self.url + "api/v1/jobs",
                    json=body,
                    headers={"Authorization": f"Bearer {secret}"},
                    timeout=30,
                )
            except requests.RequestException as exc:
                self.answers.append(type(exc).__name__)
                # A listener killed under the request refuses connections before its exit is
                # seen (its process reaped): tried again only then, when tend starts another.
                wait_until(self._answering_or_gone, 30, "sqsjkr web answering, or seen gone")
                continue
            self.answers.append(answer.status_code)
            if answer.status_code in (200, 201):
                return
            if answer.status_code == 409:
                time.sleep(min(float(answer.headers.get("Retry-After", 1)), RETRY_AFTER_BOUND))


def api_submit_path() -> JobPath:
    """A job submitted through the HTTP API (POST /api/v1/jobs, unique for a while), retried by
    its client until answered: it runs, once answered that it was sent."""
    web = Web()
    job = single_job("api")

    def send(world: World) -> None:
        command = {"command": f"echo ran >> {world.out}", "event_id": f"{PREFIX}-api"}
        web.submit(world, {"job": command, "unique_for": "10m"})

    def check(world: World) -> list[str]:
        problems = job.check(world)
        if not any(a in (200, 201) for a in web.answers):
            problems.append(f"the API never said it was sent: {web.answers}")
        return problems

    return JobPath(
        "api",
        send,
        job.settled,
        check,
        prepare=web.start,
        reruns=job.reruns,
        tend=web.tend,
    )


def paths() -> dict[str, Callable[[], JobPath]]:
    """Each path the walk tries, by name, in order of priority."""
    return {
        "plain": lambda: single_job("plain"),
        "lock": lambda: single_job("lock", lock_id="L"),
        "firing": lambda: single_job("firing", firing=True),
        "pipeline": pipeline_path,
        "rerun": rerun_path,
        "catchup": catch_up_path,
        "api": api_submit_path,
        "batch": batch_path,
        "prefetch": lambda: batch_path("prefetch", jobs=3, prefetch=None),
        # Long enough for the run claimed ahead to be noted running (ahead.LateNote).
        "late-note": lambda: batch_path("late-note", jobs=2, prefetch=None, seconds=0.3),
    }


# -- replays ------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one replay (a path, a point, a fault) left."""

    path: str
    point: Point | None
    kind: Kind | None
    problems: list[str] = field(default_factory=list)
    reached: bool = True
    reruns: int = 0
    kills: int = 0
    check: tuple[int, str] = (0, "")
    #: What status --check will say an hour on (check_later).
    later: tuple[int, str] = (0, "")
    seconds: float = 0.0

    def __str__(self) -> str:
        what = (
            "clean run"
            if self.point is None
            else f"{self.point} {self.kind.value if self.kind else ''}"
        )
        return f"{self.path}: {what}: {'; '.join(self.problems) or 'ok'}"


@contextlib.contextmanager
def world_on(
    endpoint: str,
    env: dict[str, str],
    directory: Path | None = None,
    kicker: dict[str, Any] | None = None,
) -> Iterator[World]:
    with contextlib.ExitStack() as stack:
        proxy = stack.enter_context(FaultProxy(endpoint))
        where = directory or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fp-")))
        world = World(proxy, env, where, kicker)
        stack.callback(world.close)
        yield world


def replay(
    make: Callable[[], JobPath],
    endpoint: str,
    env: dict[str, str],
    point: Point | None = None,
    kind: Kind | None = None,
    *,
    faults: Callable[[World], list[Fault]] = lambda world: [],
    settle: float = SETTLE_SECONDS,
    directory: Path | None = None,
) -> tuple[Outcome, list[Point]]:
    """Run the path once, with kind done to point's call (none: a clean run) and these other
    faults; the outcome, and the points the path's calls made."""
    path = make()
    began = time.monotonic()
    with world_on(endpoint, env, directory, path.kicker) as world:
        aim = None
        if point is not None and kind is not None:
            aim = Aim(point, retries=ATTEMPTS - 1, quiet=path.quiet)
            for fault in faults_for(kind, aim, world.kill_host):
                world.proxy.add(fault)
        for fault in faults(world):
            world.proxy.add(fault)
        if not path.begins_with_daemon:
            world.start()
        path.prepare(world)
        mark = len(world.proxy.answers)
        if aim is not None:
            aim.armed.set()
        if path.begins_with_daemon:
            world.start()
        path.send(world)
        deadline = time.monotonic() + settle
        pause = 0.05
        while not quietly(path.settled, world) and time.monotonic() < deadline:
            world.tend()
            path.tend(world)
            time.sleep(pause)
            pause = min(pause * 1.5, 0.5)
        outcome = Outcome(path.name, point, kind, kills=world.kills)
        outcome.reached = aim is None or aim.reached.is_set()
        try:
            outcome.problems = path.check(world)
        except Exception as exc:  # noqa: BLE001 - a walk of many replays reports it, and goes on
            outcome.problems = [f"the check failed: {type(exc).__name__}: {exc}"]
        outcome.reruns = path.reruns(world)
        outcome.check = status_check(world)
        outcome.later = check_later(world)
        code, line = outcome.check
        if outcome.problems and code == 0 and outcome.later[0] == 0:
            outcome.problems.append(f"status --check says OK, and would an hour on: {line}")
        if not outcome.problems and code != 0:
            outcome.problems.append(f"status --check says {code} of a path that ended well: {line}")
        points = path_points(world.proxy.answers[mark:], path.quiet)
    outcome.seconds = time.monotonic() - began
    return outcome, points


def quietly(settled: Callable[[World], bool], world: World) -> bool:
    """settled(world), False when it fails (a read at a bad moment): the next poll asks again."""
    try:
        return settled(world)
    except Exception:  # noqa: BLE001
        return False


def sample(
    points: Sequence[Point], kinds: Sequence[Kind], per_kind: int, seed: int
) -> list[tuple[Point, Kind]]:
    """A few (point, kind) pairs of each kind, drawn by a fixed seed from the points sorted: the
    same draw whichever order two runs' concurrent calls came in."""
    draw = random.Random(seed)
    chosen = []
    for kind in kinds:
        chosen += [(p, kind) for p in draw.sample(sorted(points), min(per_kind, len(points)))]
    return chosen
