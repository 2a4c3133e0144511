"""Resuming a pipeline's run by its key (`sqsjkr trigger STEP --run KEY`): a run begun by hand,
whose failed step is run again from the pipeline its run kept, and the refusals (issue 38 item 5).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.conftest import Aws, Start, run_daemon, sqsjkr, wait_until
from tests.test_pipelines import diamond, lines, pipeline_state


@pytest.mark.slow
def test_a_run_begun_by_hand_is_resumed_by_its_key_and_the_steps_after_run_once(
    aws: Aws, start_daemon: Start, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, fixed = tmp_path / "runs", tmp_path / "fixed"
    prefix = f"resume-{uuid.uuid4().hex[:6]}"
    c_command = f"echo start-c >> {out}; test -f {fixed} || exit 3; echo end-c >> {out}"
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    conf = ["-c", daemon.conf]
    code, key, err = sqsjkr(
        capsys, "send", *conf, "--body", json.dumps(diamond(out, prefix, c=c_command))
    )
    assert code == 0, err
    key = key.strip()
    wait_until(lambda: "notified" in lines(out), timeout=30, what="c's on_failure step")
    wait_until(lambda: pipeline_state(aws, key).failed == {"c"}, what="c noted as failed")
    assert "start-d" not in lines(out)
    # What today's commands answered, and what --run refuses, each naming what is at fault.
    refusals = [
        (["--run", "no-such-run"], 'no run "no-such-run" of a pipeline is kept'),
        (["--run", key, "--firing", "2026-01-15T02:00:00Z"], "--firing and --run are exclusive"),
        (["--force"], "--force is for --firing or --run"),
    ]
    for options, said in refusals:
        code, _, err = sqsjkr(capsys, "trigger", f"{prefix}-c", *conf, *options)
        assert code != 0 and said in err, err
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
    assert daemon.stop() == 0
