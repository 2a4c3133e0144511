"""What every route of the HTTP API shares: the caller's token checked for a scope, a Fleet per
token (its actions audited as the token's name), and the long polls' slots.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from flask import current_app, g, request
from flask_openapi3 import APIBlueprint, Tag

from sqsjkr.api.problems import ApiProblem, documented_problems
from sqsjkr.api.slots import WaitSlots
from sqsjkr.api.tokens import Token, Tokens
from sqsjkr.contract.config import Config
from sqsjkr.fleet.client import Fleet

#: Every route's path starts with it.
PREFIX = "/api/v1"
#: The key of the bearer scheme in the document: the header that carries the token.
SECURITY_SCHEME = "Authorization"
_KEY = "sqsjkr.api"


@dataclass
class Access:
    """The API's tokens and the Fleet each token acts through, made on its first call."""

    config: Config
    tokens: Tokens
    waits: WaitSlots = field(default_factory=WaitSlots)
    _fleets: dict[str, Fleet] = field(default_factory=dict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def fleet_of(self, token: Token) -> Fleet:
        with self._mutex:
            if token.name not in self._fleets:
                self._fleets[token.name] = Fleet(self.config, actor=token.actor)
            return self._fleets[token.name]


def blueprint(name: str, import_name: str, description: str) -> APIBlueprint:
    """A group of routes under PREFIX, each behind a bearer token and answering problems."""
    return APIBlueprint(
        name,
        import_name,
        url_prefix=PREFIX,
        abp_tags=[Tag(name=name, description=description)],
        abp_security=[{SECURITY_SCHEME: []}],
        abp_responses=documented_problems(),
    )


def install(app: object, access: Access) -> None:
    """Keep access on app, for the routes' caller()."""
    app.extensions[_KEY] = access  # type: ignore[attr-defined]


def authenticate() -> None:
    """Check the request's bearer token before anything else of it is read (401 or 429)."""
    access: Access = current_app.extensions[_KEY]
    g.token = access.tokens.check(request.headers.get("Authorization"))


def scope_of(method: str, path: str) -> str:
    """The scope a request needs: every GET reads, a submit sends, every other POST acts."""
    if method in ("GET", "HEAD", "OPTIONS"):
        return "read"
    return "send" if path.rstrip("/") == f"{PREFIX}/jobs" else "act"


def authorize() -> None:
    """Refuse the request (403) before its parameters or body are read when its token lacks
    the scope it needs."""
    _require(g.token, scope_of(request.method, request.path))


def caller(scope: str) -> Fleet:
    """The Fleet of the request's token, once the token is known to have scope (403 otherwise,
    and nothing done)."""
    access: Access = current_app.extensions[_KEY]
    token: Token = g.token
    _require(token, scope)
    return access.fleet_of(token)


def _require(token: Token, scope: str) -> None:
    if scope not in token.scopes:
        raise ApiProblem(
            403,
            "scope-missing",
            f"token {token.name!r} has no {scope!r} scope (it has: {', '.join(sorted(token.scopes))})",
        )


def waits() -> WaitSlots:
    return current_app.extensions[_KEY].waits  # type: ignore[no-any-return]
