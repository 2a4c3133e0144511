"""Commands started as processes forked from a server that has imported sqsjkr's daemon once:
each test's daemons are real processes, signalled and killed, without importing botocore anew.

A daemon exec'd anew spends ~0.3 s of CPU importing botocore, click and sqsjkr before it does
anything; the tests start some 150 of them. multiprocessing's fork server imports those once per
test worker and forks a process for each command, which then runs `sqsjkr ARGS` as the installed
command does (its environment, working directory and output set first). test_cli.py runs the
installed command itself.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

#: What the fork server imports before it forks: all that `sqsjkr run` imports as it starts, and
#: what `sqsjkr local` and `sqsjkr web` add (moto, Flask and the API's models: a second more).
PRELOAD = [
    "sqsjkr.commands.cli",
    "sqsjkr.commands.run",
    "sqsjkr.daemon.service",
    "sqsjkr.commands.local",
    "sqsjkr.local.mode",
    "sqsjkr.commands.dashboard",
    "sqsjkr.api.app",
    "sqsjkr.web.server",
    # Imported as the tests import it: the fork server starts in the worker's directory, the root.
    "tests.forked_preload",
]

_SERVER = multiprocessing.get_context("forkserver")
# "__main__" too: each forked process would otherwise import the main module of the process that
# started the server (pytest's script, when run without xdist) anew.
_SERVER.set_forkserver_preload(["__main__", *PRELOAD])


def _run_command(
    args: list[str],
    env: dict[str, str],
    cwd: str,
    log_path: str,
    preexec_fn: Callable[[], None] | None,
) -> None:
    """In the forked process: what exec'ing `sqsjkr ARGS` with this environment, working
    directory and output would have set up, then the command."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    time.tzset()  # the fork server's zone otherwise: the C library reads TZ here, not at each call
    if preexec_fn is not None:
        preexec_fn()
    from sqsjkr.commands.cli import main

    main(args)


class ForkedCommand:
    """`sqsjkr ARGS` in a forked process, with the part of subprocess.Popen's interface the tests
    use (pid, poll, wait, send_signal, kill, terminate, returncode). Its output, stdout and stderr
    together, is appended to log_path; preexec_fn must be a module's function (it is pickled)."""

    def __init__(
        self,
        args: Sequence[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        preexec_fn: Callable[[], None] | None = None,
    ) -> None:
        self.args = list(args)
        self._process = _SERVER.Process(
            target=_run_command,
            args=(self.args, dict(env), str(cwd), str(log_path), preexec_fn),
            name=f"sqsjkr {' '.join(self.args[:1])}",
            # A worker that exits stops what a test left running, where it would wait for it.
            daemon=True,
        )
        self._process.start()
        assert self._process.pid is not None
        self.pid: int = self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        # As Popen does: a process that has ended is not signalled (its pid may be another's).
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
