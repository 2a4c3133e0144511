"""The preflight's results: a line's level, subject and text, and how an AWS failure becomes one
(denied, unreachable, or an error), for `sqsjkr check`'s checks.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

from sqsjkr.backends.aws import describe, error_code


class Level(enum.Enum):
    """How a check went: FAIL stops a deploy, WARN does not, SKIP says what was not checked."""

    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"
    SKIP = "SKIP"


@dataclass(frozen=True)
class Result:
    """One check's result; stop: the checks after it on that service are pointless."""

    level: Level
    subject: str
    text: str
    stop: bool = False


def ok(subject: str, text: str) -> Result:
    return Result(Level.OK, subject, text)


def warn(subject: str, text: str) -> Result:
    return Result(Level.WARN, subject, text)


def fail(subject: str, text: str, *, stop: bool = False) -> Result:
    return Result(Level.FAIL, subject, text, stop)


def is_access_denied(exc: BaseException) -> bool:
    """AccessDenied(Exception), or a 403 whose error code did not parse (moto answers a JSON
    protocol's denial in XML, which botocore reads as the bare status)."""
    code = error_code(exc)
    if code.startswith(("AccessDenied", "UnauthorizedOperation")):
        return True
    return isinstance(exc, ClientError) and code in ("", "403")


def unreachable(exc: BaseException) -> str | None:
    """The endpoint a connection failure names, or None for any other failure."""
    if isinstance(exc, BotoCoreError):
        endpoint = getattr(exc, "kwargs", {}).get("endpoint_url")
        if endpoint:
            return str(endpoint)
    return None


def failure(subject: str, action: str, exc: BaseException) -> Result:
    """A FAIL naming what went wrong: the action denied, the endpoint unreachable, or the error.

    Only a denied action lets the checks after it on the same service go on.
    """
    if is_access_denied(exc):
        # Not AWS's message: it repeats the identity that the credentials line already names.
        return fail(subject, f"{action} denied")
    endpoint = unreachable(exc)
    if endpoint:
        return fail(subject, f"cannot reach {endpoint} ({action}: {type(exc).__name__})", stop=True)
    if isinstance(exc, NoCredentialsError):
        return fail(subject, f"{action}: no credentials", stop=True)
    return fail(subject, f"{action}: {describe(exc)}", stop=True)


def unchecked_or_failure(subject: str, action: str, exc: BaseException, what: str) -> Result:
    """For a read that the hosts' policy need not grant: denied, what is left unchecked (a
    WARN); any other error is a failure()."""
    if is_access_denied(exc):
        return warn(subject, f"{what} not checked: {action} denied")
    return failure(subject, action, exc)
