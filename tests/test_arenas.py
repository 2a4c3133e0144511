"""The daemon's malloc: glibc's arena count capped inside the process, its per-thread caches off
by an exec of itself (daemon/arenas.py), its jobs' environment untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from sqsjkr.daemon.arenas import DAEMON_ARENAS, THREAD_CACHE_OFF, TUNABLES_BEFORE

from .conftest import Aws, Start, config_text, counted, run_daemon, sqsjkr_argv, wait_until

#: glibc maps each arena but the main one at a multiple of its largest heap (64 MiB).
HEAP_ALIGN = 64 << 20

pytestmark = pytest.mark.skipif(
    not (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"), reason="glibc's arenas"
)


def arena_heaps(pid: int | str) -> int:
    """The arenas a process has besides glibc's main one: an anonymous writable mapping that
    begins on the heaps' alignment and, with the reserved part after it, spans one heap."""
    mappings = []
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        address, perms, *rest = line.split()
        start, end = (int(part, 16) for part in address.split("-"))
        mappings.append((start, end, perms, len(rest) == 3))
    count = 0
    for (start, end, perms, anonymous), after in zip(mappings, [*mappings[1:], None], strict=True):
        if not (anonymous and perms.startswith("rw") and start % HEAP_ALIGN == 0):
            continue
        reserved = after is not None and after[0] == end and after[2].startswith("---")
        if end - start == HEAP_ALIGN or (reserved and after[1] - start == HEAP_ALIGN):
            count += 1
    return count


PROBE = """
import sys, threading
from sqsjkr.daemon.arenas import limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas()
barrier = threading.Barrier(8)
kept = []
def allocate():
    barrier.wait()  # all alive at once: a thread that ended hands its arena on
    kept.append(bytearray(200_000))
    barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print("allocated", flush=True)
sys.stdin.read()
"""


def heaps_of_probe(mode: str) -> int:
    """arena_heaps of a process whose 8 threads allocated at once, after limit_malloc_arenas()
    (mode "limit") or not ("none")."""
    with subprocess.Popen(
        [sys.executable, "-c", PROBE, mode],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as probe:
        assert probe.stdout is not None and probe.stdin is not None
        assert probe.stdout.readline() == "allocated\n"
        heaps = arena_heaps(probe.pid)
        probe.stdin.close()
        assert probe.wait(30) == 0
    return heaps


def test_limit_malloc_arenas_caps_the_arenas_of_threads_that_allocate() -> None:
    assert heaps_of_probe("none") >= 4  # an arena per thread, up to 8 per core: glibc's default
    assert heaps_of_probe("limit") <= DAEMON_ARENAS - 1


def test_the_daemon_runs_with_one_arena_and_its_jobs_with_glibcs_default(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """20 workers and their closers, all alive after a burst: the daemon has no arena besides
    glibc's main one, and a job's environment has no MALLOC_ARENA_MAX (the unit's variable was
    reverted for that: every job inherited it)."""
    env_file = tmp_path / "job-env"
    for _ in range(30):
        aws.send({"command": "true"})
    aws.send({"command": f"env > {env_file}"})
    daemon, port = run_daemon(start_daemon, tmp_path, aws, max_concurrent_num=20)
    wait_until(counted(port, succeeded=31), timeout=60, what="31 jobs ended")
    assert arena_heaps(daemon.proc.pid) <= DAEMON_ARENAS - 1
    assert "MALLOC_ARENA_MAX" not in env_file.read_text()
    assert daemon.stop() == 0


@dataclass(frozen=True)
class Environs:
    """The daemon's environment as /proc shows it (what it was exec'd with last), and its job's."""

    daemon: list[str]
    job: list[str]


def exec_daemon(
    tmp_path: Path, aws: Aws, aws_env: dict[str, str], tunables: str | None
) -> Environs:
    """Run `sqsjkr run` exec'd as systemd would (not forked), with GLIBC_TUNABLES=tunables (or
    none), until a job has written its environment."""
    conf = tmp_path / "config.toml"
    # With a section it warns of, as it reads the config: after the exec, not before too.
    conf.write_text(config_text(aws, stats="stats_port = 0") + "\n[unheard_of]\nkey = 1\n")
    log_file, env_file = tmp_path / "daemon.log", tmp_path / "job-env"
    aws.send({"command": f"env > {env_file}.part && mv {env_file}.part {env_file}"})
    env = {**os.environ, **aws_env}
    env.pop("GLIBC_TUNABLES", None)
    if tunables is not None:
        env["GLIBC_TUNABLES"] = tunables
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            sqsjkr_argv("run", "-c", str(conf)), env=env, stdout=log, stderr=log
        )
    try:
        wait_until(env_file.exists, timeout=30, what="the job's environment")
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().decode()
    finally:
        proc.terminate()
        assert proc.wait(20) == 0, log_file.read_text()
    # One process from the start, the exec first: one start line, one warning.
    log_text = log_file.read_text()
    assert log_text.count(" starting with ") == 1
    assert log_text.count("unknown config section [unheard_of]") == 1, log_text
    return Environs(environ.split("\0"), env_file.read_text().splitlines())


MINE = "glibc.malloc.check=0"
MY_CACHES = "glibc.malloc.tcache_count=3"


@pytest.mark.parametrize(
    ("given", "daemon_has", "job_has"),
    [
        # None: the caches off; the job's environment is the daemon's before, with neither.
        (None, [f"GLIBC_TUNABLES={THREAD_CACHE_OFF}"], []),
        # Another tunable of the operator's: kept, the caches' added (glibc's loader splits the
        # two where /proc shows them), and the job gets the operator's alone.
        (MINE, [f"GLIBC_TUNABLES={MINE}", THREAD_CACHE_OFF], [f"GLIBC_TUNABLES={MINE}"]),
        # The operator's own tcache setting stands: no exec.
        (MY_CACHES, [f"GLIBC_TUNABLES={MY_CACHES}"], [f"GLIBC_TUNABLES={MY_CACHES}"]),
    ],
)
def test_the_daemon_execs_itself_without_thread_caches_and_its_jobs_keep_its_tunables(
    tmp_path: Path,
    aws: Aws,
    aws_env: dict[str, str],
    given: str | None,
    daemon_has: list[str],
    job_has: list[str],
) -> None:
    """glibc reads GLIBC_TUNABLES only as a process starts, and mallopt() cannot turn its
    per-thread caches off: the daemon execs itself with them off, jobs get what it had."""
    environs = exec_daemon(tmp_path, aws, aws_env, given)
    assert set(daemon_has) <= set(environs.daemon)
    # Exec'd: its environment as /proc shows it carries GLIBC_TUNABLES as it was before.
    execd = any(line.startswith(f"{TUNABLES_BEFORE}=") for line in environs.daemon)
    assert execd == (given != MY_CACHES)
    assert [line for line in environs.job if line.startswith("GLIBC_TUNABLES=")] == job_has
    assert not any(line.startswith(TUNABLES_BEFORE) for line in environs.job)
