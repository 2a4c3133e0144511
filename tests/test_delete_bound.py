"""The bound docs/semantics.md promises on a finished job's delete, measured on a real daemon.

A job that finishes while its receive loop long-polls an empty queue must not wait for that poll.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.config import load_config
from sqsjkr.daemon.service import intake_settings

from .conftest import Aws, Start, config_text, run_on, wait_until

#: A lease whose heartbeat (every L/3 = 10 s) is well past the delete bound it gives: the bound
#: must be kept by the deletes themselves, not by a beat.
LEASE_SECONDS = 30
#: A long poll that outlasts the bound, so that a delete waiting for it would break the bound.
WAIT_TIME_SECONDS = 20
#: What the measure may add to the wait the bound is about: the DeleteMessageBatch call itself
#: and wait_until's pauses (a quarter second at most each).
MEASURE_SECONDS = 1.0


def documented_bound(lease: float, wait_time_seconds: int) -> float:
    """(V - L/3 - wait_time_seconds)/3, with V = L + max(2 s, L/4) rounded up (Timing, in
    docs/semantics.md)."""
    visibility = math.ceil(lease + max(2.0, lease / 4))
    return (visibility - lease / 3 - wait_time_seconds) / 3


def test_a_job_that_ends_during_a_long_poll_is_deleted_within_the_documented_bound(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    text = config_text(aws, stats="stats_port = 0").replace(
        "wait_time_seconds = 1", f"wait_time_seconds = {WAIT_TIME_SECONDS}"
    )
    text = text.replace("[lock]\n", f'[lock]\nlease = "{LEASE_SECONDS}s"\n')
    daemon = run_on(start_daemon, tmp_path, text)
    config = load_config(daemon.conf)
    bound = documented_bound(LEASE_SECONDS, WAIT_TIME_SECONDS)
    assert intake_settings(config, config.all_queues()[0]).delete_window == pytest.approx(bound)
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    # The daemon's first receive long-polls the empty queue; the next starts as the job does.
    message_id = aws.send({"command": "true", "event_id": "bound"})
    runs = wait_until(lambda: history.runs("bound", 1), what="the run's record")
    written = time.monotonic()
    assert runs[0].message_id == message_id
    # The job ended, its record written: the receive loop sits in a 20 s poll of an empty queue.
    wait_until(lambda: aws.queue_counts() == (0, 0), timeout=WAIT_TIME_SECONDS, what="the delete")
    waited = time.monotonic() - written
    assert waited <= bound + MEASURE_SECONDS, (waited, bound, daemon.log)
    assert daemon.stop() == 0
