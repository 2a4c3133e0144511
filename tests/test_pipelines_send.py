"""A pipeline started by hand: `sqsjkr send --body` and Fleet.send of a body that carries a
pipeline run it on a real daemon, its run keyed by the send's own message id (issue 31 item 1).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import sqsjkr as sqsjkr_api
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome
from tests.conftest import Aws, Cli, Start, run_daemon, wait_until
from tests.test_pipelines import diamond, lines, pipeline_state


def all_noted(aws: Aws, key: str) -> bool:
    """Whether the run of key has noted every step of the diamond succeeded."""
    state = pipeline_state(aws, key)
    return state is not None and state.succeeded == set("abcd")


def test_a_pipeline_sent_by_hand_runs_once_keyed_by_the_sends_message_id(
    aws: Aws, start_daemon: Start, tmp_path: Path, cli: Cli
) -> None:
    daemon, _ = run_daemon(start_daemon, tmp_path, aws, lease="3s")
    prefix = f"hand-{uuid.uuid4().hex[:6]}"
    # The same pipeline sent twice at once, by the command and by the Python API: two runs.
    by_cli, by_api = tmp_path / "cli", tmp_path / "api"
    sent = cli("send", "-c", daemon.conf, "--body", json.dumps(diamond(by_cli, prefix)))
    assert sent.returncode == 0, sent.stderr
    cli_id = sent.stdout.strip()
    api_id = sqsjkr_api.Fleet(daemon.conf).send(diamond(by_api, prefix)).message_id
    for key, out in ((cli_id, by_cli), (api_id, by_api)):
        # d's end is noted in its run's item just after its output: wait for the item, not the
        # output (under load the two are apart).
        wait_until(lambda key=key: all_noted(aws, key), timeout=60, what=f"d of {out.name} noted")
        assert [lines(out).count(f"start-{step}") for step in "abcd"] == [1, 1, 1, 1]
        assert "notified" not in lines(out)
        state = pipeline_state(aws, key)
        assert state is not None and state.name == prefix and state.root == "a"
        assert not state.failed
        assert state.firing_at is None  # its firing is the send's own, not a schedule's
    # Each step's record names the run it belongs to: its root's message.
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    for step in "abcd":
        records = history.runs(f"{prefix}-{step}", 10)
        assert {r.outcome for r in records} == {RunOutcome.SUCCEEDED}
        assert sorted((r.pipeline_key, r.pipeline_step) for r in records) == sorted(
            [(cli_id, step), (api_id, step)]
        )
    assert daemon.stop() == 0
