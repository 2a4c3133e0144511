"""`sqsjkr local` as a newcomer meets it: the demo, its banner and summary, and taken ports.

The daemon runs as a real subprocess; what it prints is pasted into a fresh shell, as a person would.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from moto import backends

from sqsjkr.contract.tokens import new_token
from sqsjkr.local import demo
from sqsjkr.local.endpoint import cache_moto_routing
from sqsjkr.local.mode import write_config
from sqsjkr.local.site import LocalSite

from .conftest import Daemon, http_get_json, sqsjkr_argv, wait_until

CHECKOUT = Path(__file__).resolve().parents[1]
PACKAGE = CHECKOUT / "sqsjkr"
API_DOC = CHECKOUT / "docs" / "api.md"

#: The demo at the tests' pace: its pipeline first fires 5 s after setting up (not 20 s), and a
#: kill waits for a heartbeat of a 15 s lease (5 s, not local mode's 20 s).
TEST_PACE = ("--demo-first-firing", "5", "--lease", "15s")
DEMO_COUNTS = {"succeeded": 3, "failed": 4, "errored": 2, "duplicates": 0, "timed_out": 1}


def paste(text: str, home: Path) -> subprocess.CompletedProcess[str]:
    """Run text in a fresh shell at the top of the checkout: no virtualenv on the PATH, no AWS
    variables but those the text sets."""
    return subprocess.run(
        ["sh"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=CHECKOUT,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home)},
    )


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something else listens on."""
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        yield int(other.getsockname()[1])


def run_local(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sqsjkr_argv("local", *args), capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_demo_prints_its_real_stats_port_and_ends_with_a_summary(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    tokens = tmp_path / "api-tokens.toml"
    token, lines = new_token("ci", ["read"])
    tokens.write_text(lines)
    daemon = start_daemon(
        "local",
        "--demo",
        "--stats-port",
        "0",
        "--web-port",
        "0",
        "--api-tokens",
        str(tokens),
        *TEST_PACE,
        wait_ready=False,
    )
    daemon.wait_for_log("Stop: Ctrl-C")
    # The HTTP API beside the dashboard, for the tokens of --api-tokens: no token of its own.
    api = re.search(
        rf"^HTTP API: (http://127\.0\.0\.1:\d+/api/v1)/ \(docs/api\.md\), for the tokens of "
        rf"{re.escape(str(tokens))}$",
        daemon.log,
        re.M,
    )
    assert api and "SQSJKR_TOKEN" not in daemon.log, daemon.log
    asked = urllib.request.Request(
        f"{api[1]}/schedules", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(asked, timeout=10) as answer:
        # The sample schedules, and the demo's scheduled pipeline and late schedule.
        assert len(json.load(answer)["items"]) == 6
    stats = re.search(
        r"^Stats: curl (?:-s )?http://127\.0\.0\.1:(\d+)/stats/metrics/v2$", daemon.log, re.M
    )
    assert stats, daemon.log
    port = int(stats.group(1))
    assert port != 0
    for line in (
        "hello, newcomer",
        'waits for lock "report"',
        'aborted: lock "report" is held',
        "report 2: ran once report 1 released the lock",
        "ALERT life_time exceeded: job_id:",
        "moved to the dead-letter queue",
        "errored with exit code 3",
        "timed out after",
        "running until killed",
    ):
        daemon.wait_for_log(line, timeout=30)
    # The kill waits for the daemon's next heartbeat: up to 5 s with TEST_PACE's lease.
    daemon.wait_for_log("The daemon keeps running", timeout=90)
    # The reporter of the demo prints each report's JSON; the demo ends with status and history.
    assert "reporter 'cat' | {\"command\": " in daemon.log
    status = daemon.log[daemon.log.index("The status of every event:\n") :]
    assert re.search(r"^demo-fail +errored .* 1 failure in a row +next run ", status, re.M), status
    history = daemon.log[daemon.log.index("The runs of demo-fail, with their output:\n") :]
    assert re.search(r"errored +3 ", history) and "    about to fail" in history, history
    # Each closing command is printed as the banner's send is, and works pasted as it is.
    (send, long_job, kill_command, status_command, history_command, schedules_command,
     daemons_command, *scheduled, send_again) = pasteable_commands(daemon.log)  # fmt: skip
    # The banner's send has scrolled away by the demo's end: its last lines say it again.
    last = "The daemon keeps running. Send a job from another shell:\n"
    assert send_again == send, daemon.log
    assert daemon.log[daemon.log.index(last) :].startswith(f"{last}{send}Stop: Ctrl-C\n")
    # The long job is stopped by `sqsjkr kill`, whose output the demo shows, in the order it
    # came; to try it, a long job of the same event to send first, as the demo killed its own.
    assert " send -c " in long_job and "--event-id demo-kill" in long_job
    assert " kill -c " in kill_command and "--wait" in kill_command
    kill = daemon.log[daemon.log.index("Stopping a long job with sqsjkr kill (to try it: ") :]
    assert kill.index(long_job) < kill.index(kill_command), kill
    assert re.search(r"^kill requested: the run of event \"demo-kill\"", kill, re.M), kill
    assert re.search(r"^demo-kill +.* killed +", kill, re.M), kill
    killed_by = re.search(r"^killed by \S+@\S+: the demo shows a kill$", kill, re.M)
    assert killed_by, kill
    assert kill.index("sqsjkr: waiting for it to end") < killed_by.start(), kill
    assert re.search(r"^demo-kill +killed ", status, re.M), status
    assert " status -c " in status_command and " history -c " in history_command
    assert " schedules -c " in schedules_command and " daemons -c " in daemons_command
    # The demo's own daemon, last: running, with its queue and workers.
    daemons = daemon.log[daemon.log.index("The fleet's daemons:\n") :]
    assert re.search(r"^\S+ +\d+ +\S+ +running .* sqsjkr-local \(\d+\)", daemons, re.M), daemons
    # The sample schedules give status its next runs; the demo ends with them.
    assert re.search(r"^demo-hello +succeeded .* next run 20\d\d-", status, re.M), status
    assert re.search(r"^demo-timeout +timed_out .* no next run: schedule DISABLED", status, re.M)
    schedules = daemon.log[daemon.log.index("Every event's schedule and its next three runs:\n") :]
    assert re.search(
        r"^sqsjkr-local-timeout +cron\(0 3 \? \* 2#1 \*\) +America/New_York +DISABLED ",
        schedules,
        re.M,
    ), schedules
    pasted_status = paste(status_command, tmp_path)
    assert pasted_status.returncode == 0, pasted_status
    assert re.search(r"^demo-fail +errored ", pasted_status.stdout, re.M), pasted_status
    pasted_history = paste(history_command, tmp_path)
    assert pasted_history.returncode == 0, pasted_history
    assert "    about to fail" in pasted_history.stdout, pasted_history
    # The demo's jobs are counted on their queue, apart from the scheduled pipeline's runs.
    assert demo_queue(http_get_json(port, "/stats/metrics/v2")) == DEMO_COUNTS
    summary = daemon.log[daemon.log.index("Demo done: all 9 messages have an outcome") :]
    for line in (
        # Each count says why a job is counted there.
        "  succeeded  3: the command exited 0\n",
        "  errored    2 (timed_out 1): the command ran and exited non-zero, or was stopped at "
        "its timeout\n",
        "  failed     4: did not run (late past its life_time, its lock held, not a job) or was "
        "killed\n",
        "      - a long job stopped by `sqsjkr kill`\n",
        "  duplicates 0: a message already received, dropped unrun\n",
        "      - a message that is not a job (moved to the dead-letter queue)\n",
        "/123456789012/sqsjkr-local-dlq):\n"
        "  body 'this is not JSON', sqsjkr_error 'body is not JSON: Expecting value",
        f"Stats: curl -s http://127.0.0.1:{port}/stats/metrics/v2  # each queue's own figures",
    ):
        assert line in summary, summary
    # The summary ends with the dashboard, as the banner showed it.
    dashboard = re.search(r"^Dashboard: http://127\.0\.0\.1:\d+/\n", daemon.log, re.M)
    assert dashboard and dashboard[0] in summary, summary
    if shutil.which("curl"):
        pasted = paste(summary.split("Stats: ", 1)[1].splitlines()[0], tmp_path)
        assert demo_queue(json.loads(pasted.stdout)) == DEMO_COUNTS, pasted
    # The pair pasted after the demo: the long job sent, then killed (its run, not the demo's).
    tried = paste(long_job + kill_command, tmp_path)
    assert tried.returncode == 0, tried
    assert re.search(r"^killed by \S+@\S+: the demo shows a kill$", tried.stdout, re.M), tried
    the_scheduled_pipeline_and_the_caught_up_firing_are_shown(daemon, scheduled, tmp_path)
    assert daemon.stop(signal.SIGINT) == 0


def demo_queue(stats: dict[str, Any]) -> dict[str, int]:
    """The demo queue's own invocation counters in stats v2."""
    return dict(stats["queues"]["sqsjkr-local"]["invocations"])


def the_scheduled_pipeline_and_the_caught_up_firing_are_shown(
    daemon: Daemon, scheduled: list[str], tmp_path: Path
) -> None:
    """The commands the demo prints for its scheduled part, pasted: the late schedule's firing
    caught up at start; the pipeline's first firing failed at c, and c's forced re-run, then d."""
    firings, drawing, check, rerun, late = scheduled
    assert " firings -c " in firings and firings.rstrip().endswith(" demo-pipeline"), firings
    assert " trigger -c " in rerun and " demo-pipeline-c --firing " in rerun, rerun
    caught = paste(late, tmp_path)
    assert caught.returncode == 0, caught
    assert re.search(r" demo-catch-up +sqsjkr-local-catch-up +caught up +succeeded ", caught.stdout)
    # The pipeline's first firing comes TEST_PACE's seconds after setting up.
    daemon.wait_for_log("pipeline demo-pipeline: skipped for this run, as c failed: d", timeout=60)
    failed = paste(drawing, tmp_path)
    assert failed.returncode == 0, failed
    assert "failed at c, skipped d" in failed.stdout, failed.stdout
    assert re.search(r"^2 +d +after b, c +skipped: c failed$", failed.stdout, re.M), failed.stdout
    checked = paste(check, tmp_path)
    assert checked.returncode == 2 and "SQSJKR CRITICAL" in checked.stdout, checked
    if daemon.log.count("(event demo-pipeline) started") == 1:  # the next firing not yet run
        assert "demo-pipeline-c: 1 failure in a row" in checked.stdout, checked.stdout
    page = re.search(
        r"^Its drawing on the dashboard: (http://127\.0\.0\.1:\d+/event\?id=demo-pipeline)$",
        daemon.log,
        re.M,
    )
    assert page, daemon.log
    first = rerun.split(" --firing ", 1)[1].split()[0].replace("Z", "+00:00")
    with urllib.request.urlopen(page[1], timeout=10) as answer:
        # The drawing of a run, and the first firing among its firings (a later one may be drawn).
        drawn = answer.read().decode()
    assert 'id="pipeline"' in drawn and first in drawn, drawn
    listed = paste(firings, tmp_path)
    assert re.search(r" demo-pipeline +sqsjkr-local-pipeline +ran ", listed.stdout), listed
    forced = paste(rerun, tmp_path)
    assert forced.returncode == 0, forced

    def resumed() -> bool:
        drawn = paste(drawing, tmp_path).stdout
        return re.search(r"^2 +d +after b, c +succeeded ", drawn, re.M) is not None

    wait_until(resumed, timeout=30, what="d after c's forced re-run")


def pasteable_commands(log: str) -> list[str]:
    """Every command local mode printed to be pasted: two indented lines, the endpoint's
    variables and then the command."""
    return re.findall(r"^  AWS_ENDPOINT_URL=.* \\\n    .*\n", log, re.M)


@pytest.mark.slow
def test_local_mode_as_a_newcomer_pastes_its_commands(
    start_daemon: Callable[..., Daemon], tmp_path: Path
) -> None:
    """One test, so that one local mode serves its three parts (xdist would start one for each
    test of a module fixture on every worker)."""
    daemon = start_daemon("local", "--stats-port", "0", wait_ready=False)
    daemon.wait_for_log("receiving with")
    [send] = pasteable_commands(daemon.log)
    the_printed_send_command_works_pasted_into_a_fresh_shell(daemon, tmp_path)
    local_mode_has_sample_schedules_to_show(send, tmp_path)
    a_job_scheduled_with_send_at_is_kept_by_local_modes_scheduler(send, tmp_path)
    a_job_sent_for_in_two_seconds_is_fired_then_and_run(daemon, send, tmp_path)
    the_http_api_example_of_the_docs_works_with_the_printed_token(daemon, tmp_path)
    assert daemon.stop(signal.SIGINT) == 0


def the_printed_send_command_works_pasted_into_a_fresh_shell(
    daemon: Daemon, tmp_path: Path
) -> None:
    hint = re.search(r"^Send a job from another shell:\n((?:  .*\n)+)", daemon.log, re.M)
    assert hint, daemon.log
    sent = paste(hint.group(1), tmp_path)
    assert sent.returncode == 0, sent.stderr
    assert re.fullmatch(r"[0-9a-f-]{36}\n", sent.stdout), sent.stdout
    daemon.wait_for_log(f"job {sent.stdout.strip()} | hello")


def local_mode_has_sample_schedules_to_show(send: str, tmp_path: Path) -> None:
    command = send.replace(" send -c ", " schedules -c ").replace(" --command 'echo hello'", "")
    listed = paste(command.replace(" schedules -c ", " schedules --json -c "), tmp_path)
    assert listed.returncode == 0, listed.stderr
    shown = {s["name"]: s for s in json.loads(listed.stdout)}
    assert set(shown) == {
        "sqsjkr-local-hello",
        "sqsjkr-local-month-end",
        "sqsjkr-local-fail",
        "sqsjkr-local-timeout",
    }
    hello = shown["sqsjkr-local-hello"]
    assert (hello["event_id"], hello["timezone"], len(hello["next"])) == (
        "demo-hello",
        "Europe/Berlin",
        3,
    )
    assert all(fire[11:16] == "09:00" for fire in hello["next"]), hello
    assert shown["sqsjkr-local-fail"]["expression"] == "rate(1 hour)"
    assert len(shown["sqsjkr-local-fail"]["next"]) == 3
    assert (shown["sqsjkr-local-timeout"]["enabled"], shown["sqsjkr-local-timeout"]["next"]) == (
        False,
        [],
    )


def a_job_scheduled_with_send_at_is_kept_by_local_modes_scheduler(
    send: str, tmp_path: Path
) -> None:
    scheduled = paste(send.replace("--command", "--in 1h --event-id later --command"), tmp_path)
    assert scheduled.returncode == 0, scheduled.stderr
    assert re.fullmatch(r"at\.later\.\d{8}T\d{6}Z\.[0-9a-f]{8}\n", scheduled.stdout)
    listed = paste(send.replace("--command 'echo hello'", "--list-scheduled"), tmp_path)
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.startswith("NAME "), listed.stdout
    assert row.startswith(scheduled.stdout.strip() + "  "), listed.stdout
    assert "later" in listed.stdout and "echo hello" in listed.stdout


def a_job_sent_for_in_two_seconds_is_fired_then_and_run(
    daemon: Daemon, send: str, tmp_path: Path
) -> None:
    """Local mode's scheduler fires the at() schedule of `send --in` when due, its daemon runs the
    job as that firing, and the schedule, done, deletes itself (ActionAfterCompletion DELETE)."""
    command = "--in 2s --event-id soon --command 'echo fired on time'"
    scheduled = paste(send.replace("--command 'echo hello'", command), tmp_path)
    assert scheduled.returncode == 0, scheduled.stderr
    name = scheduled.stdout.strip()
    daemon.wait_for_log(f"local scheduler: schedule {name} fired for ", timeout=20)
    daemon.wait_for_log("(event soon) | fired on time", timeout=20)
    daemon.wait_for_log(f"local scheduler: schedule {name} completed and was deleted")
    listed = paste(send.replace("--command 'echo hello'", "--list-scheduled"), tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert name not in listed.stdout and "at.later." in listed.stdout, listed.stdout


def the_http_api_example_of_the_docs_works_with_the_printed_token(
    daemon: Daemon, tmp_path: Path
) -> None:
    """docs/api.md's submit-and-poll example, run as it is with the variables local mode prints
    (a token it made, of every scope): the job runs and the example prints how it ended."""
    exported = re.search(r"^  (export SQSJKR_API=http://\S+ SQSJKR_TOKEN=\S+)$", daemon.log, re.M)
    assert exported, daemon.log
    if not (shutil.which("curl") and shutil.which("jq")):
        return  # the example needs both; the banner's line is checked above
    [example] = re.findall(r"^```bash\n(.*?)^```$", API_DOC.read_text(), re.M | re.S)
    ran = subprocess.run(
        ["bash", "-c", f"{exported[1]}\n{example}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert (ran.returncode, ran.stdout) == (0, "succeeded\n"), ran


def test_a_taken_stats_port_fails_before_the_banner_and_names_the_option(taken_port: int) -> None:
    result = run_local("--stats-port", str(taken_port))
    assert result.returncode == 1
    assert result.stdout == ""  # no banner pointing at someone else's port
    (line,) = result.stderr.strip().splitlines()
    assert f"cannot serve stats on 127.0.0.1:{taken_port}" in line
    assert "pass another --stats-port, or --stats-port 0 for any free port" in line
    assert "make demo DEMO_ARGS='--stats-port 0'" in line  # pastes, as make demo is run


def test_a_taken_endpoint_port_fails_and_names_the_option(taken_port: int) -> None:
    result = run_local("--port", str(taken_port), "--stats-port", "0")
    assert result.returncode == 1
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert f"cannot start the local AWS endpoint on 127.0.0.1:{taken_port}" in line
    assert "pass another --port" in line


def imported_by(module: str) -> set[str]:
    """The sqsjkr modules module imports, at the top, in functions or for type checking only."""
    path = PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqsjkr."):
            found.add(str(node.module))
    return found


def test_local_mode_imports_its_demo_and_not_the_other_way_round() -> None:
    seen, todo = set(), ["sqsjkr.local.demo"]
    while todo:
        module = todo.pop()
        if (
            module not in seen
            and PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py").exists()
        ):
            seen.add(module)
            todo += imported_by(module)
    assert "sqsjkr.commands.local" not in seen
    assert "sqsjkr.local.demo" in imported_by("sqsjkr.commands.local")


def test_a_taken_dashboard_port_gives_way_to_a_free_one_and_says_so(
    taken_port: int, tmp_path: Path
) -> None:
    # Another local mode holds 8061 and 8070: its --stats-port 0 must not drop the dashboard.
    from sqsjkr.commands.local import start_dashboard

    conf = tmp_path / "config.toml"
    conf.write_text(
        '[account]\nid = "123456789012"\nregion = "us-east-1"\n\n[sqs]\nqueue_name = "q"\n'
    )
    url, close = start_dashboard(conf, taken_port)
    try:
        assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/ \(port {taken_port} is taken: .+\)", url)
        assert f":{taken_port}/" not in url
    finally:
        close()


def test_local_modes_moto_routes_requests_without_listing_its_directories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """moto's dispatcher asks for each request whether its Host names one of moto's modules:
    local mode answers from a list made once, not from moto's ~170 directories each time."""
    cache_moto_routing()
    listed = list(backends.list_of_moto_modules())
    assert {"sqs", "dynamodb", "scheduler", "events", "iam"} <= set(listed)

    def no_listing(path: str) -> list[str]:
        raise AssertionError(f"moto listed {path} again")

    monkeypatch.setattr(os, "listdir", no_listing)
    assert list(backends.list_of_moto_modules()) == listed


def test_a_demo_stopped_before_its_end_runs_neither_its_kill_nor_its_closing_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C during the demo: its watch ends, and runs no `sqsjkr kill`, no summary and no
    closing commands (sqsjkr processes) against a daemon that is stopping."""
    conf = write_config(
        tmp_path,
        stats_port=0,
        workers=1,
        role_arn="arn:aws:iam::123456789012:role/sqsjkr-local-scheduler",
    )
    site = LocalSite("http://127.0.0.1:1", "queue-url", "dead-letter-url", conf)
    # What the watch would see of a demo whose jobs all ran: its long job, then every outcome.
    monkeypatch.setattr(demo, "_running", lambda history, event_id: True)
    monkeypatch.setattr(demo, "_invocations", lambda url: dict.fromkeys(demo.OUTCOMES, 9))
    monkeypatch.setattr(demo, "_peek_dead_letters", lambda sqs, url: [])
    shown: list[str] = []
    stopping = threading.Event()
    stopping.set()
    watch = demo.DemoWatch(
        None, site, lambda: shown.append("kill"), lambda *ended: shown.append("summary"), stopping
    )
    watch.start("127.0.0.1:1")

    def watching() -> bool:
        return any(thread.name == "sqsjkr-demo-watch" for thread in threading.enumerate())

    wait_until(lambda: not watching(), timeout=10, what="the demo's watch to end by itself")
    watch.close()
    assert shown == []
