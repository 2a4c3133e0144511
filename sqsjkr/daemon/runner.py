"""Running a job's command: `sh -c COMMAND` with the job's environment, output streamed to the log.

JobRunner is the seam (a future HTTP runner is another implementation); ShellRunner runs shell commands.
"""

from __future__ import annotations

import contextlib
import enum
import errno
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
from sqsjkr.contract.limits import bounded_wait
from sqsjkr.contract.run import RunContext
from sqsjkr.daemon.output import Output, read_output
from sqsjkr.errors import HostFault
from sqsjkr.observability.logs import JobLog, shorten_command

log = logging.getLogger("sqsjkr.runner")
output_log = logging.getLogger("sqsjkr.output")

Log = logging.Logger | logging.LoggerAdapter  # type: ignore[type-arg]

#: How long a stopped job's process group has between SIGTERM and SIGKILL, unless configured.
DEFAULT_KILL_GRACE = 10.0

#: Failures to start a command that say the host is short of something (descriptors, memory,
#: processes): the job is not at fault, and runs later. Any other failure to start (sh missing,
#: E2BIG: a command too long for execve) would fail again anywhere, and is the job's own.
HOST_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM})


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
    start_error: str | None = None  # why the command could not be started at all
    output: Output = Output()  # the last bytes it printed, as much as the runner keeps
    pid: int | None = None

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
            self._changed.wait_for(lambda: self._reason is not None, bounded_wait(timeout))
            return self._reason


class JobRunner(Protocol):
    """Runs a job to completion, or until its timeout or the daemon stops it."""

    def run(
        self,
        job: Job,
        *,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None = None,
    ) -> RunResult:
        """Run job and wait for it to end; stop.trip(CANCELLED) from another thread ends it.

        context says which scheduled run this is, for the job to see. Raises HostFault when the
        host cannot start it (the job is not at fault).
        """


class ShellRunner:
    """Runs `sh -c COMMAND` in its own session, with the daemon's environment plus the job's."""

    def __init__(
        self,
        base_env: Mapping[str, str] | None = None,
        *,
        kill_grace: float = DEFAULT_KILL_GRACE,
        tail_bytes: int = 0,
    ) -> None:
        """tail_bytes: how much of the end of each job's output its result keeps."""
        self._base_env = dict(os.environ if base_env is None else base_env)
        self._kill_grace = kill_grace
        self._tail_bytes = tail_bytes

    def run(
        self,
        job: Job,
        *,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None = None,
    ) -> RunResult:
        output = JobLog(output_log, job)
        known = context.environment() if context is not None else {}
        return run_shell(
            job.command,
            # The run's own facts last: a message's envs cannot pretend to be another run.
            env={**self._base_env, **job.envs, **known},
            emit=lambda line: output.info("| %s", line),
            timeout=timeout,
            stop=stop,
            kill_grace=self._kill_grace,
            log=JobLog(log, job),
            tail_bytes=self._tail_bytes,
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
    output = JobLog(output_log, job)
    return run_shell(
        trigger,
        env=os.environ if env is None else env,
        emit=lambda line: output.info("life_time_trigger | %s", line),
        stdin=trigger_line(job) + "\n",
        stop=stop,
        log=JobLog(log, job),
    )


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    assert pipe is not None
    # A command that does not read its input is its business, not an error.
    with contextlib.suppress(BrokenPipeError), pipe:
        pipe.write(data)


class _GroupStopper:
    """Stops a command's process group once its stop switch trips or its timeout passes: SIGTERM,
    then SIGKILL to whatever of it is left after grace. Runs on a thread of its own."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        stop: StopSwitch,
        timeout: float | None,
        grace: float,
        log: Log,
    ) -> None:
        self._proc = proc
        self._stop = stop
        self._timeout = timeout
        self._grace = grace
        self._log = log
        #: Whether a signal reached the group: only then did the stop cut the command short.
        self.signalled = False

    def run(self) -> None:
        try:
            self._wait_and_stop()
        except BaseException:
            # A stopper that died would leave its job unstoppable (and the daemon's stop
            # waiting for it for ever): end the job now instead.
            self._log.critical(
                "the stopper of process group %d failed: SIGKILL", self._proc.pid, exc_info=True
            )
            self.signalled |= _signal_group(self._proc.pid, signal.SIGKILL)

    def _wait_and_stop(self) -> None:
        if self._stop.wait(self._timeout) is None:
            self._stop.trip(StopReason.TIMED_OUT)
        reason = self._stop.wait(0)
        if reason is None or reason is StopReason.ENDED:
            return
        # The job is the leader of its own session, so its group id is its pid. The group
        # outlives sh while any child of it lives; children that left the group are not ours.
        pgid = self._proc.pid
        self._log.warning("%s: stopping process group %d (SIGTERM)", reason.value, pgid)
        self.signalled = _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + self._grace
        # Rare path (a stopped job), so a short poll of the group is fine here. A group of one
        # sh that has exited ends as soon as the worker reaps it.
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _group_alive(pgid):
            self._log.warning(
                "process group %d still alive %gs after SIGTERM: SIGKILL", pgid, self._grace
            )
            _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, signum: int) -> bool:
    """Signal a process group: False if it no longer exists."""
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        return False
    return True


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
    log: Log = log,
    tail_bytes: int = 0,
) -> RunResult:
    """Run command under sh, streaming the lines of its stdout and stderr to emit as they come;
    the result keeps the last tail_bytes of each.

    After timeout seconds, or when stop is tripped, the command's whole process group gets
    SIGTERM, and SIGKILL kill_grace seconds later. HostFault when the host cannot start it.
    """
    started = time.monotonic()
    try:
        proc = _spawn(command, env, with_stdin=stdin is not None)
    except OSError as exc:
        if exc.errno in HOST_ERRNOS:
            raise HostFault(f"could not start sh: {exc.strerror or exc}") from exc
        log.error("could not start sh for command %s: %s", shorten_command(command), exc)
        return RunResult(127, time.monotonic() - started, start_error=exc.strerror or str(exc))
    assert proc.stdout is not None and proc.stderr is not None
    stop = stop or StopSwitch()
    stopper = _GroupStopper(proc, stop, timeout, kill_grace, log)
    threads = [threading.Thread(target=stopper.run, name="sqsjkr-stopper")]
    if stdin is not None:
        # Fed from a thread of its own: a command that prints a lot before reading its input
        # must not block on a full stdout pipe while we block on a full stdin pipe.
        threads.append(
            threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), name="sqsjkr-stdin")
        )
    _start_or_kill(threads, proc)
    with proc.stdout, proc.stderr:
        output = read_output(proc.stdout, proc.stderr, emit, tail_bytes)
    exit_code = proc.wait()
    stop.trip(StopReason.ENDED)
    for thread in threads:
        thread.join()
    reason = stop.wait(0)
    return RunResult(
        exit_code=exit_code,
        seconds=time.monotonic() - started,
        stopped=reason if stopper.signalled and reason is not StopReason.ENDED else None,
        output=output,
        pid=proc.pid,
    )


def _spawn(command: str, env: Mapping[str, str], *, with_stdin: bool) -> subprocess.Popen[bytes]:
    # A session of its own: a Ctrl-C aimed at the daemon's terminal must not kill the jobs it
    # is draining.
    return subprocess.Popen(
        ["sh", "-c", command],
        # sh is found on the daemon's PATH, not on a PATH the job sets for itself.
        executable=shutil.which("sh"),
        stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
        start_new_session=True,
    )


def _start_or_kill(threads: list[threading.Thread], proc: subprocess.Popen[bytes]) -> None:
    """Start the threads that watch a command; if the host cannot start them, the command is
    killed before it has done much, and HostFault says the job is to run later."""
    started = []
    try:
        for thread in threads:
            thread.start()
            started.append(thread)
    except RuntimeError as exc:  # "can't start new thread"
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        for thread in started:
            thread.join()
        raise HostFault(f"could not start a thread to watch the command: {exc}") from exc
