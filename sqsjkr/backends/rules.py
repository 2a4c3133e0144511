"""EventBridge rules that put jobs on a queue (the terraform module with schedule_engine =
"rules"): found by their target, read for `sqsjkr schedules`.

Rules run in UTC; the job each sends is its target's Input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code
from sqsjkr.backends.scheduler import EventSchedule, job_message, target_group_id, text_field


def list_rules(client: Any, queue_arns: Iterable[str]) -> list[EventSchedule]:
    """Every scheduled rule with a target on one of the queues, one entry per such target."""
    found = []
    for queue_arn in queue_arns:
        for name in _rule_names(client, queue_arn):
            try:
                rule = client.describe_rule(Name=name)
                targets = list(_targets(client, name))
            except ClientError as exc:
                if error_code(exc) == "ResourceNotFoundException":
                    continue  # deleted since it was listed
                raise
            if not rule.get("ScheduleExpression"):
                continue  # an event pattern's rule: nothing scheduled
            found += [_schedule(rule, t) for t in targets if t.get("Arn") == queue_arn]
    return sorted(found, key=lambda schedule: schedule.name)


def _rule_names(client: Any, queue_arn: str) -> Iterator[str]:
    token: str | None = None
    while True:
        page = client.list_rule_names_by_target(
            TargetArn=queue_arn, **({"NextToken": token} if token else {})
        )
        yield from (str(name) for name in page.get("RuleNames", []))
        token = page.get("NextToken")
        if not token:
            return


def _targets(client: Any, rule: str) -> Iterator[dict[str, Any]]:
    token: str | None = None
    while True:
        page = client.list_targets_by_rule(Rule=rule, **({"NextToken": token} if token else {}))
        yield from page.get("Targets", [])
        token = page.get("NextToken")
        if not token:
            return


def _schedule(rule: dict[str, Any], target: dict[str, Any]) -> EventSchedule:
    # The module's rules send through an input transformer (the firing's time and rule): its
    # template is the message, with those two quoted placeholders.
    given = target.get("Input") or (target.get("InputTransformer") or {}).get("InputTemplate")
    message = job_message(given)
    return EventSchedule(
        name=str(rule["Name"]),
        expression=str(rule["ScheduleExpression"]),
        timezone="UTC",
        enabled=rule.get("State") == "ENABLED",
        event_id=text_field(message.get("event_id")),
        command=text_field(message.get("command")),
        target_arn=target.get("Arn"),
        message=given,
        group_id=target_group_id(target),
        arn=text_field(rule.get("Arn")),
    )
