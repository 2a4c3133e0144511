"""The daemon's malloc: glibc's main arena only, not eight per core, and no per-thread caches.

`sqsjkr run` calls both once at start; jobs exec'd from it are untouched.
"""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import MutableMapping, Sequence

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


#: glibc's tunable of its per-thread caches: how many freed chunks of each size up to 1 KiB each
#: thread keeps for itself. Each of the daemon's ~50 threads fills its own as it meets new sizes:
#: 2.8 MiB more after 10,000 jobs than with none (benchmarks/README.md), at no CPU cost seen.
THREAD_CACHE_OFF = "glibc.malloc.tcache_count=0"
#: In the environment of a daemon exec'd with THREAD_CACHE_OFF: GLIBC_TUNABLES as it was
#: before, which the new process gives back to its environment, and so to its jobs.
TUNABLES_BEFORE = "SQSJKR_GLIBC_TUNABLES_BEFORE"


def exec_without_thread_caches(executable: str, command_line: Sequence[str]) -> None:
    """Exec this process again, executable with command_line (sys.executable, sys.orig_argv:
    its own), with glibc's per-thread caches off; return only if it need not or cannot: not
    glibc, done already, or a GLIBC_TUNABLES that sets those caches itself.

    glibc reads its tunables from the environment only when a process starts, and mallopt()
    has no parameter for these caches, unlike the arena count; the exec keeps the process id,
    which systemd watches. Call it before any thread starts or any file is opened for keeps.
    """
    before = os.environ.get("GLIBC_TUNABLES", "")
    if not _glibc() or TUNABLES_BEFORE in os.environ or "glibc.malloc.tcache_count" in before:
        return
    env = dict(os.environ)
    env[TUNABLES_BEFORE] = before
    env["GLIBC_TUNABLES"] = f"{before}:{THREAD_CACHE_OFF}" if before else THREAD_CACHE_OFF
    try:
        os.execve(executable, list(command_line), env)
    except OSError as exc:
        log.debug("not exec'd again without glibc's per-thread caches: %s", exc)


def give_back_tunables(environ: MutableMapping[str, str]) -> None:
    """After exec_without_thread_caches, GLIBC_TUNABLES as it was before, in environ: the
    running process keeps what it started with, and its jobs get the daemon's own value."""
    before = environ.pop(TUNABLES_BEFORE, None)
    if before is None:
        return
    if before:
        environ["GLIBC_TUNABLES"] = before
    else:
        environ.pop("GLIBC_TUNABLES", None)


def _glibc() -> bool:
    # confstr, not platform.libc_ver(): that one reads the interpreter's binary through.
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc")
    except (ValueError, OSError):
        return False
