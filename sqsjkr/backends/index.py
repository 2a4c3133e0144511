"""Every item of one Type, listed through the table's TypeExpiredIndex: no Scan of the table.

The index is KEYS_ONLY by default, so the items themselves are read by key, in batches.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from sqsjkr.errors import StoreError, quote

T = TypeVar("T")

#: The index the Go daemon's table has (hash Type, range Expired). Only items with an Expired
#: are in it.
TYPE_INDEX = "TypeExpiredIndex"
#: BatchGetItem reads at most this many items a call.
BATCH_GET_LIMIT = 100


def items_of_type(
    client: Any, table: str, type_: str, *, expired_from: int | None = None
) -> list[dict[str, Any]]:
    """Every item of the table whose Type is type_ (and that has an Expired, at least
    expired_from when given), in no order."""
    keys = [
        {"Id": key["Id"], "Type": key["Type"]}
        for key in _keys_of_type(client, table, type_, expired_from)
    ]
    return batch_get(client, table, keys)


def keys_of_type(
    client: Any, table: str, type_: str, *, expired_from: int | None = None
) -> list[dict[str, Any]]:
    """The keys (Id, Type, Expired) of items_of_type's items, the items themselves not read."""
    return list(_keys_of_type(client, table, type_, expired_from))


def batch_get(
    client: Any, table: str, keys: list[dict[str, Any]], projection: str | None = None
) -> list[dict[str, Any]]:
    """The items of these keys that exist (only the projection's attributes, when given), read
    BATCH_GET_LIMIT a call, unprocessed keys asked again; in no order."""
    items: list[dict[str, Any]] = []
    for i in range(0, len(keys), BATCH_GET_LIMIT):
        request: dict[str, Any] = {"Keys": keys[i : i + BATCH_GET_LIMIT]}
        if projection is not None:
            request["ProjectionExpression"] = projection
        pending: dict[str, Any] = {table: request}
        while pending:
            response = client.batch_get_item(RequestItems=pending)
            items += response["Responses"].get(table, [])
            pending = response.get("UnprocessedKeys") or {}
    return items


def _keys_of_type(
    client: Any, table: str, type_: str, expired_from: int | None
) -> Iterator[dict[str, Any]]:
    request: dict[str, Any] = {
        "TableName": table,
        "IndexName": TYPE_INDEX,
        "KeyConditionExpression": "#type = :type",
        "ExpressionAttributeNames": {"#type": "Type"},
        "ExpressionAttributeValues": {":type": {"S": type_}},
    }
    if expired_from is not None:
        request["KeyConditionExpression"] += " AND #expired >= :from"
        request["ExpressionAttributeNames"]["#expired"] = "Expired"
        request["ExpressionAttributeValues"][":from"] = {"N": str(expired_from)}
    while True:
        response = client.query(**request)
        yield from response["Items"]
        if "LastEvaluatedKey" not in response:
            return
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def json_value(
    item: dict[str, Any], attribute: str, read: Callable[[dict[str, Any]], T], what: str
) -> T:
    """read() of the JSON object in an item's attribute; a damaged item is named (what: "the
    daemon item"), so that an operator can delete it."""
    try:
        return read(json.loads(item[attribute]["S"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            f"{what} {quote(item.get('Id', {}).get('S', '?'))} (Type "
            f"{item.get('Type', {}).get('S', '?')!r}) is damaged ({exc!r}); it expires on its "
            "own, or delete it"
        ) from exc
