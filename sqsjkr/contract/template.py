"""Config templates: the `{{ env "X" "default" }}` and `{{ must_env "X" }}` of the Go sqsjkr's loader.

Renders the config text before TOML parsing, leaving templates inside TOML comments alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqsjkr.errors import ConfigError

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
