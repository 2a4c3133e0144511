"""The preflight's checks of the lock table: its keys, index and TTL, then each write the daemon
makes, on a probe item of its own.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import check_table, error_code
from sqsjkr.contract.config import Config
from sqsjkr.errors import ResourceMissingError
from sqsjkr.fleet.preflight_results import (
    Level,
    Result,
    fail,
    failure,
    is_access_denied,
    ok,
    unchecked_or_failure,
    warn,
)

#: How long a probe item left behind (its DeleteItem denied) lives before the TTL may take it.
PROBE_TTL_SECONDS = 3600


TYPE_INDEX = "TypeExpiredIndex"


TTL_ATTRIBUTE = "Expired"


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
        (  # as catch-up reads which firings have a claim
            "BatchGetItem",
            lambda: dynamodb.batch_get_item(RequestItems={table: {"Keys": [key]}}),
        ),
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
