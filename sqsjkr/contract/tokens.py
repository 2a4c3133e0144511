"""The HTTP API's tokens file: `[tokens.NAME]` tables of a SHA-256 digest and scopes, read and
checked, and a new token with the lines that grant it (`sqsjkr token new`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqsjkr.errors import ConfigError, quote

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

#: What a token may do: read the fleet, send jobs, act (run, kill, pause, route, unlock, redrive).
SCOPES = ("read", "send", "act")
#: A token's name, as the audit trail shows it ("api:NAME"): a TOML bare key, so that
#: `[tokens.NAME]` names one table (a '.' would nest tables).
#: Matched whole (fullmatch): "$" would let a name or a digest end in a newline.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_DIGEST = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Token:
    """A token's name and what it may do."""

    name: str
    scopes: frozenset[str]

    @property
    def actor(self) -> str:
        """Who its actions are audited as."""
        return f"api:{self.name}"


def token_digest(token: str) -> str:
    """What the tokens file keeps of a token: its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def read_tokens(path: str) -> dict[str, Token]:
    """The `[tokens.NAME]` tables of a TOML file: `sha256 = "<hex digest of the token>"` and
    `scopes = ["read", "send", "act"]`. ConfigError names the file, the token and the field."""
    where = f"--api-tokens {quote(path)}"
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc
    unknown = sorted(set(data) - {"tokens"})
    if unknown:
        raise ConfigError(f"{where}: {', '.join(map(quote, unknown))} unknown (only [tokens.NAME])")
    tables = data.get("tokens")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"{where}: no [tokens.NAME] table (make one with: sqsjkr token new NAME)")
    by_digest: dict[str, Token] = {}
    for name, table in tables.items():
        token, digest = _token(where, name, table)
        if digest in by_digest:
            raise ConfigError(f"{where}: tokens.{name}.sha256 is the same as another token's")
        by_digest[digest] = token
    return by_digest


def _token(where: str, name: str, table: Any) -> tuple[Token, str]:
    if not NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: tokens.{quote(name)}: a name is 1 to 64 letters, digits, '-' or '_'"
        )
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: tokens.{name} must be a table with sha256 and scopes")
    extra = sorted(set(table) - {"sha256", "scopes"})
    if extra:
        raise ConfigError(f"{where}: tokens.{name}.{extra[0]} unknown (sha256 and scopes only)")
    digest = table.get("sha256")
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest.lower()):
        raise ConfigError(
            f"{where}: tokens.{name}.sha256 must be the 64 hex digits of the token's SHA-256"
        )
    scopes = table.get("scopes")
    if not isinstance(scopes, list) or not scopes or not set(map(str, scopes)) <= set(SCOPES):
        raise ConfigError(
            f"{where}: tokens.{name}.scopes must list some of {', '.join(map(quote, SCOPES))}"
        )
    return Token(name, frozenset(scopes)), digest.lower()


def new_token(name: str, scopes: Iterable[str]) -> tuple[str, str]:
    """A new random token, and the TOML lines that grant it scopes under name."""
    chosen = sorted(set(scopes), key=SCOPES.index)
    token = secrets.token_urlsafe(32)
    digest = token_digest(token)
    listed = ", ".join(f'"{scope}"' for scope in chosen)
    return token, f'[tokens.{name}]\nsha256 = "{digest}"\nscopes = [{listed}]\n'
