"""The daemon's malloc arenas: glibc's main one only, not eight per core, set inside the process.

`sqsjkr run` calls limit_malloc_arenas() once at start; jobs exec'd from it are untouched.
"""

from __future__ import annotations

import ctypes
import logging
import os

log = logging.getLogger(__name__)

#: glibc's mallopt parameter for the arena count (malloc.h).
M_ARENA_MAX = -8
#: The daemon's arenas: its threads allocate while they hold the GIL, one at a time, so one
#: arena costs them no waiting; a second one kept 1.6 MiB more after a burst (benchmarks/README.md).
DAEMON_ARENAS = 1


def limit_malloc_arenas(arenas: int = DAEMON_ARENAS) -> bool:
    """Cap glibc's malloc arenas for this process; False where libc is not glibc or refuses.

    Each thread that allocates gets an arena of its own, up to 8 per core, and each keeps its
    freed pages: with 20 workers and their closers, 15 arenas and 3-4 MiB of the daemon's peak. The
    MALLOC_ARENA_MAX variable would do the same but every job would inherit it (8e8cbe1);
    mallopt() is this process's setting only, and an exec'd job starts with glibc's default.
    """
    if not _glibc():
        return False
    try:
        libc = ctypes.CDLL(None)
        done = bool(libc.mallopt(M_ARENA_MAX, arenas))
    except (OSError, AttributeError):
        done = False
    if not done:
        log.debug("mallopt(M_ARENA_MAX, %d) not taken: glibc's default arenas", arenas)
    return done


def _glibc() -> bool:
    # confstr, not platform.libc_ver(): that one reads the interpreter's binary through.
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False
