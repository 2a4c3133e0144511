"""The HTTP API's WSGI application: its routes, its OpenAPI 3.1 document made from them at
/api/v1/openapi.json, bearer tokens, and every error as a problem; or, with no tokens, off (404).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from flask import Response, jsonify, request
from flask_openapi3 import Info, OpenAPI, Schema
from flask_openapi3.models.security_scheme import SecurityScheme
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException

from sqsjkr import __version__
from sqsjkr.api import actions, jobs, reads
from sqsjkr.api.access import PREFIX, Access, authenticate, authorize, install
from sqsjkr.api.problems import (
    PROBLEM_SCHEMA,
    ApiProblem,
    install_scrub,
    problem_of,
    problem_response,
)
from sqsjkr.api.tokens import Tokens, Unauthorized, load_tokens
from sqsjkr.contract.config import Config

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: The largest request body read (413 beyond).
MAX_BODY = 1024 * 1024
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
#: The bearer scheme (RFC 6750) every route but the contract takes its token by. The reference's
#: renderer shows it on each route as a header named by its key: its description names the header.
SECURITY_SCHEMES: dict[str, SecurityScheme | dict[str, Any]] = {
    "bearer": SecurityScheme(
        type="http",
        scheme="bearer",
        bearerFormat="sqsjkr token",
        description="Send `Authorization: Bearer TOKEN`: a token of `sqsjkr token new`, granted "
        "by `sqsjkr web --api-tokens`",
    )
}


def create_api(config: Config, tokens: Tokens) -> OpenAPI:
    """The API of config's fleet, for the holders of tokens."""
    app = _routes()
    install(app, Access(config, tokens))
    install_scrub(app, config)

    @app.before_request
    def _token() -> None:
        # The contract is public; everything else needs a token before its request is read.
        if request.endpoint != "openapi":
            authenticate()
            authorize()
            _once_each()

    @app.after_request
    def _headers(response: Response) -> Response:
        # Answers hold jobs' output and the fleet's state: no cache keeps them, and no browser
        # reads a JSON answer as anything else.
        response.headers.update(HEADERS)
        return response

    return app


def document() -> dict[str, Any]:
    """The OpenAPI document, as served at /api/v1/openapi.json (docs/reference/openapi.json is
    this, written by `make openapi`)."""
    return _routes().api_doc


def _routes() -> OpenAPI:
    """The routes and their document, serving nobody yet."""
    app = OpenAPI(
        __name__,
        info=Info(
            title="sqsjkr",
            version=__version__,
            description="Submit jobs to the fleet and follow them; read and steer the fleet.",
        ),
        security_schemes=SECURITY_SCHEMES,
        doc_ui=False,
        validation_error_status=400,
        validation_error_callback=_invalid,
    )
    # No job is larger than an SQS message may be (1 MiB at most), nor any other body.
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY
    app.components_schemas["Problem"] = Schema(**PROBLEM_SCHEMA)
    for blueprint in (jobs.api, reads.api, actions.api):
        app.register_api(blueprint)
    app.add_url_rule(f"{PREFIX}/openapi.json", "openapi", lambda: jsonify(app.api_doc))
    app.register_error_handler(Exception, _problem)
    return app


def api_of(config: Config, tokens_file: str | None) -> WSGIApp:
    """The API mounted on `sqsjkr web`'s listener: with a tokens file, served; without, off."""
    if tokens_file is None:
        return _off
    return create_api(config, load_tokens(tokens_file))


def _problem(exc: Exception) -> Response:
    if isinstance(exc, Unauthorized):
        return problem_response(ApiProblem(exc.status, "unauthorized", exc.detail, exc.headers))
    if isinstance(exc, HTTPException):
        status = exc.code or 500
        # 405's Allow names the methods the path takes.
        kept = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}
        return problem_response(
            ApiProblem(status, "http-" + str(status), exc.description or "", kept)
        )
    return problem_response(problem_of(exc))


def _invalid(exc: ValidationError) -> Response:
    """A request that its route's models refuse: the first error, naming the field."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    if not where:
        # The body as a whole: not JSON, or not an object.
        detail = "the body must be a JSON object, sent as Content-Type: application/json"
        return problem_response(ApiProblem(400, "invalid-request", detail))
    return problem_response(ApiProblem(400, "invalid-request", f"{where}: {first['msg']}"))


def _once_each() -> None:
    """Refuse a query parameter given more than once: each one takes one value, and reading the
    first of several would answer a request the document does not allow."""
    for name, values in request.args.lists():
        if len(values) > 1:
            detail = f"{name}: given {len(values)} times; give it once"
            raise ApiProblem(400, "invalid-request", detail)


def _off(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    detail = "the HTTP API is off: start sqsjkr web with --api-tokens PATH"
    return problem_response(ApiProblem(404, "api-off", detail))(environ, start_response)
