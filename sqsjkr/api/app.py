"""The HTTP API's WSGI application: its routes, its OpenAPI 3.1 document made from them at
/api/v1/openapi.json, bearer tokens, and every error as a problem; or, with no tokens, off (404).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

from flask import Request, Response, jsonify, request
from flask.globals import request_ctx
from flask.json.provider import DefaultJSONProvider
from flask_openapi3 import Info, OpenAPI, Schema
from flask_openapi3.models.security_scheme import SecurityScheme
from pydantic import ValidationError
from werkzeug.exceptions import HTTPException, MethodNotAllowed
from werkzeug.routing import BaseConverter

from sqsjkr import __version__
from sqsjkr.api import actions, jobs, reads
from sqsjkr.api.access import PREFIX, SECURITY_SCHEME, Access, authenticate, authorize, install
from sqsjkr.api.problems import (
    PROBLEM_SCHEMA,
    ApiProblem,
    install_scrub,
    problem_of,
    problem_response,
)
from sqsjkr.api.tokens import Tokens, Unauthorized, load_tokens
from sqsjkr.contract import safe_json
from sqsjkr.contract.config import Config
from sqsjkr.contract.limits import MAX_MESSAGE_BYTES

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: The largest request body read (413 beyond): no job is larger than an SQS message.
MAX_BODY = MAX_MESSAGE_BYTES
#: The 413's detail, as docs/api.md documents it (the listener's own 413 says the same).
TOO_LARGE = f"the body is larger than {MAX_BODY // (1024 * 1024)} MiB"
HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}
#: The bearer scheme (RFC 6750) every route but the contract takes its token by. The reference's
#: renderer shows an HTTP scheme on each route as a header named by its key: the key
#: (access.SECURITY_SCHEME) is the header's name, so that the reference reads as a client sends it.
SECURITY_SCHEMES: dict[str, SecurityScheme | dict[str, Any]] = {
    SECURITY_SCHEME: SecurityScheme(
        type="http",
        scheme="bearer",
        bearerFormat="sqsjkr token",
        # Plain text: the reference's renderer shows a description as it is, backticks too.
        description="Send Authorization: Bearer TOKEN, with a token of sqsjkr token new, granted "
        "by sqsjkr web --api-tokens",
    )
}


def create_api(config: Config, tokens: Tokens) -> OpenAPI:
    """The API of config's fleet, for the holders of tokens."""
    app = _routes()
    install(app, Access(config, tokens))
    install_scrub(app, config)

    @app.before_request
    def _token() -> None:
        # The contract is public; everything else needs a token before its request is read,
        # then a route that takes its method (404, 405) before its scope is judged (403).
        if request.endpoint != "openapi":
            authenticate()
            _routed()
            authorize()
            _once_each()
            _decoded_body()

    @app.after_request
    def _headers(response: Response) -> Response:
        # Answers hold jobs' output and the fleet's state: no cache keeps them, and no browser
        # reads a JSON answer as anything else.
        response.headers.update(HEADERS)
        if request.method in ("GET", "HEAD") and response.status_code == 200:
            # A client that polls sends back the ETag it has: an unchanged answer is a 304.
            response.add_etag()
            response.make_conditional(request)
        return response

    return app


def document() -> dict[str, Any]:
    """The OpenAPI document, as served at /api/v1/openapi.json (docs/reference/openapi.json is
    this, written by `make openapi`)."""
    return _routes().api_doc


def _routes() -> OpenAPI:
    """The routes and their document, serving nobody yet."""
    app = _Api(
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
    app.json = _BoundedJson(app)
    app.request_class = _Request
    # Before any route is added: each path parameter is one segment of the path as sent.
    app.url_map.converters["default"] = _Segment
    app.wsgi_app = _segments_as_sent(app.wsgi_app)  # type: ignore[method-assign,assignment]
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
        detail = TOO_LARGE if status == 413 else exc.description or ""
        return problem_response(ApiProblem(status, "http-" + str(status), detail, kept))
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


def _allowed() -> set[str]:
    """The methods the request's path takes: those of the routes it matches with the fewest
    parameters, so that /dead-letters/redrive takes POST alone, not also the GET of
    /dead-letters/{message_id} that its last segment would match too."""
    adapter = request_ctx.url_adapter
    if adapter is None:
        return set()
    rules: dict[str, Any] = {}
    for method in adapter.allowed_methods():
        try:
            rules[method], _ = adapter.match(method=method, return_rule=True)
        except HTTPException:
            continue
    if not rules:
        return set()
    fewest = min(len(rule.arguments) for rule in rules.values())
    return {method for method, rule in rules.items() if len(rule.arguments) == fewest}


def _routed() -> None:
    """Refuse a path no route takes (404), or a method its routes lack (405, Allow naming
    those they take)."""
    if request.routing_exception is not None and not isinstance(
        request.routing_exception, MethodNotAllowed
    ):
        raise request.routing_exception
    allowed = _allowed()
    if request.method not in allowed:
        raise MethodNotAllowed(valid_methods=sorted(allowed))


def _decoded_body() -> None:
    """Decode a JSON body now, bounded (contract/safe_json.py): a route's model reads it decoded,
    and no decoder recurses through a body nested deeper than MAX_JSON_DEPTH."""
    if request.is_json and request.get_data(cache=True):
        request.get_json(cache=True)


class _BoundedJson(DefaultJSONProvider):
    """Every body decoded as the daemon decodes a message: nesting bounded first."""

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return safe_json.loads(s.decode() if isinstance(s, bytes) else s)


class _Request(Request):
    def on_json_loading_failed(self, e: ValueError | None) -> Any:
        raise ApiProblem(400, "invalid-request", f"body {e}")


class _Api(OpenAPI):
    def make_default_options_response(self) -> Response:
        answer = self.response_class()
        answer.allow.update(_allowed())
        return answer


#: A '/' or '%' of a path's segment as sent, kept escaped by _segments_as_sent.
_ESCAPED = re.compile("%(2F|25)")


class _Segment(BaseConverter):
    """A path parameter: one segment as sent, '%2F' and '%25' in it decoded ('team%2Freport' is
    the id 'team/report')."""

    def to_python(self, value: str) -> str:
        return _ESCAPED.sub(lambda m: "/" if m[1] == "2F" else "%", value)

    def to_url(self, value: Any) -> str:
        return quote(str(value), safe="")


def _segments_as_sent(wsgi: WSGIApp) -> WSGIApp:
    """wsgi, routed on the path as the client sent it: WSGI decodes '%2F' into PATH_INFO, which
    would split an id holding '/' across segments. waitress keeps the request's URI as sent
    (REQUEST_URI); each of its segments is decoded alone, with '/' and '%' escaped again."""

    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        sent = urlsplit(environ.get("REQUEST_URI", "")).path
        if sent and unquote_to_bytes(sent).decode("latin-1") == environ.get("PATH_INFO"):
            segments = (
                unquote_to_bytes(segment).replace(b"%", b"%25").replace(b"/", b"%2F")
                for segment in sent.split("/")
            )
            environ["PATH_INFO"] = "/".join(s.decode("latin-1") for s in segments)
        return wsgi(environ, start_response)

    return serve


def _off(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    detail = "the HTTP API is off: start sqsjkr web with --api-tokens PATH"
    return problem_response(ApiProblem(404, "api-off", detail))(environ, start_response)
