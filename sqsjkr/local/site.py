"""What `sqsjkr local` set up, and the commands it prints for a user to paste (some run, with output).

Local mode and its demo both read it, and it imports neither: they import in one direction.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DemoTimes:
    """When the demo's scheduled pipeline first fires, and the firing its late schedule missed
    before local mode started (unix seconds, whole): local/demo_scheduled.py."""

    first: float
    missed: float


@dataclass(frozen=True)
class LocalSite:
    """What `sqsjkr local` set up, for the lines it prints."""

    endpoint: str
    queue_url: str
    dead_letter_url: str
    conf: Path
    #: The demo's scheduled part, when it set one up (--demo).
    demo_times: DemoTimes | None = None

    def argv(self, command: str, *args: str) -> list[str]:
        """`sqsjkr COMMAND -c CONF ARGS` by this sqsjkr's absolute path."""
        return [*sqsjkr_argv(), command, "-c", str(self.conf), *args]

    def pasteable(self, command: str, *args: str) -> str:
        """argv as two indented lines that work pasted into a fresh shell, with no virtualenv
        on the PATH: the endpoint and its dummy credentials first."""
        return (
            f"  AWS_ENDPOINT_URL={self.endpoint} AWS_ACCESS_KEY_ID=local "
            "AWS_SECRET_ACCESS_KEY=local \\\n"
            f"    {shlex.join(self.argv(command, *args))}"
        )

    def exports(self) -> str:
        """One `export` line that sets up another shell for every command: this sqsjkr on the
        PATH, the endpoint and its dummy credentials, and the config (SQSJKR_CONF, read by
        every command's --conf)."""
        command = sqsjkr_argv()
        path = (
            [f'PATH={shlex.quote(os.path.dirname(command[0]))}:"$PATH"']
            if len(command) == 1
            else []
        )
        return "  export " + " ".join(
            [
                *path,
                f"AWS_ENDPOINT_URL={self.endpoint}",
                "AWS_ACCESS_KEY_ID=local",
                "AWS_SECRET_ACCESS_KEY=local",
                f"SQSJKR_CONF={shlex.quote(str(self.conf))}",
            ]
        )

    def shown(self, what: str, command: tuple[str, ...], before: tuple[str, ...] = ()) -> str:
        """`sqsjkr COMMAND` run as a user would run it, printed as the banner's `send` is, ready to
        paste (after `sqsjkr BEFORE`, when pasting it needs that first), with its output."""
        name, *args = command
        # One pipe for both streams: its notes on stderr show where they came, between its lines.
        done = subprocess.run(
            self.argv(name, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=90,
        )
        pasted = [self.pasteable(*before)] if before else []
        pasted.append(self.pasteable(name, *args))
        return f"{what}:\n" + "\n".join(pasted) + f"\n{done.stdout}".rstrip()


def sqsjkr_argv() -> list[str]:
    """This sqsjkr's own command, by absolute path: its virtualenv need not be on PATH."""
    beside = shutil.which("sqsjkr", path=os.path.dirname(sys.executable))
    if beside is not None:
        return [os.path.abspath(beside)]
    return [sys.executable, "-m", "sqsjkr"]
