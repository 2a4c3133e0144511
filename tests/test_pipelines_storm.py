"""A kill storm over pipelines: hosts die with SIGKILL (the daemon and its running jobs) in the
middle of a diamond's steps, two firings in flight, every message delivered twice.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from sqsjkr.backends.history import DynamoHistory
from sqsjkr.contract.run import RunOutcome, RunRecord
from tests.conftest import Aws, Daemon, Start, config_text, run_on, wait_until
from tests.faults import FaultProxy
from tests.test_pipelines import diamond, firing_fields, lines, pipeline_state, send_twice
from tests.test_pipelines import doubled as doubled  # noqa: F401 - the fixture

#: Hosts that die one after another, each while one of these steps runs on it: the root, a
#: parent of the fan-in, and the fan-in's child.
KILLS = ({"a"}, {"b", "c"}, {"d"})
#: Daemons up at any time: a dead one is replaced, as an autoscaling group would.
HOSTS = 3


def step_command(out: Path, pids: Path, step: str) -> str:
    """A step that leaves its process id where the storm finds it, then takes its time."""
    return f"echo $$ > {pids / step}; echo start-{step} >> {out}; sleep 1; echo end-{step} >> {out}"


def host(start: Start, tmp_path: Path, aws: Aws) -> Daemon:
    """A daemon with a short lease, not waited for: hosts start side by side."""
    text = config_text(aws, stats="stats_port = 0").replace("[lock]\n", '[lock]\nlease = "2s"\n')
    return run_on(start, tmp_path, text, wait_ready=False)


def parent_of(pid: int) -> int | None:
    """The process that started pid (its daemon), or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[1])


def running(pid_dirs: list[Path]) -> list[tuple[Path, int, int]]:
    """The steps running now: (their pid file, their process, its daemon's pid)."""
    found = []
    for directory in pid_dirs:
        for path in directory.iterdir():
            text = path.read_text().strip()
            parent = parent_of(int(text)) if text else None
            if parent is not None:
                found.append((path, int(text), parent))
    return found


def victim(daemons: list[Daemon], pid_dirs: list[Path], wanted: set[str]) -> Daemon | None:
    """A live daemon running one of the wanted steps now."""
    by_pid = {d.proc.pid: d for d in daemons}
    for path, _, parent in running(pid_dirs):
        if path.name in wanted and parent in by_pid:
            return by_pid[parent]
    return None


def kill_a_host(dying: Daemon, pid_dirs: list[Path]) -> list[str]:
    """SIGKILL the daemon and every step it runs, as when its host dies; the steps killed."""
    steps = running(pid_dirs)
    dying.proc.send_signal(signal.SIGKILL)
    dying.kill()
    killed = []
    for path, pid, parent in steps:
        if parent == dying.proc.pid:
            try:
                os.killpg(pid, signal.SIGKILL)  # a job is the leader of a session of its own
            except ProcessLookupError:
                continue
            path.unlink()
            killed.append(f"{path.parent.name}/{path.name}")
    return killed


def succeeded(history: DynamoHistory, prefix: str, step: str, key: str) -> list[RunRecord]:
    runs = history.runs(f"{prefix}-{step}", 50)
    return [r for r in runs if r.pipeline_key == key and r.outcome is RunOutcome.SUCCEEDED]


@pytest.mark.slow
def test_a_kill_storm_over_two_firings_of_a_diamond_runs_each_step_once_per_firing(
    aws: Aws,
    start_daemon: Start,
    tmp_path: Path,
    doubled: FaultProxy,  # noqa: F811 - the fixture: every message sent twice
) -> None:
    prefix = f"storm-{uuid.uuid4().hex[:6]}"
    at = datetime.now(timezone.utc).replace(microsecond=0).timestamp() - 5
    firings: dict[str, dict[str, Any]] = {}
    pid_dirs = []
    for name, moment in (("first", at), ("second", at - 3600)):
        out, pids = tmp_path / f"{name}.out", tmp_path / name
        pids.mkdir()
        pid_dirs.append(pids)
        commands = {s: step_command(out, pids, s) for s in "abcd"}
        body = {**diamond(out, prefix, **commands), "firing": firing_fields("nightly", moment)}
        firings[f"nightly@{body['firing']['time']}"] = {"body": body, "out": out}
    daemons = [host(start_daemon, tmp_path, aws) for _ in range(HOSTS)]
    for daemon in daemons:
        daemon.wait_for_log("receiving with")
    for firing in firings.values():
        send_twice(aws, firing["body"])
    killed: list[str] = []
    for wanted in KILLS:
        dying = wait_until(
            lambda w=wanted: victim(daemons, pid_dirs, w),
            timeout=60,
            what=f"a step of {sorted(wanted)} running on a live daemon",
        )
        killed += kill_a_host(dying, pid_dirs)
        daemons.remove(dying)
        daemons.append(host(start_daemon, tmp_path, aws))
    for key in firings:
        wait_until(
            lambda k=key: "d" in getattr(pipeline_state(aws, k), "succeeded", ()),
            timeout=90,
            what=f"d of {key} to succeed",
        )
    assert len(killed) >= len(KILLS), killed
    history = DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1)
    for key, firing in firings.items():
        # Each step succeeded once for the firing, a killed one after running again; d only
        # after both b and c had succeeded.
        runs = {s: succeeded(history, prefix, s, key) for s in "abcd"}
        assert {s: len(r) for s, r in runs.items()} == dict.fromkeys("abcd", 1), runs
        d_started = runs["d"][0].started_at
        assert d_started is not None
        assert all(d_started >= runs[s][0].ended_at for s in "bc")
        state = pipeline_state(aws, key)
        assert state.succeeded == {"a", "b", "c", "d"} and not state.failed, state
        ran = Counter(lines(firing["out"]))
        assert ran["end-d"] >= 1 and "notified" not in ran
    for daemon in daemons:
        assert daemon.stop() == 0
