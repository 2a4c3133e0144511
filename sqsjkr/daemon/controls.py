"""The fleet's controls (pauses and routes) as one queue's intake last read them: read again at most
once a refresh interval, and only when asked, so that an idle daemon reads nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.fleet import Controls, ControlStore

log = logging.getLogger("sqsjkr.pause")

#: The controls are read again once the copy is this old (and only when they are needed): every
#: daemon sees a pause or a route, or its end, within a minute.
REFRESH_SECONDS = 60.0


class ControlsCopy:
    """The last read of the controls. Used by the receive loop's thread only."""

    def __init__(
        self,
        store: ControlStore,
        *,
        clock: Callable[[], float] = time.time,
        refresh: float = REFRESH_SECONDS,
    ) -> None:
        self._store = store
        self._clock = clock
        self._refresh = refresh
        self._controls = Controls()
        self._read_at: float | None = None

    def current(self) -> Controls:
        """The controls, read again if the copy is older than the refresh interval."""
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._refresh:
            try:
                self._controls = self._store.controls()
            except AWS_ERRORS as exc:
                # Kept as they were: a store that cannot be read neither pauses nor resumes,
                # neither routes nor clears a route.
                log.error(
                    "could not read the pauses and routes (%s); trying again in %gs",
                    describe(exc),
                    self._refresh,
                )
            self._read_at = now
        return self._controls

    def last(self) -> Controls:
        """The copy as it is, without a read."""
        return self._controls

    def next_read_in(self) -> float:
        """Seconds until the copy is old enough to be read again."""
        if self._read_at is None:
            return 0.0
        return max(0.0, self._read_at + self._refresh - self._clock())
