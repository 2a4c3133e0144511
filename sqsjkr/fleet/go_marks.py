"""When Go daemons on the fleet's table took messages, from their marks: throttle items that name
neither an owner nor a firing (a sqsjkr daemon's claims and marks always do), for the faces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.dedupe import CLAIMED_AS, HOLDER, THROTTLE_TYPE
from sqsjkr.backends.index import TYPE_INDEX, batch_get
from sqsjkr.backends.sqs import queue_settings, resolve_queue_url
from sqsjkr.errors import SqsjkrError
from sqsjkr.fleet.history import Store

#: A Go daemon marks a message as it starts its job, moments after it received it: a mark this
#: long after a step's message was sent may be that message's. A Go daemon whose workers are all
#: busy takes it later, and is not seen.
TAKEN_WITHIN = 300.0
#: A mark's time is known to the second (its Expired is whole seconds).
_SLACK = 2.0
#: Attributes only sqsjkr daemons write on a throttle item: a mark with none is a Go daemon's.
_PORTS_OWN = frozenset({"Owner", CLAIMED_AS, HOLDER, "LeaseUntil", "RetryAt", "Attempts"})


def is_go_mark(item: Mapping[str, Any]) -> bool:
    """Whether a throttle item is a Go daemon's mark of a message it took: {Id, Type, Expired}
    alone (a sqsjkr daemon's claim names its owner, its mark the firing it claimed)."""
    return "Expired" in item and not _PORTS_OWN & item.keys()


def retentions(store: Store) -> set[int]:
    """The retention period of each of the config's queues (a Go daemon's mark expires that
    long after it took a message): a GetQueueUrl and a GetQueueAttributes each."""
    sqs = store.service_client("sqs")
    found = set()
    for queue in store.config.all_queues():
        url = resolve_queue_url(sqs, queue.name, store.config.account.id)
        found.add(queue_settings(sqs, url).retention_seconds)
    return found


def go_takes_after(store: Store, moments: Iterable[float]) -> dict[float, float]:
    """For each moment (a step's message sent), the first time a Go daemon took a message of
    the fleet's queues within TAKEN_WITHIN after it, when one did; {} when the queues or the
    marks cannot be read (this is what is known, never a reason to fail a face)."""
    wanted = sorted(set(moments))
    if not wanted:
        return {}
    try:
        with store.reading():
            kept = retentions(store)
            return _first_takes(store, wanted, kept)
    except (BotoCoreError, ClientError, SqsjkrError):
        return {}


def _first_takes(store: Store, moments: Sequence[float], kept: set[int]) -> dict[float, float]:
    found: dict[float, float] = {}
    for moment in moments:
        taken: list[float] = []
        for retention in kept:
            low = int(moment - _SLACK) + retention
            high = int(moment + TAKEN_WITHIN) + retention
            keys = _keys_between(store, low, high)
            items = batch_get(store.client, store.table, keys) if keys else []
            taken += [float(i["Expired"]["N"]) - retention for i in items if is_go_mark(i)]
        if taken:
            found[moment] = min(taken)
    return found


def _keys_between(store: Store, low: int, high: int) -> list[dict[str, Any]]:
    """The keys of the throttle items whose Expired is within [low, high] (the index's Query)."""
    request: dict[str, Any] = {
        "TableName": store.table,
        "IndexName": TYPE_INDEX,
        "KeyConditionExpression": "#type = :type AND #expired BETWEEN :low AND :high",
        "ExpressionAttributeNames": {"#type": "Type", "#expired": "Expired"},
        "ExpressionAttributeValues": {
            ":type": {"S": THROTTLE_TYPE},
            ":low": {"N": str(low)},
            ":high": {"N": str(high)},
        },
    }
    keys: list[dict[str, Any]] = []
    while True:
        answer = store.client.query(**request)
        keys += [{"Id": k["Id"], "Type": k["Type"]} for k in answer["Items"]]
        if "LastEvaluatedKey" not in answer:
            return keys
        request["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
