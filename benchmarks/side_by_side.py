"""Our daemon against another implementation on deployment.py's harness: interleaved rounds, medians, ratios.

Each round runs every scenario once with each daemon, on fresh queues and tables, in alternating order. Run `.venv/bin/python benchmarks/side_by_side.py --help`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, replace
from typing import Any

import deployment

#: The scenarios compared, as deployment.py names them.
SCENARIOS = ("no-lock", "lock", "single", "idle")
#: The daemons' sides, in the report's order.
SIDES = ("ours", "other")


@dataclass(frozen=True)
class Metric:
    """One figure compared: which scenario's result holds it, and issue 39's bound of ours/other."""

    label: str
    scenario: str
    field: str
    fmt: str = "{:.2f}"
    ratio_bound: str = ""  # e.g. ">= 1.5", "<= 1.2": the target of the ratio ours/other


METRICS = (
    Metric("jobs/s, no lock_id", "no-lock", "jobs_per_s", "{:.1f}", ">= 1.5"),
    Metric("jobs/s, with lock_id", "lock", "jobs_per_s", "{:.1f}", ">= 1.5"),
    Metric("jobs/s, one worker", "single", "jobs_per_s", "{:.1f}"),
    Metric("CPU ms per job, no lock_id", "no-lock", "cpu_ms_per_job", ratio_bound="<= 1.2"),
    Metric("CPU ms per job, with lock_id", "lock", "cpu_ms_per_job", ratio_bound="<= 1.2"),
    Metric("CPU ms per job, one worker", "single", "cpu_ms_per_job", ratio_bound="<= 2"),
    Metric("AWS calls per job, no lock_id", "no-lock", "calls_per_job", "{:.3f}"),
    Metric("AWS calls per job, with lock_id", "lock", "calls_per_job", "{:.3f}"),
    Metric("AWS calls per job, one worker", "single", "calls_per_job", "{:.3f}"),
    Metric("peak RSS MiB, no lock_id", "no-lock", "rss_peak_mib", "{:.1f}"),
    Metric("peak RSS MiB, with lock_id", "lock", "rss_peak_mib", "{:.1f}"),
    Metric("peak RSS MiB, one worker", "single", "rss_peak_mib", "{:.1f}"),
    Metric("idle CPU %", "idle", "idle_cpu_percent", "{:.3f}"),
    Metric("idle AWS calls per minute", "idle", "calls_per_minute", "{:.1f}"),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="In --ours and --other, {conf} stands for the config file the harness writes "
        "(the Go daemon's format: [account], [sqs], [kicker], [lock]) and {table} for the "
        "DynamoDB table it creates for the run (also the config's [lock] table). The Go daemon: "
        "--other '/path/to/sqsjkr -conf {conf} -lock-table {table}'.",
    )
    deployment.harness_arguments(parser)
    parser.add_argument(
        "--other",
        required=True,
        metavar="CMD",
        help="the other daemon's command line, with {conf} and {table}",
    )
    parser.add_argument(
        "--ours",
        default=deployment.default_daemon_command(),
        metavar="CMD",
        help="our daemon's command line (default: %(default)s)",
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds of every scenario on each side (default 3)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        choices=SCENARIOS,
        help="repeatable; default: all (single: max_concurrent_num = 1)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    deployment.harness_defaults(parser, args)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    for name in ("ours", "other"):
        if "{conf}" not in getattr(args, name):
            parser.error(f"--{name} has no {{conf}}: the daemon would not read the run's config")
    return args


def run_rounds(args: argparse.Namespace) -> tuple[dict[str, dict[str, list[Any]]], dict[str, Any]]:
    """side -> scenario -> each round's result; and the set-up."""
    keys = args.scenario or list(SCENARIOS)
    commands = {"ours": args.ours, "other": args.other}
    runs: dict[str, dict[str, list[Any]]] = {side: {key: [] for key in keys} for side in SIDES}
    with deployment.harness(args, args.ours) as (aws, options):
        for n in range(args.rounds):
            # Alternating who goes first: neither side always follows the other's leftovers.
            order = SIDES if n % 2 == 0 else SIDES[::-1]
            for key in keys:
                for side in order:
                    print(
                        f"round {n + 1}/{args.rounds}: {key}, {side} ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    side_options = replace(options, daemon_command=commands[side])
                    result = deployment.run_scenario(deployment.SCENARIOS[key], aws, side_options)
                    runs[side][key].append(result)
        setup = deployment.harness_setup(args, options)
    return runs, {**setup, "ours": args.ours, "other": args.other, "rounds": args.rounds}


def median_figure(results: list[dict[str, Any]], name: str) -> float | None:
    """The median of a figure over the rounds that gave it (a failed run gives none)."""
    values = [r[name] for r in results if isinstance(r.get(name), (int, float))]
    return round(statistics.median(values), 4) if values else None


def compare(runs: dict[str, dict[str, list[Any]]]) -> list[dict[str, Any]]:
    """Each metric whose scenario ran: both medians and the ratio ours/other."""
    rows = []
    for metric in METRICS:
        if metric.scenario not in runs["ours"]:
            continue
        ours = median_figure(runs["ours"][metric.scenario], metric.field)
        other = median_figure(runs["other"][metric.scenario], metric.field)
        ratio = round(ours / other, 3) if ours is not None and other else None
        rows.append(
            {
                "metric": metric.label,
                "ours": ours,
                "other": other,
                "ratio": ratio,
                "ratio_target": metric.ratio_bound or None,
                "verdict": verdict(ratio, metric.ratio_bound),
                "fmt": metric.fmt,
            }
        )
    return rows


def verdict(ratio: float | None, bound: str) -> str | None:
    if ratio is None or not bound:
        return None
    op, _, value = bound.partition(" ")
    ok = ratio >= float(value) if op == ">=" else ratio <= float(value)
    return "ok" if ok else "off"


def render(report: dict[str, Any]) -> str:
    setup, m = report["setup"], report["machine"]
    out = [
        f"sqsjkr {m['sqsjkr']} on {m['cpu']} ({m['cpus']} cpus), Python {m['python']}, "
        f"moto {m['moto']}",
        f"round trip {setup['latency_ms']} ms +- {setup['jitter_ms']} ms; "
        f"moto: {deployment.moto_label(setup)}",
        f"{setup['rounds']} interleaved round(s), medians; load average at the end "
        f"{setup['load_average']}",
        f"ours:  {setup['ours']}",
        f"other: {setup['other']}",
        "",
    ]
    rows = [
        [
            row["metric"],
            deployment.show(row["ours"], row["fmt"]),
            deployment.show(row["other"], row["fmt"]),
            deployment.show(row["ratio"], "{:.2f}"),
            row["ratio_target"] or "",
            row["verdict"] or "",
        ]
        for row in report["comparison"]
    ]
    out += deployment.table(["metric", "ours", "other", "ours/other", "target", ""], rows)
    for side in SIDES:
        for key, results in report["runs"][side].items():
            for n, result in enumerate(results):
                for error in result["errors"]:
                    out.append(f"ERROR {side} {key} round {n + 1}: {error}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs, setup = run_rounds(args)
    comparison = compare(runs)
    report = {
        "machine": deployment.machine(),
        "setup": setup,
        "comparison": comparison,
        "runs": runs,
    }
    if args.json:
        for row in comparison:
            row.pop("fmt")
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    failed = any(r["errors"] for side in runs.values() for rs in side.values() for r in rs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
