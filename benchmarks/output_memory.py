"""Peak memory of the daemon's process while a job prints a lot: streaming must keep it flat.

Runs sqsjkr.runner.run_shell on a command printing --megabytes of output and reports the rise in peak RSS.
"""

from __future__ import annotations

import argparse
import resource
import time

from sqsjkr.daemon.runner import run_shell


def peak_rss_mib() -> float:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(command: str) -> tuple[int, int, float, float]:
    before = peak_rss_mib()
    pieces = 0
    total = 0

    def emit(line: str) -> None:
        nonlocal pieces, total
        pieces += 1
        total += len(line)

    started = time.monotonic()
    result = run_shell(command, env={"PATH": "/usr/bin:/bin"}, emit=emit)
    assert result.ok, result
    return pieces, total, time.monotonic() - started, peak_rss_mib() - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--megabytes", type=int, default=1024)
    args = parser.parse_args()
    size = args.megabytes * 1024 * 1024
    cases = {
        "one line, no newline": f"head -c {size} /dev/zero | tr '\\0' a",
        "lines of 100 bytes": f"yes {'a' * 99} | head -c {size}",
    }
    print(f"output per job: {args.megabytes} MiB; peak RSS at start: {peak_rss_mib():.1f} MiB")
    for name, command in cases.items():
        pieces, total, seconds, rise = measure(command)
        print(
            f"{name:22} pieces {pieces:>10}  chars {total:>11}  {seconds:6.1f}s  "
            f"peak RSS rise {rise:.1f} MiB"
        )


if __name__ == "__main__":
    main()
