"""The HTTP API's cursors: where a page of a list ended (a position in the data, as the fleet
layer pages it), opaque to callers and bound to its route and filter, which a cursor must match.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from flask import request
from pydantic import BaseModel

from sqsjkr.api.problems import ApiProblem
from sqsjkr.fleet.paging import Position

#: What a query holds beside its filter: the page asked for, not which list.
_NOT_FILTER = frozenset({"cursor", "limit"})


def binding(query: BaseModel) -> str:
    """What this request's list is: its route and its filter (the path's ids and the query's
    values but the page's), digested. A cursor carries it, so that one given to another list
    (another route, event or filter) is refused rather than read as a position of this one."""
    shown = {
        "route": request.url_rule.rule if request.url_rule is not None else request.path,
        "path": request.view_args or {},
        "filter": query.model_dump(mode="json", exclude=set(_NOT_FILTER)),
    }
    text = json.dumps(shown, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def cursor_of(bound: str, position: Position) -> str:
    """The cursor of the page after position, in the list bound names."""
    # UTF-8, not \u escapes: a position of two long ids stays within Page.cursor's bound.
    text = json.dumps({"b": bound, "p": list(position)}, separators=(",", ":"), ensure_ascii=False)
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def position_of(bound: str, cursor: str | None) -> Position | None:
    """The position a cursor of bound's list carries (None: no cursor, the first page); 400
    bad-cursor naming cursor when it is no cursor of this API, or one of another list."""
    if not cursor:
        return None
    try:
        data: Any = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        data = None
    if not isinstance(data, dict) or set(data) != {"b", "p"} or not isinstance(data["p"], list):
        raise ApiProblem(400, "bad-cursor", "cursor: is not one a page of this API gave")
    if data["b"] != bound:
        raise ApiProblem(
            400,
            "bad-cursor",
            "cursor: was given by another list (another route, or other filters): "
            "a cursor goes back to the route and filters of the page that gave it",
        )
    return tuple(data["p"])
