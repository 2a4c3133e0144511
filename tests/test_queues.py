"""Several queues in one daemon, each with its own workers, and prefetch: a burst on one queue does
not hold up another, per-queue figures in the stats and Prometheus, and prefetched jobs kept hidden."""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from sqsjkr.backends.dedupe import THROTTLE_TYPE
from sqsjkr.contract.config import QueueConfig, parse_config
from sqsjkr.errors import ConfigError

from .conftest import (
    Aws,
    Cli,
    Daemon,
    Start,
    config_text,
    counted,
    run_daemon,
    wait_until,
)
from .faults import FaultProxy

BASE = '[account]\nid = "123456789012"\nregion = "us-east-1"\n'


def second_queue(aws: Aws) -> Aws:
    """Another queue of this test's own, beside aws's, on the same table."""
    name = f"heavy-{uuid.uuid4().hex[:8]}"
    url = aws.sqs.create_queue(QueueName=name)["QueueUrl"]
    return replace(aws, queue_name=name, queue_url=url)


def start_two_queues(start: Start, tmp_path: Path, aws: Aws, heavy: Aws) -> tuple[Daemon, int]:
    """A daemon on aws's queue (1 worker) and heavy's (1 worker), and its stats port."""
    conf = tmp_path / "config.toml"
    text = config_text(aws, stats="stats_port = 0", max_concurrent_num=1, shutdown_timeout="0s")
    text += f'\n[[queues]]\nname = "{heavy.queue_name}"\nmax_concurrent_num = 1\n'
    text += "wait_time_seconds = 1\n"
    conf.write_text(text)
    daemon = start("run", "-c", str(conf))
    return daemon, daemon.stats_port


def get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return str(response.read().decode())


def test_a_burst_on_one_queue_does_not_hold_up_another(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    heavy = second_queue(aws)
    daemon, port = start_two_queues(start_daemon, tmp_path, aws, heavy)
    for i in range(3):
        heavy.send({"command": f"touch heavy-{i}; exec sleep 60", "event_id": f"heavy-{i}"})
    wait_until(lambda: len(list(tmp_path.glob("heavy-*"))) == 1, what="a heavy job running")
    aws.send({"command": "touch light", "event_id": "light"})
    wait_until((tmp_path / "light").exists, what="the light job, while heavy ones wait")
    # Its one worker is busy: the other heavy jobs wait for it, not for the light queue.
    assert len(list(tmp_path.glob("heavy-*"))) == 1
    wait_until(counted(port, succeeded=1), what="the light job counted")
    v2 = json.loads(get(port, "/stats/metrics/v2"))
    assert v2["workers"] == {"busy": 1, "idle": 1}
    assert v2["queues"][aws.queue_name]["invocations"]["succeeded"] == 1
    assert v2["queues"][heavy.queue_name]["workers"] == {"busy": 1, "idle": 0}
    assert json.loads(get(port, "/stats/metrics")) == {"idle_worker": 1, "busy_worker": 1}
    metrics = get(port, "/metrics")
    assert f'sqsjkr_queue_workers{{queue="{heavy.queue_name}",state="busy"}} 1.0' in metrics
    line = f'sqsjkr_queue_jobs_total{{outcome="succeeded",queue="{aws.queue_name}"}} 1.0'
    assert (
        line in metrics
        or line.replace(
            f'outcome="succeeded",queue="{aws.queue_name}"',
            f'queue="{aws.queue_name}",outcome="succeeded"',
        )
        in metrics
    )
    assert daemon.stop() == 0  # the running heavy job is stopped, its message given back


def test_each_queues_jobs_use_the_words_of_the_daemons_jobs(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """sqsjkr_queue_jobs_total says outcomes as sqsjkr_jobs_total does, the run record's words:
    a timed-out run is timed_out only, not errored as well."""
    from prometheus_client.parser import text_string_to_metric_families

    heavy = second_queue(aws)
    daemon, port = start_two_queues(start_daemon, tmp_path, aws, heavy)
    aws.send({"command": "exit 1", "event_id": "bad"})
    aws.send({"command": "sleep 30", "event_id": "slow", "timeout": "1s"})
    wait_until(counted(port, errored=2, timed_out=1), timeout=30, what="both jobs ended")
    by_outcome: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(get(port, "/metrics")):
        for sample in family.samples:
            if sample.name in ("sqsjkr_jobs_total", "sqsjkr_queue_jobs_total"):
                key = sample.labels.get("queue", "all")
                by_outcome.setdefault(key, {})[sample.labels["outcome"]] = sample.value
    words = set(by_outcome["all"])
    assert {"duplicate", "failed_to_start", "timed_out", "invalid"} <= words
    assert set(by_outcome[aws.queue_name]) == set(by_outcome[heavy.queue_name]) == words
    light = by_outcome[aws.queue_name]
    assert (light["errored"], light["timed_out"], light["succeeded"]) == (1, 1, 0)
    assert sum(by_outcome[heavy.queue_name].values()) == 0
    assert daemon.stop() == 0


def test_a_daemon_of_one_queue_answers_v2_as_before(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """The Go daemon's monitoring reads v2: one queue adds nothing to it."""
    _, port = run_daemon(start_daemon, tmp_path, aws)
    assert set(json.loads(get(port, "/stats/metrics/v2"))) == {"workers", "invocations"}
    assert "sqsjkr_queue_workers" not in get(port, "/metrics")


def test_prefetch_keeps_more_messages_in_flight_than_workers(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    # A 2 s lease: visibility 4 s, so the prefetched message outlives it many times over.
    daemon, port = run_daemon(
        start_daemon, tmp_path, aws, lease="2s", max_concurrent_num=1, prefetch=1
    )
    aws.send({"command": "touch first; sleep 8", "event_id": "first"})
    wait_until((tmp_path / "first").exists, what="the first job running")
    aws.send({"command": "echo second >> second", "event_id": "second"})
    wait_until(lambda: aws.queue_counts() == (0, 2), what="the second received, waiting")
    assert not (tmp_path / "second").exists()
    wait_until(counted(port, succeeded=2), timeout=60, what="both jobs")
    # Kept hidden while it waited: it reappeared to no one, so it ran once.
    assert (tmp_path / "second").read_text() == "second\n"
    assert invocations_duplicates(port) == 0
    assert daemon.stop() == 0


def invocations_duplicates(port: int) -> int:
    return int(json.loads(get(port, "/stats/metrics/v2"))["invocations"]["duplicates"])


def test_queues_add_to_the_sqs_queue_with_kicker_defaults() -> None:
    config = parse_config(
        BASE + '[sqs]\nqueue_name = "light"\n[kicker]\nmax_concurrent_num = 5\n'
        '[[queues]]\nname = "heavy"\nmax_concurrent_num = 2\ndelete_message = "on_receive"\n'
    )
    assert config.sqs.queue_name == "light"
    assert config.all_queues() == (
        QueueConfig("light", max_concurrent_num=5),
        QueueConfig("heavy", max_concurrent_num=2, delete_message="on_receive"),
    )


def test_queues_alone_make_the_first_stand_for_sqs() -> None:
    config = parse_config(BASE + '[[queues]]\nname = "a"\n[[queues]]\nname = "b"\nprefetch = 3\n')
    assert config.sqs.queue_name == "a"
    assert [(q.name, q.prefetch) for q in config.all_queues()] == [("a", 0), ("b", 3)]


@pytest.mark.parametrize(
    ("kicker", "queue", "prefetch"),
    [
        ("max_concurrent_num = 1\n", "", 9),  # one receive fills a batch of ten
        ("max_concurrent_num = 2\n", "", 8),
        ("max_concurrent_num = 3\n", "", 0),  # more workers: no work held from other hosts
        ("max_concurrent_num = 1\nprefetch = 0\n", "", 0),  # as told
        ('max_concurrent_num = 1\ndelete_message = "on_receive"\n', "", 0),  # a crash loses it
        ("max_concurrent_num = 20\n", "max_concurrent_num = 1\n", 9),  # the queue's workers
        ("max_concurrent_num = 1\nprefetch = 2\n", "max_concurrent_num = 1\n", 2),
    ],
)
def test_a_queue_with_few_workers_prefetches_a_batch_unless_told(
    kicker: str, queue: str, prefetch: int
) -> None:
    config = parse_config(f'{BASE}[kicker]\n{kicker}[[queues]]\nname = "a"\n{queue}')
    assert [q.prefetch for q in config.all_queues()] == [prefetch]


def test_the_go_config_means_one_queue() -> None:
    config = parse_config(BASE + '[sqs]\nqueue_name = "jobs"\n')
    assert config.all_queues() == (QueueConfig("jobs"),)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[[queues]]\nmax_concurrent_num = 2\n", "[[queues]] #1 name is required"),
        ('[[queues]]\nname = "a"\n[[queues]]\nname = ""\n', "[[queues]] #2 name must not be empty"),
        ('[sqs]\nqueue_name = "a"\n[[queues]]\nname = "a"\n', "queue 'a' is named twice"),
        ('[[queues]]\nname = "a"\nmax_concurrent_num = 0\n', "[[queues]] #1 max_concurrent_num"),
        ('[[queues]]\nname = "a"\nwait_time_seconds = 21\n', "[[queues]] #1 wait_time_seconds"),
        ('[[queues]]\nname = "a"\nprefetch = 101\n', "[[queues]] #1 prefetch"),
        ('[[queues]]\nname = "a"\ndelete_message = "never"\n', "[[queues]] #1 delete_message"),
        (
            '[[queues]]\nname = "a"\nvisibility_timeout = 30\n',
            "[[queues]] #1 visibility_timeout (30 s) must be longer than [lock] lease",
        ),
        ("[sqs]\n", "[sqs] queue_name is required"),
    ],
)
def test_a_bad_queue_names_its_table_and_key(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(problem)):
        parse_config(BASE + text)


def test_send_and_dlq_take_a_queue_by_name(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    heavy = second_queue(aws)
    conf = tmp_path / "config.toml"
    conf.write_text(
        config_text(aws, stats="stats_port = 0") + f'\n[[queues]]\nname = "{heavy.queue_name}"\n'
    )
    sent = cli("send", "-c", str(conf), "--queue", heavy.queue_name, "--command", "true")
    assert sent.returncode == 0, sent.stderr
    assert (aws.queue_counts(), heavy.queue_counts()) == ((0, 0), (1, 0))
    # The heavy queue has no RedrivePolicy: dlq names it, not the [sqs] queue.
    dlq = cli("dlq", "list", "-c", str(conf), "--queue", heavy.queue_name)
    assert dlq.returncode != 0 and f"queue {heavy.queue_name!r} has no RedrivePolicy" in dlq.stderr


def test_a_stop_gives_prefetched_messages_back_unclaimed(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    daemon, _ = run_daemon(
        start_daemon, tmp_path, aws, max_concurrent_num=1, prefetch=2, shutdown_timeout="0s"
    )
    first = aws.send({"command": "touch first; exec sleep 60", "event_id": "first"})
    wait_until((tmp_path / "first").exists, what="the first job running")
    waiting = [aws.send({"command": "touch never", "event_id": f"w{i}"}) for i in range(2)]
    wait_until(lambda: aws.queue_counts() == (0, 3), what="two more received, waiting")
    assert aws.item(first, THROTTLE_TYPE) is not None  # what a claim leaves, for comparison
    assert daemon.stop() == 0
    assert not (tmp_path / "never").exists()
    assert aws.queue_counts() == (3, 0)  # all three visible again at once
    # Never claimed: no dedupe record to wait out before another daemon runs them.
    assert all(aws.item(message_id, THROTTLE_TYPE) is None for message_id in waiting)


def test_an_idle_daemon_receives_at_most_once_a_second_even_without_a_long_poll(
    start_daemon: Start, tmp_path: Path, aws: Aws, aws_env: dict[str, str], moto_endpoint: str
) -> None:
    """wait_time_seconds = 0 (or an endpoint that ignores it) answers an empty receive at once:
    the loop waits out the rest of a second before the next, and a job sent meanwhile still runs."""
    with FaultProxy(moto_endpoint) as proxy:
        aws_env["AWS_ENDPOINT_URL"] = proxy.url
        conf = tmp_path / "config.toml"
        text = config_text(aws, stats="stats_port = 0")
        conf.write_text(text.replace("wait_time_seconds = 1", "wait_time_seconds = 0"))
        daemon = start_daemon("run", "-c", str(conf))
        port = daemon.stats_port

        def receives() -> int:
            return sum(call.action == "ReceiveMessage" for call in proxy.calls)

        first, since = receives(), time.monotonic()
        wait_until(lambda: receives() >= first + 3, what="three more idle receives")
        made = receives() - first
        # An upper bound only: a slow host makes fewer receives, never more.
        assert made <= time.monotonic() - since + 1, f"{made} receives"
        aws.send({"command": "true", "event_id": "after-idle"})
        wait_until(counted(port, succeeded=1), what="the job sent while idle")
        assert daemon.stop() == 0
