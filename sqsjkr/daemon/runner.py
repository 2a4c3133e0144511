"""Running a job's command: `sh -c COMMAND` with the job's environment, output streamed to the log.

JobRunner is the seam (a future HTTP runner is another implementation); ShellRunner runs shell commands.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import select
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Protocol

from sqsjkr.contract.job import Job, trigger_line
from sqsjkr.contract.limits import MAX_WAIT_SECONDS, bounded_wait
from sqsjkr.contract.run import RunContext
from sqsjkr.daemon.live import LiveTails, watching
from sqsjkr.daemon.output import ExitWatch, Output, Tail, read_output
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
    KILLED = "killed"  # by `sqsjkr kill`, seen on its claim at a heartbeat
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
    """Stops one running job: tripped by the daemon (cancel), a kill, its timeout, or its end.

    The first reason wins; a condition rather than polling, so a job's end is seen at once.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._reason: StopReason | None = None
        self._listeners: list[Callable[[StopReason], None]] = []

    def trip(self, reason: StopReason) -> None:
        with self._changed:
            if self._reason is not None:
                return
            self._reason = reason
            self._changed.notify_all()
            listeners = list(self._listeners)
        for listener in listeners:
            listener(reason)

    def on_trip(self, listener: Callable[[StopReason], None]) -> None:
        """Call listener with the reason when the switch trips, in the thread that trips it; at
        once if it already has."""
        with self._changed:
            reason = self._reason
            if reason is None:
                self._listeners.append(listener)
                return
        listener(reason)

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


def time_limit(job: Job, job_timeout: float | None) -> float | None:
    """The seconds job may run (None: no limit): an HTTP call's own timeout, else the job's
    timeout, else the daemon's job_timeout."""
    if job.http is not None and job.http.timeout is not None:
        return job.http.timeout.seconds
    return job.timeout.seconds if job.timeout is not None else job_timeout


class ShellRunner:
    """Runs `sh -c COMMAND` in its own session, with the daemon's environment plus the job's."""

    def __init__(
        self,
        base_env: Mapping[str, str] | None = None,
        *,
        kill_grace: float = DEFAULT_KILL_GRACE,
        tail_bytes: int = 0,
        live: LiveTails | None = None,
    ) -> None:
        """tail_bytes: how much of the end of each job's output its result keeps; live: where
        that tail is read while the job runs (the live output's writer)."""
        # Encoded once: Popen encodes each name and value of a job's environment (os.fsencode,
        # some 90 calls for a daemon's environment) unless they are bytes already.
        self._base_env = _encoded(os.environ if base_env is None else base_env)
        self._kill_grace = kill_grace
        self._tail_bytes = tail_bytes
        self._live = live
        # Looked up once, on the daemon's PATH, which does not change while it runs.
        self._sh = shutil.which("sh")

    def run(
        self,
        job: Job,
        *,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None = None,
    ) -> RunResult:
        output = JobLog(output_log, job)
        # Each job's own copy of the daemon's environment (one C-level copy), then its envs
        # and, last, the run's own facts: a message's envs cannot pretend to be another run.
        env = self._base_env.copy()
        env.update(_encoded(job.envs))
        if context is not None:
            env.update(_encoded(context.environment()))
        with watching(self._live, job, self._tail_bytes) as merged:
            return run_shell(
                job.command,
                env=env,
                emit=lambda line: output.info("| %s", line),
                timeout=timeout,
                stop=stop,
                kill_grace=self._kill_grace,
                log=JobLog(log, job),
                tail_bytes=self._tail_bytes,
                sh=self._sh,
                merged=merged,
            )


def _encoded(env: Mapping[str, str]) -> dict[bytes, bytes]:
    """env as Popen passes it to execve: names and values in the file system's encoding."""
    return {os.fsencode(name): os.fsencode(value) for name, value in env.items()}


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
    """Stops a command's process group once its stop switch trips (a cancel, the timeout): SIGTERM
    at once, from the thread that trips it, then SIGKILL to whatever of it is left after grace,
    from a thread started for that. A command that ends by itself costs no thread."""

    def __init__(self, proc: subprocess.Popen[bytes], grace: float, log: Log) -> None:
        self._proc = proc
        self._grace = grace
        self._log = log
        self._killer: threading.Thread | None = None
        # Held by a trip from its signal until it has noted it: the worker may see the command end
        # in between (a loaded host) and must not read a kill as an exit -15 of its own.
        self._tripping = threading.Lock()
        #: Whether a signal reached the group: only then did the stop cut the command short.
        self.signalled = False

    def tripped(self, reason: StopReason) -> None:
        """The stop switch's listener."""
        if reason is StopReason.ENDED:
            return
        with self._tripping:
            self._stop_group(reason)

    def _stop_group(self, reason: StopReason) -> None:
        # The job is the leader of its own session, so its group id is its pid. The group
        # outlives sh while any child of it lives; children that left the group are not ours.
        pgid = self._proc.pid
        try:
            self._log.warning("%s: stopping process group %d (SIGTERM)", reason.value, pgid)
            self.signalled = _signal_group(pgid, signal.SIGTERM)
            killer = threading.Thread(target=self._kill_after_grace, name="sqsjkr-stopper")
            killer.start()
            self._killer = killer
        except BaseException:
            # A stop that failed halfway would leave its job unstoppable (and the daemon's stop
            # waiting for it for ever): end the job now instead.
            self._log.critical("stopping process group %d failed: SIGKILL", pgid, exc_info=True)
            self.signalled |= _signal_group(pgid, signal.SIGKILL)

    def join(self) -> None:
        """Wait until a stopped command's group is gone or killed (and a stop in progress noted)."""
        with self._tripping:
            pass
        if self._killer is not None:
            self._killer.join()

    def _kill_after_grace(self) -> None:
        pgid = self._proc.pid
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


class _Deadline:
    """A job's timeout, kept by the thread that reads its output and waits for it: trips the
    stop switch once it passes."""

    #: The longest a wait for output or for the exit lasts before the deadline is looked at
    #: again: epoll takes no timeout past about 24 days.
    LONGEST_WAIT = 3600.0

    def __init__(self, stop: StopSwitch, timeout: float | None) -> None:
        self._stop = stop
        self._at = None if timeout is None else time.monotonic() + min(timeout, MAX_WAIT_SECONDS)

    def left(self) -> float | None:
        """Seconds to wait at most before looking again (None: no timeout, or it has passed);
        trips the switch once the timeout has passed."""
        if self._at is None:
            return None
        left = self._at - time.monotonic()
        if left > 0:
            return min(left, self.LONGEST_WAIT)
        self._at = None
        self._stop.trip(StopReason.TIMED_OUT)
        return None

    def wait(self, proc: subprocess.Popen[bytes]) -> int:
        """Wait for the command to exit, keeping the timeout; its exit code.

        Its output has ended here; most commands have exited too. One that closed its output
        and runs on is waited for on a pidfd: Popen.wait(timeout) would poll 20 times a second.
        """
        if self.left() is not None and proc.poll() is None:
            try:
                pidfd = os.pidfd_open(proc.pid)
            except (AttributeError, OSError):  # not Linux, or before 5.3
                while (left := self.left()) is not None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        return proc.wait(left)
            else:
                try:
                    poller = select.poll()
                    poller.register(pidfd, select.POLLIN)
                    while (left := self.left()) is not None:
                        if poller.poll(left * 1000):
                            break
                finally:
                    os.close(pidfd)
        return proc.wait()


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
    env: Mapping[str, str] | Mapping[bytes, bytes],
    emit: Callable[[str], None],
    stdin: str | None = None,
    timeout: float | None = None,
    stop: StopSwitch | None = None,
    kill_grace: float = DEFAULT_KILL_GRACE,
    log: Log = log,
    tail_bytes: int = 0,
    sh: str | None = None,
    merged: Tail | None = None,
) -> RunResult:
    """Run command under sh (sh: its path; None: looked up on PATH), streaming the lines of its
    stdout and stderr to emit as they come; the result keeps the last tail_bytes of each, and
    both merged in merged when given.

    After timeout seconds, or when stop is tripped, the command's whole process group gets
    SIGTERM, and SIGKILL kill_grace seconds later. HostFault when the host cannot start it.
    """
    started = time.monotonic()
    try:
        proc = _spawn(command, env, with_stdin=stdin is not None, sh=sh or shutil.which("sh"))
    except OSError as exc:
        if exc.errno in HOST_ERRNOS:
            raise HostFault(f"could not start sh: {exc.strerror or exc}") from exc
        log.error("could not start sh for command %s: %s", shorten_command(command), exc)
        return RunResult(127, time.monotonic() - started, start_error=exc.strerror or str(exc))
    assert proc.stdout is not None and proc.stderr is not None
    stop = stop or StopSwitch()
    stopper = _GroupStopper(proc, kill_grace, log)
    threads = []
    if stdin is not None:
        # Fed from a thread of its own: a command that prints a lot before reading its input
        # must not block on a full stdout pipe while we block on a full stdin pipe.
        threads.append(
            threading.Thread(target=_feed, args=(proc.stdin, stdin.encode()), name="sqsjkr-stdin")
        )
    _start_or_kill(threads, proc)
    stop.on_trip(stopper.tripped)
    deadline = _Deadline(stop, timeout)
    with proc.stdout, proc.stderr, _exit_watch(proc, log) as watch:
        output = read_output(
            proc.stdout,
            proc.stderr,
            emit,
            tail_bytes,
            wait=deadline.left,
            exit_watch=watch,
            merged=merged,
        )
    exit_code = deadline.wait(proc)
    stop.trip(StopReason.ENDED)
    stopper.join()
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


@contextlib.contextmanager
def _exit_watch(proc: subprocess.Popen[bytes], log: Log) -> Iterator[ExitWatch | None]:
    """An ExitWatch on proc that logs why its job still runs once sh has exited; None where
    there is no pidfd (not Linux, or before 5.3): the job then runs on without that line."""
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        yield None
        return

    def held_open() -> None:
        log.warning(
            "is still running: its shell exited (%s), but a process it left in the background "
            "holds its output; the job keeps its worker and its lock until that process ends or "
            "closes its stdout and stderr (or the job's timeout)",
            _how_exited(proc.pid),
        )

    try:
        yield ExitWatch(pidfd, held_open)
    finally:
        os.close(pidfd)


def _how_exited(pid: int) -> str:
    """ "code 0" or "signal 9" of an exited child, left unreaped for Popen to wait for."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
    if info is None:
        return "code unknown"
    kind = "code" if info.si_code == os.CLD_EXITED else "signal"
    return f"{kind} {info.si_status}"


def _spawn(
    command: str,
    env: Mapping[str, str] | Mapping[bytes, bytes],
    *,
    with_stdin: bool,
    sh: str | None,
) -> subprocess.Popen[bytes]:
    # A session of its own: a Ctrl-C aimed at the daemon's terminal must not kill the jobs it
    # is draining. start_new_session rather than a preexec_fn lets Python start the command
    # with vfork rather than a fork of the whole daemon (posix_spawn would also need
    # close_fds=False, which would leak the daemon's sockets into every job).
    return subprocess.Popen(
        ["sh", "-c", command],
        # sh is found on the daemon's PATH, not on a PATH the job sets for itself.
        executable=sh,
        stdin=subprocess.PIPE if with_stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # A dict is passed as it is (ShellRunner builds one per job); another mapping (the
        # trigger's os.environ) is copied, as Popen would read it while it may change.
        env=env if isinstance(env, dict) else dict(env),
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
