"""What Linux's /proc says about one process: its own CPU time, its memory, its threads' wake-ups.

The benchmark reads the daemon from outside with these, so measuring costs the daemon nothing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(path: Path) -> list[str]:
    # pid (comm) state ppid ...; comm may hold spaces and parentheses.
    return path.read_text().rsplit(")", 1)[1].split()


def cpu_times(pid: int) -> tuple[float, float]:
    """(utime, stime) of the process in seconds: all its threads, living or ended; its children
    excluded (they are cutime and cstime)."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    # After "pid (comm)": state is fields[0], so utime (field 14) is fields[11].
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def cpu_seconds(pid: int) -> float:
    return sum(cpu_times(pid))


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) in KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0])
    return values


@dataclass(frozen=True)
class ThreadSample:
    """One thread's on-CPU time (ns, from schedstat) and context switches so far."""

    tid: int
    cpu_ns: int
    voluntary: int
    involuntary: int


def threads(pid: int) -> dict[int, ThreadSample]:
    """The process's living threads. A thread that sleeps and wakes makes one voluntary switch
    per wake-up, so the difference of two samples counts its wake-ups."""
    samples = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            cpu_ns = int((task / "schedstat").read_text().split()[0])
            status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
        except (OSError, ValueError):
            continue  # ended meanwhile
        tid = int(task.name)
        samples[tid] = ThreadSample(
            tid,
            cpu_ns,
            int(status["voluntary_ctxt_switches"]),
            int(status["nonvoluntary_ctxt_switches"]),
        )
    return samples


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"
