"""The faces' door to the daemon: `sqsjkr run` and `sqsjkr local` start it and set up its logging
through this module, so that no face imports the daemon or observability itself.
"""

from __future__ import annotations

from sqsjkr.daemon.service import serve_until_stopped as serve_until_stopped
from sqsjkr.daemon.signals import stop_signals as stop_signals
from sqsjkr.observability.logs import LOG_FORMATS as LOG_FORMATS
from sqsjkr.observability.logs import LOG_LEVELS as LOG_LEVELS
from sqsjkr.observability.logs import setup_logging as setup_logging
