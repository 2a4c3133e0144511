"""sqsjkr: the SQS Job Kicker.

Receives JSON jobs from SQS queues and runs them (shell commands or HTTP calls), with DynamoDB locks and dedupe.
"""

from __future__ import annotations

import importlib
from typing import Any

# The errors a program catches: cheap to import (no boto3), so imported at once.
from sqsjkr.errors import (
    AlreadyDone,
    AuditRefused,
    ConfigError,
    InvalidJobError,
    NotHeld,
    NothingToDo,
    RequestError,
    ResourceMissingError,
    RouteRefused,
    SqsjkrError,
    StoreError,
    UniqueSendBusy,
    UnlockRefused,
    WaitTimedOut,
)

__version__ = "0.1.0"

#: The Python API, by name -> the module that defines it. Loaded on first use, so that
#: `import sqsjkr` (and every CLI start) does not pay for boto3 until it needs it. Type checkers
#: read __init__.pyi instead, which imports each (tests/test_pyapi.py keeps the two alike).
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
    "Pause": "sqsjkr.backends.pause",
    "HttpRunner": "sqsjkr.daemon.http_runner",
    "IntakeSettings": "sqsjkr.daemon.intake",
    "Job": "sqsjkr.contract.job",
    "parse_job": "sqsjkr.contract.job",
    "build_body": "sqsjkr.contract.job",
    "Config": "sqsjkr.contract.config",
    "load_config": "sqsjkr.contract.config",
    "RunOutcome": "sqsjkr.contract.run",
    "RunRecord": "sqsjkr.contract.run",
    "RunStart": "sqsjkr.contract.run",
    "EventSummary": "sqsjkr.contract.run",
    "Fleet": "sqsjkr.fleet.client",
    "ScheduledSend": "sqsjkr.fleet.client",
    "JobHandle": "sqsjkr.fleet.jobs",
    "JobState": "sqsjkr.fleet.jobs",
    "JobPhase": "sqsjkr.fleet.jobs",
    "FleetStatus": "sqsjkr.fleet.status",
    "Finding": "sqsjkr.fleet.status",
    "Level": "sqsjkr.fleet.status",
    "Triggered": "sqsjkr.fleet.trigger",
    "Rerun": "sqsjkr.fleet.step_rerun",
    "FiringRow": "sqsjkr.fleet.firings",
    "FiringStatus": "sqsjkr.fleet.firings",
    "PipelineView": "sqsjkr.fleet.pipeline_steps",
    "StepView": "sqsjkr.fleet.pipeline_steps",
    "StepStatus": "sqsjkr.fleet.pipeline_steps",
    "DeadLetter": "sqsjkr.fleet.dead_letters",
    "Queues": "sqsjkr.fleet.dead_letters",
    "Redrive": "sqsjkr.fleet.redrive",
    "HeldLock": "sqsjkr.fleet.locks",
    "Holdings": "sqsjkr.fleet.locks",
    "Scheduled": "sqsjkr.fleet.schedules",
    "Upcoming": "sqsjkr.fleet.schedules",
    "Actor": "sqsjkr.fleet.audit",
    "AuditEntry": "sqsjkr.backends.audit",
    "Route": "sqsjkr.backends.routes",
    "Member": "sqsjkr.backends.members",
    "LiveOutput": "sqsjkr.backends.live",
    "KillResult": "sqsjkr.backends.kills",
    "Target": "sqsjkr.fleet.kill",
    "Paged": "sqsjkr.fleet.paging",
    "ScheduledJob": "sqsjkr.backends.scheduler",
}

__all__ = [
    "__version__",
    *_PUBLIC,
    "SqsjkrError",
    "ConfigError",
    "InvalidJobError",
    "RequestError",
    "NothingToDo",
    "AlreadyDone",
    "WaitTimedOut",
    "UniqueSendBusy",
    "AuditRefused",
    "ResourceMissingError",
    "RouteRefused",
    "NotHeld",
    "UnlockRefused",
    "StoreError",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'sqsjkr' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
