"""TransactWriteItems on local mode's endpoint (sqsjkr/local/transactions.py) over HTTP: moto's errors
and cancellation reasons, nothing written by a cancelled transaction, and no 500 under load.

Each server runs in a process of its own (moto_servers.py): the fair transaction is installed for
a whole process, as in the suite's shared server (conftest.py), and the stock one stays moto's own.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from sqsjkr.local.endpoint import create_table
from tests.moto_servers import serve


@pytest.fixture(scope="module")
def fair_endpoint() -> Iterator[str]:
    yield from serve("fair")


@pytest.fixture(scope="module", params=["fair", "stock"])
def any_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both servers: the fair transaction answers as moto's own does."""
    yield from serve(request.param)


def dynamodb(endpoint: str) -> Any:
    """A client that does not retry: a 500 is a failure, not something to try again."""
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )


def new_table(client: Any) -> str:
    name = f"fair-{uuid.uuid4().hex[:8]}"
    create_table(client, name)
    return name


def key(id_: str) -> dict[str, Any]:
    return {"Id": {"S": id_}, "Type": {"S": "t"}}


def put(table: str, id_: str, condition: str | None = None, **extra: Any) -> dict[str, Any]:
    operation: dict[str, Any] = {"TableName": table, "Item": {**key(id_), "N": {"N": "1"}}}
    if condition:
        operation["ConditionExpression"] = condition
    return {"Put": {**operation, **extra}}


def items(client: Any, table: str) -> dict[str, dict[str, Any]]:
    scanned = client.scan(TableName=table, ConsistentRead=True)["Items"]
    return {item["Id"]["S"]: item for item in scanned}


def cancelled(client: Any, transact_items: list[dict[str, Any]]) -> ClientError:
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=transact_items)
    return raised.value


def test_a_failed_third_condition_writes_nothing_and_gives_the_reasons_in_order(
    any_endpoint: str,
) -> None:
    client = dynamodb(any_endpoint)
    table = new_table(client)
    client.put_item(TableName=table, Item={**key("taken"), "N": {"N": "7"}})
    error = cancelled(
        client,
        [
            put(table, "a", "attribute_not_exists(Id)"),
            {
                "Update": {
                    "TableName": table,
                    "Key": key("b"),
                    "UpdateExpression": "SET N = :n",
                    "ExpressionAttributeValues": {":n": {"N": "2"}},
                }
            },
            put(table, "taken", "attribute_not_exists(Id)"),
            {"Delete": {"TableName": table, "Key": key("other")}},
        ],
    )
    assert error.response["Error"]["Code"] == "TransactionCanceledException"
    reasons = [reason["Code"] for reason in error.response["CancellationReasons"]]
    assert reasons == ["None", "None", "ConditionalCheckFailed", "None"]
    assert items(client, table) == {"taken": {**key("taken"), "N": {"N": "7"}}}


def test_put_update_delete_and_condition_check_all_apply_when_every_condition_holds(
    any_endpoint: str,
) -> None:
    client = dynamodb(any_endpoint)
    table = new_table(client)
    for id_ in ("to-update", "to-delete", "checked"):
        client.put_item(TableName=table, Item={**key(id_), "N": {"N": "1"}})
    client.transact_write_items(
        TransactItems=[
            put(table, "new", "attribute_not_exists(Id)"),
            {
                "Update": {
                    "TableName": table,
                    "Key": key("to-update"),
                    "UpdateExpression": "SET N = N + :one",
                    "ConditionExpression": "N = :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            {
                "Delete": {
                    "TableName": table,
                    "Key": key("to-delete"),
                    "ConditionExpression": "N = :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": key("checked"),
                    "ConditionExpression": "attribute_exists(Id)",
                }
            },
        ]
    )
    now = items(client, table)
    assert sorted(now) == ["checked", "new", "to-update"]
    assert now["to-update"]["N"] == {"N": "2"}


def test_a_failed_condition_check_cancels_the_writes_beside_it(any_endpoint: str) -> None:
    client = dynamodb(any_endpoint)
    table = new_table(client)
    error = cancelled(
        client,
        [
            put(table, "a"),
            {
                "ConditionCheck": {
                    "TableName": table,
                    "Key": key("absent"),
                    "ConditionExpression": "attribute_exists(Id)",
                }
            },
        ],
    )
    reasons = [reason["Code"] for reason in error.response["CancellationReasons"]]
    assert reasons == ["None", "ConditionalCheckFailed"]
    assert items(client, table) == {}


def test_all_old_on_a_failed_condition_returns_the_item_in_its_reason(any_endpoint: str) -> None:
    client = dynamodb(any_endpoint)
    table = new_table(client)
    client.put_item(TableName=table, Item={**key("taken"), "N": {"N": "7"}})
    error = cancelled(
        client,
        [
            put(table, "a"),
            put(
                table,
                "taken",
                "attribute_not_exists(Id)",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            ),
        ],
    )
    first, second = error.response["CancellationReasons"]
    assert first == {"Code": "None"}
    assert second["Code"] == "ConditionalCheckFailed"
    assert second["Item"] == {**key("taken"), "N": {"N": "7"}}


def test_two_operations_on_one_item_are_refused_whole(any_endpoint: str) -> None:
    client = dynamodb(any_endpoint)
    table = new_table(client)
    error = cancelled(client, [put(table, "a"), {"Delete": {"TableName": table, "Key": key("a")}}])
    assert error.response["Error"]["Code"] == "ValidationException"
    assert "multiple operations on one item" in error.response["Error"]["Message"]
    assert items(client, table) == {}


def test_an_update_moto_refuses_while_writing_puts_back_the_writes_before_it(
    any_endpoint: str,
) -> None:
    """moto checks an update's operand types only as it applies it, after the conditions."""
    client = dynamodb(any_endpoint)
    table = new_table(client)
    client.put_item(TableName=table, Item={**key("text"), "N": {"S": "not a number"}})
    client.put_item(TableName=table, Item={**key("kept"), "N": {"N": "5"}})
    error = cancelled(
        client,
        [
            put(table, "a"),
            {
                "Update": {
                    "TableName": table,
                    "Key": key("kept"),
                    "UpdateExpression": "SET N = N + :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
            {
                "Update": {
                    "TableName": table,
                    "Key": key("text"),
                    "UpdateExpression": "SET N = N + :one",
                    "ExpressionAttributeValues": {":one": {"N": "1"}},
                }
            },
        ],
    )
    assert error.response["Error"]["Code"] == "ValidationException"
    now = items(client, table)
    assert sorted(now) == ["kept", "text"]
    assert now["kept"]["N"] == {"N": "5"}


def test_transactions_gets_and_scans_racing_from_threads_never_get_a_500(
    fair_endpoint: str,
) -> None:
    """The race of moto's own server: a GetItem of a missing key adds to the table's dict while
    a Scan or a transaction's copy iterates it (HTTP 500 "dictionary changed size")."""
    client = dynamodb(fair_endpoint)
    table = new_table(client)
    errors: list[str] = []
    stop = threading.Event()

    def record(call: Any, **request: Any) -> None:
        try:
            call(**request)
        except ClientError as exc:
            if exc.response["ResponseMetadata"]["HTTPStatusCode"] >= 500:
                errors.append(str(exc))

    def writer(n: int) -> None:
        own = dynamodb(fair_endpoint)
        for i in range(40):
            record(
                own.transact_write_items,
                TransactItems=[
                    put(table, f"w{n}-{i}-{j}", "attribute_not_exists(Id)") for j in range(3)
                ],
            )

    def reader(n: int) -> None:
        own = dynamodb(fair_endpoint)
        i = 0
        while not stop.is_set():
            record(own.get_item, TableName=table, Key=key(f"missing-{n}-{i}"))
            record(own.scan, TableName=table, Select="COUNT")
            i += 1

    writers = [threading.Thread(target=writer, args=(n,)) for n in range(3)]
    readers = [threading.Thread(target=reader, args=(n,)) for n in range(3)]
    for thread in writers + readers:
        thread.start()
    for thread in writers:
        thread.join()
    stop.set()
    for thread in readers:
        thread.join()
    assert errors == []
    assert len(items(client, table)) == 3 * 40 * 3
