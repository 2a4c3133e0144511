"""Logging of the daemon and the commands: levels, the line format, job context, and safe text.

Every component logs through a named logger under "sqsjkr."; this module sets up where lines go.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO, Any

from sqsjkr.contract.job import Job

# The daemon and the fleet layer take these text helpers from here with the rest of logging.
from sqsjkr.contract.text import MAX_LOGGED_COMMAND as MAX_LOGGED_COMMAND
from sqsjkr.contract.text import escape as escape
from sqsjkr.contract.text import shorten_command as shorten_command

LOG_LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}


def moment(unix_seconds: float, timespec: str = "seconds") -> str:
    """A moment as operators read it: ISO 8601 in this host's zone, with its UTC offset
    (2026-11-25T14:03:07+00:00), so that a reader elsewhere knows which moment it is. A lease
    that never ends (the "none" backends') is "never"."""
    if unix_seconds == math.inf:
        return "never"
    try:
        return datetime.fromtimestamp(unix_seconds).astimezone().isoformat(timespec=timespec)
    except (OverflowError, OSError, ValueError):  # beyond the platform's dates
        return f"{unix_seconds:g} (unix seconds)"


@dataclass(frozen=True)
class Moment:
    """moment() for a log call's arguments: made into text only if the line is logged."""

    unix_seconds: float
    timespec: str = "seconds"

    def __str__(self) -> str:
        return moment(self.unix_seconds, self.timespec)


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


#: The job fields a JSON line carries as keys of their own (job_fields sets them on records).
JOB_FIELDS = ("event_id", "message_id", "lock_id")
#: Log formats: `[log] format` and --log-format.
LOG_FORMATS = ("text", "json")

# syslog priorities by logging level, for journald's "<N>" line prefix.
_PRIORITIES = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}


def _priority(levelno: int) -> int:
    return next(
        (p for level, p in sorted(_PRIORITIES.items(), reverse=True) if levelno >= level), 7
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, RFC 3339), level, logger, message, the job's
    fields, and the exception when there is one."""

    def __init__(self, *, journald: bool = False) -> None:
        super().__init__()
        self._journald = journald

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in JOB_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                data[name] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        line = json.dumps(data, ensure_ascii=False)
        # journald strips the prefix and files the line under its priority.
        return f"<{_priority(record.levelno)}>{line}" if self._journald else line


class JournaldFormatter(SafeFormatter):
    """Text lines for journald: the "<N>" priority prefix it reads, and no timestamp, since
    the journal stamps every line itself."""

    def __init__(self) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return f"<{_priority(record.levelno)}>{super().format(record)}"


def logs_to_journald(stream: IO[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether stream is connected to the journal: systemd sets JOURNAL_STREAM to its
    "device:inode", which a program compares with its own stream, as systemd asks."""
    expected = environ.get("JOURNAL_STREAM", "")
    if not expected:
        return False
    try:
        st = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return False
    return expected == f"{st.st_dev}:{st.st_ino}"


#: Libraries that stay at WARNING even with --log-all: botocore's debug output prints request
#: bodies, and with them job environments.
SECRET_KEEPERS = ("botocore", "boto3")
#: Libraries that set their own logger's level (werkzeug, the embedded moto server's, logs every
#: request at INFO): theirs is set outright.
LEVEL_SETTERS = ("werkzeug", "urllib3", "moto")


def setup_logging(
    level: str,
    log_format: str = "text",
    stream: IO[str] | None = None,
    *,
    log_all: bool = False,
) -> None:
    """Log sqsjkr's own records at level to stream (stderr) as text or JSON lines; under
    journald, with priorities. Other libraries log at WARNING and above unless log_all (in local
    mode, moto's debug lines would otherwise be most of the log)."""
    stream = stream or sys.stderr
    handler = logging.StreamHandler(stream)
    journald = logs_to_journald(stream)
    formatter: logging.Formatter
    if log_format == "json":
        formatter = JsonFormatter(journald=journald)
    elif journald:
        formatter = JournaldFormatter()
    else:
        formatter = SafeFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    ours = LOG_LEVELS[level]
    others = ours if log_all else max(ours, logging.WARNING)
    logging.basicConfig(level=others, handlers=[handler], force=True)
    # No format of ours shows a record's thread, process or multiprocessing names: not looking
    # them up for every record (the logging HOWTO's "Optimization") makes a line a tenth cheaper.
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.getLogger("sqsjkr").setLevel(ours)
    for name in SECRET_KEEPERS:
        logging.getLogger(name).setLevel(max(ours, logging.WARNING))
    for name in LEVEL_SETTERS:
        logging.getLogger(name).setLevel(others)
