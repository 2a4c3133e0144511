"""Logging of the daemon and the commands: levels, the line format, and quieting libraries.

Every component logs through a named logger under "sqsjkr."; this module sets up where lines go.
"""

from __future__ import annotations

import logging
import sys

LOG_LEVELS = {
    "error": logging.ERROR,
    "warn": logging.WARNING,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
}


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=LOG_LEVELS[level],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # botocore's debug output prints request bodies, and with them job environments; the
    # embedded moto server logs every request.
    for noisy in ("botocore", "boto3", "urllib3", "werkzeug"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
