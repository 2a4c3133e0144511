"""How the dashboard shows what came from messages and commands: secrets masked, job environments
left out, ANSI colour codes stripped from output; and the times and spans of its pages.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

from sqsjkr.commands.history import ended_how, format_duration, format_span, local_time

#: Parts of a key whose value is masked wherever a message is shown.
SECRET_WORDS = frozenset(
    [
        "password",
        "passwd",
        "pwd",
        "pass",
        "secret",
        "token",
        "key",
        "apikey",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "session",
        "private",
        "signature",
    ]
)
#: A job's own fields whose names look secret but are not.
NOT_SECRET = frozenset({"concurrency_key", "lock_id", "event_id"})
#: A job's environment: never shown, whatever its keys.
ENVIRONMENT_KEYS = frozenset({"env", "envs"})
MASK = "••••••"

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and other escapes.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]")
# Control characters but newline and tab: what is left after the sequences are gone.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def plain_output(text: str) -> str:
    """Output as text for a page: ANSI colour codes and other control characters stripped (the
    template's autoescaping does the HTML)."""
    return _CONTROL.sub("", _ANSI.sub("", text.replace("\r\n", "\n")))


def secret_key(key: str) -> bool:
    """Whether a key's value may be a secret: one of its words (snake, kebab or camel case) is."""
    if key in NOT_SECRET:
        return False
    words = {w.lower() for w in _WORD.findall(key)}
    return bool(words & SECRET_WORDS) or any(w in key.lower() for w in ("password", "secret"))


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


def message_text(body: str) -> str:
    """A message's body as a page shows it: JSON masked and indented; other text left out but
    for its length, since it may hold anything."""
    try:
        data = json.loads(body)
    except ValueError:
        return f"(not JSON: {len(body)} characters, not shown)"
    return json.dumps(masked(data), indent=2, ensure_ascii=False)


def ago(then: float | None, now: float | None = None) -> str:
    if then is None:
        return "never"
    return f"{format_span((now or time.time()) - then)} ago"


FILTERS = {
    "moment": lambda t: "-" if t is None else local_time(t),
    "ago": ago,
    "span": format_span,
    "duration": format_duration,
    "ended_how": ended_how,
    "plain": plain_output,
}
