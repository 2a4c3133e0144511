"""Running a job's command: `sh -c COMMAND` with the job's environment, output streamed to the log.

JobRunner is the seam (a future HTTP runner is another implementation); ShellRunner runs shell commands.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import IO, Protocol

from .job import Job, trigger_line

log = logging.getLogger("sqsjkr.runner")
output_log = logging.getLogger("sqsjkr.output")

#: Longest piece of output logged as one line; longer lines are split, so memory stays bounded
#: whatever a job prints.
MAX_LINE_BYTES = 16 * 1024


@dataclass(frozen=True)
class RunResult:
    """How a command ended."""

    exit_code: int  # negative: killed by that signal; 127 when it could not be started
    seconds: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class JobRunner(Protocol):
    """Runs a job to completion."""

    def run(self, job: Job) -> RunResult:
        """Run job and wait for it to end."""


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

    def __init__(self, base_env: Mapping[str, str] | None = None) -> None:
        self._base_env = dict(os.environ if base_env is None else base_env)

    def run(self, job: Job) -> RunResult:
        tag = f"[{job.event_id} {job.message_id}]"
        return run_shell(
            job.command,
            env={**self._base_env, **job.envs},
            emit=lambda line: output_log.info("%s %s", tag, line),
        )


def run_trigger(trigger: str, job: Job, *, env: Mapping[str, str] | None = None) -> RunResult:
    """The life_time trigger: `sh -c TRIGGER` with the Go daemon's line about job on its stdin."""
    return run_shell(
        trigger,
        env=os.environ if env is None else env,
        emit=lambda line: output_log.info("[life_time_trigger %s] %s", job.message_id, line),
        stdin=trigger_line(job) + "\n",
    )


def _feed(pipe: IO[bytes] | None, data: bytes) -> None:
    assert pipe is not None
    # A command that does not read its input is its business, not an error.
    with contextlib.suppress(BrokenPipeError), pipe:
        pipe.write(data)


def run_shell(
    command: str,
    *,
    env: Mapping[str, str],
    emit: Callable[[str], None],
    stdin: str | None = None,
) -> RunResult:
    """Run command under sh, streaming its stdout and stderr (merged, as the Go daemon did) to emit."""
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
    return RunResult(exit_code=exit_code, seconds=time.monotonic() - started)
