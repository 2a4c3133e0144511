"""Counting the AWS API calls a benchmark's own process makes, by operation, and their time.

Shared by the benchmarks that measure a read in-process (dashboard.py, check.py).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import botocore.client


class Calls:
    """Every AWS call made in this process, by operation: botocore's one door for them all."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.seconds = 0.0
        self._mutex = threading.Lock()

    @contextmanager
    def counting(self) -> Iterator[None]:
        original = botocore.client.BaseClient._make_api_call
        calls = self

        def counted(client: Any, operation: str, params: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(client, operation, params)
            finally:
                with calls._mutex:
                    calls.counts[operation] += 1
                    calls.seconds += time.perf_counter() - started

        botocore.client.BaseClient._make_api_call = counted  # type: ignore[method-assign]
        try:
            yield
        finally:
            botocore.client.BaseClient._make_api_call = original  # type: ignore[method-assign]

    def take(self) -> tuple[Counter[str], float]:
        with self._mutex:
            taken, seconds = self.counts, self.seconds
            self.counts, self.seconds = Counter(), 0.0
        return taken, seconds
