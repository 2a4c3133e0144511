"""A job built from its fields (a command or an HTTP call, and its options) or read whole as a body,
checked with the daemon's own parser; RequestErrors name the CLI's options, as fleet/pause.py's do.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from sqsjkr.contract.job import build_body, parse_job
from sqsjkr.errors import InvalidJobError, RequestError
from sqsjkr.fleet.checks import unknown_fields


def key_values(option: str, values: Sequence[str]) -> dict[str, str]:
    """Repeated KEY=VALUE options (--env, --http-header) as a dict; the last of a key wins."""
    pairs = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise RequestError(f"{option} {item!r}: expected KEY=VALUE")
        pairs[key] = value
    return pairs


def duration_option(text: str | None) -> int | str | None:
    """A --life-time or --timeout as the message carries it: int seconds or Go syntax."""
    if text is None:
        return None
    # Past 20 digits it is out of range either way, and int() refuses past 4300: left as text,
    # the parser's error names the option.
    return int(text) if text.isdigit() and len(text) <= 20 else text


def read_body(value: str) -> str | bytes:
    """--body: the JSON itself, "-" for standard input, or "@PATH" for a file's contents.

    What is read stays bytes, so that the daemon's parser reports a body that is not UTF-8.
    """
    if value == "-":
        return sys.stdin.buffer.read()
    if value.startswith("@"):
        path = value[1:]
        if not path:
            raise RequestError("--body @: expected a file name after @ (--body @job.json)")
        try:
            return Path(path).read_bytes()
        except OSError as exc:
            raise RequestError(f"--body {value}: cannot read {path}: {exc.strerror}") from exc
    return value


def checked_body(value: str) -> tuple[str, list[str]]:
    """The --body message, checked with the daemon's own parser (InvalidJobError), and a warning
    for each field it ignores."""
    raw = read_body(value)
    # What the daemon would refuse is never sent.
    parse_job(raw, message_id="(not sent)", sent_at=0.0)
    body = raw.decode() if isinstance(raw, bytes) else raw
    return body, unknown_fields(body)


#: The options whose parameter name is not the option's own.
_OPTION_NAMES = {
    "envs": "--env",
    "http_headers": "--http-header",
    "success_statuses": "--success-status",
}


def _is_set(value: object) -> bool:
    # Not a truth test: --retries 0 and --concurrency-limit 0 are given all the same.
    return value is not None and value is not False and value != ()


@dataclass(frozen=True)
class JobFields:
    """A job as its fields give it (as the command line's options), before it becomes a message body."""

    command: str | None
    envs: tuple[str, ...]
    event_id: str | None
    lock_id: str | None
    life_time: str | None
    timeout: str | None
    abort_if_locked: bool
    disable_life_time_trigger: bool
    concurrency_key: str | None
    concurrency_limit: int | None
    retries: int | None
    retry_delay: str | None
    http_url: str | None
    http_method: str | None
    http_headers: tuple[str, ...]
    http_body: str | None
    http_timeout: str | None
    success_statuses: tuple[int, ...]

    def given(self) -> list[str]:
        """The options given, by their names on the command line."""
        return [
            _OPTION_NAMES.get(item.name, "--" + item.name.replace("_", "-"))
            for item in fields(self)
            if _is_set(getattr(self, item.name))
        ]

    def body(self) -> str:
        """The message body, checked with the daemon's parser: a RequestError for fields that do
        not go together, an InvalidJobError (naming the field) for one the parser refuses."""
        self._check_combinations()
        return build_body(
            self.command,
            envs=key_values("--env", self.envs),
            event_id=self.event_id,
            lock_id=self.lock_id,
            life_time=duration_option(self.life_time),
            timeout=duration_option(self.timeout),
            abort_if_locked=self.abort_if_locked,
            disable_life_time_trigger=self.disable_life_time_trigger,
            http=self._http(),
            concurrency_key=self.concurrency_key,
            concurrency_limit=self.concurrency_limit,
            retries=self.retries,
            retry_delay=duration_option(self.retry_delay),
        )

    def _check_combinations(self) -> None:
        given = self.given()
        if self.command is not None and self.http_url is not None:
            raise RequestError("give either --command or --http-url, not both")
        if self.http_url is None:
            for option in given:
                if option.startswith("--http-") or option == "--success-status":
                    raise RequestError(f"{option} needs --http-url")
        if self.command is None and self.http_url is None:
            raise RequestError("--command, --http-url or --body is required")
        if self.concurrency_limit is not None and not self.concurrency_key:
            raise RequestError("--concurrency-limit needs --concurrency-key")

    def _http(self) -> dict[str, object] | None:
        if self.http_url is None:
            return None
        call: dict[str, object] = {"url": self.http_url}
        if self.http_method is not None:
            call["method"] = self.http_method
        if self.http_headers:
            call["headers"] = key_values("--http-header", self.http_headers)
        if self.http_body is not None:
            call["body"] = self.http_body
        if self.http_timeout is not None:
            call["timeout"] = duration_option(self.http_timeout)
        if self.success_statuses:
            call["success_status"] = list(self.success_statuses)
        return call


#: The option that sets each message field (a dotted path inside "http"), for errors: whoever
#: used the options never saw the field names.
_FIELD_OPTIONS = {
    "command": "--command",
    "env": "--env",
    "envs": "--env",
    "event_id": "--event-id",
    "lock_id": "--lock-id",
    "life_time": "--life-time",
    "timeout": "--timeout",
    "abort_if_locked": "--abort-if-locked",
    "disable_life_time_trigger": "--disable-life-time-trigger",
    "concurrency_key": "--concurrency-key",
    "concurrency_limit": "--concurrency-limit",
    "retries": "--retries",
    "retry_delay": "--retry-delay",
    "http": "--http-url",
    "http.url": "--http-url",
    "http.method": "--http-method",
    "http.headers": "--http-header",
    "http.body": "--http-body",
    "http.timeout": "--http-timeout",
    "http.success_status": "--success-status",
}
#: How contract.fields.field_error starts its message: the field's name, JSON-quoted (and cut,
#: when long, to a prefix that still names its option).
_FIELD_ERROR = re.compile(r'field ("(?:[^"\\]|\\.)*")(?:\.\.\. \(\d+ more characters\))?: ')


def option_of(error: InvalidJobError) -> str | None:
    """The option that set the field an error of the daemon's parser names, if one did."""
    match = _FIELD_ERROR.match(str(error))
    if not match:
        return None
    name = json.loads(match.group(1))
    # Longest first: "http.headers.X" is --http-header's, "http" alone is --http-url's.
    for field_name in sorted(_FIELD_OPTIONS, key=len, reverse=True):
        if name == field_name or name.startswith(f"{field_name}."):
            return _FIELD_OPTIONS[field_name]
    return None


def job_body(body: str | None, fields: JobFields) -> tuple[str, list[str]]:
    """The body to send: --body's, checked (with a warning for each field the daemon ignores),
    else the job built from its options; the daemon parser's InvalidJobError names the option at
    fault."""
    if body is not None:
        return checked_body(body)
    try:
        return fields.body(), []
    except InvalidJobError as exc:
        option = option_of(exc)
        if option is None:
            raise
        raise InvalidJobError(f"{option}: {exc}") from exc
