"""The config file: TOML in the Go sqsjkr layout, rendered through env templates first.

Every invalid value is a ConfigError that starts with `config <source>: ` and names `[section] key`.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from sqsjkr.duration import Duration, duration_value
from sqsjkr.errors import ConfigError, DurationError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEFAULT_CONFIG_PATH = "/etc/sqsjkr/config.toml"
_DEFAULT_STATS_PORT = 8061  # the port mackerel-plugin-sqsjkr reads

log = logging.getLogger("sqsjkr.config")


@dataclass(frozen=True)
class AccountConfig:
    """[account]: where the queue and the table live."""

    id: str
    region: str
    profile: str | None = None


@dataclass(frozen=True)
class SqsConfig:
    """[sqs]: the queue jobs are received from."""

    queue_name: str
    wait_time_seconds: int = 10
    visibility_timeout: int = 30


@dataclass(frozen=True)
class KickerConfig:
    """[kicker]: the workers, the life_time trigger and the stats endpoint."""

    max_concurrent_num: int = 20
    life_time_trigger: str | None = None
    stats_port: int | None = _DEFAULT_STATS_PORT  # None when the unix socket is used
    stats_socket: str | None = None
    stats_host: str = "127.0.0.1"


@dataclass(frozen=True)
class LockConfig:
    """[lock]: the store of lock_id locks."""

    backend: str = "dynamodb"
    table: str = "sqsjkr"
    retry_interval: Duration = Duration.of_seconds(5)


@dataclass(frozen=True)
class DedupeConfig:
    """[dedupe]: the store of seen message ids."""

    backend: str = "dynamodb"


@dataclass(frozen=True)
class Config:
    """The whole validated config."""

    account: AccountConfig
    sqs: SqsConfig
    kicker: KickerConfig
    lock: LockConfig
    dedupe: DedupeConfig


@dataclass(frozen=True)
class Overrides:
    """Command-line options that replace file values; None means the option was not given."""

    lock_table: str | None = None
    profile: str | None = None
    region: str | None = None
    stats_port: int | None = None
    stats_socket: str | None = None


_SECTIONS: dict[str, type] = {
    "account": AccountConfig,
    "sqs": SqsConfig,
    "kicker": KickerConfig,
    "lock": LockConfig,
    "dedupe": DedupeConfig,
}
_BACKENDS = ("dynamodb", "none")


# --- templates -------------------------------------------------------------------------------
#
# The Go sqsjkr loaded its file with kayac/go-config, which runs the whole file through Go's
# text/template with the functions env and must_env. Only that subset is implemented, plus the
# two forms that produce nothing or a constant (comments, a quoted string) so that any template
# the Go loader accepted with those functions still renders the same here.

_WS = " \t\r\n"
# Characters that can change the TOML lexical state, and the start of an action.
_INTERESTING = re.compile(r"\{\{|[#\"'\\\n]")
_QUOTED = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_BARE = re.compile(r"(?:[^ \t\r\n\"`}]|\}(?!\}))+")  # white space as _WS, not \s
_GO_ESCAPE = re.compile(
    r"\\(?:(?P<simple>[abfnrtv\\\"/])|x(?P<hex>[0-9a-fA-F]{2})|(?P<oct>[0-7]{3})"
    r"|u(?P<u4>[0-9a-fA-F]{4})|U(?P<u8>[0-9a-fA-F]{8})|(?P<bad>.?))",
    re.DOTALL,
)
_SIMPLE_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    '"': '"',
    "/": "/",  # JSON's escape; Go rejects it, accepting it costs nothing
}

# TOML lexical states, tracked only to know which `{{` sit inside comments.
_NORMAL, _COMMENT, _BASIC, _LITERAL, _ML_BASIC, _ML_LITERAL = range(6)


@dataclass(frozen=True)
class _Str:
    """A quoted argument of a template action."""

    value: str


@dataclass(frozen=True)
class _Word:
    """An unquoted token of a template action (a function name, or anything unsupported)."""

    text: str


@dataclass(frozen=True)
class _Action:
    """One parsed `{{ ... }}` with its extent in the source."""

    start: int
    end: int
    line: int
    trim_left: bool
    trim_right: bool
    tokens: tuple[_Str | _Word, ...]
    is_comment: bool = False


def render_template(text: str, env: Mapping[str, str], *, source: str = "<config>") -> str:
    """Replace the env/must_env template actions of a config file, as kayac/go-config did.

    Unlike Go, which rendered the whole file, actions inside TOML comments are left as they are:
    a commented-out line must not require its variable (the example file shows must_env in one).
    """
    out: list[str] = []
    segment = 0  # start of the literal text not yet copied to out
    state = _NORMAL
    i = 0
    while True:
        m = _INTERESTING.search(text, i)
        if m is None:
            break
        i = m.start()
        token = m.group()
        if token == "{{":
            if state == _COMMENT:
                i += 2
                continue
            action = _parse_action(text, i, source)
            literal = text[segment:i]
            out.append(literal.rstrip(_WS) if action.trim_left else literal)
            out.append(_evaluate(action, text, env, source))
            i = _skip_ws(text, action.end) if action.trim_right else action.end
            segment = i
            continue
        if state == _NORMAL:
            if token == "#":
                state = _COMMENT
            elif token == '"':
                if text.startswith('"""', i):
                    state = _ML_BASIC
                    i += 3
                    continue
                state = _BASIC
            elif token == "'":
                if text.startswith("'''", i):
                    state = _ML_LITERAL
                    i += 3
                    continue
                state = _LITERAL
        elif state == _COMMENT:
            if token == "\n":
                state = _NORMAL
        elif token == "\\":
            # Only escaped quotes and backslashes matter: they must not close a basic string.
            if state in (_BASIC, _ML_BASIC) and text[i + 1 : i + 2] in ('"', "\\"):
                i += 2
                continue
        elif state == _BASIC:
            if token in ('"', "\n"):  # a newline ends a broken string; tomllib reports it
                state = _NORMAL
        elif state == _LITERAL:
            if token in ("'", "\n"):
                state = _NORMAL
        elif state == _ML_BASIC and text.startswith('"""', i):
            i = _skip_run(text, i, '"')  # up to two quotes may precede the closing three
            state = _NORMAL
            continue
        elif state == _ML_LITERAL and text.startswith("'''", i):
            i = _skip_run(text, i, "'")
            state = _NORMAL
            continue
        i += 1
    out.append(text[segment:])
    return "".join(out)


def _skip_run(text: str, i: int, char: str) -> int:
    while i < len(text) and text[i] == char:
        i += 1
    return i


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def _parse_action(text: str, start: int, source: str) -> _Action:
    line = text.count("\n", 0, start) + 1
    n = len(text)
    i = start + 2
    # Go's trim marker is a dash followed by white space; "{{-3}}" would be the number -3.
    trim_left = text.startswith("-", i) and i + 1 < n and text[i + 1] in _WS
    if trim_left:
        i += 1
    i_after_ws = _skip_ws(text, i)
    if text.startswith("/*", i_after_ws):
        close = text.find("*/", i_after_ws + 2)
        if close < 0:
            raise _template_error(source, line, text, start, "unclosed comment")
        i = close + 2
        if text.startswith("}}", i):
            return _Action(start, i + 2, line, trim_left, False, (), is_comment=True)
        j = _skip_ws(text, i)
        if j > i and text.startswith("-}}", j):
            return _Action(start, j + 3, line, trim_left, True, (), is_comment=True)
        raise _template_error(source, line, text, start, "a comment must end the action")
    tokens: list[_Str | _Word] = []
    while True:
        j = _skip_ws(text, i)
        had_ws = j > i
        i = j
        if i >= n:
            raise _template_error(source, line, text, start, "unclosed action (no }})")
        if text.startswith("}}", i):
            return _Action(start, i + 2, line, trim_left, False, tuple(tokens))
        if had_ws and text.startswith("-}}", i):
            return _Action(start, i + 3, line, trim_left, True, tuple(tokens))
        char = text[i]
        if char == '"':
            m = _QUOTED.match(text, i)
            if m is None:
                raise _template_error(source, line, text, start, "unterminated quoted string")
            try:
                tokens.append(_Str(_unquote_go(m.group(1))))
            except ValueError as e:
                raise _template_error(source, line, text, start, str(e)) from None
            i = m.end()
        elif char == "`":
            close = text.find("`", i + 1)
            if close < 0:
                raise _template_error(source, line, text, start, "unterminated raw string")
            tokens.append(_Str(text[i + 1 : close]))
            i = close + 1
        else:
            m = _BARE.match(text, i)
            # _BARE matches at least the current character: it is neither white space,
            # a quote, nor the start of "}}" (both checked above).
            assert m is not None
            tokens.append(_Word(m.group()))
            i = m.end()


def _unquote_go(body: str) -> str:
    """Decode the escapes of a Go (or JSON) double-quoted string body."""
    # Go's \x and octal escapes are bytes, so the result is built as UTF-8 bytes.
    out = bytearray()
    pos = 0
    for m in _GO_ESCAPE.finditer(body):
        out += body[pos : m.start()].encode("utf-8")
        pos = m.end()
        if m.group("simple") is not None:
            out += _SIMPLE_ESCAPES[m.group("simple")].encode("utf-8")
        elif m.group("hex") is not None:
            out.append(int(m.group("hex"), 16))
        elif m.group("oct") is not None:
            value = int(m.group("oct"), 8)
            if value > 255:
                raise ValueError(f"invalid escape {m.group()!r} in quoted string")
            out.append(value)
        elif m.group("bad") is None:
            code = int(m.group("u4") or m.group("u8"), 16)
            try:
                out += chr(code).encode("utf-8")
            except (ValueError, UnicodeEncodeError):  # beyond U+10FFFF, or a surrogate
                raise ValueError(f"invalid escape {m.group()!r} in quoted string") from None
        else:
            raise ValueError(f"invalid escape {m.group()!r} in quoted string")
    out += body[pos:].encode("utf-8")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("quoted string is not valid UTF-8") from None


def _evaluate(action: _Action, text: str, env: Mapping[str, str], source: str) -> str:
    if action.is_comment:
        return ""
    tokens = action.tokens
    quoted = text[action.start : action.end]

    def fail(why: str) -> ConfigError:
        return ConfigError(
            f"config {source}: line {action.line}: unsupported template action {quoted}: {why}"
            ' (supported: {{ env "NAME" "default" }} and {{ must_env "NAME" }})'
        )

    if not tokens:
        raise fail("empty action")
    head, args = tokens[0], tokens[1:]
    if isinstance(head, _Str) and not args:
        return head.value  # a constant, e.g. {{ "{{" }} to write a literal "{{"
    if not isinstance(head, _Word) or head.text not in ("env", "must_env"):
        shown = head.text if isinstance(head, _Word) else json.dumps(head.value)
        raise fail(f"unknown function {shown}")
    names = [a.value for a in args if isinstance(a, _Str)]
    if len(names) != len(args):
        raise fail("arguments must be quoted strings")
    if head.text == "must_env":
        if len(names) != 1:
            raise fail("must_env takes exactly one argument")
        if names[0] not in env:
            raise ConfigError(
                f"config {source}: line {action.line}: environment variable {names[0]} "
                f"is not defined (required by {quoted})"
            )
        return env[names[0]]
    if len(names) not in (1, 2):
        raise fail('env takes a name and an optional default: {{ env "NAME" "default" }}')
    # As in go-config: a variable set to the empty string also falls back to the default.
    value = env.get(names[0], "")
    if value == "" and len(names) == 2:
        return names[1]
    return value


def _template_error(source: str, line: int, text: str, start: int, why: str) -> ConfigError:
    end = text.find("\n", start)
    snippet = text[start : end if end >= 0 else len(text)]
    if len(snippet) > 80:
        snippet = snippet[:77] + "..."
    return ConfigError(f"config {source}: line {line}: invalid template action {snippet}: {why}")


# --- validation ------------------------------------------------------------------------------


def _show(value: object) -> str:
    """A value as the user wrote it in TOML, with its TOML type."""
    if isinstance(value, bool):
        text, kind = ("true" if value else "false"), "boolean"
    elif isinstance(value, str):
        text, kind = json.dumps(value, ensure_ascii=False), "string"
    elif isinstance(value, int):
        text, kind = str(value), "integer"
    elif isinstance(value, float):
        text, kind = repr(value), "float"
    elif isinstance(value, list):
        text, kind = json.dumps(value, default=str, ensure_ascii=False), "array"
    elif isinstance(value, dict):
        text, kind = json.dumps(value, default=str, ensure_ascii=False), "table"
    elif isinstance(value, (datetime.date, datetime.time)):
        text, kind = value.isoformat(), "datetime"
    else:
        text, kind = repr(value), type(value).__name__
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({kind})"


@dataclass(frozen=True)
class _Table:
    """One [section] after overrides, with typed getters whose errors name the field."""

    source: str
    section: str
    values: Mapping[str, Any]
    from_cli: frozenset[str] = frozenset()

    def fail(self, key: str, problem: str) -> ConfigError:
        where = " (from the command line)" if key in self.from_cli else ""
        return ConfigError(f"config {self.source}: [{self.section}] {key}{where} {problem}")

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str:
        """A non-empty string."""
        if key not in self.values:
            if required or default is None:
                raise self.fail(key, "is required")
            return default
        value = self.values[key]
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_show(value)}")
        if value == "":
            raise self.fail(key, "must not be empty")
        return value

    def optional_string(self, key: str) -> str | None:
        """A string where empty means unset, as in Go."""
        value = self.values.get(key, "")
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_show(value)}")
        return value or None

    def integer(self, key: str, default: int, low: int, high: int | None = None) -> int:
        value = self.values.get(key, default)
        # bool is an int subclass in Python, but `true` is not a number in TOML.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, f"must be an integer, got {_show(value)}")
        if high is None and value < low:
            raise self.fail(key, f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise self.fail(key, f"must be between {low} and {high}, got {value}")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(key, default)
        if value not in choices:
            allowed = " or ".join(json.dumps(c) for c in choices)
            raise self.fail(key, f"must be {allowed}, got {_show(value)}")
        return value

    def duration(self, key: str, default: Duration) -> Duration:
        if key not in self.values:
            return default
        value = self.values[key]
        try:
            result = duration_value(value)
        except DurationError as e:
            reason = str(e)
            # Reasons are either a predicate ("must not be negative") or a complete sentence
            # that already quotes the text ("invalid duration "x": ...").
            if reason.startswith("must"):
                raise self.fail(key, f"{reason}, got {_show(value)}") from None
            raise self.fail(key, f"is invalid: {reason}") from None
        if result.ns <= 0:
            raise self.fail(key, f"must be greater than 0, got {_show(value)}")
        return result


def _tables(source: str, data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Split the document into the known sections, warning about everything else."""
    tables: dict[str, dict[str, Any]] = {}
    for name, value in data.items():
        dataclass_type = _SECTIONS.get(name)
        if dataclass_type is None:
            if isinstance(value, dict):
                log.warning("unknown config section [%s] in %s (ignored)", name, source)
            else:
                log.warning("unknown config key %s in %s (ignored)", name, source)
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"config {source}: [{name}] must be a table, got {_show(value)}")
        known = {f.name for f in fields(dataclass_type)}
        for key in value:
            if key not in known:
                log.warning("unknown config key [%s] %s in %s (ignored)", name, key, source)
        tables[name] = dict(value)
    return tables


def _apply_overrides(
    source: str, tables: dict[str, dict[str, Any]], overrides: Overrides
) -> dict[str, set[str]]:
    """Replace file values with command-line ones; returns the keys each section got that way."""
    from_cli: dict[str, set[str]] = {name: set() for name in _SECTIONS}

    def put(section: str, key: str, value: object) -> None:
        tables.setdefault(section, {})[key] = value
        from_cli[section].add(key)

    if overrides.region is not None:
        put("account", "region", overrides.region)
    if overrides.profile is not None:
        put("account", "profile", overrides.profile)
    if overrides.lock_table is not None:
        put("lock", "table", overrides.lock_table)
    # An empty --stats-socket is "not given", as with Go's flag default.
    socket = overrides.stats_socket or None
    if overrides.stats_port is not None and socket is not None:
        raise ConfigError(
            f"config {source}: the stats_port and stats_socket options are both "
            "given on the command line; give only one"
        )
    kicker = tables.setdefault("kicker", {})
    if overrides.stats_port is not None:
        kicker.pop("stats_socket", None)
        put("kicker", "stats_port", overrides.stats_port)
    if socket is not None:
        kicker.pop("stats_port", None)
        put("kicker", "stats_socket", socket)
    return from_cli


def parse_config(
    text: str,
    *,
    source: str = "<config>",
    env: Mapping[str, str] | None = None,
    overrides: Overrides = Overrides(),
) -> Config:
    """Render, parse and validate a config file's text; command-line overrides win over the file.

    Overrides replace file values before anything is checked, so `--region` can supply a
    region missing from the file and `--stats-port` replaces a file's stats_socket.
    """
    rendered = render_template(text, os.environ if env is None else env, source=source)
    try:
        data = tomllib.loads(rendered)
    except tomllib.TOMLDecodeError as e:
        note = ""
        if rendered.count("\n") != text.count("\n"):
            note = " (line numbers are those of the file after template rendering)"
        raise ConfigError(f"config {source}: invalid TOML: {e}{note}") from None

    tables = _tables(source, data)
    from_cli = _apply_overrides(source, tables, overrides)

    def table(name: str) -> _Table:
        return _Table(source, name, tables.get(name, {}), frozenset(from_cli.get(name, ())))

    account = table("account")
    if "id" in account.values:
        raw_id = account.values["id"]
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            raise account.fail(
                "id",
                f'must be a string, got {_show(raw_id)}: quote it (id = "{raw_id}") '
                "since AWS account ids may start with 0",
            )
    account_config = AccountConfig(
        id=account.string("id", required=True),
        region=account.string("region", required=True),
        profile=account.optional_string("profile"),
    )

    sqs = table("sqs")
    sqs_config = SqsConfig(
        queue_name=sqs.string("queue_name", required=True),
        wait_time_seconds=sqs.integer("wait_time_seconds", SqsConfig.wait_time_seconds, 0, 20),
        visibility_timeout=sqs.integer(
            "visibility_timeout", SqsConfig.visibility_timeout, 0, 43200
        ),
    )

    kicker = table("kicker")
    port_set = "stats_port" in kicker.values
    stats_port = kicker.integer("stats_port", _DEFAULT_STATS_PORT, 0, 65535)
    stats_socket = kicker.optional_string("stats_socket")
    if port_set and stats_socket is not None:
        raise ConfigError(
            f"config {source}: [kicker] stats_port and [kicker] stats_socket are both set; "
            "set only one (stats_port for TCP, stats_socket for a unix socket)"
        )
    stats_host = kicker.values.get("stats_host", KickerConfig.stats_host)
    if stats_host == "":
        raise kicker.fail(
            "stats_host", 'must not be empty (use "0.0.0.0" for all interfaces, as the Go sqsjkr)'
        )
    kicker_config = KickerConfig(
        max_concurrent_num=kicker.integer("max_concurrent_num", KickerConfig.max_concurrent_num, 1),
        life_time_trigger=kicker.optional_string("life_time_trigger"),
        stats_port=None if stats_socket is not None else stats_port,
        stats_socket=stats_socket,
        stats_host=kicker.string("stats_host", KickerConfig.stats_host),
    )

    lock = table("lock")
    lock_config = LockConfig(
        backend=lock.choice("backend", LockConfig.backend, _BACKENDS),
        table=lock.string("table", LockConfig.table),
        retry_interval=lock.duration("retry_interval", LockConfig.retry_interval),
    )

    dedupe = table("dedupe")
    dedupe_config = DedupeConfig(backend=dedupe.choice("backend", DedupeConfig.backend, _BACKENDS))

    return Config(account_config, sqs_config, kicker_config, lock_config, dedupe_config)


def load_config(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    overrides: Overrides = Overrides(),
) -> Config:
    """Read and validate the config file at path (see parse_config)."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file {source} not found") from None
    except OSError as e:
        raise ConfigError(f"config {source}: cannot read the file: {e.strerror or e}") from None
    try:
        # utf-8-sig: tolerate the byte-order mark some Windows editors write.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {source}: the file is not UTF-8 text: {e}") from None
    return parse_config(text, source=source, env=env, overrides=overrides)
