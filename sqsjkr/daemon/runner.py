"""Running a job's command: `sh -c COMMAND` with the job's environment, output streamed to the log.

JobRunner is the seam (a future HTTP runner is another implementation); ShellRunner runs shell commands.
"""

from __future__ import annotations

import codecs
import contextlib
import enum
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Protocol

from sqsjkr.contract.job import Job, trigger_line

log = logging.getLogger("sqsjkr.runner")
output_log = logging.getLogger("sqsjkr.output")

#: Longest piece of output logged as one line; longer lines are split, so memory stays bounded
#: whatever a job prints.
MAX_LINE_BYTES = 16 * 1024


#: How long a stopped job's process group has between SIGTERM and SIGKILL, unless configured.
DEFAULT_KILL_GRACE = 10.0


class StopReason(enum.Enum):
    """Why a job was stopped before it ended by itself."""

    TIMED_OUT = "timed out"
    CANCELLED = "cancelled"  # by the daemon, at its shutdown_timeout
    ENDED = "ended"  # not stopped: the job ended first


@dataclass(frozen=True)
class RunResult:
    """How a command ended."""

    exit_code: int  # negative: killed by that signal; 127 when it could not be started
    seconds: float
    stopped: StopReason | None = None  # TIMED_OUT or CANCELLED when the runner stopped it

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.stopped is None


class StopSwitch:
    """Stops one running job: tripped by the daemon (cancel), by the job's timeout, or by its end.

    The first reason wins; a condition rather than polling, so a job's end is seen at once.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._reason: StopReason | None = None

    def trip(self, reason: StopReason) -> None:
        with self._changed:
            if self._reason is None:
                self._reason = reason
                self._changed.notify_all()

    def wait(self, timeout: float | None) -> StopReason | None:
        """The reason once tripped, or None when timeout passes first."""
        with self._changed:
            self._changed.wait_for(lambda: self._reason is not None, timeout)
            return self._reason


class JobRunner(Protocol):
    """Runs a job to completion, or until its timeout or the daemon stops it."""

    def run(self, job: Job, *, timeout: float | None, stop: StopSwitch) -> RunResult:
        """Run job and wait for it to end; stop.trip(CANCELLED) from another thread ends it."""


def stream_lines(stream: IO[bytes], emit: Callable[[str], None]) -> None:
    """Pass each line of stream to emit, cut at MAX_LINE_BYTES, never holding more than one line."""
    # Incremental, so a character split by a cut is not garbled.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    cut = False
    for chunk in iter(lambda: stream.readline(MAX_LINE_BYTES), b""):
        ends_line = chunk.endswith(b"\n")
        text = decoder.decode(chunk, final=ends_line).rstrip("\r\n")
        # A line of exactly MAX_LINE_BYTES leaves only its newline for the next read.
        if text or not cut:
            emit(text)
        cut = not ends_line


class ShellRunner:
    """Runs `sh -c COMMAND` in its own session, with the daemon's environment plus the job's."""

    def __init__(
        self, base_env: Mapping[str, str] | None = None, *, kill_grace: float = DEFAULT_KILL_GRACE
    ) -> None:
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._kill_grace = kill_grace

    def run(self, job: Job, *, timeout: float | None, stop: StopSwitch) -> RunResult:
        tag = f"[{job.event_id} {job.message_id}]"
        return run_shell(
            job.command,
            env={**self._base_env, **job.envs},
            emit=lambda line: output_log.info("%s %s", tag, line),
            timeout=timeout,
            stop=stop,
            kill_grace=self._kill_grace,
        )


def run_trigger(
    trigger: str,
    job: Job,
    stop: StopSwitch | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> RunResult:
    """The life_time trigger: `sh -c TRIGGER` with the Go daemon's line about job on its stdin.

    stop ends it as it ends a job, so that a hanging trigger cannot hold up a shutdown.
    """
    return run_shell(
        trigger,
        env=os.environ if env is None else env,
        emit=lambda line: output_log.info("[life_time_trigger %s] %s", job.message_id, line),
        stdin=trigger_line(job) + "\n",
        stop=stop,
    )


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    assert pipe is not None
    # A command that does not read its input is its business, not an error.
    with contextlib.suppress(BrokenPipeError), pipe:
        pipe.write(data)


def _stop_group(
    proc: subprocess.Popen[bytes],
    stop: StopSwitch,
    timeout: float | None,
    grace: float,
) -> None:
    """Wait for the stop switch or the timeout; then SIGTERM the job's process group, and
    SIGKILL whatever of it is left after grace."""
    if stop.wait(timeout) is None:
        stop.trip(StopReason.TIMED_OUT)
    reason = stop.wait(0)
    if reason is None or reason is StopReason.ENDED:
        return
    # The job is the leader of its own session, so its group id is its pid. The group outlives
    # sh while any child of it lives; children that left the group are not ours to chase.
    pgid = proc.pid
    log.warning("%s: stopping process group %d (SIGTERM)", reason.value, pgid)
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    # Rare path (a stopped job), so a short poll of the group is fine here. A group of one sh
    # that has exited ends as soon as the worker reaps it.
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _group_alive(pgid):
        log.warning("process group %d still alive %gs after SIGTERM: SIGKILL", pgid, grace)
        _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs; zombies do not count, since an init that
    is slow to reap orphans would otherwise make every stopped job wait out its grace."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True  # no /proc (not Linux): count the group as alive while it exists
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False


def run_shell(
    command: str,
    *,
    env: Mapping[str, str],
    emit: Callable[[str], None],
    stdin: str | None = None,
    timeout: float | None = None,
    stop: StopSwitch | None = None,
    kill_grace: float = DEFAULT_KILL_GRACE,
) -> RunResult:
    """Run command under sh, streaming its stdout and stderr (merged, as the Go daemon did) to emit.

    After timeout seconds, or when stop is tripped, the command's whole process group gets
    SIGTERM, and SIGKILL kill_grace seconds later.
    """
    started = time.monotonic()
    try:
        # A session of its own: a Ctrl-C aimed at the daemon's terminal must not kill the
        # jobs it is draining.
        proc = subprocess.Popen(
            ["sh", "-c", command],
            # sh is found on the daemon's PATH, not on a PATH the job sets for itself.
            executable=shutil.which("sh"),
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
    except OSError as exc:
        log.error("could not start sh for command %r: %s", command, exc)
        return RunResult(exit_code=127, seconds=time.monotonic() - started)
    assert proc.stdout is not None
    stop = stop or StopSwitch()
    stopper = threading.Thread(
        target=_stop_group,
        args=(proc, stop, timeout, kill_grace),
        name="sqsjkr-stopper",
    )
    stopper.start()
    feeder = None
    if stdin is not None:
        # Fed from a thread of its own: a command that prints a lot before reading its input
        # must not block on a full stdout pipe while we block on a full stdin pipe.
        feeder = threading.Thread(
            target=_feed, args=(proc.stdin, stdin.encode()), name="sqsjkr-stdin"
        )
        feeder.start()
    with proc.stdout:
        stream_lines(proc.stdout, emit)
    if feeder is not None:
        feeder.join()
    exit_code = proc.wait()
    stop.trip(StopReason.ENDED)
    stopper.join()
    reason = stop.wait(0)
    return RunResult(
        exit_code=exit_code,
        seconds=time.monotonic() - started,
        stopped=None if reason is StopReason.ENDED else reason,
    )
