"""Logging of the daemon and the commands: levels, the line format, job context, and safe text.

Every component logs through a named logger under "sqsjkr."; this module sets up where lines go.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any

from sqsjkr.contract.job import Job

LOG_LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}

#: Longest command shown in a log line; the rest is cut and its length said. A message may
#: carry a command of 256 KiB, which would make one log line of that size.
MAX_LOGGED_COMMAND = 200

# C0 and C1 controls, DEL, and Unicode's line and paragraph separators: anything that could end a
# log line early or forge one (a newline in an event_id), or drive a terminal (ESC).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape(text: str) -> str:
    """text with every control character written as an escape, so a log line stays one line."""
    return _UNSAFE.sub(lambda m: _NAMED.get(m[0]) or f"\\x{ord(m[0]):02x}", text)


def shorten_command(command: str, limit: int = MAX_LOGGED_COMMAND) -> str:
    """A command as logs show it: at most limit characters, the cut said."""
    if len(command) <= limit:
        return command
    return f"{command[:limit]}... ({len(command) - limit} more characters)"


def job_label(job: Job) -> str:
    """How log lines name a job: its message id, and its event id when it has one of its own."""
    if job.event_id == job.message_id:
        return f"job {job.message_id}"
    return f"job {job.message_id} (event {job.event_id})"


def job_fields(job: Job) -> dict[str, str]:
    """The job's identity as separate fields of a log record, for structured log formats."""
    fields = {"event_id": job.event_id, "message_id": job.message_id}
    if job.lock_id:
        fields["lock_id"] = job.lock_id
    return fields


class JobLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """A logger for one job: every line starts with the job's label and carries its fields."""

    def __init__(self, logger: logging.Logger, job: Job) -> None:
        super().__init__(logger, job_fields(job))
        self.label = job_label(job)

    def process(self, msg: Any, kwargs: MutableMapping[str, Any]) -> tuple[Any, Any]:
        extra: Mapping[str, Any] = kwargs.get("extra") or {}
        kwargs["extra"] = {**(self.extra or {}), **extra}
        return f"{self.label} {msg}", kwargs


class SafeFormatter(logging.Formatter):
    """Escapes control characters in each message: fields that come from a queue message (an
    event_id, a command, a job's output) must not be able to forge log lines. Tracebacks, which
    are sqsjkr's own, keep their lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape(record.message)
        return super().formatMessage(record)


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=LOG_LEVELS[level], handlers=[handler], force=True)
    # botocore's debug output prints request bodies, and with them job environments; the
    # embedded moto server logs every request.
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
