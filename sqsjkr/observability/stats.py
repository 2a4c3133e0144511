"""Worker and invocation counters: what /stats/metrics (v1) and /stats/metrics/v2 answer.

Monitoring (mackerel-plugin-sqsjkr) reads them over the stats listener (observability/server.py).
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass

__all__ = ["Outcome", "Stats", "StatsSnapshot"]


class Outcome(enum.Enum):
    """How one received job ended; the value is its key under "invocations" in v2."""

    SUCCEEDED = "succeeded"  # command exited 0
    ERRORED = "errored"  # command ran and failed
    FAILED = "failed"  # job could not run: life_time exceeded, lock aborted, invalid message
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

    def __init__(self, workers: int) -> None:
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self._workers = workers
        self._lock = threading.Lock()
        self._busy = 0
        self._counts = dict.fromkeys(Outcome, 0)
        self._leases_lost = 0
        self._invalid = 0

    @property
    def workers(self) -> int:
        return self._workers

    def job_started(self) -> None:
        """Mark one worker busy; more jobs than workers means the dispatcher is broken."""
        with self._lock:
            if self._busy >= self._workers:
                raise RuntimeError(f"job_started with all {self._workers} workers already busy")
            self._busy += 1

    def job_finished(self) -> None:
        """Mark one worker idle again; finishing more jobs than started is a bug too."""
        with self._lock:
            if self._busy <= 0:
                raise RuntimeError("job_finished without a matching job_started")
            self._busy -= 1

    def count(self, outcome: Outcome) -> None:
        with self._lock:
            self._counts[outcome] += 1

    def invalid(self) -> None:
        """A message that is not a job: counted failed, as the Go daemon did, and apart."""
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
            )
