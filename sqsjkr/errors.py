"""The error tree of sqsjkr.

Every error an operator may see derives from SqsjkrError and says what to fix. Transient AWS
failures stay botocore's own exceptions; sqsjkr.backends.aws.is_transient tells them apart.
"""

from __future__ import annotations

import json
import re

# What JSON leaves as it is but a reader must see: C1 controls and DEL, and the bidirectional
# controls, which make "bidi-\u202egnp.exe" read as "bidi-exe.png".
_INVISIBLE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


class SqsjkrError(Exception):
    """Base of all sqsjkr errors."""


class ConfigError(SqsjkrError):
    """The config file or a command-line option is invalid; the message names the field."""


class InvalidJobError(SqsjkrError):
    """A queue message is not a valid job; the message names the field and the reason."""


class InvalidFieldError(InvalidJobError):
    """One field of a message is invalid: its name (a dotted path) and the reason, kept apart so
    that a job carried inside a message (a pipeline's step) is named by its place in it."""

    def __init__(self, message: str, field: str, reason: str) -> None:
        super().__init__(message)
        self.field = field
        self.reason = reason

    def __reduce__(self) -> tuple[type[InvalidFieldError], tuple[str, str, str]]:
        return type(self), (str(self), self.field, self.reason)


class DurationError(SqsjkrError, ValueError):
    """A duration is not an int number of seconds nor Go duration syntax."""


class ResourceMissingError(SqsjkrError):
    """A queue or table named in the config does not exist."""


class StoreError(SqsjkrError):
    """A lock or dedupe store gave an answer sqsjkr cannot act on safely."""


class StoreTooSlow(StoreError):
    """A store answers, but too slowly to keep a lease fresh; worth trying again later."""


class HostFault(SqsjkrError):
    """The host could not start a job (no file descriptors, no memory, no processes left).

    Not the job's fault: its claim and lock are released and its message is left to run later.
    """


class StartupError(SqsjkrError):
    """The daemon cannot start: bad credentials, an unknown profile, access denied."""


class StatsServerError(SqsjkrError):
    """The stats endpoint cannot listen where it was told to."""


class ReceiverFailed(SqsjkrError):
    """The receive loop died of an unexpected error; the daemon stopped after draining."""


class LocalModeError(SqsjkrError):
    """Local mode cannot start: moto is not installed, or its port is taken."""


class RunRecordLost(SqsjkrError):
    """A followed run ended (it is no longer running), but its record is not in the history."""


class NotHeld(SqsjkrError):
    """An unlock named a lock or group slot that no one holds: nothing was removed."""


class UnlockRefused(SqsjkrError):
    """An unlock of a lock or slot whose lease lives, not forced: nothing was removed."""


class RouteRefused(SqsjkrError):
    """A route to a queue where its jobs would not run (a dead-letter queue, or one that no live
    daemon serves), not forced: nothing was routed."""


class ActionError(SqsjkrError):
    """A dashboard action's form is wrong (a field missing or malformed): nothing was done."""


class CrontabError(SqsjkrError):
    """A crontab line cannot be converted exactly; the message names the line number and the line."""


def shorten(text: str, limit: int) -> str:
    """At most limit characters of text, the cut said: a message may carry 256 KiB of it."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def quote(text: str, limit: int | None = None) -> str:
    """User text quoted for an error message; unpaired surrogates are escaped so it always logs.

    limit: at most this many characters are quoted, the cut said after the closing quote.
    """
    if limit is not None and len(text) > limit:
        return f"{quote(text[:limit])}... ({len(text) - limit} more characters)"
    quoted = _INVISIBLE.sub(lambda m: f"\\u{ord(m[0]):04x}", json.dumps(text, ensure_ascii=False))
    return quoted.encode("utf-8", "backslashreplace").decode("utf-8")


class ScheduleExpressionError(SqsjkrError, ValueError):
    """A schedule's expression is not one EventBridge takes (cron, rate or at); names the part."""


class AuditRefused(SqsjkrError):
    """A state change was not made because its audit item could not be written first."""


class NothingToDo(SqsjkrError):
    """An action found nothing to act on, or found it done already (no run in progress, a route
    already there, none to clear): nothing was changed."""


class RequestError(SqsjkrError):
    """What was asked of the fleet is malformed or ambiguous (a time, a schedule of several, a
    store it needs that the config turns off): nothing was done. The CLI exits 2 with it."""


class PageError(RequestError):
    """A page was asked from a position that is not one of its list (a cursor of another list,
    or altered): nothing was read."""


class ControlsFull(RequestError):
    """A pause or a route would grow the fleet's controls item past DynamoDB's largest item:
    nothing of it was written."""


class AlreadyDone(NothingToDo, RequestError):
    """What was asked is done already (a firing asked to run that already ran): nothing was
    sent. A RequestError for programs that caught one before; the CLI exits 1 with it, as with
    every nothing-to-do refusal."""


class WaitTimedOut(SqsjkrError, TimeoutError):
    """A wait's deadline (--timeout) passed before what it waited for: nothing was stopped. A
    TimeoutError, as a program's other waits raise; the CLI exits 124 with it."""


class IdempotencyKeyReused(RequestError):
    """A send's idempotency key came with another request before, within its window: nothing
    was sent."""


class UniqueSendBusy(SqsjkrError):
    """A send with unique_for found an identical send still under way (it holds the job's
    uniqueness item without a message id yet): nothing was sent."""
