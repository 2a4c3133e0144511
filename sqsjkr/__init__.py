"""sqsjkr: the SQS Job Kicker.

Receives JSON jobs from SQS queues and runs them (shell commands or HTTP calls), with DynamoDB locks and dedupe.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: The Python API, by name -> the module that defines it. Loaded on first use, so that
#: `import sqsjkr` (and every CLI start) does not pay for boto3 until it needs it.
_PUBLIC = {
    "serve": "sqsjkr.daemon.service",
    "Kicker": "sqsjkr.daemon.loop",
    "KickerSettings": "sqsjkr.daemon.loop",
    "JobRunner": "sqsjkr.daemon.runner",
    "ShellRunner": "sqsjkr.daemon.runner",
    "MessageSource": "sqsjkr.backends.sqs",
    "SqsSource": "sqsjkr.backends.sqs",
    "Locker": "sqsjkr.backends.locks",
    "DynamoLocker": "sqsjkr.backends.locks",
    "MemoryLocker": "sqsjkr.backends.locks",
    "NoopLocker": "sqsjkr.backends.locks",
    "DedupeStore": "sqsjkr.backends.dedupe",
    "DynamoDedupe": "sqsjkr.backends.dedupe",
    "MemoryDedupe": "sqsjkr.backends.dedupe",
    "NoopDedupe": "sqsjkr.backends.dedupe",
    "History": "sqsjkr.backends.history",
    "DynamoHistory": "sqsjkr.backends.history",
    "MemoryHistory": "sqsjkr.backends.history",
    "NoHistory": "sqsjkr.backends.history",
    "Groups": "sqsjkr.backends.groups",
    "DynamoGroups": "sqsjkr.backends.groups",
    "PauseStore": "sqsjkr.backends.pause",
    "DynamoPauses": "sqsjkr.backends.pause",
    "HttpRunner": "sqsjkr.daemon.http_runner",
    "IntakeSettings": "sqsjkr.daemon.intake",
    "Job": "sqsjkr.contract.job",
    "parse_job": "sqsjkr.contract.job",
    "build_body": "sqsjkr.contract.job",
    "Config": "sqsjkr.contract.config",
    "load_config": "sqsjkr.contract.config",
    # The fleet API: what a program reads and steers the fleet with (docs/python-api.md).
    "Fleet": "sqsjkr.fleet.client",
    "JobHandle": "sqsjkr.fleet.jobs",
    "JobState": "sqsjkr.fleet.jobs",
    "JobPhase": "sqsjkr.fleet.jobs",
}

__all__ = ["__version__", *_PUBLIC]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sqsjkr' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
