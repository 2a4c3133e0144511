"""EventBridge Scheduler: one-time jobs, at() schedules in the module's schedule group that put a
job's message on the queue once and are deleted once they have (ActionAfterCompletion), and the
reading of every schedule of the group, for `sqsjkr schedules`.

sqsjkr finds its own by name: they start with NAME_PREFIX, which no schedule of the module can.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import error_code
from sqsjkr.contract import safe_json
from sqsjkr.contract.when import OneTime
from sqsjkr.errors import ResourceMissingError

#: The start of every one-time schedule's name. The module names its schedules <name>-<key>, and
#: its name allows no ".", so none of them starts with "at.".
NAME_PREFIX = "at."
_SLUG_LENGTH = 30


@dataclass(frozen=True)
class QueueTarget:
    """What a schedule needs to know of the queue: its ARN, and its dead-letter queue's."""

    arn: str
    dead_letter_arn: str | None


@dataclass(frozen=True)
class ScheduledJob:
    """A one-time job still to run, as --list-scheduled shows it (never its envs)."""

    name: str
    when: str  # yyyy-mm-ddThh:mm:ss, read in timezone
    timezone: str
    instant: datetime | None  # when, in UTC; None if the schedule says something else
    state: str
    event_id: str | None
    command: str | None


@dataclass(frozen=True)
class EventSchedule:
    """A schedule or rule that puts a job on a queue, as `sqsjkr schedules` shows it (never the
    job's envs, which may hold secrets)."""

    name: str
    expression: str
    timezone: str
    enabled: bool
    event_id: str | None
    command: str | None
    target_arn: str | None
    start: datetime | None = None  # StartDate: it fires from then on
    end: datetime | None = None  # EndDate: and not after
    created: datetime | None = None  # a rate() counts from StartDate, else from creation
    #: The target's Input as it is, which `sqsjkr trigger` sends: never shown (envs).
    message: str | None = field(default=None, repr=False)
    group_id: str | None = None  # the target's FIFO MessageGroupId, if it has one
    #: Its ARN: what a firing's message names as its schedule (the Scheduler's schedule-arn).
    arn: str | None = None
    #: Where the Scheduler puts a firing it could not deliver (its DeadLetterConfig), if set.
    dead_letter_arn: str | None = None
    #: Its FlexibleTimeWindow's MaximumWindowInMinutes in seconds: the Scheduler may deliver a
    #: firing this long after it was due (0 when the window is OFF, or for a rule).
    flexible_window: float = 0.0
    #: Its ActionAfterCompletion is DELETE: the Scheduler deletes it once it fires no more.
    delete_after: bool = False


def queue_target(sqs: Any, queue_url: str) -> QueueTarget:
    """The queue's ARN and its RedrivePolicy's dead-letter queue, from GetQueueAttributes."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["QueueArn", "RedrivePolicy"]
    )["Attributes"]
    redrive = json.loads(attributes.get("RedrivePolicy") or "{}")
    return QueueTarget(str(attributes["QueueArn"]), redrive.get("deadLetterTargetArn"))


def one_time_name(event_id: str | None, when: OneTime) -> str:
    """A new schedule's name: the prefix, the job's event_id, the UTC time, and a random part."""
    slug = re.sub(r"[^0-9A-Za-z_-]+", "-", event_id or "job").strip("-")[:_SLUG_LENGTH] or "job"
    return f"{NAME_PREFIX}{slug}.{when.instant:%Y%m%dT%H%M%SZ}.{secrets.token_hex(4)}"


def create_one_time(
    client: Any,
    *,
    group: str,
    name: str,
    when: OneTime,
    queue: QueueTarget,
    role_arn: str,
    body: str,
    message_group_id: str | None = None,
) -> None:
    """Schedule body to be put on the queue at `when`, once; the schedule deletes itself after.

    A FIFO queue needs message_group_id (and content-based deduplication on the queue)."""
    target: dict[str, Any] = {"Arn": queue.arn, "RoleArn": role_arn, "Input": body}
    if message_group_id is not None:
        target["SqsParameters"] = {"MessageGroupId": message_group_id}
    if queue.dead_letter_arn:
        # Where alarms already look: a job the scheduler could not send is not lost silently.
        target["DeadLetterConfig"] = {"Arn": queue.dead_letter_arn}
    try:
        client.create_schedule(
            Name=name,
            GroupName=group,
            ScheduleExpression=when.expression,
            ScheduleExpressionTimezone=when.timezone,
            FlexibleTimeWindow={"Mode": "OFF"},
            Target=target,
            ActionAfterCompletion="DELETE",
            State="ENABLED",
            Description="sqsjkr send --at",
        )
    except ClientError as exc:
        raise _missing_group(exc, group) from exc


def list_one_time(client: Any, group: str) -> list[ScheduledJob]:
    """sqsjkr's one-time schedules in the group that have not run yet, soonest first."""
    jobs = [_scheduled_job(schedule) for schedule in _schedules(client, group, NAME_PREFIX)]
    latest = datetime.max.replace(tzinfo=timezone.utc)
    return sorted(jobs, key=lambda job: (job.instant or latest, job.name))


def cancel_one_time(client: Any, group: str, name: str) -> None:
    """Delete one of sqsjkr's one-time schedules; ValueError for any other schedule's name."""
    if not name.startswith(NAME_PREFIX):
        raise ValueError(
            f"{name!r} is not a one-time job of sqsjkr send (their names start with "
            f"{NAME_PREFIX!r}; --list-scheduled shows them)"
        )
    try:
        client.delete_schedule(GroupName=group, Name=name)
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            raise ResourceMissingError(
                f"no one-time job {name!r} in schedule group {group!r}: it has run already, "
                "was cancelled, or the group is another ([schedule] group)"
            ) from exc
        raise


def list_schedules(client: Any, group: str) -> list[EventSchedule]:
    """Every schedule of the group (the module's and one-time jobs alike), by name."""
    schedules = [_event_schedule(schedule) for schedule in _schedules(client, group, "")]
    return sorted(schedules, key=lambda schedule: schedule.name)


@dataclass(frozen=True)
class Listed:
    """A schedule as ListSchedules gives it (one call per 100): no expression or input."""

    name: str
    arn: str
    enabled: bool
    #: Its LastModificationDate: a reader that keeps schedules read whole reads one again when
    #: this changes.
    modified: datetime | None = None


def list_states(client: Any, group: str) -> list[Listed]:
    """Every schedule of the group with its state, from ListSchedules alone."""
    return [
        Listed(
            str(s["Name"]),
            str(s.get("Arn", "")),
            s.get("State") == "ENABLED",
            s.get("LastModificationDate"),
        )
        for s in _listed(client, group, "")
    ]


def get_event_schedule(client: Any, group: str, name: str) -> EventSchedule | None:
    """One schedule read whole (GetSchedule), or None if it is gone since it was listed."""
    try:
        return _event_schedule(client.get_schedule(GroupName=group, Name=name))
    except ClientError as exc:
        if error_code(exc) != "ResourceNotFoundException":
            raise
        return None


def _schedules(client: Any, group: str, prefix: str) -> Iterator[dict[str, Any]]:
    """GetSchedule of each schedule of the group whose name starts with prefix."""
    for name in _names(client, group, prefix):
        try:
            yield client.get_schedule(GroupName=group, Name=name)
        except ClientError as exc:
            if error_code(exc) != "ResourceNotFoundException":
                raise
            # It ran (a one-time job) or was deleted since it was listed.


def _event_schedule(schedule: dict[str, Any]) -> EventSchedule:
    target = schedule.get("Target", {})
    message = job_message(target.get("Input"))
    return EventSchedule(
        name=str(schedule["Name"]),
        expression=str(schedule.get("ScheduleExpression", "")),
        timezone=str(schedule.get("ScheduleExpressionTimezone") or "UTC"),
        enabled=schedule.get("State") == "ENABLED",
        event_id=text_field(message.get("event_id")),
        command=text_field(message.get("command")),
        target_arn=target.get("Arn"),
        start=schedule.get("StartDate"),
        end=schedule.get("EndDate"),
        created=schedule.get("CreationDate"),
        message=target.get("Input"),
        group_id=target_group_id(target),
        arn=text_field(schedule.get("Arn")),
        dead_letter_arn=target.get("DeadLetterConfig", {}).get("Arn"),
        flexible_window=60.0 * _flexible_minutes(schedule.get("FlexibleTimeWindow") or {}),
        delete_after=schedule.get("ActionAfterCompletion") == "DELETE",
    )


def _flexible_minutes(window: dict[str, Any]) -> int:
    if window.get("Mode") != "FLEXIBLE":
        return 0
    return int(window.get("MaximumWindowInMinutes") or 0)


def job_message(text: str | None) -> dict[str, Any]:
    """A target's input as a job message; empty when it is none (not JSON, not an object)."""
    try:
        message = safe_json.loads(text or "{}")
    except ValueError:  # safe_json's JsonError: not JSON, or nested past any job's depth
        return {}
    return message if isinstance(message, dict) else {}


def target_group_id(target: dict[str, Any]) -> str | None:
    """The FIFO MessageGroupId of a schedule's or rule's target, if it sets one."""
    return text_field((target.get("SqsParameters") or {}).get("MessageGroupId"))


def text_field(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _names(client: Any, group: str, prefix: str) -> Iterator[str]:
    return (str(summary["Name"]) for summary in _listed(client, group, prefix))


def _listed(client: Any, group: str, prefix: str) -> Iterator[dict[str, Any]]:
    arguments = {"GroupName": group, **({"NamePrefix": prefix} if prefix else {})}
    try:
        for page in client.get_paginator("list_schedules").paginate(**arguments):
            for summary in page.get("Schedules", []):
                # GroupName is checked too: moto matched the group by substring.
                if summary.get("GroupName", group) == group:
                    yield summary
    except ClientError as exc:
        raise _missing_group(exc, group) from exc


def _scheduled_job(schedule: dict[str, Any]) -> ScheduledJob:
    expression = str(schedule.get("ScheduleExpression", ""))
    match = re.fullmatch(r"at\((.*)\)", expression)
    message = job_message(schedule.get("Target", {}).get("Input"))
    when = match.group(1) if match else expression
    zone_name = str(schedule.get("ScheduleExpressionTimezone") or "UTC")
    try:
        local = datetime.fromisoformat(when).replace(tzinfo=ZoneInfo(zone_name))
        instant: datetime | None = local.astimezone(timezone.utc)
    except (ValueError, ZoneInfoNotFoundError):
        instant = None
    return ScheduledJob(
        name=str(schedule["Name"]),
        when=when,
        timezone=zone_name,
        instant=instant,
        state=str(schedule.get("State", "")),
        event_id=message.get("event_id"),
        command=message.get("command"),
    )


def _missing_group(exc: ClientError, group: str) -> Exception:
    if error_code(exc) == "ResourceNotFoundException":
        return ResourceMissingError(
            f"EventBridge Scheduler has no schedule group {group!r} (check [schedule] group: the "
            "terraform module's schedule_group_name output)"
        )
    return exc
