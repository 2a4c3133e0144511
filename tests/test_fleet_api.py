"""sqsjkr.Fleet as a program uses it, against moto over HTTP and one real daemon shared by the
module: send and wait, a job's state, history, status, schedules and trigger, pause and resume,
kill, routes, dead letters and the audit trail as the Fleet's actor; one session for its threads.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.session import Session

import sqsjkr
from sqsjkr.backends import aws as aws_module
from sqsjkr.contract.run import RunOutcome
from sqsjkr.errors import NothingToDo, RequestError, RouteRefused
from sqsjkr.fleet import trigger as trigger_module
from sqsjkr.fleet.jobs import JobPhase
from sqsjkr.fleet.status import Level

from .conftest import REGION, Aws, Cli, Daemon, config_text, new_aws, wait_until
from .test_send_wait import Site
from .test_trigger import ROLE_ARN
from .web_fleet import module_env

DOC = Path(__file__).resolve().parents[1] / "docs" / "python-api.md"
#: Who the module's Fleets act as, in the audit trail.
ACTOR = "deploy-bot@ci"
#: The event the module's schedule sends.
SCHEDULED = "nightly-backup"


@dataclass
class ApiSite(Site):
    """Site's queues and daemon, with a dead-letter queue and a schedule group of its own."""

    dlq_name: str = ""
    dlq_url: str = ""

    def fleet(self) -> sqsjkr.Fleet:
        return sqsjkr.Fleet(self.conf, actor=ACTOR)

    def audited(self, action: str, since: float) -> list[Any]:
        return [e for e in self.fleet().audit(since) if e.action == action]


def scheduled_group(aws: Aws, queue_url: str) -> str:
    """A schedule group whose one schedule sends SCHEDULED's job to the queue (in a year)."""
    group = aws.table
    scheduler = boto3.client("scheduler", region_name=REGION)
    scheduler.create_schedule_group(Name=group)
    arn = aws.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])
    scheduler.create_schedule(
        Name="sqsjkr-nightly-backup",
        GroupName=group,
        ScheduleExpression="rate(1 day)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={
            "Arn": arn["Attributes"]["QueueArn"],
            "RoleArn": ROLE_ARN,
            "Input": json.dumps({"event_id": SCHEDULED, "command": "echo nightly"}),
        },
    )
    return group


def add_dead_letter_queue(aws: Aws, name: str) -> None:
    """Give the queue a dead-letter queue, as `sqsjkr local` and the terraform module do."""
    url = aws.sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    policy = {"deadLetterTargetArn": arn["Attributes"]["QueueArn"], "maxReceiveCount": "5"}
    aws.sqs.set_queue_attributes(
        QueueUrl=aws.queue_url, Attributes={"RedrivePolicy": json.dumps(policy)}
    )


@pytest.fixture(scope="module")
def site(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiSite]:
    directory = tmp_path_factory.mktemp("fleet-api")
    with module_env(moto_endpoint), pytest.MonkeyPatch.context() as patch:
        # A wait reads the history every 2 s: the module's dozen waits would take half a minute.
        patch.setattr(trigger_module, "WAIT_POLL_SECONDS", 0.2)
        aws = new_aws()
        # The daemon's queue gets a dead-letter queue: Fleet.dead_letters reads it.
        dlq = f"{aws.queue_name}-dlq"
        add_dead_letter_queue(aws, dlq)
        idle = f"idle-{uuid.uuid4().hex[:10]}"
        idle_url = aws.sqs.create_queue(QueueName=idle)["QueueUrl"]
        text = config_text(aws, stats="stats_port = 0").replace(
            "[lock]\n", '[lock]\nlease = "3s"\n'
        )
        text += f'\n[history]\nlive_output_interval = "1s"\n\n[schedule]\ngroup = "{scheduled_group(aws, aws.queue_url)}"\n'
        text += f'role_arn = "{ROLE_ARN}"\n'  # send_later's
        conf = directory / "config.toml"
        conf.write_text(text)
        daemon = Daemon(["run", "-c", str(conf)], {}, directory)
        try:
            daemon.wait_for_log("receiving with")
            dlq_url = aws.sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
            yield ApiSite(aws, str(conf), idle, idle_url, directory, dlq, dlq_url)
        finally:
            assert daemon.stop() == 0, daemon.log


def test_a_sent_job_is_waited_for_and_seen_by_state_history_run_status_and_audit(
    site: ApiSite,
) -> None:
    since, fleet = time.time() - 1, site.fleet()
    handle = fleet.send({"command": "echo hello", "event_id": "api-greet"}, reason="a test")
    record = handle.wait(timeout=30)
    assert (record.outcome, record.output) == (RunOutcome.SUCCEEDED, "hello\n")
    assert fleet.job(handle.message_id).record == record  # found without its event
    assert fleet.handle(handle.message_id).event_id == "api-greet"
    assert fleet.history("api-greet")[0] == record
    assert fleet.run("api-greet", handle.message_id) == record
    summary = next(s for s in fleet.status().summaries if s.event_id == "api-greet")
    assert summary.last_run is not None and summary.last_run.message_id == handle.message_id
    findings = {f.event_id: f.level for f in fleet.check()}
    assert findings["api-greet"] is Level.OK
    [sent] = [e for e in site.audited("send", since) if handle.message_id in e.detail]
    assert (sent.target, sent.user, sent.reason) == ("api-greet", ACTOR, "a test")
    # A unique send of an unfinished job returns that job: the idle queue's stays queued.
    first = fleet.send({"command": "true"}, queue=site.idle, unique_for=600)
    assert fleet.send({"command": "true"}, queue=site.idle, unique_for=600) == first


def test_pause_and_resume_are_audited_as_the_fleets_actor(site: ApiSite) -> None:
    since, fleet = time.time() - 1, site.fleet()
    [made] = fleet.pause("api-paused", until="1h", reason="db move")
    assert made.by == ACTOR and made.until is not None
    assert [p.event_id for p in fleet.status().pauses] == ["api-paused"]
    assert [p.event_id for p in fleet.resume(["api-paused"], reason="moved")] == ["api-paused"]
    assert fleet.status().pauses == []
    with pytest.raises(RequestError, match="name the events"):
        fleet.pause([])  # not every event: None says that
    entries = site.audited("pause", since) + site.audited("resume", since)
    assert sorted((e.action, e.target, e.user, e.reason) for e in entries) == [
        ("pause", "api-paused", ACTOR, "db move"),
        ("resume", "api-paused", ACTOR, "moved"),
    ]


def test_a_triggered_schedule_runs_and_the_schedules_say_when_it_fires(site: ApiSite) -> None:
    since, fleet = time.time() - 1, site.fleet()
    [scheduled] = fleet.schedules()
    assert scheduled.schedule.event_id == SCHEDULED and len(scheduled.timing.fires.times) == 3
    assert SCHEDULED in fleet.next_runs().soonest
    sent = fleet.trigger(SCHEDULED, reason="rerun")
    record = fleet.handle(sent.message_id, SCHEDULED).wait(timeout=30)
    assert (record.outcome, record.output) == (RunOutcome.SUCCEEDED, "nightly\n")
    [entry] = site.audited("trigger", since)
    assert (entry.user, entry.reason) == (ACTOR, "rerun") and sent.message_id in entry.detail


def test_a_long_job_shows_its_live_output_and_is_killed(site: ApiSite) -> None:
    fleet = site.fleet()
    command, flag = site.blocker()
    handle = fleet.send({"command": f"echo started; {command}", "event_id": "api-long"})
    wait_until(lambda: fleet.job(handle.message_id).phase is sqsjkr.JobPhase.RUNNING)
    assert [d.host for d in fleet.daemons()] != []
    live = wait_until(lambda: fleet.live_output("api-long", handle.message_id), what="output")
    assert live.output == "started\n"
    [(target, _)] = fleet.kill("api-long", reason="runaway")
    assert target.message_id == handle.message_id
    assert handle.wait(timeout=30).outcome is RunOutcome.KILLED
    flag.touch()
    with pytest.raises(NothingToDo):
        fleet.kill("api-long")


def test_a_route_to_a_dead_letter_queue_is_refused_and_one_to_a_served_queue_made(
    site: ApiSite,
) -> None:
    since, fleet = time.time() - 1, site.fleet()
    with pytest.raises(RouteRefused, match="dead-letter queue"):
        fleet.route("api-routed", site.dlq_name)
    assert site.audited("route", since) == []
    made = fleet.route("api-routed", site.aws.queue_name, reason="move")
    assert [r.queue for r in fleet.routes()] == [made.queue]
    assert "api-routed" in fleet.clear_route("api-routed")
    with pytest.raises(NothingToDo):
        fleet.clear_route("api-routed")
    assert [e.user for e in site.audited("route", since)] == [ACTOR, ACTOR]


def test_dead_letters_are_listed_redriven_and_deleted(site: ApiSite) -> None:
    fleet, sqs = site.fleet(), site.aws.sqs
    run = json.dumps({"command": "echo redriven", "event_id": "api-dlq"})
    redriven = sqs.send_message(QueueUrl=site.dlq_url, MessageBody=run)["MessageId"]
    dropped = sqs.send_message(QueueUrl=site.dlq_url, MessageBody="not json")["MessageId"]
    assert {letter.message_id for letter in fleet.dead_letters()} == {redriven, dropped}
    assert fleet.redrive([redriven], reason="fixed").moved == 1
    found, missing = fleet.delete_dead_letters([dropped, "nope"], reason="junk")
    assert ([letter.message_id for letter in found], missing) == ([dropped], ["nope"])
    assert fleet.dead_letters() == []
    record = wait_until(lambda: fleet.history("api-dlq"), what="the redriven run")[0]
    assert record.outcome is RunOutcome.SUCCEEDED


class CountedSession(Session):
    """A botocore session that counts the sessions and clients made."""

    made: list[CountedSession] = []
    clients: list[str] = []
    _lock = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with self._lock:
            self.made.append(self)

    def create_client(self, service_name: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self.clients.append(service_name)
        time.sleep(0.01)  # widen the window in which an unlocked Fleet makes a second one
        return super().create_client(service_name, *args, **kwargs)


def test_a_fleet_used_from_several_threads_makes_one_session_and_one_client_a_service(
    site: ApiSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aws_module, "Session", CountedSession)
    CountedSession.made.clear()
    CountedSession.clients.clear()
    fleet, start = site.fleet(), threading.Barrier(8)
    errors: list[BaseException] = []

    def use(i: int) -> None:
        try:
            start.wait()
            [fleet.status, fleet.daemons, fleet.dead_letters, fleet.routes][i % 4]()
            fleet.send({"command": "true"}, queue=site.idle, reason=f"thread {i}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=use, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(CountedSession.made) == 1
    assert sorted(CountedSession.clients) == sorted(set(CountedSession.clients))


def test_import_sqsjkr_gives_fleet_without_click_or_flask() -> None:
    code = (
        "import json, sys, sqsjkr; sqsjkr.Fleet, sqsjkr.JobHandle, sqsjkr.JobState;"
        "print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    loaded = json.loads(result.stdout)
    assert "sqsjkr.fleet.client" in loaded
    assert [m for m in loaded if m.split(".")[0] in ("click", "flask", "jinja2")] == []
    assert (Path(sqsjkr.__file__).parent / "py.typed").exists()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_the_python_api_docs_examples_run_as_written(
    site: ApiSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The walk-through's Fleet() reads SQSJKR_CONF, as local mode's export line sets it.
    monkeypatch.setenv("SQSJKR_CONF", site.conf)
    blocks = python_blocks(DOC.read_text())
    assert len(blocks) > 10, "docs/python-api.md lost its examples"
    namespace: dict[str, object] = {}
    for block in blocks:
        # The doc's config, and its second queue that a daemon serves: the module's own.
        block = block.replace("/etc/sqsjkr/config.toml", site.conf)
        exec(block.replace('"jobs-big"', repr(site.aws.queue_name)), namespace)  # noqa: S102


def test_a_finished_job_not_its_events_last_run_is_found_without_its_event(
    site: ApiSite, cli: Cli
) -> None:
    fleet = site.fleet()
    earlier = fleet.send({"command": "echo first", "event_id": "api-twice"})
    record = earlier.wait(timeout=30)
    fleet.send({"command": "echo second", "event_id": "api-twice"}).wait(timeout=30)
    # No event given, and the event's last run is another's: found among its runs all the same.
    state = fleet.job(earlier.message_id)
    assert (state.phase, state.event_id, state.record) == (JobPhase.ENDED, "api-twice", record)
    assert fleet.handle(earlier.message_id).wait(timeout=5) == record
    done = cli("job", earlier.message_id, "-c", site.conf)
    assert done.returncode == 0 and "ended succeeded" in done.stdout, done


def test_an_unknown_or_empty_message_id_is_no_queued_job(site: ApiSite, cli: Cli) -> None:
    fleet = site.fleet()
    assert fleet.job("no-such-message").phase is JobPhase.UNKNOWN
    unknown = cli("job", "no-such-message", "-c", site.conf)
    assert unknown.returncode == 1 and "unknown" in unknown.stdout, unknown
    with pytest.raises(RequestError, match="message id is needed"):
        fleet.job("")
    empty = cli("job", "", "-c", site.conf)
    assert empty.returncode == 2 and "message id is needed" in empty.stderr, empty
    assert "ValidationException" not in empty.stderr


def test_a_send_says_it_was_deduplicated_by_the_callers_unique_key(site: ApiSite) -> None:
    fleet, key = site.fleet(), f"tenant-7/report-{uuid.uuid4().hex[:6]}"
    first = fleet.send({"command": "echo a"}, queue=site.idle, unique_for=600, unique_key=key)
    # Another body, the same key: that job, unsent; another key: sent.
    again = fleet.send({"command": "echo b"}, queue=site.idle, unique_for=600, unique_key=key)
    other = fleet.send({"command": "echo a"}, queue=site.idle, unique_for=600, unique_key="x")
    assert not first.deduplicated and again.deduplicated and not other.deduplicated
    assert again.message_id == first.message_id != other.message_id


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"unique_for": math.nan}, "unique_for"),
        ({"unique_for": math.inf}, "unique_for"),
        ({"unique_for": -5}, "unique_for"),
        ({"delay": -1}, "delay"),
        ({"delay": 901}, "delay"),
        ({"unique_key": "k"}, "unique_key"),
    ],
)
def test_a_send_with_a_bad_window_or_delay_is_refused_and_leaves_nothing(
    site: ApiSite, options: dict[str, Any], field: str
) -> None:
    job = {"command": f"echo {uuid.uuid4().hex}"}
    fleet = site.fleet()
    with pytest.raises(RequestError, match=field):
        fleet.send(job, queue=site.idle, **options)
    # No uniqueness item left pending: the same job sends at once.
    assert not fleet.send(job, queue=site.idle, unique_for=60).deduplicated
    with pytest.raises(RequestError, match="timeout"):
        fleet.handle("no-such-message", "ev").wait(timeout=math.nan)


def test_a_handle_made_before_any_daemon_took_its_job_waits_for_it_by_its_event(
    site: ApiSite,
) -> None:
    # Sent by another program, delayed: no daemon has taken it when its handle is made.
    body = json.dumps({"command": "echo elsewhere", "event_id": "api-elsewhere"})
    message_id = site.aws.sqs.send_message(
        QueueUrl=site.aws.queue_url, MessageBody=body, DelaySeconds=1
    )["MessageId"]
    fleet = site.fleet()
    handle = fleet.handle(message_id)
    assert handle.state().phase is not JobPhase.UNKNOWN  # a handle knows its job was sent
    record = handle.wait(timeout=30)
    assert (record.event_id, record.output) == ("api-elsewhere", "elsewhere\n")
