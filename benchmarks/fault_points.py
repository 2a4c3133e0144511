"""The whole fault-point walk (issue 36): every AWS call of each path, refused, its answer lost,
or followed by SIGKILL of its daemon, then the path's invariants checked after recovery.

    .venv/bin/python benchmarks/fault_points.py                   # every path, ~17 min
    .venv/bin/python benchmarks/fault_points.py --path plain --kind lost --jobs 2

Prints `P points x K faults: T tried, N failed`, each failure, and exits 1 when any failed.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests package: the harness

from moto.server import ThreadedMotoServer  # noqa: E402

from sqsjkr.local.endpoint import serialize_moto_writes  # noqa: E402
from tests.fault_points import Kind, Outcome, Point, paths, replay  # noqa: E402


def moto() -> tuple[ThreadedMotoServer, dict[str, str]]:
    """A moto server in this process, and the environment that points AWS clients at it."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    serialize_moto_writes()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
        os.environ.pop(name, None)
    os.environ.update(env)
    return server, env


def say(text: str) -> None:
    """Print to the real stdout: a replay's `status --check` redirects sys.stdout meanwhile."""
    print(text, file=sys.__stdout__, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", action="append", choices=list(paths()), help="(repeatable)")
    parser.add_argument("--kind", action="append", choices=[k.value for k in Kind])
    parser.add_argument("--jobs", type=int, default=2, help="replays at once (default 2)")
    parser.add_argument("-v", "--verbose", action="store_true", help="every replay's outcome")
    args = parser.parse_args()
    kinds = [Kind(k) for k in args.kind] if args.kind else list(Kind)
    server, env = moto()
    began = time.monotonic()
    failed: list[Outcome] = []
    tried = unreached = again = 0
    points_seen = 0
    try:
        for name in args.path or list(paths()):
            make = paths()[name]
            clean, points = replay(make, env["AWS_ENDPOINT_URL"], env)
            say(f"{name}: {len(points)} points in its clean run ({clean.seconds:.1f}s)")
            if clean.problems:
                say(f"  the clean run failed: {clean}")
                failed.append(clean)
                continue
            points_seen += len(points)
            todo: list[tuple[Point, Kind]] = [(p, k) for p in points for k in kinds]

            def one(job: tuple[Point, Kind], make=make) -> Outcome:  # type: ignore[no-untyped-def]
                return replay(make, env["AWS_ENDPOINT_URL"], env, *job)[0]

            with ThreadPoolExecutor(args.jobs) as pool:
                for outcome in pool.map(one, todo):
                    tried += 1
                    unreached += not outcome.reached
                    again += outcome.reruns > 0
                    if outcome.problems:
                        failed.append(outcome)
                    if outcome.problems or args.verbose:
                        extra = f" (runs again: {outcome.reruns})" if outcome.reruns else ""
                        reached = "" if outcome.reached else " (point not reached)"
                        say(f"  {outcome}{extra}{reached} [{outcome.seconds:.1f}s]")
    finally:
        server.stop()
    minutes = (time.monotonic() - began) / 60
    say(
        f"{points_seen} points x {len(kinds)} faults: {tried} tried, {len(failed)} failed, "
        f"{unreached} not reached, {again} ran a command again, in {minutes:.1f} min"
    )
    for outcome in failed:
        say(f"FAILED {outcome}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
