"""`sqsjkr check`: a preflight for deploy pipelines: the config, credentials, queue, table and permissions.

Each check is a small function returning Results; the command prints one line per result and a summary.
"""

from __future__ import annotations

import enum
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import click
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from sqsjkr.backends.aws import check_table, describe, error_code, make_client, make_session
from sqsjkr.backends.lease import MIN_SAFE_LEASE_SECONDS
from sqsjkr.backends.sqs import dead_letter_queue_url, resolve_queue_url
from sqsjkr.commands.options import (
    UsageFailure,
    conf_option,
    load,
    lock_table_option,
    profile_option,
    region_option,
)
from sqsjkr.contract.config import Config, Overrides, QueueConfig
from sqsjkr.daemon.service import intake_settings
from sqsjkr.errors import ResourceMissingError
from sqsjkr.fleet.wording import format_span

#: A queue keeps a job while no host can run it (the fleet down, a deploy gone wrong). Under a
#: day, the jobs of an outage overnight are gone, unrun and unlogged, by the time anyone looks.
MIN_RETENTION_SECONDS = 86400
#: A message is received again after a crash, when a stopping daemon gives it back unstarted,
#: and for each duplicate delivery: a job should survive two such mishaps before SQS moves it.
MIN_MAX_RECEIVE_COUNT = 3
#: The least margin of visibility over the lease that lease_timing derives: a dead daemon's
#: message should reappear only once its claim has expired, past the clocks' skew.
MIN_VISIBILITY_MARGIN_SECONDS = 2
#: How long a probe item left behind (its DeleteItem denied) lives before the TTL may take it.
PROBE_TTL_SECONDS = 3600
TYPE_INDEX = "TypeExpiredIndex"
TTL_ATTRIBUTE = "Expired"
#: The calls of the daemon that need a message: a check must not take one, nor add one.
NOT_EXERCISED = (
    "sqs:ReceiveMessage",
    "sqs:DeleteMessage(Batch)",
    "sqs:ChangeMessageVisibility(Batch)",
)


class Level(enum.Enum):
    """How a check went: FAIL stops a deploy, WARN does not, SKIP says what was not checked."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    """One line of the check's output; stop: the checks after it on that service are pointless."""

    level: Level
    subject: str
    text: str
    stop: bool = False

    def line(self) -> str:
        return f"{self.level.value:<4} {self.subject}: {self.text}"


def ok(subject: str, text: str) -> Result:
    return Result(Level.OK, subject, text)


def warn(subject: str, text: str) -> Result:
    return Result(Level.WARN, subject, text)


def fail(subject: str, text: str, *, stop: bool = False) -> Result:
    return Result(Level.FAIL, subject, text, stop)


# -- AWS failures -------------------------------------------------------------------------------


def is_access_denied(exc: BaseException) -> bool:
    """AccessDenied(Exception), or a 403 whose error code did not parse (moto answers a JSON
    protocol's denial in XML, which botocore reads as the bare status)."""
    code = error_code(exc)
    if code.startswith(("AccessDenied", "UnauthorizedOperation")):
        return True
    return isinstance(exc, ClientError) and code in ("", "403")


def unreachable(exc: BaseException) -> str | None:
    """The endpoint a connection failure names, or None for any other failure."""
    if isinstance(exc, BotoCoreError):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url")
        if endpoint:
            return str(endpoint)
    return None


def failure(subject: str, action: str, exc: BaseException) -> Result:
    """A FAIL naming what went wrong: the action denied, the endpoint unreachable, or the error.

    Only a denied action lets the checks after it on the same service go on.
    """
    if is_access_denied(exc):
        # Not AWS's message: it repeats the identity that the credentials line already names.
        return fail(subject, f"{action} denied")
    endpoint = unreachable(exc)
    if endpoint:
        return fail(subject, f"cannot reach {endpoint} ({action}: {type(exc).__name__})", stop=True)
    if isinstance(exc, NoCredentialsError):
        return fail(subject, f"{action}: no credentials", stop=True)
    return fail(subject, f"{action}: {describe(exc)}", stop=True)


# -- config -------------------------------------------------------------------------------------


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


def unchecked_or_failure(subject: str, action: str, exc: BaseException, what: str) -> Result:
    """For a read that the hosts' policy need not grant: denied, what is left unchecked (a
    WARN); any other error is a failure()."""
    if is_access_denied(exc):
        return warn(subject, f"{what} not checked: {action} denied")
    return failure(subject, action, exc)


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


# -- the queue ----------------------------------------------------------------------------------


def queue_checks(sqs: Any, config: Config, name: str) -> Iterator[Result]:
    """The queue, its retention and its dead-letter queue."""
    subject = f"queue {name}"
    try:
        url = resolve_queue_url(sqs, name, config.account.id)
    except ResourceMissingError:
        yield fail(
            subject,
            f"not found in account {config.account.id}, region {config.account.region} "
            "(check its name in [sqs] or [[queues]], [account] id and region)",
            stop=True,
        )
        return
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, "sqs:GetQueueUrl", exc)
        return
    yield ok(subject, url)
    try:
        attributes = queue_attributes(sqs, url)
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, "sqs:GetQueueAttributes", exc)
        return
    yield check_retention(subject, attributes)
    yield from check_redrive(sqs, subject, attributes)


def queue_attributes(sqs: Any, url: str) -> dict[str, str]:
    response = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return dict(response["Attributes"])


def check_retention(subject: str, attributes: Mapping[str, str]) -> Result:
    retention = int(attributes["MessageRetentionPeriod"])
    text = f"retention {format_span(retention)}"
    if retention < MIN_RETENTION_SECONDS:
        return warn(
            subject,
            f"{text}, under {format_span(MIN_RETENTION_SECONDS)}: jobs that wait out an outage "
            "of every host are deleted unrun by the time anyone looks",
        )
    return ok(subject, text)


def check_redrive(sqs: Any, subject: str, attributes: Mapping[str, str]) -> Iterator[Result]:
    """The RedrivePolicy: present, naming a queue that exists, with room for a few receives."""
    if not attributes.get("RedrivePolicy"):
        yield warn(
            subject,
            "no RedrivePolicy: malformed messages are logged and dropped, and a message that "
            "keeps coming back cycles until its retention ends",
        )
        return
    policy = json.loads(attributes["RedrivePolicy"])
    arn = str(policy.get("deadLetterTargetArn", ""))
    count = int(policy.get("maxReceiveCount", 0))
    try:
        dlq_url = dead_letter_queue_url(sqs, arn)
    except ResourceMissingError as exc:
        yield fail(subject, str(exc))
        return
    except (BotoCoreError, ClientError) as exc:
        yield failure(subject, f"sqs:GetQueueUrl of the dead-letter queue {arn}", exc)
        return
    dlq_name = arn.rsplit(":", 1)[-1]
    text = f"dead-letter queue {dlq_name} after {count} receives"
    if count < MIN_MAX_RECEIVE_COUNT:
        yield warn(
            subject,
            f"{text}: a job given back by a stopping daemon, or delivered again after a crash, "
            f"may be dead-lettered unrun (allow at least {MIN_MAX_RECEIVE_COUNT})",
        )
    else:
        yield ok(subject, text)
    yield check_dlq_retention(sqs, dlq_name, dlq_url, attributes)


def check_dlq_retention(
    sqs: Any, name: str, url: str, source_attributes: Mapping[str, str]
) -> Result:
    """A standard queue's message keeps its first enqueue time in the DLQ: a DLQ retention
    shorter than the queue's can drop a dead-lettered message at once. A FIFO queue's restarts."""
    subject = f"dead-letter queue {name}"
    source_retention = int(source_attributes["MessageRetentionPeriod"])
    fifo = source_attributes.get("FifoQueue") == "true"
    try:
        retention = int(queue_attributes(sqs, url)["MessageRetentionPeriod"])
    except (BotoCoreError, ClientError) as exc:
        # The hosts' policy may grant no reads of the DLQ: the daemon only sends to it.
        return unchecked_or_failure(subject, "sqs:GetQueueAttributes", exc, "retention")
    text = f"retention {format_span(retention)}"
    if retention < source_retention and not fifo:
        return warn(
            subject,
            f"{text}, shorter than the queue's {format_span(source_retention)}: a message SQS "
            "moves there keeps its first enqueue time and may expire at once",
        )
    return ok(subject, text)


# -- the table ----------------------------------------------------------------------------------


def table_checks(dynamodb: Any, config: Config) -> Iterator[Result]:
    """The table's keys, index and TTL, then each write the daemon makes, on a probe item."""
    table = config.lock.table
    subject = f"table {table}"
    try:
        description = dynamodb.describe_table(TableName=table)["Table"]
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            yield fail(subject, "not found (check [lock] table or --lock-table, and the region)")
            return
        if not is_access_denied(exc):
            yield failure(subject, "dynamodb:DescribeTable", exc)
            return
        # The hosts' policy does not grant DescribeTable: the daemon's own start-up read tells
        # a missing table and wrong keys apart, but not the index and the TTL.
        yield warn(
            subject, "keys by a read only, index and TTL not checked: dynamodb:DescribeTable denied"
        )
        keys = check_keys_by_reading(dynamodb, table)
        yield keys
        if keys.level is Level.FAIL:
            return
    except BotoCoreError as exc:
        yield failure(subject, "dynamodb:DescribeTable", exc)
        return
    else:
        keys = check_keys(subject, description)
        yield keys
        if keys.level is Level.FAIL:
            return
        yield check_index(subject, description, config)
        yield check_ttl(dynamodb, table)
    yield from check_writes(dynamodb, table)


def check_keys(subject: str, description: Mapping[str, Any]) -> Result:
    types = {a["AttributeName"]: a["AttributeType"] for a in description["AttributeDefinitions"]}
    keys = {k["KeyType"]: k["AttributeName"] for k in description["KeySchema"]}
    found = ", ".join(
        f"{kind.lower()} key {name} ({types.get(name, '?')})" for kind, name in sorted(keys.items())
    )
    if (
        keys != {"HASH": "Id", "RANGE": "Type"}
        or types.get("Id") != "S"
        or types.get("Type") != "S"
    ):
        return fail(
            subject,
            f"has {found}: sqsjkr needs hash key Id and range key Type, both strings (S)",
        )
    return ok(subject, found)


def check_keys_by_reading(dynamodb: Any, table: str) -> Result:
    subject = f"table {table}"
    try:
        check_table(dynamodb, table)
    except ResourceMissingError as exc:
        return fail(subject, str(exc))
    except (BotoCoreError, ClientError) as exc:
        return failure(subject, "dynamodb:GetItem", exc)
    return ok(subject, "hash key Id and range key Type (by dynamodb:GetItem)")


def check_index(subject: str, description: Mapping[str, Any], config: Config) -> Result:
    indexes = {i["IndexName"]: i for i in description.get("GlobalSecondaryIndexes") or []}
    if TYPE_INDEX in indexes:
        keys = [k["AttributeName"] for k in indexes[TYPE_INDEX]["KeySchema"]]
        if keys == ["Type", TTL_ATTRIBUTE]:
            return ok(subject, f"index {TYPE_INDEX}")
        return warn(
            subject,
            f"index {TYPE_INDEX} has keys {', '.join(keys)}, not Type and {TTL_ATTRIBUTE}",
        )
    if config.history.backend != "dynamodb":
        return ok(subject, f"no index {TYPE_INDEX} (needed only by the history)")
    return warn(
        subject,
        f"no index {TYPE_INDEX} (hash key Type, range key {TTL_ATTRIBUTE}): "
        "`sqsjkr status` needs it, and so does a Go daemon sharing the table",
    )


def check_ttl(dynamodb: Any, table: str) -> Result:
    subject = f"table {table}"
    try:
        response = dynamodb.describe_time_to_live(TableName=table)
    except (BotoCoreError, ClientError) as exc:
        return unchecked_or_failure(subject, "dynamodb:DescribeTimeToLive", exc, "TTL")
    ttl = response.get("TimeToLiveDescription", {})
    status, attribute = ttl.get("TimeToLiveStatus"), ttl.get("AttributeName")
    if status in ("ENABLED", "ENABLING") and attribute == TTL_ATTRIBUTE:
        return ok(subject, f"TTL on {TTL_ATTRIBUTE}")
    if status in ("ENABLED", "ENABLING"):
        why = f"TTL is on {attribute}, not {TTL_ATTRIBUTE}"
    else:
        why = "TTL is off"
    return warn(
        subject,
        f"{why}: dedupe records, released locks and run records pile up (aws dynamodb "
        f"update-time-to-live --table-name {table} --time-to-live-specification "
        f"Enabled=true,AttributeName={TTL_ATTRIBUTE})",
    )


# -- the daemon's writes ------------------------------------------------------------------------


def check_writes(dynamodb: Any, table: str) -> Iterator[Result]:
    """Each DynamoDB call the daemon makes, on a probe item of its own key that nothing reads.

    Every write after the first is conditional on the item existing, so were the first denied,
    they change nothing and their failed condition still shows that they were allowed.
    """
    subject = f"table {table}"
    key = {"Id": {"S": f"sqsjkr-check-probe-{secrets.token_hex(6)}"}, "Type": {"S": "probe"}}
    now = time.time()
    exists = {"ConditionExpression": "attribute_exists(Id)"}
    touch = {
        "Key": key,
        "UpdateExpression": "SET Checked = :now",
        "ExpressionAttributeValues": {":now": {"N": f"{now:.3f}"}},
        **exists,
    }
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("GetItem", lambda: dynamodb.get_item(TableName=table, Key=key, ConsistentRead=True)),
        (
            "Query",  # as a concurrency group's slots are read
            lambda: dynamodb.query(
                TableName=table,
                KeyConditionExpression="Id = :id",
                ExpressionAttributeValues={":id": key["Id"]},
                ConsistentRead=True,
                Limit=1,
            ),
        ),
        (
            "PutItem",
            lambda: dynamodb.put_item(
                TableName=table,
                Item={**key, TTL_ATTRIBUTE: {"N": str(int(now) + PROBE_TTL_SECONDS)}},
                ConditionExpression="attribute_not_exists(Id)",
            ),
        ),
        ("UpdateItem", lambda: dynamodb.update_item(TableName=table, **touch)),
        (
            "TransactWriteItems",
            lambda: dynamodb.transact_write_items(
                TransactItems=[{"Update": {"TableName": table, **touch}}]
            ),
        ),
        ("DeleteItem", lambda: dynamodb.delete_item(TableName=table, Key=key, **exists)),
    ]
    created = stopped = False
    for name, call in calls:
        # After a failure that leaves the rest pointless, only a probe item made is cleaned up.
        if stopped and not (name == "DeleteItem" and created):
            continue
        result = exercise(subject, name, call)
        created = created or (name == "PutItem" and result.level is Level.OK)
        if name == "DeleteItem" and created and result.level is not Level.OK:
            result = fail(
                subject,
                f"{result.text}; probe item {key['Id']['S']} is left in the table "
                f"(its {TTL_ATTRIBUTE} lets the TTL remove it)",
                stop=result.stop,
            )
        yield result
        stopped = stopped or result.stop


def exercise(subject: str, name: str, call: Callable[[], Any]) -> Result:
    """OK when the call is allowed: it succeeds, or fails only its condition."""
    action = f"dynamodb:{name}"
    try:
        call()
    except ClientError as exc:
        code = error_code(exc)
        reasons = exc.response.get("CancellationReasons") or []
        failed_condition = code == "ConditionalCheckFailedException" or (
            code == "TransactionCanceledException"
            and all(r.get("Code") in ("ConditionalCheckFailed", "None") for r in reasons)
        )
        if not failed_condition:
            return failure(subject, action, exc)
    except BotoCoreError as exc:
        return failure(subject, action, exc)
    return ok(subject, f"{action} allowed")


# -- the command --------------------------------------------------------------------------------


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


def summary(results: list[Result]) -> str:
    counts = {level: sum(r.level is level for r in results) for level in Level}
    return ", ".join(f"{counts[level]} {level.value}" for level in Level)


@click.command()
@conf_option
@lock_table_option
@profile_option
@region_option
def check(conf: str, lock_table: str | None, profile: str | None, region: str | None) -> int:
    """Preflight for a deploy: config, credentials, queue, table and the daemon's permissions.

    One line per check, OK, WARN or FAIL; exit 0 with no FAIL, 1 with any, 2 for a bad config.
    """
    results: list[Result] = []

    def show(result: Result) -> None:
        results.append(result)
        click.echo(result.line())

    with config_warnings() as warnings:
        try:
            config = load(conf, Overrides(lock_table=lock_table, profile=profile, region=region))
        except UsageFailure as exc:
            show(fail("config", exc.format_message()))
            click.echo(summary(results))
            return 2
    show(ok("config", conf))
    for message in warnings:
        show(warn("config", message))
    for result in run_checks(config):
        show(result)
    click.echo(summary(results))
    return 1 if any(r.level is Level.FAIL for r in results) else 0
