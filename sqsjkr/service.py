"""Assembles a running daemon from a Config: AWS clients, backends, the stats server and the loop.

`sqsjkr run` and `sqsjkr local` both start the daemon through serve().
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from botocore.exceptions import BotoCoreError, ClientError

from .aws import Backoff, describe, is_transient, make_client, make_session
from .config import Config
from .daemon import Kicker, KickerSettings
from .dedupe import DedupeStore, DynamoDedupe, NoopDedupe
from .errors import StartupError
from .locks import DynamoLocker, Locker, NoopLocker
from .runner import ShellRunner
from .sqs import SqsSource, resolve_queue_url
from .stats import Stats, StatsServer

log = logging.getLogger("sqsjkr.service")

T = TypeVar("T")


def serve(
    config: Config,
    stop: threading.Event,
    *,
    locker: Locker | None = None,
    dedupe: DedupeStore | None = None,
) -> None:
    """Run the daemon until stop is set and its running jobs have finished.

    locker and dedupe replace the backends the config selects (for embedding sqsjkr in Python).
    """
    stats = Stats(config.kicker.max_concurrent_num)
    # Stats first: a taken port fails before any AWS call, and monitoring sees a daemon that is
    # still waiting for AWS as up with all workers idle.
    server = _start_stats_server(config, stats)
    try:
        parts = _connect(config, stop, locker, dedupe)
        if parts is None:
            return  # stopped while starting
        source, dedupe, locker = parts
        kicker = Kicker(
            source,
            dedupe=dedupe,
            locker=locker,
            runner=ShellRunner(),
            stats=stats,
            settings=KickerSettings(
                max_workers=config.kicker.max_concurrent_num,
                life_time_trigger=config.kicker.life_time_trigger,
                lock_retry_interval=config.lock.retry_interval.seconds,
                delete_window=max(0, config.sqs.visibility_timeout - config.sqs.wait_time_seconds)
                / 3,
            ),
        )
        log.info("queue %s, lock table %r", source.queue_url, config.lock.table)
        kicker.run(stop)
    finally:
        server.close()


def _connect(
    config: Config, stop: threading.Event, locker: Locker | None, dedupe: DedupeStore | None
) -> tuple[SqsSource, DedupeStore, Locker] | None:
    """The queue and the backends, retrying while AWS cannot be reached; None if stopped."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    pool = config.kicker.max_concurrent_num + 2
    sqs = make_client(session, "sqs", max_pool=pool)
    queue_url = _retry_at_startup(
        lambda: resolve_queue_url(sqs, config.sqs.queue_name, config.account.id),
        f"looking up SQS queue {config.sqs.queue_name!r}",
        stop,
    )
    if queue_url is None:
        return None
    source = SqsSource(
        sqs,
        queue_url,
        wait_time_seconds=config.sqs.wait_time_seconds,
        visibility_timeout=config.sqs.visibility_timeout,
    )
    dynamodb = make_client(session, "dynamodb", max_pool=pool)
    if dedupe is None:
        dedupe = _dedupe(config, source, dynamodb, stop)
        if dedupe is None:
            return None
    if locker is None:
        locker = (
            DynamoLocker(dynamodb, config.lock.table)
            if config.lock.backend == "dynamodb"
            else NoopLocker()
        )
    return source, dedupe, locker


def _dedupe(
    config: Config, source: SqsSource, dynamodb: Any, stop: threading.Event
) -> DedupeStore | None:
    if config.dedupe.backend == "none":
        return NoopDedupe()
    retention = _retry_at_startup(
        source.retention_seconds, "reading the queue's MessageRetentionPeriod", stop
    )
    if retention is None:
        return None
    return DynamoDedupe(dynamodb, config.lock.table, retention_seconds=retention)


def _start_stats_server(config: Config, stats: Stats) -> StatsServer:
    server = StatsServer(
        stats,
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
