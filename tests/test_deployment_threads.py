"""benchmarks/deployment.py's CPU and wake-ups per job by thread: each of the daemon's threads
counted under its part of a job by its Python name, and a thread started in the burst from zero.

The benchmark itself runs daemons for minutes (benchmarks/README.md); this checks what it reports.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import deployment  # noqa: E402
from proc_stats import ThreadSample  # noqa: E402


@pytest.mark.parametrize(
    ("name", "role"),
    [
        ("sqsjkr-worker-bench-single-defb5984_0", "workers"),
        ("sqsjkr-worker_12", "workers"),
        ("sqsjkr-worker-bench-single-defb5984-close_1", "closers"),
        ("sqsjkr-worker-close_0", "closers"),
        ("sqsjkr-receiver-bench-no-lock-1a2b", "receiver"),
        ("sqsjkr-receiver", "receiver"),
        ("sqsjkr-deletes-bench-lock-1a2b", "deletes"),
        ("sqsjkr-heartbeat", "other"),
        ("MainThread", "other"),
        ("", "other"),
    ],
)
def test_a_thread_counts_under_its_part_of_a_job_by_its_name(name: str, role: str) -> None:
    assert deployment.thread_role(name) == role


def test_each_part_gives_its_threads_cpu_and_wakeups_per_job_a_new_thread_from_zero() -> None:
    before = {
        1: ThreadSample(1, cpu_ns=5_000_000, voluntary=10, involuntary=0),
        2: ThreadSample(2, cpu_ns=1_000_000, voluntary=4, involuntary=0),
        9: ThreadSample(9, cpu_ns=7_000_000, voluntary=1, involuntary=0),  # ended in the burst
    }
    after = {
        1: ThreadSample(1, cpu_ns=45_000_000, voluntary=50, involuntary=3),
        2: ThreadSample(2, cpu_ns=3_000_000, voluntary=8, involuntary=0),
        3: ThreadSample(3, cpu_ns=20_000_000, voluntary=30, involuntary=1),  # started in it
    }
    names = {1: "sqsjkr-worker_0", 2: "sqsjkr-receiver", 3: "sqsjkr-worker_1"}
    parts = deployment.by_thread(before, after, names, jobs=10)
    assert parts == {
        "workers": {"cpu_ms": 6.0, "wakeups": 7.0},
        "receiver": {"cpu_ms": 0.2, "wakeups": 0.4},
    }
    assert list(parts or {}) == ["workers", "receiver"]  # the busiest first


def test_without_the_threads_names_there_is_no_figure_by_thread() -> None:
    sample = {1: ThreadSample(1, cpu_ns=1, voluntary=1, involuntary=0)}
    assert deployment.by_thread(sample, sample, {}, jobs=10) is None


def test_the_report_shows_each_part_and_a_dash_for_a_part_without_threads() -> None:
    bursts = [
        {
            "scenario": "no lock_id",
            "by_thread": {
                "workers": {"cpu_ms": 1.234, "wakeups": 5.25},
                "deletes": {"cpu_ms": 0.2, "wakeups": 0.1},
            },
        },
        {"scenario": "the other daemon", "by_thread": None},
    ]
    lines = deployment.render_by_thread(bursts)
    assert lines[1] == "CPU ms / wake-ups per job, by thread"
    [row] = [line for line in lines if line.startswith("no lock_id")]
    assert row.split() == ["no", "lock_id", "1.23", "/", "5.2", "-", "-", "0.20", "/", "0.1", "-"]
    assert not any(line.startswith("the other daemon") for line in lines)
    assert deployment.render_by_thread([bursts[1]]) == []
