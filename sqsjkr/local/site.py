"""What `sqsjkr local` set up, and the commands it prints for a user to paste into another shell.

Local mode and its demo both read it, and it imports neither: they import in one direction.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LocalSite:
    """What `sqsjkr local` set up, for the lines it prints."""

    endpoint: str
    queue_url: str
    dead_letter_url: str
    conf: Path

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


def sqsjkr_argv() -> list[str]:
    """This sqsjkr's own command, by absolute path: its virtualenv need not be on PATH."""
    beside = shutil.which("sqsjkr", path=os.path.dirname(sys.executable))
    if beside is not None:
        return [os.path.abspath(beside)]
    return [sys.executable, "-m", "sqsjkr"]
