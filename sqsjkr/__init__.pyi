"""What type checkers read of sqsjkr: every name __init__.py loads on first use, typed."""

from sqsjkr.backends.audit import AuditEntry
from sqsjkr.backends.dedupe import DedupeStore, DynamoDedupe, MemoryDedupe, NoopDedupe
from sqsjkr.backends.groups import DynamoGroups, Groups
from sqsjkr.backends.history import DynamoHistory, History, MemoryHistory, NoHistory
from sqsjkr.backends.kills import KillResult
from sqsjkr.backends.live import LiveOutput
from sqsjkr.backends.locks import DynamoLocker, Locker, MemoryLocker, NoopLocker
from sqsjkr.backends.members import Member
from sqsjkr.backends.pause import DynamoPauses, Pause, PauseStore
from sqsjkr.backends.routes import Route
from sqsjkr.backends.scheduler import ScheduledJob
from sqsjkr.backends.sqs import MessageSource, SqsSource
from sqsjkr.contract.config import Config, load_config
from sqsjkr.contract.job import Job, build_body, parse_job
from sqsjkr.contract.run import EventSummary, RunOutcome, RunRecord, RunStart
from sqsjkr.daemon.http_runner import HttpRunner
from sqsjkr.daemon.intake import IntakeSettings
from sqsjkr.daemon.loop import Kicker, KickerSettings
from sqsjkr.daemon.runner import JobRunner, ShellRunner
from sqsjkr.daemon.service import serve
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
from sqsjkr.fleet.audit import Actor
from sqsjkr.fleet.client import Fleet, ScheduledSend
from sqsjkr.fleet.dead_letters import DeadLetter, Queues
from sqsjkr.fleet.firings import FiringRow, FiringStatus
from sqsjkr.fleet.jobs import JobHandle, JobPhase, JobState
from sqsjkr.fleet.kill import Target
from sqsjkr.fleet.locks import HeldLock, Holdings
from sqsjkr.fleet.paging import Paged
from sqsjkr.fleet.pipeline_steps import PipelineView, StepStatus, StepView
from sqsjkr.fleet.redrive import Redrive
from sqsjkr.fleet.schedules import Scheduled, Upcoming
from sqsjkr.fleet.status import Finding, FleetStatus, Level
from sqsjkr.fleet.step_rerun import Rerun
from sqsjkr.fleet.trigger import Triggered

__version__: str

__all__ = [
    "__version__",
    "serve",
    "Kicker",
    "KickerSettings",
    "JobRunner",
    "ShellRunner",
    "MessageSource",
    "SqsSource",
    "Locker",
    "DynamoLocker",
    "MemoryLocker",
    "NoopLocker",
    "DedupeStore",
    "DynamoDedupe",
    "MemoryDedupe",
    "NoopDedupe",
    "History",
    "DynamoHistory",
    "MemoryHistory",
    "NoHistory",
    "Groups",
    "DynamoGroups",
    "PauseStore",
    "DynamoPauses",
    "Pause",
    "HttpRunner",
    "IntakeSettings",
    "Job",
    "parse_job",
    "build_body",
    "Config",
    "load_config",
    "RunOutcome",
    "RunRecord",
    "RunStart",
    "EventSummary",
    "Fleet",
    "ScheduledSend",
    "JobHandle",
    "JobState",
    "JobPhase",
    "FleetStatus",
    "Finding",
    "Level",
    "Triggered",
    "Rerun",
    "FiringRow",
    "FiringStatus",
    "PipelineView",
    "StepView",
    "StepStatus",
    "DeadLetter",
    "Queues",
    "Redrive",
    "HeldLock",
    "Holdings",
    "Scheduled",
    "Upcoming",
    "Actor",
    "AuditEntry",
    "Route",
    "Member",
    "LiveOutput",
    "KillResult",
    "Target",
    "Paged",
    "ScheduledJob",
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
