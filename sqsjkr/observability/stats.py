"""Worker and invocation counters: what /stats/metrics (v1) and /stats/metrics/v2 answer.

Monitoring (mackerel-plugin-sqsjkr) reads them over the stats listener (observability/server.py);
/metrics reads the runs' outcomes, counted here too, in the run record's words.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqsjkr.contract.run import RunOutcome

__all__ = ["Outcome", "Stats", "StatsSnapshot"]

#: A duplicate's record is no run's end: it counts among duplicates (Outcome.DUPLICATE).
_RUN_OUTCOMES = tuple(o.value for o in RunOutcome if o is not RunOutcome.DUPLICATE)


class Outcome(enum.Enum):
    """How one received job ended, in the Go daemon's words: the value is its key under
    "invocations" in v2. /metrics counts runs by their RunOutcome instead."""

    SUCCEEDED = "succeeded"  # command exited 0
    ERRORED = "errored"  # command ran and failed
    FAILED = "failed"  # did not run: life_time exceeded, lock aborted, invalid message; or killed
    DUPLICATE = "duplicates"  # message already seen (dedupe), skipped
    TIMED_OUT = "timed_out"  # stopped at its timeout; counted errored as well


@dataclass(frozen=True)
class StatsSnapshot:
    """The counters at one instant, taken under one lock so they agree with each other."""

    busy: int
    idle: int
    succeeded: int
    failed: int
    errored: int
    duplicates: int
    timed_out: int = 0
    leases_lost: int = 0
    invalid: int = 0  # malformed messages, also counted in failed
    #: Runs that ended, by RunOutcome value (every outcome present).
    runs: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(_RUN_OUTCOMES, 0))

    def v1(self) -> dict[str, int]:
        """The body of GET /stats/metrics, the shape mackerel-plugin-sqsjkr reads."""
        return {"idle_worker": self.idle, "busy_worker": self.busy}

    def v2(self) -> dict[str, dict[str, int]]:
        """The body of GET /stats/metrics/v2."""
        return {
            "workers": {"busy": self.busy, "idle": self.idle},
            "invocations": {
                "succeeded": self.succeeded,
                "failed": self.failed,
                "errored": self.errored,
                "duplicates": self.duplicates,
                "timed_out": self.timed_out,
            },
        }


class Stats:
    """Thread-safe counters; busy + idle == workers always."""

    def __init__(self, workers: int, queues: Mapping[str, int] | None = None) -> None:
        """queues: each queue's workers, when there are several, for per-queue figures; the
        methods that take a queue count its job there as well as in the totals."""
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self._queues = {name: Stats(n) for name, n in (queues or {}).items()}
        self._lock = threading.Lock()
        self._busy = 0
        self._counts = dict.fromkeys(Outcome, 0)
        self._leases_lost = 0
        self._invalid = 0
        self._runs = dict.fromkeys(_RUN_OUTCOMES, 0)

    @property
    def workers(self) -> int:
        return self._workers

    @property
    def busy(self) -> int:
        """How many workers run a job now: read at every job's start and end, without the copy
        of every count that snapshot() makes."""
        with self._lock:
            return self._busy

    def job_started(self, queue: str | None = None) -> None:
        """Mark one worker busy; more jobs than workers means the dispatcher is broken."""
        if queue in self._queues:
            self._queues[queue].job_started()
        with self._lock:
            if self._busy >= self._workers:
                raise RuntimeError(f"job_started with all {self._workers} workers already busy")
            self._busy += 1

    def job_finished(self, queue: str | None = None) -> None:
        """Mark one worker idle again; finishing more jobs than started is a bug too."""
        if queue in self._queues:
            self._queues[queue].job_finished()
        with self._lock:
            if self._busy <= 0:
                raise RuntimeError("job_finished without a matching job_started")
            self._busy -= 1

    def count(self, outcome: Outcome, queue: str | None = None) -> None:
        if queue in self._queues:
            self._queues[queue].count(outcome)
        with self._lock:
            self._counts[outcome] += 1

    def ran(self, outcome: RunOutcome, queue: str | None = None) -> None:
        """A run ended with outcome (a record was written of it)."""
        if queue in self._queues:
            self._queues[queue].ran(outcome)
        with self._lock:
            self._runs[outcome.value] += 1

    def invalid(self, queue: str | None = None) -> None:
        """A message that is not a job: counted failed, as the Go daemon did, and apart."""
        if queue in self._queues:
            self._queues[queue].invalid()
        with self._lock:
            self._counts[Outcome.FAILED] += 1
            self._invalid += 1

    def lease_lost(self) -> None:
        """A lock or claim turned out to be held by another daemon while its job ran here."""
        with self._lock:
            self._leases_lost += 1

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            return StatsSnapshot(
                busy=self._busy,
                idle=self._workers - self._busy,
                succeeded=self._counts[Outcome.SUCCEEDED],
                failed=self._counts[Outcome.FAILED],
                errored=self._counts[Outcome.ERRORED],
                duplicates=self._counts[Outcome.DUPLICATE],
                timed_out=self._counts[Outcome.TIMED_OUT],
                leases_lost=self._leases_lost,
                invalid=self._invalid,
                runs=dict(self._runs),
            )

    def queues(self) -> dict[str, StatsSnapshot]:
        """Each queue's own figures, when the daemon receives from several; else empty."""
        return {name: stats.snapshot() for name, stats in self._queues.items()}

    def v2(self) -> dict[str, Any]:
        """The body of GET /stats/metrics/v2: the totals, and with several queues, each one's
        figures under "queues" (a daemon of one queue answers exactly as the Go daemon)."""
        body: dict[str, Any] = self.snapshot().v2()
        if self._queues:
            body["queues"] = {name: snap.v2() for name, snap in self.queues().items()}
        return body
