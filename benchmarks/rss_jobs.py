"""The daemon's memory over many jobs with distinct event ids: VmRSS and VmHWM every N jobs.

deployment.py's harness (moto a round trip away); jobs are sent a few hundred ahead of the daemon,
not in one burst: moto's ReceiveMessage walks its whole queue, so a queue of 10,000 slows it tenfold.
Run `.venv/bin/python benchmarks/rss_jobs.py --help`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import deployment
import proc_stats

#: Seconds between two looks at the jobs' file.
POLL = 0.2


@dataclass(frozen=True)
class Sample:
    """The daemon after `jobs` jobs had run: memory in MiB, its threads."""

    jobs: int
    rss_mib: float
    peak_mib: float
    threads: int


def sample(pid: int, jobs: int) -> Sample:
    memory = proc_stats.memory_kib(pid)
    return Sample(
        jobs,
        round(memory["VmRSS"] / 1024, 1),
        round(memory["VmHWM"] / 1024, 1),
        len(list(Path(f"/proc/{pid}/task").iterdir())),
    )


def send_ahead(run: deployment.Run, sent: int, started: int, jobs: int, ahead: int) -> int:
    """Jobs sent, ten a call, until `ahead` are waiting or all `jobs` are; the new count sent."""
    while sent < jobs and sent - started < ahead:
        indexes = range(sent, min(sent + 10, jobs))
        entries = [{"Id": str(i), "MessageBody": run.body(i)} for i in indexes]
        response = run.aws.sqs.send_message_batch(QueueUrl=run.queue_url, Entries=entries)
        if response.get("Failed"):
            raise RuntimeError(f"could not send jobs: {response['Failed']}")
        sent = indexes[-1] + 1
    return sent


def measure(run: deployment.Run, jobs: int, every: int, ahead: int, timeout: float) -> list[Sample]:
    """Samples at the start and every `every` jobs, until all `jobs` have run; an error if no
    job starts for `timeout` seconds."""
    daemon, _ = deployment.start_daemon(run)
    try:
        samples = [sample(daemon.pid, 0)]
        sent, due, seen, deadline = 0, every, 0, time.time() + timeout
        while due <= jobs:
            started = len(run.started_jobs())
            if started > seen:
                seen, deadline = started, time.time() + timeout
            sent = send_ahead(run, sent, started, jobs, ahead)
            if started >= due:
                samples.append(sample(daemon.pid, started))
                print(json.dumps(asdict(samples[-1])), file=sys.stderr, flush=True)
                due += every
            elif not daemon.alive() or time.time() > deadline:
                raise RuntimeError(f"{started}/{jobs} jobs ran, then none: see {daemon.log.path}")
            else:
                time.sleep(POLL)
        return samples
    finally:
        daemon.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    deployment.harness_arguments(parser)
    parser.add_argument("--every", type=int, default=1000, help="jobs between samples (1000)")
    parser.add_argument("--ahead", type=int, default=300, help="jobs sent ahead (300)")
    parser.add_argument(
        "--daemon-command",
        default=deployment.default_daemon_command(),
        help="the daemon, {conf} standing for its config file (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    args.jobs = args.jobs or 10_000
    deployment.harness_defaults(parser, args)
    with deployment.harness(args, args.daemon_command) as (aws, options):
        run = deployment.Run(deployment.SCENARIOS["no-lock"], aws, options)
        samples = measure(run, args.jobs, args.every, args.ahead, args.timeout)
    print(f"{'jobs':>6}  {'VmRSS MiB':>9}  {'VmHWM MiB':>9}  threads")
    for s in samples:
        print(f"{s.jobs:>6}  {s.rss_mib:>9.1f}  {s.peak_mib:>9.1f}  {s.threads:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
