"""Prometheus metrics of the daemon, on prometheus-client: a registry of its own per daemon.

Runs feed its histograms, its per-event gauges and the failures (contract.run.FAILURES) as a
RunListener does; AWS errors come from the clients' events (calls.py); the jobs by outcome, the
workers and the receive loop's last turn are read from Stats and Health at each scrape.
"""

from __future__ import annotations

import logging
import platform
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector

from sqsjkr import __version__
from sqsjkr.contract.config import KickerConfig
from sqsjkr.contract.firing import Firing
from sqsjkr.contract.run import FAILURES, RunOutcome, RunRecord, RunStart
from sqsjkr.errors import ScheduleExpressionError
from sqsjkr.observability.event_series import BUCKETS as _BUCKETS
from sqsjkr.observability.event_series import EventSeries, Families
from sqsjkr.observability.health import Health
from sqsjkr.observability.logs import escape
from sqsjkr.observability.stats import Stats, StatsSnapshot

#: Seconds: from a few milliseconds (a trivial job, a free lock) to a day.

#: The event_id label of jobs sent without an event_id: their message ids would add series for
#: ever. No event_id is empty (an empty one is the message id), so it names no real event.
ONE_OFF_LABEL = ""
#: The event_id label that the runs of events past the cap share (Metrics' max_events).
OTHER_LABEL = "(other)"
#: How many events get series of their own unless configured ([kicker] metrics_max_events):
#: about 0.4 KiB of memory each (1.3 KiB with a next firing), and 2 KiB in every scrape.
DEFAULT_MAX_EVENTS = KickerConfig.metrics_max_events

__all__ = [
    "CONTENT_TYPE_LATEST",
    "DEFAULT_MAX_EVENTS",
    "ONE_OFF_LABEL",
    "OTHER_LABEL",
    "Metrics",
    "label",
]

log = logging.getLogger("sqsjkr.metrics")


class Metrics:
    """The daemon's metrics; exposition() gives them in Prometheus' text format."""

    def __init__(
        self,
        stats: Stats,
        health: Health,
        clock: Callable[[], float] = time.time,
        *,
        max_events: int = DEFAULT_MAX_EVENTS,
    ) -> None:
        """max_events: how many events get series of their own; the runs of later ones are
        counted under event_id="(other)" (OTHER_LABEL), so that a host running ever new
        event_ids keeps its memory and its scrapes bounded."""
        self._max_events = max_events
        #: The label of each event that has series of its own, by event_id.
        self._labels: dict[str, str] = {}
        self._labels_lock = threading.Lock()
        self._over_cap = False
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        # Each event's series are plain numbers read at each scrape, not prometheus_client's
        # children (a lock and an object per bucket): 0.4 KiB an event, not 6.5.
        self._events = EventSeries()
        registry.register(Families(self._events.durations))
        self._queue_delay = Histogram(
            "sqsjkr_job_queue_delay_seconds",
            "From the message's send (the schedule's firing) to the command's start",
            buckets=_BUCKETS,
            registry=registry,
        )
        self._lock_wait = Histogram(
            "sqsjkr_lock_wait_seconds",
            "Time jobs waited for their lock_id",
            buckets=_BUCKETS,
            registry=registry,
        )
        registry.register(Families(self._events.times))
        # With the runs' counter, Prometheus alone tells a firing that never ran: the time is
        # past this gauge (and its grace) and the event's runs have not increased since.
        self._clock = clock
        #: Each event's next firing as the gauge shows it.
        self._next_at: dict[str, float] = {}
        self._next_firing = _per_event(
            "sqsjkr_event_next_firing_timestamp_seconds",
            "Unix time each event's schedule fires next after the last firing run on this "
            "daemon (events whose messages carry their schedule's expression)",
            registry,
        )
        # A pipeline's gauges are kept from the state each step's end writes (one UpdateItem that
        # answers with the run's new state): no call of their own, so idle daemons make none.
        self._pipeline_ends: dict[str, float] = {}
        self._pipeline_in_progress = Gauge(
            "sqsjkr_pipeline_in_progress",
            "1 while the run of each pipeline whose step ended last on this daemon has steps "
            "still to end, else 0 (fleet-wide: the daemon with the newest "
            "sqsjkr_pipeline_last_step_end_timestamp_seconds says)",
            ["pipeline"],
            registry=registry,
        )
        self._pipeline_step_end = Gauge(
            "sqsjkr_pipeline_last_step_end_timestamp_seconds",
            "Unix time a step of each pipeline last ended for good on this daemon",
            ["pipeline"],
            registry=registry,
        )
        self._failures = Counter(
            "sqsjkr_job_failures",
            "Final runs that failed, by outcome: the outcomes that need someone "
            "(contract.run.FAILURES; not a kill, a lock abort, or a run that will be retried)",
            ["outcome"],
            registry=registry,
        )
        # Each from 0, so that increase() sees the first failure too.
        for outcome in sorted(o.value for o in FAILURES):
            self._failures.labels(outcome)
        self._aws_errors = Counter(
            "sqsjkr_aws_errors",
            "Failed attempts of AWS calls, by service and error code",
            ["service", "code"],
            registry=registry,
        )
        Info("sqsjkr_build", "The sqsjkr build", registry=registry).info(
            {"version": __version__, "python": platform.python_version()}
        )
        registry.register(_StateCollector(stats, health))

    # -- a RunListener ---------------------------------------------------------------------

    def notice(self, start: RunStart) -> None:
        return None

    def report(self, record: RunRecord) -> None:
        event = ONE_OFF_LABEL if record.one_off else self._event_label(record.event_id)
        if record.started_at is not None:
            self._events.ran(event, record.duration, record.ended_at, record.one_off)
            self._queue_delay.observe(max(0.0, record.queue_delay))
        if record.lock_id:
            self._lock_wait.observe(record.lock_wait)
        if record.failure:
            self._failures.labels(record.outcome.value).inc()
        # A one-off job has no next run to succeed: its gauge would only age into an alarm.
        if record.outcome is RunOutcome.SUCCEEDED and not record.one_off:
            self._events.succeeded(event, record.ended_at)

    def _event_label(self, event_id: str) -> str:
        """event_id's label: its own while fewer than max_events events have one, else
        OTHER_LABEL (said once in the log)."""
        known = self._labels.get(event_id)
        if known is not None:
            return known
        with self._labels_lock:
            if event_id in self._labels:
                return self._labels[event_id]
            if len(self._labels) < self._max_events:
                self._labels[event_id] = label(event_id)
                return self._labels[event_id]
            if not self._over_cap:
                self._over_cap = True
                log.warning(
                    "more than %d events have run: the runs of events new to this daemon are "
                    'counted under event_id="%s" in /metrics ([kicker] metrics_max_events)',
                    self._max_events,
                    OTHER_LABEL,
                )
        return OTHER_LABEL

    def fired(self, event_id: str, firing: Firing) -> None:
        """A run of the message of firing has ended: the event's next firing is the one after
        it. Nothing without the expression, or for one EventBridge would not take. A message's
        expression is its sender's: it never moves a next firing still to come later, nor
        removes it, so that a forged one cannot silence the missed-firing alert."""
        if firing.expression is None:
            return
        # An event past the cap has no next firing of its own, and no event's can stand for
        # those of all the others: the missed-firing alert covers the events with series.
        if self._event_label(event_id) == OTHER_LABEL:
            return
        # Imported at the first firing: a daemon whose jobs carry none starts without the cron
        # arithmetic (`sqsjkr run` imports no crontab code, for its start-up time).
        from sqsjkr.crontab.fires import next_fires

        try:
            after = datetime.fromtimestamp(firing.at, timezone.utc)
            fires = next_fires(firing.expression, firing.timezone or "UTC", after, 1).times
        except (ScheduleExpressionError, OverflowError, ValueError):
            return  # past Python's dates too: the contract refuses such a firing
        following = fires[0].timestamp() if fires else None
        pending = self._next_at.get(event_id)
        to_come = pending is not None and pending > self._clock()
        if to_come and (following is None or following > (pending or 0.0)):
            return
        if following is None:
            if self._next_at.pop(event_id, None) is not None:
                self._next_firing.remove(label(event_id))  # it has ended: no firing is due
            return
        self._next_at[event_id] = following
        self._next_firing.labels(label(event_id)).set(following)

    def pipeline_step_ended(self, pipeline: str, at: float, in_progress: bool) -> None:
        """A step of a run of pipeline ended at `at` (the run's state as that end left it): in
        progress while steps remain. A redelivery's older state never moves the gauges back."""
        if at < self._pipeline_ends.get(pipeline, 0.0):
            return
        self._pipeline_ends[pipeline] = at
        self._pipeline_step_end.labels(label(pipeline)).set(at)
        self._pipeline_in_progress.labels(label(pipeline)).set(1 if in_progress else 0)

    # -- AWS calls -------------------------------------------------------------------------

    def aws_error(self, service: str, code: str) -> None:
        self._aws_errors.labels(service, label(code)).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def label(value: str) -> str:
    """A label value from a message (an event_id) as /metrics writes it: its control characters
    and bidi overrides escaped as the logs write them, so that a scrape read in a terminal or a
    page shows what it holds (the text format itself escapes only \\, " and newline)."""
    return escape(value)


def _per_event(name: str, documentation: str, registry: CollectorRegistry) -> Gauge:
    """A gauge by event_id (one-off jobs have none: a series per message would grow for ever)."""
    return Gauge(name, documentation, ["event_id"], registry=registry)


class _StateCollector(Collector):
    """What is read at each scrape: outcome counts, workers, leases lost, the loop's last turn."""

    def __init__(self, stats: Stats, health: Health) -> None:
        self._stats = stats
        self._health = health

    def collect(self) -> Iterator[Metric]:
        snapshot = self._stats.snapshot()
        jobs = CounterMetricFamily(
            "sqsjkr_jobs",
            "Jobs that reached an end, by outcome: a run's outcome, a duplicate message, or an "
            "invalid one",
            labels=["outcome"],
        )
        for outcome, count in job_counts(snapshot):
            jobs.add_metric([outcome], count)
        yield jobs
        workers = GaugeMetricFamily("sqsjkr_workers", "Workers by state", labels=["state"])
        workers.add_metric(["busy"], snapshot.busy)
        workers.add_metric(["idle"], snapshot.idle)
        yield workers
        yield from _per_queue(self._stats.queues())
        yield CounterMetricFamily(
            "sqsjkr_leases_lost",
            "Locks and claims found taken over by another daemon while their job ran here",
            value=snapshot.leases_lost,
        )
        last_turn = self._health.last_turn_at
        if last_turn is not None:
            yield GaugeMetricFamily(
                "sqsjkr_receive_loop_last_turn_timestamp_seconds",
                "Unix time the receive loop last went round",
                value=last_turn,
            )


def job_counts(snapshot: StatsSnapshot) -> Iterator[tuple[str, int]]:
    """Jobs by outcome, in the run record's words (RunOutcome), then messages that never ran:
    a duplicate, an invalid one. The daemon's totals and each queue's say them alike."""
    yield from snapshot.runs.items()
    yield "duplicate", snapshot.duplicates
    yield "invalid", snapshot.invalid


def _per_queue(queues: dict[str, StatsSnapshot]) -> Iterator[Metric]:
    """Each queue's jobs and workers, labelled with its name, when the daemon has several."""
    if not queues:
        return
    jobs = CounterMetricFamily(
        "sqsjkr_queue_jobs",
        "Jobs of one queue that reached an end, by outcome (as sqsjkr_jobs)",
        labels=["queue", "outcome"],
    )
    workers = GaugeMetricFamily(
        "sqsjkr_queue_workers", "Workers of one queue, by state", labels=["queue", "state"]
    )
    for name, snap in queues.items():
        for outcome, count in job_counts(snap):
            jobs.add_metric([name, outcome], count)
        workers.add_metric([name, "busy"], snap.busy)
        workers.add_metric([name, "idle"], snap.idle)
    yield jobs
    yield workers
