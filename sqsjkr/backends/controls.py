"""The one item of the lock table that holds the fleet's controls: an attribute per pause and per
route, so that a daemon reads all of them with one GetItem per refresh.

pause.py and routes.py give the attributes their meaning; this module only reads and writes them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from botocore.exceptions import ClientError

from sqsjkr.backends.aws import conditional_write, raise_if_missing
from sqsjkr.errors import ControlsFull, StoreError

T = TypeVar("T")

#: The key of the item. Its name predates routes: the pauses were its only attributes. A
#: lock_id or event_id of the same name cannot collide with it: their items have other Types.
CONTROLS_ID = "sqsjkr:pauses"
CONTROLS_TYPE = "pause"
KEY = {"Id": {"S": CONTROLS_ID}, "Type": {"S": CONTROLS_TYPE}}
#: DynamoDB's largest item: its attributes' names and values, in bytes.
MAX_ITEM_BYTES = 400 * 1024


class ControlItem:
    """The item in one table. It has no Expired: a pause or a route until lifted must not be
    removed by the TTL. The Go daemon reads only "lock" and "throttle" items and never sees it."""

    def __init__(self, client: Any, table: str) -> None:
        self._client = client
        self._table = table

    def read_attributes(self) -> dict[str, Any]:
        """Every attribute of the item (none when there is no item), read consistently."""
        try:
            response = self._client.get_item(TableName=self._table, Key=KEY, ConsistentRead=True)
        except ClientError as exc:
            raise_if_missing(exc, self._table)
            raise
        return dict(response.get("Item") or {})

    def put_attribute(self, name: str, text: str) -> None:
        """Set one attribute to a string, creating the item if need be."""
        self.put_attributes({name: text})

    def put_attributes(self, texts: Mapping[str, str]) -> None:
        """Set attributes to strings, creating the item if need be: all of them or none.
        ControlsFull, and nothing written, when the item would grow past DynamoDB's largest;
        then one UpdateItem, which sets them all or fails whole."""
        if not texts:
            return
        # Checked first: an UpdateItem refused for its size is all-or-nothing on DynamoDB, but
        # not on every endpoint that speaks its API (moto's sets some of it).
        grown = {**self.read_attributes(), **{name: {"S": text} for name, text in texts.items()}}
        size = item_bytes({**KEY, **grown})
        if size > MAX_ITEM_BYTES:
            raise ControlsFull(
                f"the controls item would be {size} bytes, over DynamoDB's {MAX_ITEM_BYTES}: "
                f"nothing written (fewer events at once, shorter ids or reasons, or resume "
                "pauses and clear routes no longer needed)"
            )
        names = {f"#n{i}": name for i, name in enumerate(texts)}
        values = {f":v{i}": {"S": text} for i, text in enumerate(texts.values())}
        sets = ", ".join(f"#n{i} = :v{i}" for i in range(len(texts)))
        try:
            self._client.update_item(
                TableName=self._table,
                Key=KEY,
                UpdateExpression=f"SET {sets}",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            raise_if_missing(exc, self._table)
            raise

    def remove_attributes(self, names: Sequence[str]) -> dict[str, Any]:
        """Remove these attributes; those of them that were there, with their old values."""
        if not names:
            return {}
        placeholders = {f"#a{i}": name for i, name in enumerate(names)}
        # The condition keeps an UpdateItem from creating the item when it has nothing to remove.
        _, old = conditional_write(
            self._client.update_item,
            self._table,
            Key=KEY,
            UpdateExpression="REMOVE " + ", ".join(placeholders),
            ConditionExpression="attribute_exists(Id)",
            ExpressionAttributeNames=placeholders,
            ReturnValues="UPDATED_OLD",
        )
        return {name: value for name, value in old.items() if name in names}

    def remove_prefixed_attributes(self, prefix: str) -> dict[str, Any]:
        """Remove every attribute whose name starts with prefix (damaged ones too), as read now;
        the ones removed, with their old values. One written between the read and the removal
        stays."""
        names = sorted(name for name in self.read_attributes() if name.startswith(prefix))
        return self.remove_attributes(names)


def decode_attributes(
    item: dict[str, Any],
    prefix: str,
    build: Callable[[str, dict[str, Any]], T],
    *,
    strict: bool,
    remedy: str,
) -> list[T]:
    """Each attribute of the item named prefix + KEY, its JSON built into a value by
    build(KEY, data). When strict, a damaged one is named with its remedy, never skipped:
    skipping a pause or a route would run jobs where someone said they must not run."""
    found = []
    for name, value in item.items():
        if not name.startswith(prefix):
            continue
        try:
            found.append(build(name[len(prefix) :], json.loads(value["S"])))
        except (KeyError, TypeError, ValueError) as exc:
            if not strict:
                continue
            raise StoreError(
                f"the item {CONTROLS_ID!r} has a damaged attribute {name!r} ({exc!r}): {remedy}"
            ) from exc
    return found


def item_bytes(item: Mapping[str, Any]) -> int:
    """An item's size as DynamoDB counts it, for the string and number attributes this item
    holds (a number counted at its largest, 21 bytes); any other value by its JSON's length."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        if "S" in value:
            size += len(value["S"].encode())
        elif "N" in value:
            size += 21
        else:
            size += len(json.dumps(value))
    return size
