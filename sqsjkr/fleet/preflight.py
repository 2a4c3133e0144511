"""The preflight of a deploy (`sqsjkr check`): the config's warnings and lease, the credentials, then
each queue's and the table's checks, in order, as Results.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.backends.lease import MIN_SAFE_LEASE_SECONDS
from sqsjkr.contract.config import Config, QueueConfig
from sqsjkr.daemon.service import intake_settings
from sqsjkr.fleet.preflight_queues import queue_checks
from sqsjkr.fleet.preflight_results import (
    Level,
    Result,
    fail,
    is_access_denied,
    ok,
    unreachable,
    warn,
)
from sqsjkr.fleet.preflight_table import table_checks

#: The least margin of visibility over the lease that lease_timing derives: a dead daemon's
#: message should reappear only once its claim has expired, past the clocks' skew.
MIN_VISIBILITY_MARGIN_SECONDS = 2


#: The calls of the daemon that need a message: a check must not take one, nor add one.
NOT_EXERCISED = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage(Batch)",
    "sqs:ChangeMessageVisibility(Batch)",
)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def config_warnings() -> Iterator[list[str]]:
    """The config loader's warnings (unknown keys), kept to be shown as WARN lines."""
    logger = logging.getLogger("sqsjkr.config")
    handler = _Collect()
    logger.addHandler(handler)
    propagate, logger.propagate = logger.propagate, False
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def check_lease(config: Config) -> Result:
    lease = config.lock.lease
    if config.takes_leases() and lease.seconds < MIN_SAFE_LEASE_SECONDS:
        return warn(
            "lease",
            f"[lock] lease {lease} is shorter than the smallest safe lease "
            f"({MIN_SAFE_LEASE_SECONDS}s): one slow DynamoDB call could let a lock or claim lapse "
            'while its job runs (docs/semantics.md, "Lease timing")',
        )
    return ok("lease", f"{lease} (safe from {MIN_SAFE_LEASE_SECONDS}s)")


def check_visibility(config: Config, queue: QueueConfig) -> Result:
    intake = intake_settings(config, queue)
    subject = f"visibility of {queue.name}" if config.queues else "visibility"
    if intake.delete_on_receive:
        return ok(subject, f"{intake.visibility}s (messages are deleted on receive)")
    lease = config.lock.lease
    margin = intake.visibility - lease.seconds
    text = f"{intake.visibility}s, lease {lease} + {margin:g}s"
    if config.dedupe.backend == "dynamodb" and margin < MIN_VISIBILITY_MARGIN_SECONDS:
        return warn(
            subject,
            f"{text}: the visibility_timeout is less than {MIN_VISIBILITY_MARGIN_SECONDS}s "
            "over the lease, so a dead daemon's message may reappear before its claim expires "
            "and wait out the lease again; leave it unset to derive it from the lease",
        )
    return ok(subject, text)


def check_credentials(session: Any) -> Result:
    """Who the credentials are, from STS GetCallerIdentity, which needs no permission.

    An unreachable STS is only a warning: the daemon never calls it (hosts in a private subnet
    may reach SQS and DynamoDB only).
    """
    if session.get_credentials() is None:
        return fail("credentials", "none found (environment, profile, instance role)", stop=True)
    try:
        identity = make_client(session, "sts").get_caller_identity()
    except (BotoCoreError, ClientError) as exc:
        endpoint = unreachable(exc)
        if endpoint:
            return warn(
                "credentials",
                f"identity unknown: cannot reach STS at {endpoint} (the daemon never calls STS)",
            )
        if is_access_denied(exc):
            return warn("credentials", "identity unknown: sts:GetCallerIdentity denied")
        return fail("credentials", describe(exc), stop=True)
    return ok("credentials", f"{identity['Arn']} (account {identity['Account']})")


def run_checks(config: Config) -> Iterator[Result]:
    """Every check after the config's, in order; a service that cannot be reached is left."""
    yield check_lease(config)
    queues = config.all_queues()
    for queue in queues:
        yield check_visibility(config, queue)
    try:
        session = make_session(region=config.account.region, profile=config.account.profile)
    except BotoCoreError as exc:  # an unknown profile
        yield fail("credentials", describe(exc), stop=True)
        return
    credentials = check_credentials(session)
    yield credentials
    if credentials.stop:
        return
    found = []
    sqs = make_client(session, "sqs")
    for queue in queues:
        queue_found = True
        for result in queue_checks(sqs, config, queue.name):
            queue_found = queue_found and not result.stop
            yield result
        if queue_found:
            found.append(queue.name)
    if config.uses_table():
        yield from table_checks(make_client(session, "dynamodb"), config)
    else:
        yield ok("table", "not used ([lock], [dedupe] and [history] backends are none)")
    for name in found:
        yield Result(
            Level.SKIP,
            f"queue {name}",
            f"not exercised, as each needs a message: {', '.join(NOT_EXERCISED)}, and "
            "sqs:SendMessage to the dead-letter queue, if any",
        )
