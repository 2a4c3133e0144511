"""AWS calls watched through botocore's events: each attempt's outcome feeds health and metrics.

Nothing in the daemon's path reports them: the clients do, once watch() has hooked them.
"""

from __future__ import annotations

from typing import Any

from sqsjkr.observability.health import Health, call_error
from sqsjkr.observability.metrics import Metrics


def watch(client: Any, service: str, health: Health, metrics: Metrics) -> None:
    """Tell health and metrics of every attempt of every call client makes."""

    def attempted(
        response: Any = None,
        caught_exception: BaseException | None = None,
        operation: Any = None,
        **kwargs: Any,
    ) -> None:
        error = call_error(response, caught_exception)
        health.call_ended(service, operation.name, error)
        if error is not None:
            metrics.aws_error(service, error)
        # None: botocore's own handler decides about retrying.

    client.meta.events.register(f"needs-retry.{service}", attempted)
