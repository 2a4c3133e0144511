"""Resuming a pipeline's run by its key (`sqsjkr trigger STEP --run KEY`): a run begun by hand,
whose failed step is run again from the pipeline its run kept, and the refusals (issue 38 item 5).
"""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.pipeline import parse_pipeline, step_fields
from sqsjkr.errors import InvalidJobError
from sqsjkr.fleet.send import by_hand
from tests.conftest import Aws, Start, run_daemon, sqsjkr, wait_until
from tests.test_pipelines import diamond, failed_nightly, lines, pipeline_state
from tests.test_schedules import group as group  # noqa: F401 - the fixture

DOCS = Path(__file__).parent.parent / "docs"


def test_the_documented_root_message_is_one_the_daemon_and_send_take_whole() -> None:
    text = (DOCS / "pipelines.md").read_text()
    blocks = re.findall(r"^```json\n(.*?)^```", text, flags=re.M | re.S)
    [root] = [b for b in blocks if '"root": "extract"' in b]
    job = parse_job(root, message_id="sent-by-hand", sent_at=0)
    assert job.pipeline is not None and job.pipeline.is_root
    assert (job.pipeline.key, job.pipeline.pipeline.name) == ("sent-by-hand", "extract")
    assert job.pipeline.pipeline.steps["transform-b"].on_failure == ("page",)
    # `send --body` takes it: a root's own step names no run's step.
    assert json.loads(by_hand(root))["origin"] == "send"
    with pytest.raises(InvalidJobError, match='field "step"'):
        by_hand(json.dumps({**json.loads(root), "step": "load"}))


def test_a_steps_rerun_is_its_claims_and_is_refused_where_it_names_nothing() -> None:
    root = diamond(Path("/tmp/never"), "p")
    pipeline = parse_pipeline(root)
    assert pipeline is not None
    step = step_fields(pipeline, "run-key", "c", None, "trigger")
    job = parse_job(json.dumps({**step, "rerun": "r1"}), message_id="m", sent_at=0)
    assert job.rerun == "r1" and job.pipeline is not None
    assert job.pipeline.claim_key(job.rerun) == "run-key#step-c#rerun-r1"
    firing = {"time": "2026-01-15T02:00:00Z", "schedule": "s", "rerun": "f1"}
    fired = parse_job(json.dumps({**step, "firing": firing}), message_id="m", sent_at=2e9)
    assert fired.rerun == "f1"  # a fired run's re-run, in its firing
    refused = [
        ({**root, "rerun": "r1"}, "belongs to a step's re-run"),
        ({**step, "firing": firing, "rerun": "r1"}, "carries its re-run in firing.rerun"),
        ({**step, "rerun": "x" * 65}, "must be a text of 1 to 64 characters"),
        ({**step, "rerun": 7}, "must be a text of 1 to 64 characters"),
        ({"command": "true", "rerun": "r1"}, 'belongs to a "pipeline"'),
    ]
    for body, said in refused:
        with pytest.raises(InvalidJobError, match='field "rerun"') as caught:
            parse_job(json.dumps(body), message_id="m", sent_at=2e9)
        assert said in str(caught.value)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--run", "k", "--firing", "2026-01-15T02:00:00Z"], "--firing and --run are exclusive"),
        (["--force"], "--force is for --firing or --run"),
        (["--run", "k", "--schedule", "s"], "--schedule is not for --run"),
        (["--queue", "q"], "--queue is for --run"),
    ],
)
def test_trigger_refuses_options_that_name_no_run_before_reading_anything(
    capsys: pytest.CaptureFixture[str], options: list[str], said: str
) -> None:
    code, _, err = sqsjkr(capsys, "trigger", "c", "-c", "/nonexistent.toml", *options)
    assert code == 2 and said in err, err


@pytest.mark.slow
def test_a_run_begun_by_hand_is_resumed_by_its_key_and_the_steps_after_run_once(
    aws: Aws, start_daemon: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, fixed = tmp_path / "runs", tmp_path / "fixed"
    prefix = f"resume-{uuid.uuid4().hex[:6]}"
    c_command = f"echo start-c >> {out}; test -f {fixed} || exit 3; echo end-c >> {out}"
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    conf = ["-c", daemon.conf]
    # The root's body as the terraform module's job_messages output writes it: its step named.
    body = {**diamond(out, prefix, c=c_command), "step": "a"}
    code, key, err = sqsjkr(capsys, "send", *conf, "--body", json.dumps(body))
    assert code == 0, err
    key = key.strip()
    wait_until(lambda: "notified" in lines(out), timeout=30, what="c's on_failure step")
    wait_until(lambda: pipeline_state(aws, key).failed == {"c"}, what="c noted as failed")
    assert "start-d" not in lines(out)
    # What today's commands answered, and what --run refuses, each naming what is at fault.
    code, _, err = sqsjkr(capsys, "trigger", f"{prefix}-c", *conf, "--run", "no-such-run")
    assert code != 0 and 'no run "no-such-run" of a pipeline is kept' in err, err
    code, _, err = sqsjkr(capsys, "trigger", "nope", *conf, "--run", key)
    assert code != 0 and "no step of pipeline" in err and "its steps are a, b, c, d" in err, err
    code, _, err = sqsjkr(capsys, "trigger", "a", *conf, "--run", key)
    assert code != 0 and "is the root of pipeline" in err, err
    code, _, err = sqsjkr(capsys, "trigger", f"{prefix}-b", *conf, "--run", key)
    assert code != 0 and "step b of run" in err and "already succeeded: --force" in err, err
    # The cause fixed, c runs again in its run (by its step's name); d follows once.
    fixed.touch()
    code, message_id, err = sqsjkr(capsys, "trigger", "c", *conf, "--run", key, "--wait")
    assert code == 0, err
    assert "as its re-run" in err and "succeeded" in message_id
    wait_until(lambda: "end-d" in lines(out), timeout=30, what="d after c's re-run")
    wait_until(lambda: "d" in pipeline_state(aws, key).succeeded, what="d noted")
    ran = lines(out)
    assert [ran.count(f"start-{s}") for s in "abcd"] == [1, 1, 2, 1], ran
    assert ran.count("notified") == 1
    state = pipeline_state(aws, key)
    assert state.succeeded == {"a", "b", "c", "d", "notify"} and not state.failed
    assert any(asked.startswith("c#rerun-") for asked in state.asked)
    # A step that succeeded runs again only with --force, as a re-run of its own.
    code, _, err = sqsjkr(capsys, "trigger", f"{prefix}-d", *conf, "--run", key)
    assert code != 0 and "already succeeded" in err, err
    code, _, err = sqsjkr(
        capsys, "trigger", f"{prefix}-d", *conf, "--run", key, "--force", "--wait"
    )
    assert code == 0, err
    assert lines(out).count("start-d") == 2
    # A message's fields are no authority: a re-run in a run no daemon began, or one no operator
    # asked for, is refused unrun; a sender may not write `rerun` at all.
    pipeline = parse_pipeline(body)
    assert pipeline is not None
    step_c = step_fields(pipeline, key, "c", None, "pipeline")
    aws.send({**step_c, "pipeline_key": "forged-run", "rerun": "r1"})
    aws.send({**step_c, "rerun": "r2"})
    forged = "step c of pipeline {}, run forged-run: no daemon of this fleet began that run"
    wait_until(lambda: forged.format(prefix) in daemon.log, what="the forged key refused")
    unasked = f"step c of pipeline {prefix}, run {key}: no operator asked for its re-run r2"
    wait_until(lambda: unasked in daemon.log, what="the unasked re-run refused")
    code, _, err = sqsjkr(capsys, "send", *conf, "--body", json.dumps({**step_c, "rerun": "r3"}))
    assert code != 0 and 'field "step": is set by the fleet\'s daemons' in err, err
    root_rerun = json.dumps({**body, "rerun": "r4"})
    code, _, err = sqsjkr(capsys, "send", *conf, "--body", root_rerun)
    assert code != 0 and 'field "rerun": is set by the fleet\'s daemons' in err, err
    assert lines(out).count("start-c") == 2
    # `sqsjkr pipeline` finds a run by its pipeline's name too, and says what to type otherwise.
    code, shown, err = sqsjkr(capsys, "pipeline", prefix, *conf)
    assert code == 0 and shown.startswith(f"pipeline {prefix} (root a), run {key}"), err
    code, _, err = sqsjkr(capsys, "pipeline", "no-such-pipeline", *conf)
    assert code != 0 and "give the event id of a pipeline's root or step" in err, err
    assert f"pipelines with runs kept: {prefix} (root step a)" in err
    assert daemon.stop() == 0


@pytest.mark.slow
def test_a_fired_run_is_resumed_by_the_key_sqsjkr_pipeline_shows(
    start_daemon: Start,
    tmp_path: Path,
    aws: Aws,
    group: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    nightly = failed_nightly(start_daemon, tmp_path, aws, group, capsys)
    conf = ["-c", nightly.conf]
    # `sqsjkr pipeline` takes the root's event id, and shows the run's key.
    code, shown, err = sqsjkr(capsys, "pipeline", "nightly", *conf, "--json")
    assert code == 0, err
    key = json.loads(shown)["key"]
    assert key.endswith("/sqsjkr-nightly@2026-01-15T02:00:00Z")
    nightly.fixed.touch()
    code, _, err = sqsjkr(capsys, "trigger", "nightly-c", *conf, "--run", key, "--wait")
    assert code == 0, err
    assert "schedule sqsjkr-nightly's target, where its run began" in err  # its queue
    wait_until(lambda: "end-d" in lines(nightly.out), timeout=30, what="d after c's re-run")
    ran = lines(nightly.out)
    assert [ran.count(f"start-{s}") for s in "abcd"] == [1, 1, 2, 1], ran
    # Sent as the firing's re-run, as --firing --force sends it: the ledger sees it so.
    [rerun, first] = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(
        "nightly-c", 2
    )
    assert rerun.firing_rerun is not None and first.firing_rerun is None
    assert rerun.firing_at == first.firing_at and rerun.pipeline_key == key
    assert nightly.daemon.stop() == 0
