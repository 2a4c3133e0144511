"""This daemon's item in the fleet's roster: written at start, refreshed while it runs, stopped at the end.

`sqsjkr daemons` reads the items; a daemon whose item is not refreshed in time is shown lost.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from types import TracebackType

from sqsjkr import __version__
from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.lease import new_owner
from sqsjkr.backends.members import Member, Roster
from sqsjkr.observability.stats import Stats

log = logging.getLogger("sqsjkr.presence")


def this_daemon(
    queues: Sequence[tuple[str, int]], stats: str, refresh: float, now: float
) -> Member:
    """The Member this process is, started now: each queue with its workers, where its stats
    listen, and how often it refreshes its item."""
    return Member(
        owner=new_owner(),
        host=socket.gethostname(),
        pid=os.getpid(),
        version=__version__,
        queues=tuple(queues),
        started_at=now,
        stats=stats,
        refresh=refresh,
        seen_at=now,
    )


class Presence:
    """Writes member's item on a thread of its own: at once, then every member.refresh seconds
    with the workers' busy and idle counts of that moment; marks it stopped when stopped.

    Whoever starts it stops it (a with block does both): stopping joins the thread before the
    last write, so that no refresh can overwrite the stop. A write that fails is logged and
    left to the next refresh: the daemon's jobs never wait for it.
    """

    def __init__(
        self,
        roster: Roster,
        member: Member,
        stats: Stats,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._roster = roster
        self._member = member
        self._stats = stats
        self._clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sqsjkr-presence")
        self._failing = False

    def __enter__(self) -> Presence:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join()
        self._write(stopped=True)

    def _run(self) -> None:
        while True:
            self._write()
            if self._stop.wait(self._member.refresh):
                return

    def _write(self, *, stopped: bool = False) -> None:
        counts = self._stats.snapshot()
        member = self._member.seen(self._clock(), counts.busy, counts.idle, stopped=stopped)
        try:
            self._roster.write(member)
        except AWS_ERRORS as exc:
            # Once per outage at WARNING: a table out of reach is logged by the jobs' own calls.
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            log.log(
                level,
                "could not write this daemon's item to the table (%s); `sqsjkr daemons` shows "
                "it lost until a refresh gets through",
                describe(exc),
            )
            return
        except Exception:
            log.exception("could not write this daemon's item to the table")
            return
        if self._failing:
            log.info("this daemon's item is written again")
        self._failing = False
