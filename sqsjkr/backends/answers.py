"""Answers of an endpoint that cannot be read: refused as an AWS failure instead of read as empty.

botocore reads a JSON service's answer that is not JSON as an empty result: a listing of nothing, a write done.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import BotoCoreError

#: The protocols whose successful answers are a JSON document (or nothing at all).
JSON_PROTOCOLS = frozenset({"json", "rest-json"})


class UnreadableAnswer(BotoCoreError):
    """A successful answer whose body is not what its protocol says it is: not the service's own
    answer (a proxy's page, a wrong AWS_ENDPOINT_URL, a broken emulator)."""

    fmt = "{operation} got a {status} answer that is not JSON: {excerpt}"


def refuse_unreadable(http_response: Any, parsed: dict[str, Any], model: Any, **_: Any) -> None:
    """botocore's after-call hook: a successful answer that is not JSON fails the call.

    botocore reads such an answer as a result with nothing in it, so only an answer read as
    empty is parsed again here: a call that found something pays nothing for the check.
    """
    service = model.service_model
    if (
        len(parsed) > 1
        or service.resolved_protocol not in JSON_PROTOCOLS
        or model.has_streaming_output
        or not 200 <= http_response.status_code < 300
    ):
        return
    body = http_response.content
    if not body.strip():
        return
    try:
        json.loads(body)
    except ValueError:
        raise UnreadableAnswer(
            operation=f"{service.service_id.hyphenize()}:{model.name}",
            status=http_response.status_code,
            excerpt=repr(body[:60]),
        ) from None


def watch_answers(client: Any) -> Any:
    """client, with its unreadable answers refused (once, however often a shared client is
    watched)."""
    client.meta.events.register(
        "after-call", refuse_unreadable, unique_id="sqsjkr.refuse_unreadable"
    )
    return client
