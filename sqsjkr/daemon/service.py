"""Assembles a running daemon from a Config: AWS clients, backends, the stats server and the loop.

`sqsjkr run` starts it through serve_until_stopped(), `sqsjkr local` through serve().
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr import __version__
from sqsjkr.backends.aws import (
    Backoff,
    check_table,
    describe,
    is_transient,
    make_client,
    make_session,
)
from sqsjkr.backends.dedupe import LATE_COPY_SECONDS, DedupeStore, DynamoDedupe, NoopDedupe
from sqsjkr.backends.fleet import ControlStore, DynamoControls
from sqsjkr.backends.groups import DynamoGroups, Groups, NoGroups
from sqsjkr.backends.history import DynamoHistory, History, NoHistory, running_update
from sqsjkr.backends.lease import MIN_SAFE_LEASE_SECONDS, lease_timing
from sqsjkr.backends.live import DynamoLive
from sqsjkr.backends.locks import DynamoLocker, Locker, NoopLocker
from sqsjkr.backends.members import DynamoRoster, Member, NoRoster, Roster
from sqsjkr.backends.pipeline import DynamoPipelines
from sqsjkr.backends.sqs import (
    QueueForwarder,
    QueueSettings,
    SqsSource,
    dead_letter_queue_url,
    queue_settings,
    resolve_queue_url,
)
from sqsjkr.backends.transactions import Transactions
from sqsjkr.contract.config import Config, QueueConfig
from sqsjkr.contract.duration import Duration
from sqsjkr.daemon.arenas import limit_malloc_arenas
from sqsjkr.daemon.catchup import CatchUpStores, catch_up, catch_up_interval
from sqsjkr.daemon.http_runner import HttpRunner, Runners
from sqsjkr.daemon.intake import IntakeSettings
from sqsjkr.daemon.live import LiveTails, LiveWriter
from sqsjkr.daemon.loop import Kicker, KickerSettings
from sqsjkr.daemon.pipeline_seen import seen
from sqsjkr.daemon.presence import Presence, this_daemon
from sqsjkr.daemon.runner import ShellRunner
from sqsjkr.daemon.runs import Listeners
from sqsjkr.daemon.signals import stop_signals
from sqsjkr.errors import StartupError
from sqsjkr.observability import calls
from sqsjkr.observability.health import Health
from sqsjkr.observability.metrics import Metrics
from sqsjkr.observability.notify import Notifier, SystemdNotifier
from sqsjkr.observability.report import Reporter
from sqsjkr.observability.server import StatsServer
from sqsjkr.observability.stats import Stats

log = logging.getLogger("sqsjkr.service")

#: The Go daemon's fixed visibility timeout, kept when messages are deleted on receive.
GO_VISIBILITY_TIMEOUT = 30
#: The collector's young generation threshold while serving. A job's objects are nearly all
#: freed by their reference counts, yet at the default (700) a burst of jobs ran a young pass
#: every four jobs, some 4 % of the daemon's CPU; at this one a pass every hundred jobs, 1 %.
#: At most this many objects wait for a pass.
YOUNG_GC_THRESHOLD = 10_000

T = TypeVar("T")


def serve_until_stopped(config: Config, conf: str) -> None:
    """`sqsjkr run` once its options are read: serve config (read from conf) until a stop
    signal, telling systemd how it goes when systemd started it."""
    # Before any job can start: jobs copy the daemon's environment, and systemd's variables
    # are not meant for them.
    notifier = SystemdNotifier.from_environment(os.environ, unset=True)
    # Before any thread starts: glibc fixes its arena count when a second thread first allocates.
    limit_malloc_arenas()
    with stop_signals() as (stop, force):
        # The entry point's logger, which the start line has always named.
        logging.getLogger("sqsjkr.cli").info("sqsjkr %s starting with %s", __version__, conf)
        # What the imports made (botocore's models and modules: ~70,000 objects) lives as long as
        # the daemon: out of the collector's sight, its full passes walk only what jobs make.
        gc.freeze()
        gc.set_threshold(YOUNG_GC_THRESHOLD)
        serve(config, stop, force=force, notifier=notifier)


def serve(
    config: Config,
    stop: threading.Event,
    *,
    force: threading.Event | None = None,
    locker: Locker | None = None,
    dedupe: DedupeStore | None = None,
    history: History | None = None,
    notifier: Notifier | None = None,
    on_listening: Callable[[str], None] | None = None,
) -> None:
    """Run the daemon until stop is set and its in-flight jobs are done (force: stop them now).

    locker, dedupe and history replace the stores the config selects (for embedding sqsjkr);
    notifier tells a service manager (systemd) how the daemon is doing; on_listening is called
    with the stats server's bound address ("127.0.0.1:8061", "unix:/path") once it listens.
    """
    _warn_on_short_lease(config)
    queues = config.all_queues()
    workers = sum(queue.max_concurrent_num for queue in queues)
    stats = Stats(
        workers,
        {q.name: q.max_concurrent_num for q in queues} if len(queues) > 1 else None,
    )
    health = Health()
    metrics = Metrics(stats, health, max_events=config.kicker.metrics_max_events)
    # Stats first: a taken port fails before any AWS call, and monitoring sees a daemon that is
    # still waiting for AWS as up with all workers idle (and not ready).
    server = _start_stats_server(config, stats, metrics, health)
    try:
        if on_listening is not None:
            on_listening(server.address)
        connected = _connect(
            config, stop, Stores(dedupe, locker, history), Observers(health, metrics)
        )
        if connected is None:
            return  # stopped while starting
        reporter = Reporter(config.report)
        live = None
        if connected.live is not None and config.history.output_tail > 0:  # 0: no output kept
            live = LiveTails(config.history.live_output_interval.seconds)
        runners = _runners(config, workers, live)
        kicker = Kicker(
            connected.sources,
            dedupe=connected.dedupe,
            locker=connected.locker,
            history=connected.history,
            listener=Listeners(reporter, metrics),
            health=health,
            controls=connected.controls,
            forwarder=connected.forwarder,
            groups=connected.groups,
            pipelines=seen(connected.pipelines, metrics),
            step_sender=connected.forwarder,
            runner=runners,
            stats=stats,
            settings=kicker_settings(config),
            notifier=notifier,
        )
        _log_queues(config, connected.sources)
        reporter.start()
        try:
            with ExitStack() as threads:
                member = _this_daemon(config, server.address)
                threads.enter_context(Presence(connected.roster, member, stats))
                if connected.catch_up is not None:
                    urls = [source.queue_url for source, _ in connected.sources]
                    threads.enter_context(catch_up(config, connected.catch_up, member.owner, urls))
                if connected.live is not None and live is not None:
                    threads.enter_context(LiveWriter(connected.live, live))
                kicker.run(stop, force)
        finally:
            runners.close()
            # After the drain: the last runs' reports get [report] timeout to go out.
            reporter.close()
    finally:
        server.close()


def _runners(config: Config, workers: int, live: LiveTails | None) -> Runners:
    """The shell and HTTP runners, keeping output_tail of each job's output (live: where the
    live output's writer reads it while the job runs)."""
    return Runners(
        ShellRunner(
            kill_grace=config.kicker.kill_grace.seconds,
            tail_bytes=config.history.output_tail,
            live=live,
        ),
        HttpRunner(tail_bytes=config.history.output_tail, max_connections=workers, live=live),
    )


def kicker_settings(config: Config) -> KickerSettings:
    """The loop's settings (each queue's own are IntakeSettings)."""
    return KickerSettings(
        life_time_trigger=config.kicker.life_time_trigger,
        lock_retry_interval=config.lock.retry_interval.seconds,
        lease=config.lock.lease.seconds,
        job_timeout=_seconds(config.kicker.job_timeout),
        shutdown_timeout=_seconds(config.kicker.shutdown_timeout),
        pause_refresh=config.kicker.pause_refresh.seconds,
        http_allow=config.http.allow,
    )


def _this_daemon(config: Config, stats_address: str) -> Member:
    queues = [(queue.name, queue.max_concurrent_num) for queue in config.all_queues()]
    refresh = config.kicker.member_refresh.seconds
    return this_daemon(queues, stats_address, refresh, time.time())


def _log_queues(config: Config, sources: list[tuple[SqsSource, IntakeSettings]]) -> None:
    for source, queue in sources:
        log.info(
            "queue %s, lock table %r, lease %s, visibility timeout %ds, messages deleted %s",
            source.queue_url,
            config.lock.table,
            config.lock.lease,
            queue.visibility,
            "on receive (at-most-once)" if queue.delete_on_receive else "when jobs finish",
        )


def intake_settings(config: Config, queue: QueueConfig) -> IntakeSettings:
    """One queue's settings: its visibility timeout and delete window go with the lease."""
    lease = config.lock.lease.seconds
    interval, derived = lease_timing(lease)
    on_receive = queue.delete_message == "on_receive"
    visibility = queue.visibility_timeout
    if visibility is None:
        visibility = GO_VISIBILITY_TIMEOUT if on_receive else derived
    # A finished job's message waits in the delete batch at most the window: its Receiver's
    # deleter sends it when due, whatever the receive loop waits for. Its visibility was last
    # renewed up to a heartbeat ago (never, in on_receive mode, where it waits from its
    # receipt), so a third of what a beat and a long poll leave keeps the delete well inside.
    left = visibility - (0 if on_receive else interval) - queue.wait_time_seconds
    return IntakeSettings(
        name=queue.name,
        max_workers=queue.max_concurrent_num,
        prefetch=queue.prefetch,
        delete_window=max(0.0, left / 3),
        delete_on_receive=on_receive,
        visibility=visibility,
        wait_time_seconds=queue.wait_time_seconds,
    )


def _warn_on_short_lease(config: Config) -> None:
    if config.takes_leases() and config.lock.lease.seconds < MIN_SAFE_LEASE_SECONDS:
        log.warning(
            "[lock] lease %s is shorter than the smallest safe lease (%ds): one slow DynamoDB "
            "call, retries included, could let a lock or claim lapse while its job runs "
            '(docs/semantics.md, "Lease timing")',
            config.lock.lease,
            MIN_SAFE_LEASE_SECONDS,
        )


def _seconds(duration: Duration | None) -> float | None:
    return None if duration is None else duration.seconds


@dataclass(frozen=True)
class Stores:
    """The dedupe, lock and history stores the daemon uses; None: the config's choice."""

    dedupe: DedupeStore | None = None
    locker: Locker | None = None
    history: History | None = None


@dataclass(frozen=True)
class Connected:
    """The queue and the stores, once AWS has answered."""

    sources: list[tuple[SqsSource, IntakeSettings]]
    dedupe: DedupeStore
    locker: Locker
    history: History
    controls: ControlStore | None  # fleet-wide pauses and routes, kept in the lock table
    forwarder: QueueForwarder  # sends routed messages on to their route's queue
    groups: Groups  # concurrency groups' slots, kept like locks
    roster: Roster  # this daemon's item, which `sqsjkr daemons` lists
    live: DynamoLive | None = None  # running jobs' output tails, for `history --follow`
    pipelines: DynamoPipelines | None = None  # each run of a pipeline's state
    catch_up: CatchUpStores | None = None  # what catch-up calls, when this daemon takes part


@dataclass(frozen=True)
class Observers:
    """Told of every AWS call the daemon's clients make."""

    health: Health
    metrics: Metrics

    def watch(self, client: Any, service: str) -> Any:
        calls.watch(client, service, self.health, self.metrics)
        return client


def _connect(
    config: Config, stop: threading.Event, given: Stores, observers: Observers
) -> Connected | None:
    """The queues and the stores, retrying while AWS cannot be reached; None if stopped."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    queues = config.all_queues()
    # A connection for each worker, and each queue's receive and heartbeat.
    pool = sum(queue.max_concurrent_num for queue in queues) + 2 * len(queues)
    sqs = observers.watch(make_client(session, "sqs", max_pool=pool), "sqs")
    found = _sources(config, sqs, stop)
    if found is None:
        return None
    sources, retention = found
    dynamodb = observers.watch(make_client(session, "dynamodb", max_pool=pool), "dynamodb")
    table = config.lock.table
    uses_table = (
        (given.dedupe is None and config.dedupe.backend == "dynamodb")
        or (given.locker is None and config.lock.backend == "dynamodb")
        or (given.history is None and config.history.backend == "dynamodb")
    )
    # Checked now, not when the first job arrives and cannot be claimed.
    if uses_table and not _retry_at_startup(
        lambda: check_table(dynamodb, table), f"checking DynamoDB table {table!r}", stop
    ):
        return None
    lease = config.lock.lease.seconds
    # One for claims and ends of runs: the writes of a burst's workers share calls.
    transactions = Transactions(dynamodb)
    records_history = given.history is None and config.history.backend == "dynamodb"
    locker = given.locker
    if locker is None:
        locker = (
            DynamoLocker(dynamodb, table, lease_seconds=lease)
            if config.lock.backend == "dynamodb"
            else NoopLocker()
        )
    dedupe = given.dedupe
    if dedupe is None:
        dedupe = (
            DynamoDedupe(
                dynamodb,
                table,
                retention_seconds=retention,
                lease_seconds=lease,
                # A run shows as running now in its event's summary from the claim's own write,
                # which takes the job's lock too when it is free.
                note_running=running_update if records_history else None,
                take_lock=locker.take_put if isinstance(locker, DynamoLocker) else None,
                transactions=transactions,
            )
            if config.dedupe.backend == "dynamodb"
            else NoopDedupe()
        )
    groups: Groups = (
        DynamoGroups(dynamodb, table, lease_seconds=lease)
        if config.lock.backend == "dynamodb"
        else NoGroups()
    )
    # Written beside the history it belongs to: a run's final write deletes its live item.
    live = DynamoLive(dynamodb, table) if records_history else None
    history = given.history
    if history is None:
        history = (
            DynamoHistory(
                dynamodb,
                table,
                retention_seconds=config.history.retention.seconds,
                # Same table: a run's record rides on the write that finishes its claim and
                # releases its lock.
                claims=dedupe if isinstance(dedupe, DynamoDedupe) else None,
                locks=locker if isinstance(locker, DynamoLocker) else None,
                slots=groups if isinstance(groups, DynamoGroups) else None,
                transactions=transactions,
                live_delete=live.end_delete if live is not None else None,
            )
            if config.history.backend == "dynamodb"
            else NoHistory()
        )
    # Pauses and routes are kept in the table: with no table in use, nothing can pause or route
    # this daemon's jobs.
    controls = DynamoControls(dynamodb, table) if uses_table else None
    roster: Roster = DynamoRoster(dynamodb, table) if uses_table else NoRoster()
    forwarder = QueueForwarder(sqs, config.account.id)
    # A run's state lives as long as its steps' claims: a late copy of a step finds it.
    pipelines = (
        DynamoPipelines(dynamodb, table, lives_seconds=retention + LATE_COPY_SECONDS)
        if uses_table
        else None
    )
    looks = None
    if isinstance(dedupe, DynamoDedupe) and catch_up_interval(config) > 0:
        scheduler = observers.watch(make_client(session, "scheduler"), "scheduler")
        looks = CatchUpStores(scheduler, dynamodb, table, sqs)
    return Connected(
        sources,
        dedupe,
        locker,
        history,
        controls,
        forwarder,
        groups,
        roster,
        live,
        pipelines,
        looks,
    )


def _sources(
    config: Config, sqs: Any, stop: threading.Event
) -> tuple[list[tuple[SqsSource, IntakeSettings]], int] | None:
    """Each queue with its settings, and the longest retention of them (dedupe records must
    outlive any message of any queue); None if stopped."""
    sources = []
    retention = 0
    for queue in config.all_queues():
        found = _queue(config, queue.name, sqs, stop)
        if found is None:
            return None
        queue_url, settings, dead_letter_url = found
        intake = replace(
            intake_settings(config, queue), max_receive_count=settings.max_receive_count
        )
        source = SqsSource(
            sqs,
            queue_url,
            wait_time_seconds=queue.wait_time_seconds,
            visibility_timeout=intake.visibility,
            dead_letter_url=dead_letter_url,
        )
        sources.append((source, intake))
        retention = max(retention, settings.retention_seconds)
    return sources, retention


def _queue(
    config: Config, name: str, sqs: Any, stop: threading.Event
) -> tuple[str, QueueSettings, str | None] | None:
    """The queue's URL, its settings and its dead-letter queue's URL; None if stopped."""
    queue_url = _retry_at_startup(
        lambda: resolve_queue_url(sqs, name, config.account.id),
        f"looking up SQS queue {name!r}",
        stop,
    )
    if queue_url is None:
        return None
    settings = _retry_at_startup(
        lambda: queue_settings(sqs, queue_url), f"reading the attributes of queue {name!r}", stop
    )
    if settings is None:
        return None
    if settings.dead_letter_arn is None:
        return queue_url, settings, None
    arn = settings.dead_letter_arn
    dead_letter_url = _retry_at_startup(
        lambda: dead_letter_queue_url(sqs, arn), "looking up the dead-letter queue", stop
    )
    if dead_letter_url is None:
        return None
    return queue_url, settings, dead_letter_url


def _start_stats_server(
    config: Config, stats: Stats, metrics: Metrics, health: Health
) -> StatsServer:
    server = StatsServer(
        stats,
        metrics=metrics,
        health=health,
        host=config.kicker.stats_host,
        port=config.kicker.stats_port,
        socket_path=config.kicker.stats_socket,
    )
    server.start()
    return server


def _retry_at_startup(call: Callable[[], T], what: str, stop: threading.Event) -> T | None:
    """Retry transient failures (the network may come up after the daemon); fail fast otherwise."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            return call()
        except (BotoCoreError, ClientError) as exc:
            if not is_transient(exc):
                raise StartupError(f"{what}: {describe(exc)}") from exc
            delay = backoff.next_delay()
            log.error("%s failed (%s); retrying in %.1fs", what, describe(exc), delay)
            stop.wait(delay)
    return None
