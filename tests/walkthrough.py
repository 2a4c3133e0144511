"""The docs' walk-throughs as a test runs them: each page's "## Try it" section read, local mode
started as it says, its commands pasted into one bash session and their output matched.

The matching rule is docs/getting-started.md's "Walk-throughs": a line `...` stands for any
number of lines, `…` inside a line for any text, and a run of spaces for any run of spaces.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .conftest import Daemon, wait_until

DOCS = Path(__file__).resolve().parents[1] / "docs"

#: The section of a page that holds its walk-through, up to the next section.
SECTION = re.compile(r"^## Try it\n(.*?)(?=^## |\Z)", re.M | re.S)
#: How the page starts local mode: the first `sqsjkr local ...` in a code span.
START = re.compile(r"`(?:\.venv/bin/)?sqsjkr local((?: [^`]*)?)`")
BLOCK = re.compile(r"^```(console|python|text)\n(.*?)^```$", re.M | re.S)
#: What ends each command's output in the session: its exit status follows.
MARKER = "__walkthrough_done__"


@dataclass(frozen=True)
class Step:
    """One command of a walk-through (a bash line, or a python program) and what it prints."""

    command: str
    expected: tuple[str, ...]
    python: bool = False

    @property
    def shown(self) -> str:
        return f"python program:\n{self.command}" if self.python else f"$ {self.command}"


@dataclass(frozen=True)
class Walk:
    """A page's walk-through: the options it starts `sqsjkr local` with, and its steps."""

    page: str
    local_args: tuple[str, ...]
    steps: tuple[Step, ...]


class WalkError(AssertionError):
    """A page's walk-through is malformed, or what it shows drifted from what runs."""


def read_walk(page: str) -> Walk:
    """The walk-through of docs/PAGE: its console blocks (`$ command`, then its output) and
    python blocks (each followed by a text block with its output)."""
    text = (DOCS / page).read_text()
    section = SECTION.search(text)
    if section is None:
        raise WalkError(f"docs/{page} has no '## Try it' section")
    first = re.search(r"^## (.*)$", text, re.M)
    if first is None or first[1] != "Try it":
        raise WalkError(f"docs/{page} opens with '## {first and first[1]}', not its walk-through")
    start = START.search(section[1])
    if start is None:
        raise WalkError(f"docs/{page}: its walk-through does not say how to start `sqsjkr local`")
    steps: list[Step] = []
    blocks = BLOCK.findall(section[1])
    for index, (kind, body) in enumerate(blocks):
        if kind == "console":
            steps.extend(console_steps(page, body))
        elif kind == "python":
            after = blocks[index + 1] if index + 1 < len(blocks) else ("", "")
            if after[0] != "text":
                raise WalkError(f"docs/{page}: a python block without a text block after it")
            steps.append(Step(body.rstrip("\n"), tuple(after[1].splitlines()), python=True))
    if not steps:
        raise WalkError(f"docs/{page}: its walk-through has no command")
    return Walk(page, tuple(start[1].split()), tuple(steps))


def console_steps(page: str, body: str) -> list[Step]:
    """The `$ command` lines of a console block, each with the lines below it."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif not steps:
            raise WalkError(f"docs/{page}: a console block starts with {line!r}, not `$ `")
        else:
            steps[-1][1].append(line)
    return [Step(command, tuple(lines)) for command, lines in steps]


def _line_pattern(line: str) -> re.Pattern[str]:
    words = (".*".join(map(re.escape, word.split("…"))) for word in line.split())
    return re.compile(" +".join(words))


def first_difference(expected: tuple[str, ...] | list[str], actual: list[str]) -> str | None:
    """None when actual matches expected by the rule; else the first line that differs, said."""
    patterns = [None if line == "..." else _line_pattern(line) for line in expected]
    got = [line.strip() for line in actual]
    furthest: list[tuple[int, int]] = [(0, 0)]
    seen: set[tuple[int, int]] = set()

    def matches(i: int, j: int) -> bool:
        if (i, j) in seen:
            return False
        seen.add((i, j))
        furthest[0] = max(furthest[0], (i, j))
        if i == len(patterns):
            return j == len(got)
        pattern = patterns[i]
        if pattern is None:
            return any(matches(i + 1, k) for k in range(j, len(got) + 1))
        return j < len(got) and bool(pattern.fullmatch(got[j])) and matches(i + 1, j + 1)

    if matches(0, 0):
        return None
    i, j = furthest[0]
    shown = expected[i] if i < len(expected) else "(the end of the output)"
    printed = actual[j] if j < len(actual) else "(the end of the output)"
    return f"line {j + 1}: the page shows {shown!r}, the command printed {printed!r}"


class Session:
    """One bash session, as the reader's second shell: commands run in order, exports carry."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own process group: a command that hangs is killed with the shell.
            start_new_session=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="walkthrough-session")
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(self, command: str, timeout: float = 60.0) -> tuple[list[str], int]:
        """Run command (its stderr with its stdout, as a terminal shows both): the lines it
        printed and its exit status."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{command}\nprintf '\\n{MARKER} %d\\n' $?\n")
        self.proc.stdin.flush()
        out: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise WalkError(f"no end after {timeout}s; printed so far: {out}") from None
            if line is None:
                raise WalkError(f"the shell ended; printed: {out}")
            if line.startswith(MARKER):
                # The printf's own newline ends a last line that had none; else an empty line.
                last = out.pop() if out else ""
                if last:
                    out.append(last)
                return out, int(line.split()[1])
            out.append(line.rstrip("\n"))

    def close(self) -> None:
        """End the session; a command still running (one that timed out) is killed."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
        finally:
            self.proc.wait()
            self._reader.join()


def python_command(source: str) -> str:
    """A python block run as the reader runs it: the venv's python (on the exported PATH)."""
    return f"python - <<'WALKTHROUGH_EOF'\n{source}\nWALKTHROUGH_EOF"


def walk_through(walk: Walk, home: Path) -> None:
    """Start local mode as the page says, paste its `export` lines into a fresh bash session,
    run the page's steps in order (run_steps)."""
    base = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    # Ports of their own, so that pages run side by side: the matcher reads ports as any text.
    local = Daemon(
        ["local", *walk.local_args, "--stats-port", "0", "--web-port", "0"],
        {**base, "TZ": "UTC"},
        home,
    )
    try:
        local.wait_for_log("Stop: Ctrl-C", timeout=60)
        exports = [line for line in local.log.splitlines() if line.startswith("  export ")]
        session = Session(home, base)
        try:
            run_steps(walk, session, [*(line.strip() for line in exports)], lambda: local.log)
        finally:
            session.close()
    finally:
        stop_local(local)


def run_steps(walk: Walk, session: Session, exports: list[str], log: Callable[[], str]) -> None:
    """Run the export lines, then the page's steps, in session; raise WalkError naming the page,
    the command and the first differing line when a command's output drifts from the page,
    with the output and the end of local mode's log."""
    for line in exports:
        session.run(line)
    for step in walk.steps:
        command = python_command(step.command) if step.python else step.command
        try:
            printed, _ = session.run(command)
        except WalkError as exc:
            printed, drift = [], str(exc)
        else:
            drift = first_difference(step.expected, printed)
        if drift is not None:
            raise WalkError(
                f"docs/{walk.page}'s walk-through drifted at\n{step.shown}\n{drift}\n"
                "--- it printed ---\n" + "\n".join(printed) + "\n--- local mode's log "
                "---\n" + log()[-4000:]
            )


#: What local mode logs once a stop signal took: how many jobs it still waits for.
_STOPPING = re.compile(r"stopping: no longer receiving; waiting for (\d+) in-flight job")


def stop_local(local: Daemon) -> None:
    """Stop local mode as a reader ends a walk-through, with Ctrl-C; a second one when it waits
    for a job still running (the demo's long job, which its kill ends only at a heartbeat)."""
    local.proc.send_signal(signal.SIGINT)
    stopping = wait_until(
        lambda: _STOPPING.search(local.log) or local.proc.poll() is not None,
        20,
        "local mode to take its Ctrl-C",
    )
    if isinstance(stopping, re.Match) and int(stopping[1]) and local.proc.poll() is None:
        local.proc.send_signal(signal.SIGINT)
    with contextlib.suppress(subprocess.TimeoutExpired):
        local.proc.wait(20)
    local.stop()  # closes its log; one still running is signalled again, then named stuck
