"""One-time jobs that EventBridge Scheduler puts on the queue later (`send --at`/`--in`), kept by
AWS instead of by sqsjkr: when one runs, scheduling it (audited), listing those to run, cancelling one.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.scheduler import ScheduledJob as ScheduledJob
from sqsjkr.backends.scheduler import (
    cancel_one_time,
    create_one_time,
    list_one_time,
    one_time_name,
    queue_target,
)
from sqsjkr.contract.config import Config
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.when import OneTime, one_time_at, one_time_in
from sqsjkr.errors import ConfigError, RequestError
from sqsjkr.fleet.audit import Auditor
from sqsjkr.fleet.send import Outgoing, audit_send


def check_timing(at_text: str | None, in_text: str | None, zone: str | None, delay: int) -> bool:
    """Whether the job is for later (--at or --in); RequestError for options that do not go
    together."""
    if at_text is not None and in_text is not None:
        raise RequestError("give --at or --in, not both")
    later = at_text is not None or in_text is not None
    if later and delay:
        raise RequestError("--delay is for jobs sent now; --at and --in schedule them instead")
    if zone is not None and at_text is None:
        raise RequestError("--timezone is the zone of an --at time; give it with --at")
    return later


def when_of(config: Config, at_text: str | None, in_text: str | None, zone: str | None) -> OneTime:
    """The time of an --at or --in option, from now, an --at without an offset in --timezone or
    [schedule] timezone; RequestError names the option at fault."""
    now = datetime.now(timezone.utc)
    if in_text is not None:
        try:
            return one_time_in(in_text, now)
        except ValueError as exc:
            raise RequestError(f"--in: {exc}") from exc
    assert at_text is not None
    try:
        return one_time_at(at_text, zone or config.schedule.timezone, now)
    except ValueError as exc:
        source = "--timezone" if zone else "[schedule] timezone"
        raise RequestError(f"--at ({source} {zone or config.schedule.timezone}): {exc}") from exc


def schedule_job(
    config: Config,
    session: Any,
    sqs: Any,
    audit: Auditor,
    out: Outgoing,
    when: OneTime,
    *,
    reason: str = "",
) -> str:
    """Create the one-time schedule that sends out's job at when, audited first; its name.

    out.fifo: the message group, for a FIFO queue (None for a standard one). ConfigError
    without [schedule] role_arn."""
    role_arn = config.schedule.role_arn
    audit_send(audit, out.body, out.queue_name, reason, when)
    if role_arn is None:
        raise ConfigError(
            "--at and --in need [schedule] role_arn in the config: the role EventBridge "
            "Scheduler sends as (the terraform module's scheduler_role_arn output)"
        )
    job = parse_job(out.body, message_id="(scheduled)", sent_at=0.0)
    name = one_time_name(job.event_id, when)
    body = _as_its_firing(out.body, when)
    create_one_time(
        make_client(session, "scheduler"),
        group=config.schedule.group,
        name=name,
        when=when,
        queue=queue_target(sqs, out.queue_url),
        role_arn=role_arn,
        body=body,
        message_group_id=None if out.fifo is None else out.fifo["MessageGroupId"],
    )
    return name


def _as_its_firing(body: str, when: OneTime) -> str:
    """body as the one-time schedule sends it: with its firing, which the Scheduler fills in
    (its context attributes), so that a second delivery of it is dropped as the first's
    duplicate, as a repeating schedule's is."""
    fields = json.loads(body)
    fields["firing"] = {
        "time": SCHEDULED_TIME,
        "schedule": SCHEDULE_ARN,
        "expression": when.expression,
        "timezone": when.timezone,
    }
    return json.dumps(fields, ensure_ascii=False)


def scheduled_jobs(config: Config) -> list[ScheduledJob]:
    """The one-time jobs still to run in [schedule] group, soonest first."""
    return list_one_time(_scheduler(config), config.schedule.group)


def cancel_scheduled(config: Config, audit: Auditor, name: str, *, reason: str = "") -> None:
    """Cancel the one-time job of that name, audited first. ValueError for a name that is not
    a one-time job's; ResourceMissingError when there is no such job."""
    group = config.schedule.group
    scheduler = _scheduler(config)
    audit("send --cancel", name, reason=reason, detail=f"group {group}")
    cancel_one_time(scheduler, group, name)


def _scheduler(config: Config) -> Any:
    """A Scheduler client of the config's account."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    return make_client(session, "scheduler")
