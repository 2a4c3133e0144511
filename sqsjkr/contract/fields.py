"""Checking the fields of a JSON message: each error names the field and says what it must be.

Shared by the job (job.py) and its HTTP call (http_call.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from sqsjkr.contract import safe_json
from sqsjkr.contract.duration import Duration, duration_value
from sqsjkr.contract.limits import MAX_KEY_BYTES, MAX_SHOWN
from sqsjkr.errors import DurationError, InvalidFieldError, InvalidJobError, quote, shorten


def load_object(body: str | bytes) -> dict[str, object]:
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8")
        except UnicodeDecodeError as error:
            raise InvalidJobError(
                f"body is not valid UTF-8: {error.reason} at byte offset {error.start}"
            ) from None
    try:
        data = safe_json.loads(body)
    except safe_json.JsonError as error:
        raise InvalidJobError(f"body {error}") from None
    if not isinstance(data, dict):
        raise InvalidJobError(f"body must be a JSON object, got {json_type(data)}")
    return data


def optional_text(fields: Mapping[str, object], name: str) -> str:
    value = fields.get(name)
    return "" if value is None else text(name, value)


def flag(fields: Mapping[str, object], name: str) -> bool:
    value = fields.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise field_error(name, f"must be a boolean, got {json_type(value)}")
    return value


def duration_field(
    fields: Mapping[str, object], name: str, *, path: str | None = None
) -> Duration | None:
    """A duration field (int seconds or Go syntax); None when absent or zero. path names it in
    errors when it sits inside another field ("http.timeout")."""
    value = fields.get(name)
    if value is None:
        return None
    try:
        duration = duration_value(value)
    except DurationError as error:
        reason = str(error)
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            reason += f", got {json_type(value)}"
            if isinstance(value, float):
                # "got number" alone would puzzle whoever wrote 90.0.
                reason += f" {value!r}"
        raise field_error(path or name, reason) from None
    return duration if duration.ns else None


def integer(fields: Mapping[str, object], name: str, default: int, low: int, high: int) -> int:
    """An integer field between low and high."""
    value = fields.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise field_error(name, f"must be an integer, got {json_type(value)}")
    if not low <= value <= high:
        got = shorten(str(value), MAX_SHOWN)
        raise field_error(name, f"must be between {low} and {high}, got {got}")
    return value


def text(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise field_error(name, f"must be a string, got {json_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        # The JSON escape "\ud800" decodes to a lone surrogate, which no command or AWS call takes.
        surrogate = value[error.start].encode("utf-8", "backslashreplace").decode("ascii")
        raise field_error(name, f"must not contain an unpaired surrogate ({surrogate})") from None
    return value


def reject_nul(name: str, value: str) -> None:
    # The command line and environment of a process are NUL-terminated C strings.
    if "\0" in value:
        raise field_error(name, "must not contain a NUL character")


def key_text(fields: Mapping[str, object], name: str) -> str:
    """A text field that becomes a DynamoDB key and reaches the job's environment ("" when
    absent): refused here if too long or holding a NUL, rather than failing at every delivery."""
    value = optional_text(fields, name)
    size = len(value.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise field_error(
            name, f"must be at most {MAX_KEY_BYTES} bytes, got {size} (DynamoDB's limit on a key)"
        )
    reject_nul(name, value)
    return value


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def field_error(name: str, reason: str) -> InvalidFieldError:
    # A name may come from the message too (an env variable's, a header's).
    return InvalidFieldError(f"field {quote(name, MAX_SHOWN)}: {reason}", name, reason)
