"""The HTTP API's errors as RFC 9457 problem details: each with a stable code, the status it is
sent with, and the fleet layer's errors mapped to them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from flask import Response, current_app, has_app_context

from sqsjkr import errors
from sqsjkr.contract.config import Config
from sqsjkr.fleet.failures import failure_text
from sqsjkr.fleet.unique import PENDING_SECONDS

MEDIA_TYPE = "application/problem+json"
#: Seconds a 429 or 503 that names none asks a program to wait before it tries again (the table
#: or the audit trail failing: throttled, most often).
RETRY_AFTER = 5

#: The fleet layer's errors, most specific first: their status and code.
_BY_ERROR: tuple[tuple[type[Exception], int, str], ...] = (
    (errors.AlreadyDone, 409, "already-done"),
    (errors.NothingToDo, 409, "nothing-to-do"),
    (errors.NotHeld, 404, "not-held"),
    (errors.UnlockRefused, 409, "unlock-refused"),
    (errors.RouteRefused, 409, "route-refused"),
    (errors.UniqueSendBusy, 409, "send-busy"),
    (errors.IdempotencyKeyReused, 422, "idempotency-key-reused"),
    (errors.ResourceMissingError, 404, "not-found"),
    (errors.InvalidJobError, 400, "invalid-job"),
    (errors.DurationError, 400, "invalid-duration"),
    (errors.ScheduleExpressionError, 400, "invalid-expression"),
    (errors.RequestError, 400, "bad-request"),
    (errors.AuditRefused, 503, "audit-refused"),
    (errors.StoreError, 503, "store-unavailable"),
)

#: The statuses any route may answer with a problem, and what each means.
STATUSES = {
    400: "The request is malformed: a field, a parameter or the cursor (its detail names which).",
    401: "No token, or an unknown one: send 'Authorization: Bearer TOKEN'.",
    403: "The token's scopes do not allow this route: nothing was done.",
    404: "What the path names is not there (or the API is off: sqsjkr web --api-tokens).",
    409: "The action found nothing to do, or what it would do is refused or done already.",
    413: "The body is larger than 1 MiB.",
    422: "An Idempotency-Key given before with another request: nothing was sent.",
    429: "Too many failed token checks, or long polls at once: try again after Retry-After.",
    500: "The fleet layer failed in a way it names (a config it cannot use, say).",
    502: "AWS refused or failed the call the fleet layer made.",
    503: "The audit trail or the table could not be written or read, or the tokens file cannot "
    "be used: nothing was done; try again after Retry-After.",
}


class ApiProblem(Exception):
    """A problem to answer with: its status, stable code and detail."""

    def __init__(
        self, status: int, code: str, detail: str, headers: Mapping[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = dict(headers or {})


def problem_of(exc: Exception) -> ApiProblem:
    """The problem an error raised by the fleet layer (or by boto3 under it) is answered with."""
    if isinstance(exc, ApiProblem):
        return exc
    for kind, status, code in _BY_ERROR:
        if isinstance(exc, kind):
            # A send under way holds the job for at most PENDING_SECONDS: then it may be sent.
            wait = {"Retry-After": str(PENDING_SECONDS)} if code == "send-busy" else None
            return ApiProblem(status, code, str(exc), wait)
    if isinstance(exc, errors.SqsjkrError):
        return ApiProblem(500, "failed", str(exc))
    # failure_text raises again what is neither sqsjkr's nor an AWS failure: a bug, a 500.
    return ApiProblem(502, "aws-failed", failure_text(exc))


def problem_response(problem: ApiProblem) -> Response:
    """The problem as application/problem+json, its detail scrubbed of where the fleet lives
    (Scrub) when the API's app has installed one."""
    detail = problem.detail
    if has_app_context():
        scrub = current_app.extensions.get(_SCRUB_KEY)
        if scrub is not None:
            detail = scrub(detail)
    body = {
        "type": f"urn:sqsjkr:problem:{problem.code}",
        "title": HTTPStatus(problem.status).phrase,
        "status": problem.status,
        "detail": detail,
        "code": problem.code,
    }
    response = Response(json.dumps(body), problem.status, mimetype=MEDIA_TYPE)
    response.headers.update(problem.headers)
    if problem.status in (429, 503):
        # A program told to come back is told when.
        response.headers.setdefault("Retry-After", str(RETRY_AFTER))
    return response


_SCRUB_KEY = "sqsjkr.api.scrub"
#: An ARN, a URL of an AWS endpoint, an account id, a region's name: whatever their source.
_ARN = re.compile(r"arn:aws[\w-]*:[^\s'\"(),]*")
_AWS_URL = re.compile(r"https?://[^\s'\"(),]*amazonaws\.com[^\s'\"(),]*")
_ACCOUNT = re.compile(r"(?<![\w-])\d{12}(?![\w-])")
_REGION = re.compile(
    r"(?<![\w-])(?:us|eu|ap|sa|ca|me|af|il|mx|cn)(?:-gov|-iso[a-z]?)?-"
    r"(?:north|south|east|west|central|northeast|southeast|northwest|southwest)-\d(?![\w-])"
)


@dataclass(frozen=True)
class Scrub:
    """Takes out of a problem's detail what tells a client where the fleet lives: the AWS
    account, its region, the table, the schedule group (a fleet's error names them for its
    operator, who reads the log; a token's holder needs none of them to act on the problem)."""

    account: str
    region: str
    #: The table and the schedule group: often the same word as the command's name ("sqsjkr"),
    #: so they are taken out only where an error names them (after "table" or "group", quoted).
    names: tuple[str, ...]

    def __call__(self, detail: str) -> str:
        detail = _ARN.sub("<arn>", detail)
        detail = _AWS_URL.sub("<aws-endpoint>", detail)
        for word, shown in ((self.account, "<account>"), (self.region, "<region>")):
            if word:
                detail = re.sub(rf"(?<![\w-]){re.escape(word)}(?![\w-])", shown, detail)
        detail = _REGION.sub("<region>", _ACCOUNT.sub("<account>", detail))
        for name in self.names:
            named = rf"(?i)\b(table|group)(:?\s+|/)(['\"]?){re.escape(name)}\3(?![\w.-])"
            detail = re.sub(named, r"\1\2\3<name>\3", detail)
        return detail


def install_scrub(app: Any, config: Config) -> None:
    """Scrub every problem app answers with of config's account, region, table and group."""
    names = tuple(n for n in (config.lock.table, config.schedule.group) if n)
    app.extensions[_SCRUB_KEY] = Scrub(config.account.id, config.account.region, names)


#: The problem object's JSON Schema, as the OpenAPI document shows it.
PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail", "code"],
    "properties": {
        "type": {"type": "string", "description": "A URI naming the problem's kind"},
        "title": {"type": "string", "description": "The status's phrase"},
        "status": {"type": "integer"},
        "detail": {"type": "string", "description": "What went wrong, for a person"},
        "code": {"type": "string", "description": "A stable code, for a program"},
    },
}


#: A read's answer when the client's If-None-Match names its ETag: no body.
NOT_MODIFIED = "Not modified: the answer is the one whose ETag If-None-Match names."


def documented_problems() -> dict[Any, Any]:
    """Every problem status, as the OpenAPI document's responses of each route (and a read's
    304, which has no body)."""
    return {
        304: {"description": NOT_MODIFIED},
        **{
            status: {
                "description": meaning,
                "content": {MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}},
            }
            for status, meaning in STATUSES.items()
        },
    }
