"""Sending a job and following it, against moto over HTTP and one real daemon shared by the module:
the Python API's handle (wait, state), `send --wait`, `send --unique-for` and `sqsjkr job`
(docs/python-api.md's examples run in test_fleet_api.py, whose fleet has a schedule and a
dead-letter queue).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import sqsjkr as sqsjkr_api
from sqsjkr.contract.config import load_config
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import AuditRefused, InvalidJobError, WaitTimedOut
from sqsjkr.fleet.jobs import JobHandle, JobPhase
from sqsjkr.fleet.send import Sender
from sqsjkr.fleet.unique import unique_key

from .conftest import Aws, Daemon, config_text, new_aws, sqsjkr, wait_until
from .faults import FaultProxy
from .test_audit import failing_audit as failing_audit  # noqa: F401 - the fixture
from .web_fleet import module_env


@dataclass
class Site:
    """A queue read by one daemon, a queue no daemon reads, and their config."""

    aws: Aws
    conf: str
    idle: str
    idle_url: str
    directory: Path

    def sender(self) -> Sender:
        return Sender(load_config(self.conf))

    def blocker(self) -> tuple[str, Path]:
        """A command that runs until its flag file exists, and that file."""
        flag = self.directory / f"go-{uuid.uuid4().hex[:6]}"
        return f"while [ ! -e {flag} ]; do sleep 0.05; done; echo released", flag

    def idle_count(self) -> int:
        attrs = self.aws.sqs.get_queue_attributes(
            QueueUrl=self.idle_url, AttributeNames=["ApproximateNumberOfMessages"]
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])


@pytest.fixture(scope="module")
def site(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    directory = tmp_path_factory.mktemp("send-wait")
    with module_env(moto_endpoint):
        aws = new_aws()
        idle = f"idle-{uuid.uuid4().hex[:10]}"
        idle_url = aws.sqs.create_queue(QueueName=idle)["QueueUrl"]
        conf = directory / "config.toml"
        conf.write_text(config_text(aws, stats="stats_port = 0"))
        daemon = Daemon(["run", "-c", str(conf)], {}, directory)
        try:
            daemon.wait_for_log("receiving with")
            yield Site(aws, str(conf), idle, idle_url, directory)
        finally:
            assert daemon.stop() == 0, daemon.log


def test_a_sent_job_waited_for_returns_its_succeeded_record(site: Site) -> None:
    sender = site.sender()
    handle = sender.send({"command": "echo hello", "event_id": "greet"}, reason="a test")
    assert (handle.event_id, handle.queue) == ("greet", site.aws.queue_name)
    record = handle.wait(timeout=30)
    assert record.outcome is RunOutcome.SUCCEEDED
    assert (record.message_id, record.event_id) == (handle.message_id, "greet")
    assert record.output == "hello\n"
    state = handle.state()
    assert state.phase is JobPhase.ENDED and state.outcome is RunOutcome.SUCCEEDED
    assert sender.job(handle.message_id).record == record  # found without its event


def test_a_failing_jobs_wait_returns_its_record_and_send_wait_exits_1(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    record = site.sender().send({"command": "exit 3"}).wait(timeout=30)
    assert (record.outcome, record.exit_code) == (RunOutcome.ERRORED, 3)
    code, out, err = sqsjkr(capsys, "send", "--command", "exit 4", "--wait", "-c", site.conf)
    assert code == 1, err
    message_id, header, row, *tail = out.splitlines()
    assert header.split()[:3] == ["ENDED", "OUTCOME", "EXIT"]
    assert " errored " in row and " 4 " in row and message_id in row


def test_send_wait_prints_the_succeeded_run_and_exits_0(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = sqsjkr(capsys, "send", "--command", "echo done", "--wait", "-c", site.conf)
    assert code == 0, err
    message_id, _, row, output = out.splitlines()
    assert " succeeded " in row and message_id in row and output == "    done"


def test_a_wait_on_a_queue_no_daemon_reads_times_out(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    queued = site.idle_count()
    handle = site.sender().send({"command": "true"}, queue=site.idle)
    with pytest.raises(WaitTimedOut, match=re.escape(handle.message_id)):
        handle.wait(timeout=1)
    assert handle.state().phase is JobPhase.QUEUED
    code, out, err = sqsjkr(
        capsys, *("send", "--command", "true", "--queue", site.idle),
        *("--wait", "--wait-timeout", "2s", "-c", site.conf),
    )  # fmt: skip
    assert code == 124, err
    assert f'gave up waiting for the run of message "{out.strip()}" after 2s' in err
    assert site.idle_count() == queued + 2


def test_a_program_may_not_send_a_runs_fields_nor_a_pipeline_with_a_malformed_step(
    site: Site,
) -> None:
    fleet = sqsjkr_api.Fleet(site.conf)
    queued = site.idle_count()
    steps = {"a": {}, "b": {"after": ["a"], "job": {"command": "x"}}}
    root = {"command": "true", "pipeline": {"name": "p", "root": "a", "steps": steps}}
    firing = {"time": "2030-01-15T01:00:00Z", "schedule": "nightly"}
    # The fleet's daemons mint these: a sender's would forge a firing's claim or a step's run.
    minted = (("firing", firing), ("step", "b"), ("pipeline_key", "forged"), ("rerun", "r1"))
    for field, value in minted:
        with pytest.raises(InvalidJobError) as refused:
            fleet.send({**root, field: value}, queue=site.idle)
        assert str(refused.value) == (
            f'field "{field}": is set by the fleet\'s daemons, not by a sender'
        )
    # A step's job is checked with its root, as the daemon will check the step's message.
    steps["b"]["job"] = {"command": "x", "retries": "many"}
    with pytest.raises(InvalidJobError, match='field "pipeline.steps.b.job.retries"'):
        fleet.send(json.dumps(root), queue=site.idle)
    assert site.idle_count() == queued


def test_a_jobs_state_goes_from_queued_to_running_to_ended(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    sender = site.sender()
    command, flag = site.blocker()
    url = site.aws.queue_url
    # Delayed, so that no daemon can take it before its first state is read.
    message_id = site.aws.sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps({"command": command}), DelaySeconds=2
    )["MessageId"]
    # No trace of it yet: taken by no daemon, or no job of the fleet; its handle knows better.
    assert sender.job(message_id).phase is JobPhase.UNKNOWN
    assert JobHandle(message_id, message_id, url, sender.store).state().phase is JobPhase.QUEUED
    code, out, _ = sqsjkr(capsys, "job", message_id, "-c", site.conf)
    assert code == 1 and "state    unknown (no daemon has taken it yet" in out
    running = wait_until(
        lambda: (s := sender.job(message_id)).phase is JobPhase.RUNNING and s,
        what="the job running",
    )
    assert running.host and running.event_id == message_id
    code, out, _ = sqsjkr(capsys, "job", message_id, "--json", "-c", site.conf)
    shown = json.loads(out)
    assert (shown["state"], shown["host"], shown["outcome"]) == ("running", running.host, None)
    flag.touch()
    ended = wait_until(lambda: (s := sender.job(message_id)).ended and s, what="the job ended")
    assert ended.outcome is RunOutcome.SUCCEEDED
    code, out, _ = sqsjkr(capsys, "job", message_id, "-c", site.conf)
    assert re.search(r"^state    ended succeeded at ", out, re.M)
    assert "    released" in out.splitlines()


def test_unique_for_returns_the_unfinished_jobs_id_and_sends_anew_once_it_ended(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    # On a queue no daemon reads: the first job stays unfinished, one message on the queue.
    args = ("send", "--command", "echo once", "--queue", site.idle, "--unique-for", "10m")
    queued = site.idle_count()
    code, first, _ = sqsjkr(capsys, *args, "-c", site.conf)
    assert code == 0
    code, second, err = sqsjkr(capsys, *args, "-c", site.conf)
    assert code == 0 and second == first and "nothing was sent" in err
    assert site.idle_count() == queued + 1
    # On the daemon's queue: the same while it runs, a new job once it has ended.
    sender = site.sender()
    command, flag = site.blocker()
    job = {"command": command, "event_id": "unique"}
    handle = sender.send(job, unique_for=600)
    assert sender.send(job, unique_for=600).message_id == handle.message_id
    flag.touch()
    handle.wait(timeout=30)
    again = sender.send(job, unique_for=600)
    assert again.message_id != handle.message_id
    assert again.wait(timeout=30).outcome is RunOutcome.SUCCEEDED


def test_a_unique_send_that_fails_gives_its_item_up(
    site: Site,
    failing_audit: FaultProxy,  # noqa: F811
) -> None:
    body = json.dumps({"command": "echo refused"})
    with pytest.raises(AuditRefused):
        site.sender().send(body, queue=site.idle, unique_for=600)
    key = unique_key(site.idle, body)
    assert site.aws.item(key["Id"]["S"], key["Type"]["S"]) is None  # the next send may send it


def test_a_job_is_found_by_its_message_id_alone_and_a_handle_waits_for_it(
    site: Site, capsys: pytest.CaptureFixture[str]
) -> None:
    sender = sqsjkr_api.Fleet(site.conf)
    body = json.dumps({"command": "echo found", "event_id": f"found-{uuid.uuid4().hex[:6]}"})
    # Delayed, so that the handle is made before any daemon has taken it.
    message_id = site.aws.sqs.send_message(
        QueueUrl=site.aws.queue_url, MessageBody=body, DelaySeconds=2
    )["MessageId"]
    handle = sender.handle(message_id)  # no event id: not known yet
    record = handle.wait(timeout=30)
    assert record.message_id == message_id and record.outcome is RunOutcome.SUCCEEDED
    # Its claim names its event: found without it, ended with its record.
    state = sender.job(message_id)
    assert state.phase is JobPhase.ENDED and state.record == record
    code, out, _ = sqsjkr(capsys, "job", message_id, "-c", site.conf)
    assert code == 0 and re.search(r"^state    ended succeeded at ", out, re.M), out
    # What is no message id is said so; an unknown one is not taken (exit 1).
    code, _, err = sqsjkr(capsys, "job", "", "-c", site.conf)
    assert code == 2 and "a message id is needed" in err and "Exception" not in err, err
    code, out, _ = sqsjkr(capsys, "job", str(uuid.uuid4()), "-c", site.conf)
    assert code == 1 and "no daemon has taken it yet" in out
