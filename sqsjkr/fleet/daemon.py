"""The faces' door to the daemon: `sqsjkr run` and `sqsjkr local` start it and set up its logging
through this module, so that no face imports the daemon or observability itself.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqsjkr.daemon.arenas import exec_without_thread_caches, give_back_tunables
from sqsjkr.daemon.signals import stop_signals as stop_signals
from sqsjkr.observability.logs import LOG_FORMATS as LOG_FORMATS
from sqsjkr.observability.logs import LOG_LEVELS as LOG_LEVELS
from sqsjkr.observability.logs import setup_logging as setup_logging

if TYPE_CHECKING:
    from sqsjkr.contract.config import Config


def exec_as_daemon(command_line: Sequence[str] | None) -> None:
    """`sqsjkr run` before it reads anything: exec the process again as command_line (its own,
    None when main() was given arguments, as the tests' fork server does) with the daemon's
    malloc settings, which glibc reads only as a process starts. Returns if it does not exec,
    or once it has been: with the environment as it was before, which its jobs copy."""
    if command_line is not None:
        exec_without_thread_caches(sys.executable, command_line)
    give_back_tunables(os.environ)


def serve_until_stopped(config: Config, conf: str) -> None:
    """`sqsjkr run` once its options are read: serve config (read from conf) until a stop
    signal, telling systemd how it goes when systemd started it."""
    # Imported here, not above: every command takes its --log-level choices from this module,
    # and only the daemon needs the daemon's modules (botocore, the backends, prometheus_client).
    from sqsjkr.daemon.service import serve_until_stopped as serve

    serve(config, conf)
