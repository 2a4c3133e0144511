"""The per-event series of the daemon's metrics (a histogram of durations, the last runs'
gauges): plain numbers per event, written out at each scrape as prometheus-client writes its own.
"""

from __future__ import annotations

import bisect
import itertools
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

#: The duration histograms' buckets, in seconds (the per-event one and metrics.py's others).
BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600, 10800, 43200, 86400)

_DURATION_HELP = (
    'How long commands ran, from start to end (jobs sent without an event_id: event_id="")'
)
_TIMES_HELP = {
    "last_success": (
        "sqsjkr_job_last_success_timestamp_seconds",
        "Unix time of the last successful run of each event, on this daemon (jobs sent without "
        "an event_id have none)",
    ),
    "last_duration": (
        "sqsjkr_job_last_duration_seconds",
        "How long the last run of each event that started its command ran, on this daemon",
    ),
    "last_end": (
        "sqsjkr_job_last_run_timestamp_seconds",
        "Unix time the last run of each event that started its command ended, on this daemon",
    ),
}
#: The buckets' upper bounds with +Inf, and their le labels as prometheus_client writes them.
_BOUNDS = (*map(float, BUCKETS), math.inf)
_LE = tuple(floatToGoString(bound) for bound in _BOUNDS)


def created_series_wanted() -> bool:
    """False when PROMETHEUS_DISABLE_CREATED_SERIES asks prometheus_client to leave out its
    _created series, read as prometheus_client reads it."""
    flag = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False")
    return flag.lower() not in ("true", "1", "t")


@dataclass(slots=True)
class EventRuns:
    """One label's numbers: its durations' histogram (a count per bucket, not cumulative) and
    the last runs' gauges (None: no series yet)."""

    created: float
    buckets: list[int] = field(default_factory=lambda: [0] * len(_BOUNDS))
    total: float = 0.0
    last_success: float | None = None
    last_duration: float | None = None
    last_end: float | None = None

    @property
    def count(self) -> int:
        return sum(self.buckets)


class EventSeries:
    """The per-event series (sqsjkr_job_duration_seconds and the last runs' gauges), written
    out at each scrape as prometheus_client would write its own Histogram and Gauges.

    A gauge shows a daily job's duration from its first run and between its runs, where a rate
    over the histogram sees nothing: a series that appears at count 1 never rises. With the
    end's time, a query picks the daemon that ran the event last."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._runs: dict[str, EventRuns] = {}  # by label, in the order they appeared
        # With its _created sample as prometheus_client's own Histogram has it, unless its
        # PROMETHEUS_DISABLE_CREATED_SERIES says not.
        self._created = created_series_wanted()

    def _of(self, event: str) -> EventRuns:
        runs = self._runs.get(event)
        if runs is None:
            runs = self._runs[event] = EventRuns(time.time())
        return runs

    def ran(self, event: str, duration: float, ended_at: float, one_off: bool) -> None:
        with self._mutex:
            runs = self._of(event)
            runs.buckets[bisect.bisect_left(_BOUNDS, duration)] += 1
            runs.total += duration
            if not one_off:
                runs.last_duration, runs.last_end = duration, ended_at

    def succeeded(self, event: str, ended_at: float) -> None:
        with self._mutex:
            self._of(event).last_success = ended_at

    def _copy(self) -> list[tuple[str, EventRuns]]:
        with self._mutex:
            return [
                (event, replace(runs, buckets=list(runs.buckets)))
                for event, runs in self._runs.items()
            ]

    def durations(self) -> Iterator[Metric]:
        family = HistogramMetricFamily(
            "sqsjkr_job_duration_seconds", _DURATION_HELP, labels=["event_id"]
        )
        for event, runs in self._copy():
            if runs.count == 0:
                continue  # only gauges so far
            cumulative = list(itertools.accumulate(runs.buckets))
            family.add_metric([event], list(zip(_LE, cumulative, strict=True)), runs.total)
            if self._created:
                family.add_sample(f"{family.name}_created", {"event_id": event}, runs.created)
        yield family

    def times(self) -> Iterator[Metric]:
        copies = self._copy()
        for attribute, (name, documentation) in _TIMES_HELP.items():
            family = GaugeMetricFamily(name, documentation, labels=["event_id"])
            for event, runs in copies:
                value = getattr(runs, attribute)
                if value is not None:
                    family.add_metric([event], value)
            yield family


class Families(Collector):
    """A collector of the families a function writes out at each scrape."""

    def __init__(self, families: Callable[[], Iterator[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return self._families()
