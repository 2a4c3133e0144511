"""Local mode's stand-in for EventBridge's scheduled rules (the terraform module's schedule_engine =
"rules"): each enabled rule with a schedule expression fires in UTC, its targets' input made from
the scheduled event as EventBridge makes it (Input, InputPath or an input transformer).
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code
from sqsjkr.backends.scheduler import target_group_id
from sqsjkr.contract.firing import Firing
from sqsjkr.crontab.fires import Window, fires_between, next_fires
from sqsjkr.errors import ScheduleExpressionError
from sqsjkr.local.delivery import Delivery, deliver, is_queue, substituted

log = logging.getLogger("sqsjkr.local")

#: Most firings of one rule sent at one look.
MAX_FIRES = 1000
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")


class LocalRules:
    """Fires the default event bus's scheduled rules, each firing once; a rule's rate() counts
    from when it was first seen (EventBridge's, from when it was created)."""

    def __init__(self, events: Any, sqs: Any, since: float) -> None:
        self._events = events
        self._sqs = sqs
        self._looked = since
        self._seen: dict[str, float] = {}  # each rule's ARN: when it was first listed
        self._fired: set[str] = set()
        # Each enabled rule's (expression, time before which nothing of it is due).
        self._quiet: dict[str, tuple[str, float]] = {}

    def fire_due(self, now: float) -> float | None:
        """Deliver each enabled rule's firings in (the last look, now]; when the next is due."""
        seen: dict[str, float] = {}
        soonest: float | None = None
        for rule in self._rules():
            arn = str(rule["Arn"])
            seen[arn] = self._seen.get(arn, now)
            if rule.get("State") != "ENABLED":
                continue
            expression = str(rule["ScheduleExpression"])
            quiet = self._quiet.get(arn)
            if quiet is not None and quiet[0] == expression and now < quiet[1]:
                upcoming: float | None = quiet[1]  # nothing of it due yet
            else:
                upcoming = self._fire_rule(rule, seen[arn], now)
                self._quiet[arn] = (expression, math.inf if upcoming is None else upcoming)
            if upcoming is not None and upcoming < math.inf:
                soonest = upcoming if soonest is None else min(soonest, upcoming)
        self._seen = seen
        self._quiet = {arn: q for arn, q in self._quiet.items() if arn in seen}
        self._fired = {key for key in self._fired if float(key.rpartition("@")[2]) > now - 3600}
        self._looked = now
        return soonest

    def _fire_rule(self, rule: dict[str, Any], seen: float, now: float) -> float | None:
        """Deliver the rule's firings in (the last look, now]; when its next is due."""
        arn, expression = str(rule["Arn"]), str(rule["ScheduleExpression"])
        window = Window(created=datetime.fromtimestamp(seen, timezone.utc))
        times, _ = fires_between(expression, "UTC", self._looked, now, window, MAX_FIRES)
        for at in times:
            if f"{arn}@{at}" not in self._fired:
                self._fire(rule, at)
                self._fired.add(f"{arn}@{at}")
        return _next(expression, now, window)

    def _rules(self) -> Iterator[dict[str, Any]]:
        for page in self._events.get_paginator("list_rules").paginate():
            yield from (r for r in page.get("Rules", []) if r.get("ScheduleExpression"))

    def _fire(self, rule: dict[str, Any], at: float) -> None:
        try:
            targets = list(self._targets(str(rule["Name"])))
        except ClientError as exc:
            if error_code(exc) == "ResourceNotFoundException":
                return  # deleted since it was listed
            raise
        event = scheduled_event(str(rule["Arn"]), at)
        for target in targets:
            if not is_queue(target.get("Arn")):
                log.warning(
                    "local scheduler: rule %s targets %s; local mode delivers to SQS queues only",
                    rule["Name"],
                    target.get("Arn"),
                )
                continue
            what = deliver(self._sqs, rule_delivery(rule, target, event))
            log.info("local scheduler: rule %s fired for %s: %s", rule["Name"], event["time"], what)

    def _targets(self, rule: str) -> Iterator[dict[str, Any]]:
        for page in self._events.get_paginator("list_targets_by_rule").paginate(Rule=rule):
            yield from page.get("Targets", [])


def _next(expression: str, now: float, window: Window) -> float | None:
    try:
        fires = next_fires(expression, "UTC", datetime.fromtimestamp(now, timezone.utc), 1, window)
    except ScheduleExpressionError:
        return None  # EventBridge would not take it: it never fires
    return fires.times[0].timestamp() if fires.times else None


def scheduled_event(rule_arn: str, at: float) -> dict[str, Any]:
    """The event of a scheduled rule's firing: its time is the minute it was due."""
    _, _, _, region, account, _ = rule_arn.split(":", 5)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": account,
        "time": Firing(at, "").iso,
        "region": region,
        "resources": [rule_arn],
        "detail": {},
    }


def rule_delivery(rule: dict[str, Any], target: dict[str, Any], event: dict[str, Any]) -> Delivery:
    """A target's firing: its Input, the part of the event its InputPath names, its input
    transformer's template filled in, or else the whole event; refused, the event goes to its
    DeadLetterConfig with EventBridge's attributes."""
    return Delivery(
        target_arn=str(target["Arn"]),
        body=target_input(target, event, rule),
        group_id=target_group_id(target),
        dead_letter_arn=(target.get("DeadLetterConfig") or {}).get("Arn"),
        dead_letter_body=json.dumps(event),
        attributes={"RULE_ARN": str(rule["Arn"])},
    )


def target_input(target: dict[str, Any], event: dict[str, Any], rule: dict[str, Any]) -> str:
    if target.get("Input") is not None:
        return str(target["Input"])
    if target.get("InputPath"):
        return json.dumps(resolve(event, str(target["InputPath"])))
    transformer = target.get("InputTransformer")
    if not transformer:
        return json.dumps(event)
    values = {
        f"<{name}>": resolve(event, str(path))
        for name, path in (transformer.get("InputPathsMap") or {}).items()
    }
    values.update(
        {
            "<aws.events.rule-arn>": rule["Arn"],
            "<aws.events.rule-name>": rule["Name"],
            "<aws.events.event.ingestion-time>": event["time"],
            "<aws.events.event>": event,
        }
    )
    # A string goes in escaped where its placeholder stands (in quotes, in the module's
    # templates); anything else as JSON.
    return substituted(
        str(transformer["InputTemplate"]),
        {
            placeholder: json.dumps(value)[1:-1] if isinstance(value, str) else json.dumps(value)
            for placeholder, value in values.items()
        },
    )


def resolve(event: Any, path: str) -> Any:
    """The part of the event a JSONPath of EventBridge's names ($.time, $.resources[0]); None
    when it names nothing."""
    value = event
    for key, index in _STEP.findall(path.removeprefix("$")):
        try:
            value = value[int(index)] if index else value[key]
        except (KeyError, IndexError, TypeError):
            return None
    return value
