"""Pipelines per run: the graph in the message, fan-in once with no leader (two daemons, every
step's message sent twice), failure and on_failure, resuming by a forced re-run, kill -9 mid-step.
"""

from __future__ import annotations

import json
import logging
import signal
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.pipeline import DynamoPipelines, MemoryPipelines
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.pipeline import PipelineRun, parse_pipeline
from sqsjkr.daemon.pipeline import Steps
from sqsjkr.errors import InvalidJobError
from sqsjkr.observability.logs import JobLog
from tests.conftest import Aws, Daemon, Start, run_daemon, wait_until
from tests.faults import Fault, FaultProxy
from tests.test_schedules import group as group  # noqa: F401 - the fixture
from tests.test_schedules import sqsjkr, write_conf
from tests.test_trigger import NIGHTLY, module_input, nightly_schedule


def diamond(out: Path, prefix: str, **commands: str) -> dict[str, Any]:
    """A -> (B, C) -> D, each step appending its start and end to out; commands override a
    step's command (its text is run by sh)."""

    def job(name: str) -> dict[str, Any]:
        command = commands.get(name) or (
            f"echo start-{name} >> {out}; sleep 0.3; echo end-{name} >> {out}"
        )
        return {"command": command, "event_id": f"{prefix}-{name}"}

    steps: dict[str, Any] = {
        "a": {"after": []},
        "b": {"after": ["a"], "job": job("b")},
        "c": {"after": ["a"], "job": job("c"), "on_failure": ["notify"]},
        "d": {"after": ["b", "c"], "job": job("d")},
        "notify": {"job": {"command": f"echo notified >> {out}", "event_id": f"{prefix}-notify"}},
    }
    root = job("a")
    return {**root, "pipeline": {"name": prefix, "root": "a", "steps": steps}}


def firing_fields(schedule: str, at: float) -> dict[str, str]:
    moment = datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="seconds")
    return {"time": moment.replace("+00:00", "Z"), "schedule": schedule}


def lines(out: Path) -> list[str]:
    return out.read_text().split() if out.exists() else []


# -- the contract and the graph ------------------------------------------------------------------


def test_a_pipeline_is_parsed_with_its_graph() -> None:
    body = diamond(Path("/tmp/x"), "p")
    pipeline = parse_pipeline(body)
    assert pipeline is not None and pipeline.root == "a"
    assert pipeline.children("a") == ["b", "c"]
    assert pipeline.ready({"a", "b"}, "b") == []
    assert pipeline.ready({"a", "b", "c"}, "c") == ["d"]
    assert pipeline.skipped({"a", "b"}, {"c"}) == {"d": "c"}
    assert pipeline.skipped({"a", "b", "c"}, {"c"}) == {}
    assert pipeline.depth() == {"a": 0, "b": 1, "c": 1, "d": 2, "notify": 0}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda s: s["b"].update(after=["d"]), "pipeline.steps"),  # b -> d -> b
        (lambda s: s["d"].update(after=["b", "x"]), "pipeline.steps.d.after[1]"),
        (lambda s: s["c"].update(on_failure=["nobody"]), "pipeline.steps.c.on_failure[0]"),
        (lambda s: s["b"].pop("job"), "pipeline.steps.b.job"),
        (lambda s: s["a"].update(after=["b"]), "pipeline.steps"),
        (lambda s: s.update({"bad name": {"job": {"command": "x"}}}), "pipeline.steps.bad name"),
    ],
)
def test_a_malformed_pipeline_is_refused_naming_the_field(
    change: Callable[[dict[str, Any]], None], field: str
) -> None:
    body = diamond(Path("/tmp/x"), "p")
    change(body["pipeline"]["steps"])
    with pytest.raises(InvalidJobError) as refused:
        parse_job(json.dumps(body), message_id="m", sent_at=0.0)
    assert field in str(refused.value)


def test_a_step_is_claimed_once_per_run_and_its_root_by_its_firing() -> None:
    body = {**diamond(Path("/tmp/x"), "p"), "firing": firing_fields("sched", 1_800_000_000)}
    root = parse_job(json.dumps(body), message_id="m1", sent_at=1_800_000_001)
    assert root.pipeline is not None and root.pipeline.is_root
    assert root.pipeline.key == "sched@2027-01-15T08:00:00Z"
    child = parse_job(
        json.dumps({**body, "step": "d", "command": "x", "pipeline_key": root.pipeline.key}),
        message_id="m2",
        sent_at=1_800_000_002,
    )
    assert child.pipeline is not None
    assert child.pipeline.claim_key() == "sched@2027-01-15T08:00:00Z#step-d"


class Sent:
    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []

    def send(self, body: str, queue: str, event_id: str, deduplication_id: str) -> str:
        self.bodies.append(json.loads(body))
        return f"m{len(self.bodies)}"


def test_two_parents_ending_at_once_each_see_the_other_and_the_child_is_sent_by_the_last() -> None:
    store, sent = MemoryPipelines(), Sent()
    steps = Steps(store, sent, "q", clock=lambda: 100.0)
    body = diamond(Path("/tmp/x"), "p")
    pipeline = parse_pipeline(body)
    assert pipeline is not None
    job = parse_job(json.dumps(body), message_id="root", sent_at=1.0)
    jlog = JobLog(logging.getLogger("test"), job)
    steps.ended(job, True, jlog)
    assert [b["step"] for b in sent.bodies] == ["b", "c"]
    b, c = (parse_job(json.dumps(x), message_id=x["step"], sent_at=2.0) for x in sent.bodies)
    steps.ended(b, True, jlog)
    assert len(sent.bodies) == 2  # d waits for c
    steps.ended(c, True, jlog)
    assert sent.bodies[-1]["step"] == "d" and sent.bodies[-1]["pipeline_key"] == "root"
    steps.again(c, jlog)  # a redelivery of c sends d again: its claim drops the copy
    assert [x["step"] for x in sent.bodies].count("d") == 2
    assert store.state("root").succeeded == {"a", "b", "c"}  # type: ignore[union-attr]


# -- real daemons --------------------------------------------------------------------------------


@pytest.fixture
def doubled(moto_endpoint: str, aws_env: dict[str, str]) -> Any:
    """A proxy in front of moto that sends every SendMessage twice: every step's message that a
    daemon sends arrives as two messages."""
    with FaultProxy(moto_endpoint) as proxy:
        proxy.add(Fault(matches=lambda call: call.action == "SendMessage", repeat=1))
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        yield proxy


def send_twice(aws: Aws, body: dict[str, Any]) -> None:
    aws.send(body)
    aws.send(body)


def pipeline_state(aws: Aws, key: str) -> Any:
    return DynamoPipelines(aws.dynamodb, aws.table, lives_seconds=60).state(key)


@pytest.mark.slow
def test_a_diamond_on_two_daemons_with_every_message_twice_runs_each_step_once_in_order(
    aws: Aws, start_daemon: Start, tmp_path: Path, doubled: FaultProxy
) -> None:
    out = tmp_path / "runs"
    prefix = f"dia-{uuid.uuid4().hex[:6]}"
    at = datetime.now(timezone.utc).replace(microsecond=0).timestamp() - 5
    first = {**diamond(out, prefix), "firing": firing_fields("nightly", at)}
    second = {**diamond(out, prefix), "firing": firing_fields("nightly", at - 3600)}
    daemons = [run_daemon(start_daemon, tmp_path, aws, lease="3s")[0] for _ in range(2)]
    send_twice(aws, first)
    send_twice(aws, second)  # a second firing in flight at the same time
    aws.send(diamond(out, prefix))  # and one sent by hand: a run of its own, its steps doubled
    wait_until(lambda: lines(out).count("end-d") == 3, timeout=60, what="d of the three runs")
    ran = lines(out)
    for step in "abcd":
        assert ran.count(f"start-{step}") == 3, ran  # once per run
    assert "notified" not in ran
    for firing in (first, second):
        # d's end is noted in the run's item just after its command prints it.
        key = f"nightly@{firing['firing']['time']}"
        wait_until(lambda k=key: "d" in pipeline_state(aws, k).succeeded, what="d noted")
        state = pipeline_state(aws, key)
        assert state.succeeded == {"a", "b", "c", "d"} and not state.failed
    # d started only after b and c ended, in each firing.
    starts = [i for i, line in enumerate(ran) if line == "start-d"]
    assert ran.index("end-b") < starts[0] and ran.index("end-c") < starts[0]
    for daemon in daemons:
        assert daemon.stop() == 0
    duplicates = sum(d.log.count("duplicate") for d in daemons)
    assert duplicates >= 8, "the copies were not dropped as duplicates"


@pytest.mark.slow
def test_a_failed_step_skips_what_needs_it_runs_on_failure_once_and_a_forced_rerun_resumes(
    aws: Aws, start_daemon: Start, tmp_path: Path
) -> None:
    out, fixed = tmp_path / "runs", tmp_path / "fixed"
    prefix = f"fail-{uuid.uuid4().hex[:6]}"
    at = datetime.now(timezone.utc).replace(microsecond=0).timestamp() - 5
    c_command = f"echo start-c >> {out}; test -f {fixed} || exit 3; echo end-c >> {out}"
    body = {**diamond(out, prefix, c=c_command), "firing": firing_fields("nightly", at)}
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    aws.send(body)
    key = f"nightly@{body['firing']['time']}"
    wait_until(lambda: "notified" in lines(out), timeout=30, what="on_failure's step")
    wait_until(lambda: pipeline_state(aws, key).failed == {"c"}, what="c noted as failed")
    assert "start-d" not in lines(out)
    assert "skipped for this run, as c failed: d" in daemon.log
    # The forced re-run of c for this firing, as `trigger --firing T --force` sends it.
    fixed.touch()
    pipeline = parse_pipeline(body)
    assert pipeline is not None
    rerun = {**body["firing"], "rerun": uuid.uuid4().hex}
    step = PipelineRun(pipeline, "c", key)
    message = {**pipeline.steps["c"].job, "pipeline": pipeline.as_fields(), "step": "c"}  # type: ignore[arg-type]
    # As trigger does: the re-run is asked for in the run's state before its message is sent.
    assert DynamoPipelines(aws.dynamodb, aws.table, lives_seconds=60).ask(
        key, step.asked(rerun["rerun"])
    )
    aws.send({**message, "pipeline_key": step.key, "firing": rerun})
    wait_until(lambda: "end-d" in lines(out), timeout=30, what="d after c's re-run")
    assert lines(out).count("notified") == 1 and lines(out).count("start-b") == 1
    wait_until(lambda: "d" in pipeline_state(aws, key).succeeded, what="d noted")
    state = pipeline_state(aws, key)
    assert state.succeeded == {"a", "b", "c", "d", "notify"} and not state.failed
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_daemon_killed_mid_step_loses_nothing(
    aws: Aws, start_daemon: Start, tmp_path: Path
) -> None:
    out, started = tmp_path / "runs", tmp_path / "b-started"
    prefix = f"kill-{uuid.uuid4().hex[:6]}"
    b_command = f"touch {started}; echo start-b >> {out}; sleep 2; echo end-b >> {out}"
    body = diamond(out, prefix, b=b_command)
    victim, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    aws.send(body)
    wait_until(started.exists, timeout=30, what="b to start")
    victim.proc.send_signal(signal.SIGKILL)
    victim.kill()
    survivor, _ = run_daemon(start_daemon, tmp_path, aws, lease="2s")
    wait_until(lambda: "end-d" in lines(out), timeout=60, what="d after b ran again")
    ran = lines(out)
    # b ran again once its claim's lease ended (the killed daemon's own run of it, in a
    # session of its own, ran on); d ran once, after b's run that the survivor recorded.
    assert ran.count("start-b") == 2 and ran.count("start-a") == 1
    assert ran.count("start-d") == 1
    assert ran.index("start-d") > len(ran) - 1 - ran[::-1].index("end-b")
    assert survivor.stop() == 0


@dataclass
class FailedNightly:
    """A nightly diamond's firing whose c failed (notify ran, d skipped), on a daemon."""

    out: Path
    fixed: Path  # c succeeds once this exists
    body: dict[str, Any]  # the schedule's message
    conf: str
    daemon: Daemon
    firing: list[str]  # trigger's options naming the firing and the config


def failed_nightly(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,
    capsys: pytest.CaptureFixture[str],
) -> FailedNightly:
    """A nightly diamond's schedule, a daemon, and its 2026-01-15 firing triggered: c failed."""
    out, fixed = tmp_path / "runs", tmp_path / "fixed"
    body = json.loads(module_input("scheduler", NIGHTLY, "UTC"))
    c_command = f"echo start-c >> {out}; test -f {fixed} || exit 3; echo end-c >> {out}"
    body.update(diamond(out, "nightly", c=c_command))
    body["event_id"] = "nightly"
    nightly_schedule(aws, group, body)
    conf = write_conf(tmp_path, aws, group=group)
    daemon, _ = run_daemon(start_daemon, tmp_path, aws)
    firing = ["--firing", "2026-01-15T02:00:00Z", "-c", conf]
    code, _, err = sqsjkr(capsys, "trigger", "nightly", *firing)
    assert code == 0, err
    wait_until(lambda: "notified" in lines(out), timeout=30, what="c's on_failure step")
    assert "start-d" not in lines(out)
    return FailedNightly(out, fixed, body, conf, daemon, firing)


def test_trigger_firing_force_of_a_failed_step_runs_it_again_and_resumes_its_pipeline(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    nightly = failed_nightly(start_daemon, tmp_path, aws, group, capsys)
    out, fixed, daemon, firing = nightly.out, nightly.fixed, nightly.daemon, nightly.firing
    code, _, err = sqsjkr(capsys, "trigger", "nightly-c", *firing)
    assert code == 1 and "already ran" in err, err
    fixed.touch()
    code, _, err = sqsjkr(capsys, "trigger", "nightly-c", *firing, "--force", "--wait")
    assert code == 0, err
    wait_until(lambda: "end-d" in lines(out), timeout=30, what="d after c's forced re-run")
    ran = lines(out)
    assert ran.count("start-c") == 2 and ran.count("start-d") == 1 and ran.count("start-a") == 1
    assert ran.count("notified") == 1
    assert daemon.stop() == 0
