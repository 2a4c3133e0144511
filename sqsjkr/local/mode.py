"""Local mode set up and served: the endpoint, its queue, table and schedules, the config written
for them, and the daemon serving that config (and the demo) until stopped.
"""

from __future__ import annotations

import gc
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sqsjkr.backends.aws import make_client, make_session
from sqsjkr.backends.scheduler import queue_target
from sqsjkr.contract.config import load_config
from sqsjkr.daemon.service import serve
from sqsjkr.errors import LocalModeError, StatsServerError
from sqsjkr.local.demo import DEMO_REPORTER, DemoWatch, send_demo
from sqsjkr.local.demo_scheduled import PIPELINE_FIRST_SECONDS, SCHEDULED_QUEUE, demo_scheduled
from sqsjkr.local.endpoint import (
    LOCAL_ACCOUNT,
    LOCAL_QUEUE,
    LOCAL_REGION,
    LOCAL_SCHEDULE_GROUP,
    LOCAL_TABLE,
    bind_error,
    create_demo_scheduled,
    create_queue,
    create_sample_schedules,
    create_schedule_group,
    create_table,
    local_endpoint,
    use_endpoint,
)
from sqsjkr.local.scheduler import LocalScheduler
from sqsjkr.local.site import DemoTimes, LocalSite
from sqsjkr.observability.notify import NullNotifier


@dataclass(frozen=True)
class Pace:
    """How soon local mode's slower moments come: the demo pipeline's first firing, and the
    [lock] lease, a third of which a kill waits for at most. The tests quicken both."""

    first_firing_seconds: float = PIPELINE_FIRST_SECONDS
    lease: str | None = None  # a Go duration; None: the config's default (60s)


def write_config(
    directory: Path,
    *,
    stats_port: int,
    workers: int,
    role_arn: str,
    scheduled: bool = False,
    lease: str | None = None,
) -> Path:
    """The config of local mode's daemon; with scheduled, the demo's scheduled queue besides."""
    path = directory / "config.toml"
    lease_line = "" if lease is None else f'lease = "{lease}"\n'
    path.write_text(
        f"""# Written by `sqsjkr local` for its embedded AWS endpoint.
[account]
id = "{LOCAL_ACCOUNT}"
region = "{LOCAL_REGION}"

[sqs]
queue_name = "{LOCAL_QUEUE}"
wait_time_seconds = 2

[kicker]
max_concurrent_num = {workers}
life_time_trigger = "sed 's/^/ALERT life_time exceeded: /'"
stats_port = {stats_port}

[lock]
table = "{LOCAL_TABLE}"
retry_interval = "1s"
{lease_line}
[schedule]
# For `sqsjkr send --at`: local mode's scheduler fires the schedule (moto only keeps it).
role_arn = "{role_arn}"
group = "{LOCAL_SCHEDULE_GROUP}"

[report]
# Prints each run's report (horenso's JSON) into the log, as sqsjkr.report lines.
reporters = ["{DEMO_REPORTER}"]
"""
        + (_SCHEDULED_QUEUE_CONFIG if scheduled else "")
    )
    return path


#: The demo's scheduled queue: its own workers, and its own figures in the stats.
_SCHEDULED_QUEUE_CONFIG = f"""
[[queues]]
# The demo's scheduled pipeline and late schedule: counted apart from the demo's jobs.
name = "{SCHEDULED_QUEUE}"
max_concurrent_num = 2
"""


@contextmanager
def prepared(
    *, port: int, stats_port: int, workers: int, demo: bool = False, pace: Pace = Pace()
) -> Iterator[tuple[LocalSite, Any]]:
    """Start the endpoint, create the queue and table, the schedule group and the sample schedules
    (with demo, the demo's scheduled queue and schedules too), write the config; yields the site
    and an SQS client, for the lifetime of the block."""
    with local_endpoint(port) as endpoint, tempfile.TemporaryDirectory(prefix="sqsjkr-") as tmp:
        use_endpoint(endpoint)
        session = make_session(region=LOCAL_REGION)
        sqs = make_client(session, "sqs")
        queue_url = create_queue(sqs, LOCAL_QUEUE, dead_letter=True)
        dead_letter_url = str(sqs.get_queue_url(QueueName=f"{LOCAL_QUEUE}-dlq")["QueueUrl"])
        create_table(make_client(session, "dynamodb"), LOCAL_TABLE)
        role_arn = create_schedule_group(session)
        create_sample_schedules(session, queue_target(sqs, queue_url).arn, role_arn)
        times = None
        if demo:
            times = _scheduled(session, sqs, role_arn, Path(tmp), pace.first_firing_seconds)
        conf = write_config(
            Path(tmp),
            stats_port=stats_port,
            workers=workers,
            role_arn=role_arn,
            scheduled=demo,
            lease=pace.lease,
        )
        yield LocalSite(endpoint, queue_url, dead_letter_url, conf, times), sqs


def _scheduled(
    session: Any, sqs: Any, role_arn: str, directory: Path, first_in: float
) -> DemoTimes:
    """The demo's scheduled queue and schedules, set up now; their times."""
    url = create_queue(sqs, SCHEDULED_QUEUE, dead_letter=True)
    scheduled = demo_scheduled(time.time(), directory, first_in)
    create_demo_scheduled(session, queue_target(sqs, url).arn, role_arn, scheduled)
    return scheduled.times


class LocalFace(Protocol):
    """What the command line shows at each step of local mode."""

    def listening(self, site: LocalSite, stats_address: str) -> Callable[[], None]:
        """The stats server listens: say where everything is; returns what closes what it
        started beside (the dashboard)."""

    def killable(self, site: LocalSite) -> None:
        """The demo's long job runs: show how to kill it."""

    def done(self, site: LocalSite, counts: dict[str, int], dead: list[tuple[str, str]]) -> None:
        """Every demo job has an outcome: counts and the dead letters' (body, sqsjkr_error)."""


def run_local(
    stop: threading.Event,
    force: threading.Event,
    face: LocalFace,
    *,
    demo: bool,
    port: int,
    stats_port: int,
    workers: int,
    pace: Pace = Pace(),
) -> None:
    """Start the endpoint, create the queue and table, serve until stop, telling face each step;
    the endpoint's schedules fire meanwhile (local/scheduler.py: moto never fires them).

    The banner (and the demo) wait for the stats server to listen, so a taken stats port fails
    before anything is printed or sent; one taken already fails before the endpoint starts.
    """
    check_stats_port(stats_port)
    with (
        long_lived(),
        prepared(port=port, stats_port=stats_port, workers=workers, demo=demo, pace=pace) as (
            site,
            sqs,
        ),
        firing(site.endpoint),
    ):
        stats: list[str] = []  # the stats server's address, once it listens
        closing: list[Callable[[], None]] = []
        watch = DemoWatch(
            sqs, site, lambda: face.killable(site), lambda *ended: face.done(site, *ended), stop
        )

        def receiving() -> None:
            if demo:
                send_demo(sqs, site.queue_url)
                watch.start(stats[0])

        def listening(stats_address: str) -> None:
            stats.append(stats_address)
            closing.append(face.listening(site, stats_address))
            gc.freeze()  # served, the dashboard imported: long-lived too (long_lived)

        try:
            serve_local(site, stop, force, on_listening=listening, on_receiving=receiving)
        finally:
            watch.close()
            for close in closing:
                close()


@contextmanager
def long_lived() -> Iterator[None]:
    """Local mode's objects frozen (gc.freeze) as it starts, and as it ends: what it has loaded
    (moto, botocore's models, Flask) lives as long as it, and the collector's full passes skip
    it, the last one at exit too, which would otherwise walk it all for half a second of CPU."""
    gc.freeze()
    try:
        yield
    finally:
        gc.freeze()


@contextmanager
def firing(endpoint: str) -> Iterator[LocalScheduler]:
    """The scheduler that fires the endpoint's schedules, its thread running for the block."""
    scheduler = LocalScheduler(make_session(region=LOCAL_REGION), endpoint)
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.close()


def serve_local(
    site: LocalSite,
    stop: threading.Event,
    force: threading.Event,
    *,
    on_listening: Callable[[str], None],
    on_receiving: Callable[[], None],
) -> None:
    """Serve the site's config until stop; a taken stats port is a LocalModeError that says what
    to pass. on_receiving is called once the daemon receives (the demo's delays count from then)."""
    try:
        serve(
            load_config(site.conf),
            stop,
            force=force,
            on_listening=on_listening,
            notifier=_Receiving(on_receiving),
        )
    except StatsServerError as exc:
        raise LocalModeError(f"{exc}; {_STATS_PORT_HINT}") from exc


#: What to do about a taken stats port, said after the error.
_STATS_PORT_HINT = (
    "pass another --stats-port, or --stats-port 0 for any free port "
    "(with make demo: make demo DEMO_ARGS='--stats-port 0')"
)


def check_stats_port(port: int) -> None:
    """LocalModeError if the stats port (on 127.0.0.1, where local mode serves them) is taken:
    local mode fails at once, before its endpoint starts; one taken later fails at the daemon's
    bind (serve_local), before the banner."""
    if port == 0:
        return
    error = bind_error(port)
    if error is not None:
        raise LocalModeError(
            f"cannot serve stats on 127.0.0.1:{port}: {error.strerror}; {_STATS_PORT_HINT}"
        ) from error


class _Receiving(NullNotifier):
    """Tells local mode that the daemon receives."""

    def __init__(self, on_receiving: Callable[[], None]) -> None:
        self._on_receiving = on_receiving

    def ready(self) -> None:
        self._on_receiving()
