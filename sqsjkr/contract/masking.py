"""What of a message may be shown: the one rule for secret-looking names, and a message body with
their values masked, its environment left out and its HTTP call named by method and origin.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqsjkr.contract import safe_json
from sqsjkr.contract.http_call import origin

#: Words of a key whose value is masked wherever a message is shown (dashboard, `dlq`).
SECRET_WORDS = frozenset(
    [
        "password",
        "passwd",
        "pwd",
        "pass",
        "passphrase",
        "secret",
        "token",
        "key",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "authentication",
        "bearer",
        "cookie",
        "session",
        "private",
        "signature",
        "dsn",
        "jwt",
    ]
)
#: Parts that mark a key secret even inside a longer word ("dbpassword", "mysecretvalue").
SECRET_PARTS = ("password", "secret", "passphrase", "token", "credential", "bearer")
#: A job's own fields whose names look secret but are not.
NOT_SECRET = frozenset({"concurrency_key", "lock_id", "event_id"})
#: A job's environment: never shown, whatever its keys.
ENVIRONMENT_KEYS = frozenset({"env", "envs"})
MASK = "••••••"

_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def secret_key(key: str) -> bool:
    """Whether a key's value may be a secret: one of its words (snake, kebab or camel case) is,
    or it holds one of SECRET_PARTS."""
    if key in NOT_SECRET:
        return False
    words = {w.lower() for w in _WORD.findall(key)}
    lowered = key.lower()
    return bool(words & SECRET_WORDS) or any(part in lowered for part in SECRET_PARTS)


def masked(value: Any) -> Any:
    """value with the values of secret-looking keys masked and job environments left out."""
    if isinstance(value, dict):
        shown: dict[str, Any] = {}
        for key, inner in value.items():
            if key in ENVIRONMENT_KEYS:
                count = len(inner) if isinstance(inner, dict) else 0
                shown[key] = f"({count} variable{'' if count == 1 else 's'}, not shown)"
            elif secret_key(str(key)):
                shown[key] = MASK
            else:
                shown[key] = masked(inner)
        return shown
    if isinstance(value, list):
        return [masked(inner) for inner in value]
    return value


def masked_call(call: dict[str, Any]) -> dict[str, Any]:
    """A message's "http" object as it may be shown: its URL by origin only (a path or query may
    hold a token, user info a password), every header's value and its body masked."""
    shown = masked(call)
    url = call.get("url")
    if isinstance(url, str):
        shown["url"] = f"{origin(url)} (path not shown)"
    headers = call.get("headers")
    if isinstance(headers, dict):
        shown["headers"] = {str(name): MASK for name in headers}
    if call.get("body") not in (None, ""):
        shown["body"] = MASK
    return shown


def masked_message(data: Any) -> Any:
    """A parsed message body with what may be secret masked (masked, and its call's masked_call)."""
    shown = masked(data)
    if isinstance(data, dict) and isinstance(data.get("http"), dict):
        shown["http"] = masked_call(data["http"])
    return shown


def shown_body(body: str, indent: int | None = 2) -> str | None:
    """A message body as it may be shown: JSON masked (indented, or on one line when indent is
    None); None when it is not JSON safe_json reads (or nests deeper than MAX_JSON_DEPTH), for
    the face to show as escaped text."""
    try:
        data = safe_json.loads(body)
    except safe_json.JsonError:
        return None
    return json.dumps(masked_message(data), indent=indent, ensure_ascii=False)
