"""Reporters: commands and a webhook told of each run's start and end, in horenso's report format.

The daemon hands starts and records to a Reporter, whose own threads run them off the jobs' path.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import urllib3

from sqsjkr.contract.config import ReportConfig
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import RunOutcome, RunRecord, RunStart
from sqsjkr.observability.logs import escape, shorten_command

log = logging.getLogger("sqsjkr.report")

#: Reports waiting for a free reporter thread; more are dropped with a warning, so a burst of runs
#: (or reporters slower than the jobs) cannot grow the daemon's memory without end.
QUEUE_SIZE = 256

#: Between SIGTERM and SIGKILL of a reporter that outlived its timeout.
KILL_GRACE = 2.0

#: How long close() waits, past its deadline, for threads it has freed by killing their commands.
JOIN_GRACE = 2.0

#: Lines of a reporter's own output that reach the log; the rest are counted.
MAX_LOGGED_LINES = 50

_VERBS = {
    RunOutcome.SUCCEEDED: "succeeded",
    RunOutcome.ERRORED: "failed",
    RunOutcome.TIMED_OUT: "timed out",
    RunOutcome.CANCELLED: "was cancelled",
    RunOutcome.ABORTED: "was aborted",
    RunOutcome.STOPPED: "was stopped",
    RunOutcome.FAILED_TO_START: "failed to start",
    RunOutcome.KILLED: "was killed",
    RunOutcome.DUPLICATE: "was a duplicate",  # not reported: no run ended
}


def horenso_report(record: RunRecord) -> dict[str, Any]:
    """What reporters get when a run ends: horenso's report, and sqsjkr's own fields."""
    report = _common(record.command, record.event_id, record.host)
    report.update(
        output=record.output,
        stdout=record.stdout,
        stderr=record.stderr,
        exitCode=-1 if record.exit_code is None else record.exit_code,
        signaled=record.signal is not None,
        result=_result(record),
        # horenso stamps startAt even when the command cannot start; the nearest here is the
        # moment a worker took the job up.
        startAt=_rfc3339(record.started_at or record.claimed_at),
        endAt=_rfc3339(record.ended_at),
    )
    if record.pid is not None:
        report["pid"] = record.pid
    report.update(_sqsjkr_fields(record.event_id, record.message_id, record.lock_id))
    report.update(
        outcome=record.outcome.value,
        attempt=record.attempt,
        sent_at=_rfc3339(record.sent_at),
        queue_delay=record.queue_delay,
    )
    return report


def horenso_notice(start: RunStart) -> dict[str, Any]:
    """What noticers get when a command starts: exitCode -1, no endAt, and no outcome yet (null)."""
    notice = _common(start.command, start.event_id, start.host)
    notice.update(
        output="",
        stdout="",
        stderr="",
        exitCode=-1,
        signaled=False,
        result="",
        startAt=_rfc3339(start.started_at),
    )
    notice.update(_sqsjkr_fields(start.event_id, start.message_id, start.lock_id))
    notice.update(
        outcome=None,
        attempt=start.attempt,
        sent_at=_rfc3339(start.sent_at),
        queue_delay=start.started_at - start.sent_at,
    )
    return notice


def summary_line(record: RunRecord) -> str:
    """The webhook's one-line "text": ":x: nightly failed on host-a: command exited with code: 3 (2.1s)"."""
    icon = _icon(record.outcome)
    took = "" if record.started_at is None else f" ({record.duration:.1f}s)"
    verb = _VERBS[record.outcome]
    return escape(f"{icon} {record.event_id} {verb} on {record.host}: {_result(record)}{took}")


def _icon(outcome: RunOutcome) -> str:
    """A success, a failure (contract.run.FAILURES), or neither: a run that someone killed, that
    its own abort_if_locked skipped, or that a shutdown stopped."""
    if outcome is RunOutcome.SUCCEEDED:
        return ":white_check_mark:"
    return ":x:" if outcome.failed else ":heavy_minus_sign:"


def _common(command: str, event_id: str, host: str) -> dict[str, Any]:
    return {
        "command": command,
        "commandArgs": ["sh", "-c", command],
        "tag": event_id,
        "hostname": host,
    }


def _sqsjkr_fields(event_id: str, message_id: str, lock_id: str | None) -> dict[str, Any]:
    return {"event_id": event_id, "message_id": message_id, "lock_id": lock_id}


def _result(record: RunRecord) -> str:
    """horenso's result strings, word for word; a run that never started says why."""
    if record.exit_code is not None:
        return f"command exited with code: {record.exit_code}"
    if record.signal is not None:
        return f"command died with signal: {record.signal}"
    why = record.outcome.value if not record.error else f"{record.outcome.value}: {record.error}"
    return f"failed to execute the command: {why}"


def _rfc3339(unix: float) -> str:
    # The host's local zone, as horenso writes its times.
    return datetime.fromtimestamp(unix).astimezone().isoformat(timespec="microseconds")


def _label(event_id: str, message_id: str) -> str:
    """As logs.job_label names a job."""
    if event_id == message_id:
        return f"job {message_id}"
    return f"job {message_id} (event {event_id})"


@dataclass(frozen=True)
class _Task:
    """One command (or the webhook, when command is None) to be told one JSON document."""

    label: str  # the job, as log lines name it
    body: bytes
    command: str | None


class Reporter:
    """Runs [report]'s noticers, reporters and webhook on threads of its own, never blocking a job.

    start() the threads, hand it notice()s and report()s, and close() it on the way out.
    """

    def __init__(self, config: ReportConfig, *, queue_size: int = QUEUE_SIZE) -> None:
        self._config = config
        self._timeout = config.timeout.seconds
        self._queue_size = queue_size
        # Unbounded underneath, bounded by hand: close() must always find room for its sentinels.
        self._queue: queue.Queue[_Task | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._running: set[subprocess.Popen[bytes]] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._abandoned = threading.Event()
        self._webhook = _Webhook(config.webhook_url, self._timeout) if config.webhook_url else None

    @property
    def enabled(self) -> bool:
        """Whether anything is configured to be told of runs."""
        return bool(self._config.reporters or self._config.noticers or self._webhook)

    def start(self) -> None:
        """Start the worker threads; with nothing configured, none."""
        if not self.enabled:
            return
        for n in range(self._config.max_concurrent):
            thread = threading.Thread(target=self._work, name=f"sqsjkr-report-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def notice(self, start: RunStart) -> None:
        """Tell the noticers that a command has started; returns at once."""
        if not self._config.noticers:
            return
        body = json.dumps(horenso_notice(start)).encode()
        label = _label(start.event_id, start.message_id)
        for command in self._config.noticers:
            self._put(_Task(label, body, command))

    def fired(self, event_id: str, firing: Firing) -> None:
        return None  # a firing's run is reported by report()

    def report(self, record: RunRecord) -> None:
        """Tell the reporters and the webhook that a run has ended, if report_on wants it; returns at once."""
        if not self._wanted(record):
            return
        report = horenso_report(record)
        body = json.dumps(report).encode()
        label = _label(record.event_id, record.message_id)
        for command in self._config.reporters:
            self._put(_Task(label, body, command))
        if self._webhook:
            posted = json.dumps({**report, "text": summary_line(record)}).encode()
            self._put(_Task(label, posted, None))

    def close(self, timeout: float | None = None) -> None:
        """Stop taking reports, let the queued and running ones finish for at most timeout seconds
        (the config's timeout by default), then kill what still runs and join the threads."""
        deadline = time.monotonic() + (self._timeout if timeout is None else timeout)
        with self._lock:
            self._closed = True
        for _ in self._threads:
            self._queue.put(None)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in self._threads):
            self._abandon()
            for thread in self._threads:
                thread.join(max(0.0, deadline + JOIN_GRACE - time.monotonic()))
        busy = [thread.name for thread in self._threads if thread.is_alive()]
        if busy:
            log.warning("reporter threads still busy after close, left behind: %s", ", ".join(busy))
        self._threads = []

    def _wanted(self, record: RunRecord) -> bool:
        if not (self._config.reporters or self._webhook):
            return False
        if self._config.report_on == "failure":
            return record.failure
        return True

    def _put(self, task: _Task) -> None:
        with self._lock:
            if self._closed:
                log.warning(
                    "%s: not reported to %s: reporting has stopped", task.label, _what(task)
                )
                return
            if self._queue.qsize() >= self._queue_size:
                log.warning(
                    "%s: not reported to %s: %d reports already waiting",
                    task.label,
                    _what(task),
                    self._queue_size,
                )
                return
            self._queue.put(task)

    def _abandon(self) -> None:
        """close()'s deadline has passed: drop what is queued, kill what runs."""
        with self._lock:
            self._abandoned.set()
            running = list(self._running)
        for proc in running:
            log.warning("reporter pid %d still running at shutdown: killing it", proc.pid)
            _signal_group(proc.pid, signal.SIGKILL)

    def _work(self) -> None:
        while (task := self._queue.get()) is not None:
            if self._abandoned.is_set():
                log.warning(
                    "%s: not reported to %s: the daemon is stopping", task.label, _what(task)
                )
                continue
            try:
                if task.command is None:
                    assert self._webhook is not None
                    self._webhook.post(task)
                else:
                    self._run(task, task.command)
            except Exception:
                log.exception("%s: reporting to %s failed", task.label, _what(task))

    def _run(self, task: _Task, command: str) -> None:
        """Run one reporter, its report on stdin and its output to the log."""
        shown = shorten_command(command)
        try:
            proc = subprocess.Popen(
                ["sh", "-c", command],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # so a timeout can stop the reporter's whole group
            )
        except OSError as e:
            log.warning("%s: reporter %r could not start: %s", task.label, shown, e)
            return
        with self._lock:
            self._running.add(proc)
            if self._abandoned.is_set():
                _signal_group(proc.pid, signal.SIGKILL)
        try:
            output = self._communicate(proc, task, shown)
        finally:
            with self._lock:
                self._running.discard(proc)
        _log_output(task.label, shown, output)
        code = proc.returncode
        if code != 0:
            how = f"died of signal {-code}" if code < 0 else f"exited with {code}"
            log.warning("%s: reporter %r %s", task.label, shown, how)

    def _communicate(self, proc: subprocess.Popen[bytes], task: _Task, shown: str) -> bytes:
        """The reporter's output once it ends; stopped (SIGTERM, then SIGKILL) at the timeout."""
        try:
            return proc.communicate(task.body, timeout=self._timeout)[0]
        except subprocess.TimeoutExpired:
            log.warning(
                "%s: reporter %r still running after %gs: stopping it",
                task.label,
                shown,
                self._timeout,
            )
        for signum in (signal.SIGTERM, signal.SIGKILL):
            _signal_group(proc.pid, signum)
            try:
                return proc.communicate(timeout=KILL_GRACE)[0]
            except subprocess.TimeoutExpired:
                pass
        # A descendant that left the group still holds the output pipe: stop reading it.
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            if pipe:
                pipe.close()
        return b""


class _Webhook:
    """POSTs reports to one URL, whose path (a Slack webhook's secret) never reaches the log."""

    def __init__(self, url: str, timeout: float) -> None:
        self._url = url
        parsed = urllib3.util.parse_url(url)
        self.origin = f"{parsed.scheme}://{parsed.host}" + (
            f":{parsed.port}" if parsed.port else ""
        )
        self._secrets = [s for s in (url, parsed.request_uri, parsed.auth) if s and s != "/"]
        # urllib3's own retries log the URL, secret and all: _send tries again itself.
        self._http = urllib3.PoolManager(timeout=urllib3.Timeout(total=timeout), retries=False)

    def post(self, task: _Task) -> None:
        try:
            status = self._send(task.body)
        except urllib3.exceptions.HTTPError as e:
            log.warning("%s: webhook %s failed: %s", task.label, self.origin, self._redact(str(e)))
            return
        if not 200 <= status < 300:
            log.warning("%s: webhook %s answered HTTP %d", task.label, self.origin, status)

    def _send(self, body: bytes) -> int:
        """The answer's HTTP status."""
        headers = {"Content-Type": "application/json"}
        try:
            return self._http.request("POST", self._url, body=body, headers=headers).status
        except urllib3.exceptions.ConnectTimeoutError:
            # No connection was made (refused, too, is one of these), so nothing was posted:
            # one more try cannot post the report twice.
            return self._http.request("POST", self._url, body=body, headers=headers).status

    def _redact(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "...")
        return text


def _what(task: _Task) -> str:
    return "the webhook" if task.command is None else f"reporter {shorten_command(task.command)!r}"


def _log_output(label: str, shown: str, output: bytes) -> None:
    lines = output.decode(errors="replace").splitlines()
    for line in lines[:MAX_LOGGED_LINES]:
        log.info("%s: reporter %r | %s", label, shown, line)
    if len(lines) > MAX_LOGGED_LINES:
        log.info("%s: reporter %r | ... %d more lines", label, shown, len(lines) - MAX_LOGGED_LINES)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the group has ended
        os.killpg(pgid, signum)
