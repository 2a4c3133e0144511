"""The one JSON decoder for what comes from a queue (a job's body, a dead letter): nesting bounded
by a scan that does not recurse, so that no body can exhaust Python's stack in any reader.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqsjkr.contract.limits import MAX_JSON_DEPTH

# A JSON string, escapes and all (unrolled, so it matches in linear time): brackets inside
# one do not nest.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonError(ValueError):
    """Text that is not JSON sqsjkr reads: not JSON at all, a NaN or Infinity, or nested
    deeper than MAX_JSON_DEPTH. Its message says which, and where, after the text's name:
    "body " + str(error) reads "body is not JSON: Expecting value at line 1 column 1"."""


def too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether text's arrays and objects nest deeper than limit, counted without recursion (a
    body of brackets is as deep as it is long): brackets inside strings do not count."""
    if text.count("[") + text.count("{") <= limit:
        return False  # it opens no more than that: no scan (every job's case)
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = 0
    for bracket in brackets:
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            return True
    return False


def loads(text: str) -> Any:
    """text's JSON value; JsonError when it is none, holds NaN or Infinity, or nests deeper
    than MAX_JSON_DEPTH (which every reader of it may then walk by recursion)."""
    if too_deep(text):
        raise JsonError(f"nests deeper than {MAX_JSON_DEPTH} arrays and objects")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise JsonError(
            f"is not JSON: {error.msg} at line {error.lineno} column {error.colno}"
        ) from None
    except ValueError as error:  # a NaN, an integer of more digits than Python converts
        raise JsonError(f"is not JSON: {error}") from None


def loads_object(text: str) -> dict[str, Any]:
    """text's JSON object; JsonError when it is not one."""
    value = loads(text)
    if not isinstance(value, dict):
        raise JsonError("is not a JSON object")
    return value


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON value")
