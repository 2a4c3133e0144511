"""The dashboard's "Run this step again": a failed (or skipped) step of a pipeline's run, shown on
the run's pages only where it can work, confirmed, then run again within its run by the fleet
layer's trigger (`trigger STEP --run KEY`), audited as the web user (issue 38 item 7).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import requests

import sqsjkr
from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.backends.history import run_type
from sqsjkr.backends.pipeline import DynamoPipelines
from sqsjkr.backends.sqs import TRIGGERED_BY_ATTRIBUTE
from sqsjkr.contract.pipeline import PipelineRun, parse_pipeline
from sqsjkr.contract.run import RunOutcome, RunStart
from sqsjkr.errors import AlreadyDone
from sqsjkr.web.server import Dashboard
from tests.test_pipelines import diamond
from tests.test_web import act, audit_of, get, take_message
from tests.web_fleet import WebFleet, make_fleet, module_env, record

BUTTON = ">Run this step again</button>"


@pytest.fixture(scope="module")
def failed_run(
    moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WebFleet, str, str]]:
    """A fleet of its own with a diamond's run begun by hand whose c failed (d skipped): its
    run's item, its steps' records and c's claim, as daemons leave them; the fleet, the run's
    key and the prefix of its steps' events."""
    with module_env(moto_endpoint):
        own = make_fleet(tmp_path_factory.mktemp("rerun"))
        prefix, key = f"web-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
        pipeline = parse_pipeline(diamond(Path("/tmp/never"), prefix))
        assert pipeline is not None
        store = DynamoPipelines(own.dynamodb, own.table, lives_seconds=3600)
        now, history = time.time(), own.history()
        for step, ok in (("a", True), ("b", True), ("c", False)):
            store.step_ended(PipelineRun(pipeline, step, key), ok, now)
            outcome = RunOutcome.SUCCEEDED if ok else RunOutcome.ERRORED
            message_id = key if step == "a" else uuid.uuid4().hex
            history.finished(
                record(f"{prefix}-{step}", now - 5, outcome, message_id=message_id,
                       pipeline_key=key, pipeline_step=step)
            )  # fmt: skip
        claim = {"Id": {"S": f"{key}#step-c"}, "Type": {"S": THROTTLE_TYPE}}
        own.dynamodb.put_item(TableName=own.table, Item=claim)
        yield own, key, prefix


@pytest.fixture(scope="module")
def served(failed_run: tuple[WebFleet, str, str]) -> Iterator[tuple[Dashboard, Dashboard]]:
    own = failed_run[0]
    with_actions, read_only = own.serve(enable_actions=True), own.serve()
    yield with_actions, read_only
    with_actions.close()
    read_only.close()


def c_run_page(fleet: WebFleet, prefix: str) -> str:
    [c] = fleet.history().runs(f"{prefix}-c", 5)
    return "/run?" + urlencode({"event": f"{prefix}-c", "key": run_type(c)})


def steps_offered(page: str) -> list[str]:
    """The steps of the pipeline's list that offer to run again."""
    items = re.findall(r'<li data-step="([^"]+)">(.*?)</li>', page, flags=re.S)
    return [step for step, item in items if BUTTON in item]


def test_the_button_shows_on_a_failed_or_skipped_step_only_and_only_with_actions(
    failed_run: tuple[WebFleet, str, str], served: tuple[Dashboard, Dashboard]
) -> None:
    own, key, prefix = failed_run
    with_actions, read_only = served
    # The root's event page and a step's: c failed, d skipped; a and b succeeded.
    for event in ("a", "b"):
        page = get(with_actions, f"/event?id={prefix}-{event}").text
        assert f"<code>{key}</code>" in page
        assert steps_offered(page) == ["c", "d"]
        assert BUTTON not in get(read_only, f"/event?id={prefix}-{event}").text
    assert BUTTON in get(with_actions, c_run_page(own, prefix)).text
    assert BUTTON not in get(read_only, c_run_page(own, prefix)).text
    [b] = own.history().runs(f"{prefix}-b", 5)
    b_page = "/run?" + urlencode({"event": f"{prefix}-b", "key": run_type(b)})
    assert BUTTON not in get(with_actions, b_page).text


def test_run_this_step_again_confirms_then_asks_it_in_its_run_and_sends_it_audited(
    failed_run: tuple[WebFleet, str, str], served: tuple[Dashboard, Dashboard]
) -> None:
    own, key, prefix = failed_run
    page = c_run_page(own, prefix)
    confirm, done = act(
        served[0], requests.Session(), "trigger_run", page,
        {"event_id": "c", "run": key, "reason": "disk cleaned"},
    )  # fmt: skip
    assert f"Confirm: Run step c of pipeline run {key} again" in confirm.text
    said = re.search(
        rf"asked step c of run {key} of pipeline {prefix} again as its re-run (\w+): "
        rf"sent message (\S+) to queue {own.queue_name}",
        done.text,
    )
    assert said, done.text
    rerun, message_id = said[1], said[2]
    state = DynamoPipelines(own.dynamodb, own.table, lives_seconds=60).state(key)
    assert state is not None and f"c#rerun-{rerun}" in state.asked
    message = take_message(own, message_id)
    body: dict[str, Any] = json.loads(message["Body"])
    assert (body["step"], body["pipeline_key"], body["rerun"]) == ("c", key, rerun)
    assert body["event_id"] == f"{prefix}-c" and body["origin"] == "trigger"
    [entry] = audit_of(own, "trigger", f"{prefix}-c")
    assert entry.user.startswith("web:") and entry.reason == "disk cleaned"
    assert message["MessageAttributes"][TRIGGERED_BY_ATTRIBUTE]["StringValue"] == entry.user
    assert f"run {key}" in entry.detail and message_id in entry.detail
    # A step that succeeded is refused, as the command refuses it, and the page says why.
    _, refused = act(
        served[0], requests.Session(), "trigger_run", page, {"event_id": "b", "run": key}
    )
    assert "already succeeded" in refused.text


def test_a_step_that_runs_now_is_refused_without_force(
    failed_run: tuple[WebFleet, str, str], served: tuple[Dashboard, Dashboard]
) -> None:
    """Step b of a run of its own runs now (its event's summary names its claim): no second run
    of it starts beside the first unless forced."""
    own, _, prefix = failed_run
    key = uuid.uuid4().hex
    pipeline = parse_pipeline(diamond(Path("/tmp/never"), prefix))
    assert pipeline is not None
    DynamoPipelines(own.dynamodb, own.table, lives_seconds=3600).step_ended(
        PipelineRun(pipeline, "a", key), True, time.time()
    )
    start = RunStart(
        f"{prefix}-b", "m-b", "host-b", "host-b:1:x", time.time(), time.time(), "sleep 60",
        claim_id=f"{key}#step-b",
    )  # fmt: skip
    own.history().started(start)
    fleet = sqsjkr.Fleet(str(own.conf))
    with pytest.raises(
        AlreadyDone, match=f"step b of run .{key}. has not ended \\(running on host-b"
    ):
        fleet.trigger_run("b", key)
    again = fleet.trigger_run("b", key, force=True)
    assert again.step == "b" and again.run == key
    take_message(own, again.message_id)
