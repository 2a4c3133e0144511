"""Local mode's scheduler: the schedules and scheduled rules of a moto server fired as EventBridge
fires them, driven by fire_due(now) with the time given, against the real server over HTTP.

Its own region: the schedules other tests leave on the worker's server are not fired here.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing, Origin
from sqsjkr.contract.job import parse_job
from sqsjkr.crontab.fires import Window, next_fires
from sqsjkr.errors import LocalModeError
from sqsjkr.fleet.dead_letters import SCHEDULER_ATTRIBUTES
from sqsjkr.local.demo_scheduled import demo_scheduled
from sqsjkr.local.endpoint import create_demo_scheduled
from sqsjkr.local.scheduler import ATTEMPT_NUMBER, EXECUTION_ID, LocalScheduler

from .test_terraform import (
    ExamplePlan,
    by_key,
    example_plan,  # noqa: F401, F811 (a fixture)
    needs_providers,
    once,  # noqa: F401 (a fixture)
)

REGION = "eu-north-1"
ROLE = "arn:aws:iam::123456789012:role/scheduler"
#: Every context attribute of the Scheduler, in a job's input.
CONTEXT_INPUT = json.dumps(
    {
        "command": "true",
        "firing": {"time": SCHEDULED_TIME, "schedule": SCHEDULE_ARN},
        "envs": {"EXECUTION": EXECUTION_ID, "ATTEMPT": ATTEMPT_NUMBER},
    }
)


@dataclass
class Site:
    """Queues and a schedule group of this test's own, in REGION."""

    endpoint: str
    session: Any
    sqs: Any
    scheduler: Any
    group: str

    def queue(self, name: str, **attributes: str) -> tuple[str, str]:
        """A new queue's (URL, ARN)."""
        url = self.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
        return url, arn["Attributes"]["QueueArn"]

    def schedule(self, name: str, expression: str, target: dict[str, Any], **more: Any) -> float:
        """Create a schedule in the group; its CreationDate (a rate() counts from it)."""
        self.scheduler.create_schedule(
            Name=name,
            GroupName=self.group,
            ScheduleExpression=expression,
            FlexibleTimeWindow=more.pop("FlexibleTimeWindow", {"Mode": "OFF"}),
            Target={"RoleArn": ROLE, **target},
            **more,
        )
        got = self.scheduler.get_schedule(GroupName=self.group, Name=name)
        return float(got["CreationDate"].timestamp())

    def arn(self, name: str) -> str:
        return f"arn:aws:scheduler:{REGION}:123456789012:schedule/{self.group}/{name}"

    def firer(self, since: float, **options: Any) -> LocalScheduler:
        return LocalScheduler(self.session, self.endpoint, since=since, **options)


@pytest.fixture
def site(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for name, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    session = make_session(region=REGION)
    scheduler = make_client(session, "scheduler")
    group = f"g-{uuid.uuid4().hex[:8]}"
    scheduler.create_schedule_group(Name=group)
    yield Site(moto_endpoint, session, make_client(session, "sqs"), scheduler, group)
    # The next test of this worker must not fire this one's schedules.
    for page in scheduler.get_paginator("list_schedules").paginate(GroupName=group):
        for listed in page["Schedules"]:
            scheduler.delete_schedule(GroupName=group, Name=listed["Name"])
    scheduler.delete_schedule_group(Name=group)


def received(sqs: Any, url: str) -> list[dict[str, Any]]:
    """Every message on the queue, with its attributes, taken off it."""
    found: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            AttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not messages:
            return found
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        found += messages


def iso(at: float) -> str:
    return Firing(at, "").iso


def test_rate_cron_and_at_schedules_fire_once_when_due_in_their_zones_and_a_disabled_one_never(
    site: Site,
) -> None:
    url, arn = site.queue(f"q-{uuid.uuid4().hex[:8]}")
    target = {"Arn": arn, "Input": CONTEXT_INPUT}
    created = site.schedule("hourly", "rate(1 hour)", target)
    # 03:00 in Kathmandu (UTC+05:45) is 21:15 UTC: the zone is applied, not UTC's 03:00.
    site.schedule(
        "nightly", "cron(0 3 * * ? *)", target, ScheduleExpressionTimezone="Asia/Kathmandu"
    )
    once_at = datetime.fromtimestamp(int(created) + 120, timezone.utc)
    site.schedule(
        "once",
        f"at({once_at:%Y-%m-%dT%H:%M:%S})",
        target,
        ActionAfterCompletion="DELETE",
    )
    site.schedule("off", "rate(1 hour)", target, State="DISABLED")
    nightly = next_fires("cron(0 3 * * ? *)", "Asia/Kathmandu", once_at, 1).times[0].timestamp()
    assert datetime.fromtimestamp(nightly, timezone.utc).strftime("%H:%M") == "21:15"
    firer = site.firer(created)

    # Before anything is due, nothing is sent; the answer is when the next firing is due.
    assert firer.fire_due(created + 30) == min(once_at.timestamp(), nightly, created + 3600)
    assert received(site.sqs, url) == []
    # A day later: each enabled schedule's firings since, once (the at() and the cron once,
    # the rate() 24 times), none of the disabled one's.
    day = created + 86400 + 1
    firer.fire_due(day)
    bodies = [json.loads(m["Body"]) for m in received(site.sqs, url)]
    by_schedule: dict[str, list[str]] = {}
    for body in bodies:
        by_schedule.setdefault(body["firing"]["schedule"], []).append(body["firing"]["time"])
        assert re.fullmatch(r"[0-9a-f]{16}", body["envs"]["EXECUTION"]), body
        assert body["envs"]["ATTEMPT"] == "1"
    assert set(by_schedule) == {site.arn("hourly"), site.arn("nightly"), site.arn("once")}
    assert by_schedule[site.arn("once")] == [iso(once_at.timestamp())]
    assert by_schedule[site.arn("nightly")] == [iso(nightly)]
    assert sorted(by_schedule[site.arn("hourly")]) == [
        iso(float(int(created)) + 3600 * n) for n in range(1, 25)
    ]
    assert len({body["envs"]["EXECUTION"] for body in bodies}) == len(bodies)
    # Sent once: the same look again sends nothing.
    firer.fire_due(day)
    assert received(site.sqs, url) == []
    # The at() asked to be deleted once done; the others stay.
    with pytest.raises(ClientError, match="ResourceNotFound"):
        site.scheduler.get_schedule(GroupName=site.group, Name="once")
    # Enabled again (a change the next look reads): it fires from then on, and the firings it
    # missed while disabled are not sent.
    site.scheduler.update_schedule(
        Name="off",
        GroupName=site.group,
        ScheduleExpression="rate(1 hour)",
        FlexibleTimeWindow={"Mode": "OFF"},
        Target={"RoleArn": ROLE, **target},
        State="ENABLED",
    )
    firer.fire_due(day + 3600)
    sent = sorted(json.loads(m["Body"])["firing"]["schedule"] for m in received(site.sqs, url))
    # The nightly one fires in that hour too when its 21:15 UTC falls within it: a test run
    # between 20:15 and 21:15 UTC.
    after_day = datetime.fromtimestamp(day, timezone.utc)
    next_nightly = next_fires("cron(0 3 * * ? *)", "Asia/Kathmandu", after_day, 1).times[0]
    nightly_too = [site.arn("nightly")] if next_nightly.timestamp() <= day + 3600 else []
    assert sent == sorted([site.arn("hourly"), site.arn("off"), *nightly_too])


def test_a_flexible_window_delays_a_firing_within_it_and_keeps_its_scheduled_time(
    site: Site,
) -> None:
    url, arn = site.queue(f"q-{uuid.uuid4().hex[:8]}")
    window = {"Mode": "FLEXIBLE", "MaximumWindowInMinutes": 10}
    created = site.schedule(
        "report", "rate(1 hour)", {"Arn": arn, "Input": CONTEXT_INPUT}, FlexibleTimeWindow=window
    )
    due = float(int(created)) + 3600
    # The latest the window allows, drawn once for the firing.
    firer = site.firer(created, delay=lambda low, high: high)
    assert firer.fire_due(due + 1) == due + 600
    assert received(site.sqs, url) == []
    firer.fire_due(due + 600)
    [message] = received(site.sqs, url)
    assert json.loads(message["Body"])["firing"]["time"] == iso(due)


def test_a_firing_its_queue_refuses_goes_to_the_dead_letter_queue_with_the_schedulers_attributes(
    site: Site,
) -> None:
    dlq_url, dlq_arn = site.queue(f"dlq-{uuid.uuid4().hex[:8]}")
    fifo_url, fifo_arn = site.queue(
        f"q-{uuid.uuid4().hex[:8]}.fifo", FifoQueue="true", ContentBasedDeduplication="true"
    )
    gone = f"arn:aws:sqs:{REGION}:123456789012:no-such-queue"
    created = site.schedule(
        "lost",
        "rate(1 hour)",
        {"Arn": gone, "Input": CONTEXT_INPUT, "DeadLetterConfig": {"Arn": dlq_arn}},
    )
    site.schedule(
        "fifo",
        "rate(1 hour)",
        {"Arn": fifo_arn, "Input": CONTEXT_INPUT, "SqsParameters": {"MessageGroupId": "nightly"}},
    )
    # A target that is no queue: skipped (with a warning), neither sent nor dead-lettered.
    function = f"arn:aws:lambda:{REGION}:123456789012:function:nightly"
    site.schedule("lambda", "rate(1 hour)", {"Arn": function, "DeadLetterConfig": {"Arn": dlq_arn}})
    site.firer(created).fire_due(created + 3601)
    due = iso(float(int(created)) + 3600)
    # A FIFO target's firing carries its message group.
    [sent] = received(site.sqs, fifo_url)
    assert sent["Attributes"]["MessageGroupId"] == "nightly"
    [letter] = received(site.sqs, dlq_url)
    body = json.loads(letter["Body"])
    assert body["firing"] == {"time": due, "schedule": site.arn("lost")}
    attributes = {name: a["StringValue"] for name, a in letter["MessageAttributes"].items()}
    # All of them the Scheduler's, which a redrive (`sqsjkr dlq redrive`) leaves behind.
    assert set(attributes) <= set(SCHEDULER_ATTRIBUTES)
    assert attributes.pop("ERROR_CODE")
    assert attributes.pop("ERROR_MESSAGE")
    assert attributes == {
        "EXECUTION_ID": body["envs"]["EXECUTION"],
        "RETRY_ATTEMPTS": "0",
        "SCHEDULED_TIME": due,
        "SCHEDULE_ARN": site.arn("lost"),
        "TARGET_ARN": gone,
    }


def test_a_scheduled_rule_fires_in_utc_through_its_input_transformer(site: Site) -> None:
    url, arn = site.queue(f"q-{uuid.uuid4().hex[:8]}")
    dlq_url, dlq_arn = site.queue(f"dlq-{uuid.uuid4().hex[:8]}")
    events = make_client(site.session, "events")
    name = f"rule-{uuid.uuid4().hex[:8]}"
    rule = events.put_rule(Name=name, ScheduleExpression="cron(0 3 * * ? *)")["RuleArn"]
    template = '{"command": "true", "firing": {"time": "<time>", "schedule": "<rule>"}}'
    transformer = {
        "InputPathsMap": {"time": "$.time", "rule": "$.resources[0]"},
        "InputTemplate": template,
    }
    gone = f"arn:aws:sqs:{REGION}:123456789012:no-such-queue"
    events.put_targets(
        Rule=name,
        Targets=[
            {"Id": "queue", "Arn": arn, "InputTransformer": transformer},
            {"Id": "gone", "Arn": gone, "DeadLetterConfig": {"Arn": dlq_arn}},
        ],
    )
    try:
        now = datetime.now(timezone.utc).timestamp()
        firer = site.firer(now)
        due = next_fires("cron(0 3 * * ? *)", "UTC", datetime.fromtimestamp(now, timezone.utc))
        first = due.times[0].timestamp()
        assert firer.fire_due(now + 1) == first
        firer.fire_due(first)
        [message] = received(site.sqs, url)
        assert json.loads(message["Body"]) == {
            "command": "true",
            "firing": {"time": iso(first), "schedule": rule},
        }
        # The target it cannot deliver to: the scheduled event in its dead-letter queue.
        [letter] = received(site.sqs, dlq_url)
        assert json.loads(letter["Body"])["resources"] == [rule]
        attributes = letter["MessageAttributes"]
        assert (attributes["RULE_ARN"]["StringValue"], attributes["TARGET_ARN"]["StringValue"]) == (
            rule,
            gone,
        )
    finally:
        events.remove_targets(Rule=name, Ids=["queue", "gone"])
        events.delete_rule(Name=name)


def test_it_refuses_any_endpoint_but_local_modes_own(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(LocalModeError, match="only on its embedded endpoint"):
        LocalScheduler(site.session, "https://scheduler.eu-north-1.amazonaws.com")
    # Its clients call where the environment says: not the endpoint it was given, refused.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "https://sqs.eu-north-1.amazonaws.com")
    with pytest.raises(LocalModeError, match="client calls https://sqs"):
        LocalScheduler(make_session(region=REGION), site.endpoint)


@needs_providers
@pytest.mark.slow
def test_the_modules_planned_schedules_and_rules_fire_messages_the_daemon_takes(
    site: Site,
    example_plan: ExamplePlan,  # noqa: F811
) -> None:
    """Each schedule and rule of the example's plan (and of the modules planned beside it),
    created as terraform apply creates it against local mode's endpoint, fires once due, and the
    daemon takes what it sends as that firing."""
    standard = site.queue(f"q-{uuid.uuid4().hex[:8]}")
    fifo = site.queue(
        f"q-{uuid.uuid4().hex[:8]}.fifo", FifoQueue="true", ContentBasedDeduplication="true"
    )
    dlq_arn = site.queue(f"dlq-{uuid.uuid4().hex[:8]}")[1]
    fired = set()
    for address, planned in example_plan.resources.items():
        if ".aws_scheduler_schedule.job[" not in address:
            continue
        url, arn = fifo if address.startswith("module.fifo.") else standard
        [target] = planned["target"]
        [window] = planned["flexible_time_window"]
        groups = [p["message_group_id"] for p in target.get("sqs_parameters") or []]
        created = site.schedule(
            planned["name"],
            planned["schedule_expression"],
            {
                "Arn": arn,
                "Input": target["input"],
                "DeadLetterConfig": {"Arn": dlq_arn},
                **({"SqsParameters": {"MessageGroupId": groups[0]}} if groups else {}),
            },
            ScheduleExpressionTimezone=planned["schedule_expression_timezone"],
            State=planned["state"],
            FlexibleTimeWindow={
                "Mode": window["mode"],
                **(
                    {"MaximumWindowInMinutes": window["maximum_window_in_minutes"]}
                    if window["mode"] == "FLEXIBLE"
                    else {}
                ),
            },
        )
        moment = datetime.fromtimestamp(created, timezone.utc)
        expression, zone = planned["schedule_expression"], planned["schedule_expression_timezone"]
        first = next_fires(expression, zone, moment, 1, Window(created=moment)).times[0]
        latest = first.timestamp() + 60 * (window.get("maximum_window_in_minutes") or 0)
        site.firer(created, delay=lambda low, high: high).fire_due(latest)
        messages = received(site.sqs, url)
        site.scheduler.delete_schedule(GroupName=site.group, Name=planned["name"])
        if planned["state"] == "DISABLED":
            assert messages == [], address
            continue
        [message] = messages
        job = parse_job(message["Body"], message_id="m", sent_at=latest)
        assert (job.origin, job.firing) == (
            Origin.SCHEDULE,
            Firing(float(int(first.timestamp())), site.arn(planned["name"]), expression, zone),
        ), address
        assert message["Attributes"].get("MessageGroupId") == (groups[0] if groups else None)
        fired.add(address)
    assert len(fired) >= 9, fired  # the example's enabled jobs, crontab2tf's, the FIFO module's
    fired_rules = fire_the_planned_rules(site, example_plan, fifo)
    assert fired_rules == {"nightly", "hourly"}


def fire_the_planned_rules(site: Site, plan: ExamplePlan, queue: tuple[str, str]) -> set[str]:
    """The FIFO rules module's rules and targets put as terraform would, each fired once."""
    events = make_client(site.session, "events")
    url, arn = queue
    rules = by_key(plan.resources, "module.fifo_rules.aws_cloudwatch_event_rule.job")
    targets = by_key(plan.resources, "module.fifo_rules.aws_cloudwatch_event_target.job")
    fired = set()
    for key, rule in rules.items():
        name = f"{rule['name']}-{uuid.uuid4().hex[:6]}"
        rule_arn = events.put_rule(
            Name=name, ScheduleExpression=rule["schedule_expression"], State=rule["state"]
        )["RuleArn"]
        [transformer] = targets[key]["input_transformer"]
        [fifo] = targets[key]["sqs_target"]
        events.put_targets(
            Rule=name,
            Targets=[
                {
                    "Id": targets[key]["target_id"],
                    "Arn": arn,
                    "InputTransformer": {
                        "InputPathsMap": transformer["input_paths"],
                        "InputTemplate": transformer["input_template"],
                    },
                    "SqsParameters": {"MessageGroupId": fifo["message_group_id"]},
                }
            ],
        )
        try:
            now = datetime.now(timezone.utc)
            firer = site.firer(now.timestamp())
            first = firer.fire_due(now.timestamp())  # seen now: a rate() counts from now
            assert first is not None
            firer.fire_due(first)
            [message] = received(site.sqs, url)
        finally:
            events.remove_targets(Rule=name, Ids=[targets[key]["target_id"]])
            events.delete_rule(Name=name)
        job = parse_job(message["Body"], message_id="m", sent_at=first)
        assert (job.origin, job.firing) == (
            Origin.SCHEDULE,
            Firing(float(int(first)), rule_arn, rule["schedule_expression"], "UTC"),
        ), key
        assert message["Attributes"]["MessageGroupId"] == fifo["message_group_id"]
        fired.add(key)
    return fired


def test_the_demos_pipeline_fires_first_at_the_time_it_prints_and_its_late_schedule_is_left_to_catch_up(
    site: Site, tmp_path: Path
) -> None:
    """The demo's scheduled part as `sqsjkr local --demo` sets it up: the pipeline's root is sent
    at the first firing the demo prints (for `trigger --firing`) and each minute after, never
    before; the late schedule's firing before the start is catch-up's to send, not the scheduler's."""
    url, arn = site.queue(f"q-{uuid.uuid4().hex[:8]}")
    now = time.time()
    scheduled = demo_scheduled(now, tmp_path)
    create_demo_scheduled(site.session, arn, ROLE, scheduled, group=site.group)
    first = scheduled.times.first
    firer = site.firer(since=now)
    firer.fire_due(first - 1)
    assert received(site.sqs, url) == []
    for at in (first, first + 60):
        firer.fire_due(at)
        [root] = received(site.sqs, url)
        job = parse_job(root["Body"], message_id="m", sent_at=at)
        assert job.firing is not None and job.firing.at == at
        assert job.event_id == "demo-pipeline" and job.pipeline is not None
        assert set(job.pipeline.pipeline.steps) == {"a", "b", "c", "d", "notify"}
    late = site.scheduler.get_schedule(GroupName=site.group, Name="sqsjkr-local-catch-up")
    assert late["LastModificationDate"].timestamp() == scheduled.times.missed - 3600
    assert json.loads(late["Target"]["Input"])["catch_up"] == "15m"
