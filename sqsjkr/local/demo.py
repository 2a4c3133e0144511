"""The demo of `sqsjkr local --demo`: sample jobs that show each behaviour (one stopped by `sqsjkr
kill`), sample schedules, the watch that tells when they have ended, and the commands it shows last."""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from sqsjkr.backends.aws import describe, make_client, make_session
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.config import Config, load_config
from sqsjkr.contract.job import build_body
from sqsjkr.local.demo_scheduled import scheduled_commands
from sqsjkr.local.site import LocalSite

log = logging.getLogger("sqsjkr.local")

#: The demo's queue, whose dead-letter queue is named after it.
DEMO_QUEUE = "sqsjkr-local"
#: A reporter that prints each report: the demo's log shows the JSON reporters get.
DEMO_REPORTER = "cat"
#: The event of the demo's long job, which the demo stops with `sqsjkr kill` once it runs.
KILLED_EVENT = "demo-kill"
#: The demo's long job, which runs until it is killed.
LONG_COMMAND = 'echo "running until killed"; sleep 600'
#: The send the banner shows and the demo's end repeats, after `sqsjkr COMMAND -c CONF`.
SEND_COMMAND = ("send", "--command", "echo hello")
#: The kill, after `sqsjkr COMMAND -c CONF`.
KILL_COMMAND = ("kill", KILLED_EVENT, "--reason", "the demo shows a kill", "--wait")
#: What a user pastes before KILL_COMMAND to try it: the demo's own long job has been killed.
LONG_JOB_SEND = ("send", "--event-id", KILLED_EVENT, "--command", LONG_COMMAND)


@dataclass(frozen=True)
class DemoJob:
    """One message of the demo: what it shows, its body, its DelaySeconds and how it should end."""

    what: str
    body: str
    delay: int
    outcome: str  # the invocations counter it should add to


#: The lock jobs share lock_id "report": the delays make sure report 1 holds it (for 5 s) before
#: report 2 waits for it and the abort job gives up on it. The late job is delayed past its
#: life_time, so it is cancelled and the trigger prints an alert.
DEMO_JOBS = [
    DemoJob(
        "a plain job with an env",
        build_body('echo "hello, $WHO"', envs={"WHO": "newcomer"}, event_id="demo-hello"),
        0,
        "succeeded",
    ),
    DemoJob(
        "a job holding lock 'report' for 5s",
        build_body(
            'echo "report 1: started, holding the lock for 5s"; sleep 5; echo "report 1: done"',
            event_id="demo-report-1",
            lock_id="report",
        ),
        0,
        "succeeded",
    ),
    DemoJob(
        "a job waiting for lock 'report'",
        build_body(
            'echo "report 2: ran once report 1 released the lock"',
            event_id="demo-report-2",
            lock_id="report",
        ),
        1,
        "succeeded",
    ),
    DemoJob(
        "a job giving up because 'report' is locked",
        build_body(
            'echo "never printed"', event_id="demo-abort", lock_id="report", abort_if_locked=True
        ),
        2,
        "failed",
    ),
    DemoJob(
        "a job arriving after its 1s life_time",
        build_body('echo "never printed"', event_id="demo-late", life_time="1s"),
        3,
        "failed",
    ),
    DemoJob(
        "a job that fails",
        build_body('echo "about to fail" >&2; exit 3', event_id="demo-fail"),
        0,
        "errored",
    ),
    DemoJob(
        "a job stopped by its 2s timeout",
        build_body(
            'echo "sleeping 60s under a 2s timeout"; sleep 60',
            event_id="demo-timeout",
            timeout="2s",
        ),
        0,
        "errored",
    ),
    DemoJob(
        "a long job stopped by `sqsjkr kill`",
        build_body(LONG_COMMAND, event_id=KILLED_EVENT),
        0,
        "failed",
    ),
    DemoJob(
        "a message that is not a job (moved to the dead-letter queue)",
        "this is not JSON",
        0,
        "failed",
    ),
]


@dataclass(frozen=True)
class SampleSchedule:
    """A schedule local mode creates in its scheduler for `sqsjkr schedules` and status's next
    runs to show, and which its scheduler fires when due (local/scheduler.py)."""

    name: str
    expression: str
    timezone: str
    body: str
    enabled: bool = True


#: Each of the engine's kinds of expression, with the jobs of demo events; one disabled.
SAMPLE_SCHEDULES = (
    SampleSchedule(
        "sqsjkr-local-hello", "cron(0 9 ? * MON-FRI *)", "Europe/Berlin", DEMO_JOBS[0].body
    ),
    SampleSchedule("sqsjkr-local-month-end", "cron(30 2 L * ? *)", "UTC", DEMO_JOBS[1].body),
    SampleSchedule("sqsjkr-local-fail", "rate(1 hour)", "UTC", DEMO_JOBS[5].body),
    SampleSchedule(
        "sqsjkr-local-timeout",
        "cron(0 3 ? * 2#1 *)",
        "America/New_York",
        DEMO_JOBS[6].body,
        enabled=False,
    ),
)


#: How often the demo reads the stats endpoint while its jobs run.
_DEMO_POLL_SECONDS = 0.25
#: The invocation counters of which each message adds to exactly one; timed_out is part of errored.
OUTCOMES = ("succeeded", "errored", "failed", "duplicates")


def send_demo(sqs: Any, queue_url: str) -> None:
    for job in DEMO_JOBS:
        sent = sqs.send_message(QueueUrl=queue_url, MessageBody=job.body, DelaySeconds=job.delay)
        log.info("demo: sent %s as message %s", job.what, sent["MessageId"])


class DemoWatch:
    """Polls the stats endpoint until every demo message has an outcome.

    Calls on_killable once the long job runs (the face runs and shows `sqsjkr kill`), then
    on_done with the invocation counters and the dead letters' (body, sqsjkr_error) once all
    have ended; neither once stopping is set (Ctrl-C: the daemon stops its jobs, and the
    commands they would run are not wanted). Its thread is started by start() and joined by
    close().
    """

    def __init__(
        self,
        sqs: Any,
        site: LocalSite,
        on_killable: Callable[[], None],
        on_done: Callable[[dict[str, int], list[tuple[str, str]]], None],
        stopping: threading.Event | None = None,
    ) -> None:
        self._sqs = sqs
        self._site = site
        self._on_killable = on_killable
        self._on_done = on_done
        self._done = threading.Event()
        self._stopping = threading.Event() if stopping is None else stopping
        self._thread: threading.Thread | None = None

    def start(self, stats_address: str) -> None:
        self._thread = threading.Thread(
            target=self._watch, args=(stats_address,), name="sqsjkr-demo-watch"
        )
        self._thread.start()

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()

    def _watch(self, stats_address: str) -> None:
        url = f"http://{stats_address}/stats/metrics/v2"
        killed = False
        history = _history(load_config(str(self._site.conf)))
        while not self._done.wait(_DEMO_POLL_SECONDS) and not self._stopping.is_set():
            if not killed and _running(history, KILLED_EVENT):
                self._on_killable()
                killed = True
                continue  # its kill took seconds: a stop may have come meanwhile
            counts = _invocations(url)
            if counts is not None and sum(counts[k] for k in OUTCOMES) >= len(DEMO_JOBS):
                self._on_done(counts, _peek_dead_letters(self._sqs, self._site.dead_letter_url))
                return


def _history(config: Config) -> DynamoHistory:
    """The config's run history, read through the backend: local mode sits beside the fleet layer."""
    session = make_session(region=config.account.region, profile=config.account.profile)
    return DynamoHistory(
        make_client(session, "dynamodb"),
        config.lock.table,
        retention_seconds=config.history.retention.seconds,
    )


def _running(history: DynamoHistory, event_id: str) -> bool:
    """Whether the event's summary shows a run of it in progress (False while unreadable)."""
    try:
        summary = history.summary(event_id)
    except (BotoCoreError, ClientError) as exc:
        log.warning("demo: cannot read the summary of %s: %s", event_id, describe(exc))
        return False
    return summary is not None and bool(summary.running)


def _invocations(url: str) -> dict[str, int] | None:
    """The invocation counters of the demo's queue at the stats url: its own figures beside
    the scheduled queue's, whose on-going firings are not the demo jobs'; None while it cannot
    be read."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            body = json.load(response)
        return dict(body.get("queues", {}).get(DEMO_QUEUE, body)["invocations"])
    except (OSError, ValueError, KeyError, AttributeError):
        return None


def _peek_dead_letters(sqs: Any, url: str) -> list[tuple[str, str]]:
    """(body, sqsjkr_error) of the messages in the dead-letter queue, leaving them there."""
    try:
        # The failed counter goes up just before the message is moved: wait for it a little.
        response = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            MessageAttributeNames=["All"],
            VisibilityTimeout=0,
            WaitTimeSeconds=2,
        )
    except (BotoCoreError, ClientError) as exc:
        log.warning("demo: cannot read the dead-letter queue: %s", describe(exc))
        return []
    return [
        (
            message["Body"],
            message.get("MessageAttributes", {}).get("sqsjkr_error", {}).get("StringValue", ""),
        )
        for message in response.get("Messages", [])
    ]


#: The commands the demo ends with: what each shows, and its arguments after `-c CONF`.
CLOSING_COMMANDS = (
    ("The status of every event", ("status",)),
    ("The runs of demo-fail, with their output", ("history", "demo-fail", "--output")),
    ("Every event's schedule and its next three runs", ("schedules",)),
    ("The fleet's daemons", ("daemons",)),
)


def closing_commands(site: LocalSite, dashboard: str = "") -> str:
    """CLOSING_COMMANDS, run as a user would run them, each printed as the banner's `send` is,
    ready to paste, with its output; then how to look at the demo's scheduled part."""
    shown = [site.shown(what, command) for what, command in CLOSING_COMMANDS]
    if site.demo_times is not None:
        shown.append(scheduled_commands(site, site.demo_times, dashboard))
    # The banner's send line has scrolled away by now: the last lines say it again.
    shown.append(
        "The daemon keeps running. Send a job from another shell:\n"
        f"{site.pasteable(*SEND_COMMAND)}\nStop: Ctrl-C"
    )
    return "\n".join(part.rstrip() for part in shown)


def shown_kill(site: LocalSite) -> str:
    """`sqsjkr kill` of the long job, run and shown as the closing commands are, after the send
    that starts one."""
    what = "Stopping a long job with sqsjkr kill (to try it: send a long job, then kill it)"
    return site.shown(what, KILL_COMMAND, before=LONG_JOB_SEND)
