"""benchmarks/side_by_side.py's arithmetic and command line: medians over the rounds that gave a
figure, the ratio ours/other against issue 39's bounds, and commands refused without {conf}.

The benchmark itself runs daemons for minutes (benchmarks/README.md); this checks what it reports.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))

import side_by_side  # noqa: E402


def result(**figures: Any) -> dict[str, Any]:
    return {"errors": [], **figures}


def runs(ours: list[dict[str, Any]], other: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ours": {"no-lock": ours}, "other": {"no-lock": other}}


def row(rows: list[dict[str, Any]], metric: str) -> dict[str, Any]:
    return next(r for r in rows if r["metric"] == metric)


def test_each_side_gives_the_median_of_its_rounds_and_the_ratio_is_ours_over_other() -> None:
    rows = side_by_side.compare(
        runs(
            [result(jobs_per_s=50.0), result(jobs_per_s=30.0), result(jobs_per_s=40.0)],
            [result(jobs_per_s=20.0), result(jobs_per_s=25.0), result(jobs_per_s=90.0)],
        )
    )
    jobs = row(rows, "jobs/s, no lock_id")
    assert (jobs["ours"], jobs["other"], jobs["ratio"]) == (40.0, 25.0, 1.6)
    assert (jobs["ratio_target"], jobs["verdict"]) == (">= 1.5", "ok")


def test_a_round_that_failed_gives_no_figure_and_the_median_is_of_the_others() -> None:
    rows = side_by_side.compare(
        runs(
            [result(cpu_ms_per_job=3.0), result(), result(cpu_ms_per_job=5.0)],
            [result(cpu_ms_per_job=2.0)],
        )
    )
    cpu = row(rows, "CPU ms per job, no lock_id")
    assert (cpu["ours"], cpu["other"], cpu["ratio"], cpu["verdict"]) == (4.0, 2.0, 2.0, "off")


def test_only_the_scenarios_that_ran_are_compared_and_a_missing_side_has_no_ratio() -> None:
    rows = side_by_side.compare(runs([result(calls_per_job=0.5)], [result()]))
    assert {r["metric"] for r in rows} == {
        m.label for m in side_by_side.METRICS if m.scenario == "no-lock"
    }
    calls = row(rows, "AWS calls per job, no lock_id")
    assert (calls["ours"], calls["other"], calls["ratio"], calls["verdict"]) == (
        0.5,
        None,
        None,
        None,
    )


def test_the_report_prints_both_medians_the_ratio_and_each_rounds_errors() -> None:
    failed = result(jobs_per_s=10.0)
    failed["errors"] = ["the daemon died (exit 1)"]
    measured = runs([result(jobs_per_s=45.0)], [failed])
    report = {
        "machine": {"sqsjkr": "0", "cpu": "cpu", "cpus": 2, "python": "3", "moto": "5"},
        "setup": {
            "latency_ms": 10.0,
            "jitter_ms": 2.0,
            "moto_mode": "fair",
            "rounds": 1,
            "load_average": [1.0, 1.0, 1.0],
            "ours": "ours -c {conf}",
            "other": "go -conf {conf} -lock-table {table}",
        },
        "comparison": side_by_side.compare(measured),
        "runs": measured,
    }
    text = side_by_side.render(report)
    assert "moto: fair transactions" in text
    line = next(line for line in text.splitlines() if line.startswith("jobs/s, no lock_id"))
    assert line.split() == ["jobs/s,", "no", "lock_id", "45.0", "10.0", "4.50", ">=", "1.5", "ok"]
    assert "ERROR other no-lock round 1: the daemon died (exit 1)" in text


def test_a_command_without_conf_is_refused_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        side_by_side.parse_args(["--other", "/opt/go/sqsjkr -lock-table {table}"])
    assert exited.value.code == 2
    assert "--other has no {conf}" in capsys.readouterr().err


def test_the_moto_mode_and_rounds_reach_the_options() -> None:
    args = side_by_side.parse_args(
        ["--other", "x -conf {conf}", "--moto", "stock", "--rounds", "2", "--quick"]
    )
    assert (args.moto, args.rounds, args.jobs) == ("stock", 2, 60)
