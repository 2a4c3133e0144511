"""ShellRunner, run_shell, run_trigger and stream_lines, with real `sh -c` subprocesses."""

from __future__ import annotations

import contextlib
import gc
import io
import logging
import os
import shlex
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sqsjkr.contract.job import Job, trigger_line
from sqsjkr.contract.run import RunContext
from sqsjkr.daemon.output import MAX_LINE_BYTES, Output, stream_lines
from sqsjkr.daemon.runner import (
    RunResult,
    ShellRunner,
    StopReason,
    StopSwitch,
    run_shell,
    run_trigger,
)

from .conftest import wait_until

PATH = os.environ.get("PATH", "/usr/bin:/bin")


def output_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sqsjkr.output"]


def job(command: str, **kwargs: object) -> Job:
    kwargs.setdefault("message_id", "msg-1")
    kwargs.setdefault("event_id", "ev-1")
    return Job(command=command, **kwargs)  # type: ignore[arg-type]


def run(runner: ShellRunner, the_job: Job, timeout: float | None = None) -> RunResult:
    return runner.run(the_job, timeout=timeout, stop=StopSwitch())


def alive(pid: int) -> bool:
    """True while pid runs. A killed orphan is a zombie until init reaps it, which some
    container inits do late or never: a zombie counts as gone."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@contextlib.contextmanager
def background_pid(pid_file: Path) -> Iterator[Callable[[], int]]:
    """Yields a function that reads the pid a command wrote to pid_file; kills it at the end."""
    pids: list[int] = []

    def read() -> int:
        pids.append(int(pid_file.read_text()))
        return pids[-1]

    try:
        yield read
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# --- ShellRunner ------------------------------------------------------------------------------


def test_command_runs_with_daemon_env_plus_job_envs_job_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    runner = ShellRunner(base_env={"PATH": PATH, "FROM_DAEMON": "daemon", "SHARED": "daemon"})
    result = run(
        runner,
        job('echo "$FROM_DAEMON $FROM_JOB $SHARED"', envs={"FROM_JOB": "job", "SHARED": "job"}),
    )
    assert result.ok
    assert output_lines(caplog) == ["job msg-1 (event ev-1) | daemon job job"]


def test_default_base_env_is_the_daemon_environment(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    monkeypatch.setenv("SQSJKR_TEST_DAEMON_VAR", "inherited")
    result = run(ShellRunner(), job('echo "$SQSJKR_TEST_DAEMON_VAR"'))
    assert result.ok
    assert output_lines(caplog) == ["job msg-1 (event ev-1) | inherited"]


def test_exit_codes() -> None:
    runner = ShellRunner()
    ok = run(runner, job("true"))
    assert ok.exit_code == 0 and ok.ok and ok.stopped is None
    failed = run(runner, job("exit 3"))
    assert failed.exit_code == 3 and not failed.ok and failed.stopped is None


def test_killed_by_signal_gives_negative_code() -> None:
    result = run(ShellRunner(), job("kill -KILL $$"))
    assert result.exit_code == -signal.SIGKILL
    assert not result.ok


def test_stdout_and_stderr_both_logged_with_tag(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    result = run(
        ShellRunner(),
        job("echo to-stdout; echo to-stderr >&2", event_id="nightly", message_id="abc-123"),
    )
    assert result.ok
    lines = output_lines(caplog)
    assert sorted(lines) == [
        "job abc-123 (event nightly) | to-stderr",
        "job abc-123 (event nightly) | to-stdout",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "sqsjkr.output")


def test_job_envs_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-value-7f1c"
    result = run(ShellRunner(), job("echo done; exit 2", envs={"API_TOKEN": secret}))
    assert result.exit_code == 2
    assert "job msg-1 (event ev-1) | done" in output_lines(caplog)
    assert secret not in caplog.text


def test_runs_in_its_own_session() -> None:
    lines: list[str] = []
    script = "import os; print(os.getsid(0), os.getpgid(0))"
    result = run_shell(
        f"{shlex.quote(sys.executable)} -c {shlex.quote(script)}",
        env=os.environ,
        emit=lines.append,
    )
    assert result.ok
    sid, pgid = (int(x) for x in lines[0].split())
    assert sid != os.getsid(0)
    assert pgid != os.getpgrp()
    assert sid == pgid  # a session leader's group


# --- stopping a job: timeout, cancel, kill_grace -----------------------------------------------


def discard(line: str) -> None:
    pass


def runner_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sqsjkr.runner"]


def test_timeout_sends_sigterm_to_the_whole_process_group(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sqsjkr.runner")
    pid_file, got_term = tmp_path / "pid", tmp_path / "got-term"
    # A grandchild that does not hold the output pipe, so only a group kill can end it, and
    # that says whether SIGTERM reached it (and not only the SIGKILL after kill_grace).
    grandchild = f"(trap 'echo yes > {shlex.quote(str(got_term))}; exit 0' TERM; sleep 300 & wait)"
    command = f"{grandchild} >/dev/null 2>&1 & echo $! > {shlex.quote(str(pid_file))}; wait"
    with background_pid(pid_file) as grandchild_pid:
        result = run_shell(command, env=os.environ, emit=discard, timeout=0.5, kill_grace=1.0)
        assert result.stopped is StopReason.TIMED_OUT
        assert result.exit_code == -signal.SIGTERM
        assert not result.ok
        assert 0.5 <= result.seconds < 10
        pid = grandchild_pid()
        wait_until(lambda: not alive(pid), timeout=5, what=f"grandchild {pid} to end")
    assert got_term.read_text() == "yes\n"
    assert any("timed out: stopping process group" in line for line in runner_warnings(caplog))


def test_a_command_exiting_0_on_sigterm_still_timed_out() -> None:
    result = run_shell(
        "trap 'exit 0' TERM; sleep 10 & wait", env=os.environ, emit=discard, timeout=0.3
    )
    assert result.exit_code == 0
    assert result.stopped is StopReason.TIMED_OUT
    assert not result.ok
    assert result.seconds < 5


def test_a_command_ignoring_sigterm_gets_sigkill_after_kill_grace(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr")
    # Left alone it would run about five seconds and exit 0; the trap says TERM came first.
    command = (
        "trap 'echo got-term' TERM; echo ready; i=0; "
        'while [ "$i" -lt 100 ]; do sleep 0.05; i=$((i + 1)); done; echo survived'
    )
    result = run(ShellRunner(kill_grace=0.3), job(command), timeout=0.5)
    assert result.exit_code == -signal.SIGKILL
    assert result.stopped is StopReason.TIMED_OUT
    assert not result.ok
    assert 0.8 <= result.seconds < 4  # timeout + grace, not the command's own five seconds
    lines = output_lines(caplog)
    assert "job msg-1 (event ev-1) | got-term" in lines
    assert "job msg-1 (event ev-1) | survived" not in lines
    warned = runner_warnings(caplog)
    assert any("SIGTERM" in line for line in warned)
    assert any(line.endswith("SIGKILL") for line in warned)


def test_cancel_from_another_thread_stops_a_running_command(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sqsjkr.runner")
    started = tmp_path / "started"
    stop = StopSwitch()

    def cancel_once_started() -> None:
        wait_until(started.exists, timeout=10, what="the command to start")
        stop.trip(StopReason.CANCELLED)

    canceller = threading.Thread(target=cancel_once_started)
    canceller.start()
    try:
        result = ShellRunner(kill_grace=1.0).run(
            job(f"touch {shlex.quote(str(started))}; sleep 10; echo finished"),
            timeout=20,  # not reached: the cancel comes first
            stop=stop,
        )
    finally:
        canceller.join()
    assert result.stopped is StopReason.CANCELLED
    assert result.exit_code == -signal.SIGTERM
    assert not result.ok
    assert result.seconds < 8
    assert any("cancelled: stopping process group" in line for line in runner_warnings(caplog))


def until(release: Path) -> str:
    """A shell loop that ends once release exists."""
    return f"while [ ! -e {shlex.quote(str(release))} ]; do sleep 0.05; done"


@contextlib.contextmanager
def on_a_thread(command: str, release: Path) -> Iterator[tuple[threading.Thread, list[RunResult]]]:
    """command run by a ShellRunner on a thread, and the list its result goes to; at the end,
    release is made and the thread joined."""
    results: list[RunResult] = []
    worker = threading.Thread(target=lambda: results.append(run(ShellRunner(), job(command), 60)))
    worker.start()
    try:
        yield worker, results
    finally:
        release.touch()
        worker.join(10)


def test_a_command_that_ends_is_not_stopped_and_its_background_child_lives_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="sqsjkr.runner")
    pid_file = tmp_path / "pid"
    # As under cron: a child that closed its output outlives the command that started it.
    command = f"sleep 300 >/dev/null 2>&1 & echo $! > {shlex.quote(str(pid_file))}"
    stop = StopSwitch()
    with background_pid(pid_file) as child_pid:
        result = ShellRunner(kill_grace=0.3).run(job(command), timeout=5, stop=stop)
        assert result.stopped is None
        assert result.exit_code == 0 and result.ok
        assert result.seconds < 3  # its end is seen at once, not at the timeout
        assert stop.wait(0) is StopReason.ENDED
        assert alive(child_pid())
    assert runner_warnings(caplog) == []


def test_a_background_process_holding_the_output_is_named_once_the_shell_exits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`slow & echo done` runs until slow ends, since slow holds its output: said at sh's exit."""
    caplog.set_level(logging.INFO, logger="sqsjkr")
    release = tmp_path / "release"
    with on_a_thread(f"({until(release)}) & echo done", release) as (worker, results):
        wait_until(lambda: runner_warnings(caplog), timeout=10, what="the warning")
        assert runner_warnings(caplog) == [
            "job msg-1 (event ev-1) is still running: its shell exited (code 0), but a process "
            "it left in the background holds its output; the job keeps its worker and its lock "
            "until that process ends or closes its stdout and stderr (or the job's timeout)"
        ]
        assert worker.is_alive()
    # No tail kept by default: only the count of the bytes printed ("done\n").
    assert results[0].ok and results[0].output == Output(merged_bytes=5)
    assert "job msg-1 (event ev-1) | done" in output_lines(caplog)
    assert len(runner_warnings(caplog)) == 1


def test_a_command_whose_output_ends_with_it_is_not_said_to_be_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr")
    for command in ("true", "echo done", "seq 1 20000", "sleep 0.1 & wait; echo x >&2"):
        assert run(ShellRunner(), job(command)).ok
    assert runner_warnings(caplog) == []


def test_a_running_command_costs_no_thread_but_the_one_running_it(tmp_path: Path) -> None:
    started, release = tmp_path / "started", tmp_path / "release"
    before = set(threading.enumerate())
    command = f"touch {shlex.quote(str(started))}; {until(release)}"
    with on_a_thread(command, release) as (worker, results):
        wait_until(started.exists, timeout=10, what="the command to start")
        assert set(threading.enumerate()) - before == {worker}  # no stopper, no reader thread
    assert results[0].ok


def test_a_command_that_closed_its_output_still_times_out() -> None:
    result = run_shell(
        "exec >/dev/null 2>&1 </dev/null; sleep 10", env=os.environ, emit=discard, timeout=0.3
    )
    assert result.stopped is StopReason.TIMED_OUT
    assert result.exit_code == -signal.SIGTERM
    assert result.seconds < 5


def test_a_runner_keeps_the_sh_it_found_on_the_daemons_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    runner = ShellRunner(base_env={"PATH": str(empty)})  # created with the daemon's PATH
    monkeypatch.setenv("PATH", str(empty))
    assert run(runner, job("exit 3")).exit_code == 3


def test_stop_switch_first_reason_wins() -> None:
    stop = StopSwitch()
    assert stop.wait(0) is None
    assert stop.wait(0.01) is None  # not tripped: the timeout passes
    stop.trip(StopReason.CANCELLED)
    stop.trip(StopReason.TIMED_OUT)
    stop.trip(StopReason.ENDED)
    assert stop.wait(0) is StopReason.CANCELLED
    assert stop.wait(None) is StopReason.CANCELLED


def test_stopped_result_is_never_ok() -> None:
    assert RunResult(exit_code=0, seconds=1.0).ok
    assert not RunResult(exit_code=0, seconds=1.0, stopped=StopReason.TIMED_OUT).ok
    assert not RunResult(exit_code=0, seconds=1.0, stopped=StopReason.CANCELLED).ok


# --- run_shell: bounded memory ----------------------------------------------------------------


def test_one_huge_line_is_cut_into_bounded_pieces() -> None:
    pieces = 0
    total = 0
    longest = 0

    def emit(line: str) -> None:
        nonlocal pieces, total, longest
        pieces += 1
        total += len(line)
        longest = max(longest, len(line))
        assert set(line) <= {"a"}

    result = run_shell("head -c 5000000 /dev/zero | tr '\\0' a", env=os.environ, emit=emit)
    assert result.ok
    assert total == 5_000_000
    assert longest <= MAX_LINE_BYTES
    assert pieces >= 5_000_000 // MAX_LINE_BYTES


def test_many_lines_each_emitted() -> None:
    count = 0
    first = last = ""

    def emit(line: str) -> None:
        nonlocal count, first, last
        if count == 0:
            first = line
        count += 1
        last = line

    result = run_shell("seq 1 200000", env=os.environ, emit=emit)
    assert result.ok
    assert (count, first, last) == (200_000, "1", "200000")


def test_stream_lines_strips_newlines_and_cuts_long_lines() -> None:
    data = b"one\r\ntwo\n" + b"x" * (MAX_LINE_BYTES * 2 + 5) + b"\nlast-no-newline"
    got: list[str] = []
    stream_lines(io.BytesIO(data), got.append)
    assert got[:2] == ["one", "two"]
    assert got[-1] == "last-no-newline"
    middle = got[2:-1]
    assert all(len(piece) <= MAX_LINE_BYTES for piece in middle)
    assert "".join(middle) == "x" * (MAX_LINE_BYTES * 2 + 5)


# --- run_shell: a command that cannot start ---------------------------------------------------


def test_sh_not_found_gives_127_and_logs(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Neither the daemon's PATH nor the job's leads to an `sh`.
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(empty))
    caplog.set_level(logging.ERROR, logger="sqsjkr.runner")
    lines: list[str] = []
    result = run_shell("echo never", env={"PATH": str(empty)}, emit=lines.append)
    assert result == RunResult(
        exit_code=127, seconds=result.seconds, start_error="No such file or directory"
    )
    assert not result.ok
    assert lines == []
    assert "could not start sh" in caplog.text


def test_job_path_without_sh_still_runs(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    # Go: exec.Command("sh", ...) looks sh up in the daemon's PATH; cmd.Env (with the job's
    # PATH) applies only to what sh runs. A job setting PATH to its own bin dir worked there.
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    result = run(
        ShellRunner(base_env=dict(os.environ)), job('echo "$PATH"', envs={"PATH": str(tmp_path)})
    )
    assert result.ok
    assert output_lines(caplog) == [f"job msg-1 (event ev-1) | {tmp_path}"]


# --- run_trigger ------------------------------------------------------------------------------


def test_trigger_gets_the_go_line_on_stdin_and_the_given_env(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    stdin_file = tmp_path / "stdin.txt"
    the_job = job("echo hi", message_id="m-42", event_id="ev-42", sent_at=1_700_000_000.25)
    result = run_trigger(
        f'cat > {shlex.quote(str(stdin_file))}; echo "alert $ALERT_TO"',
        the_job,
        env={"PATH": PATH, "ALERT_TO": "ops"},
    )
    assert result.ok
    assert stdin_file.read_bytes() == (trigger_line(the_job) + "\n").encode()
    assert output_lines(caplog) == ["job m-42 (event ev-42) life_time_trigger | alert ops"]


def test_trigger_default_env_is_the_daemon_environment(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    monkeypatch.setenv("SQSJKR_TEST_TRIGGER_VAR", "from-daemon")
    result = run_trigger('echo "$SQSJKR_TEST_TRIGGER_VAR"', job("true"))
    assert result.ok
    assert output_lines(caplog) == ["job msg-1 (event ev-1) life_time_trigger | from-daemon"]


def test_trigger_that_ignores_stdin_does_not_raise() -> None:
    assert run_trigger("exit 0", job("echo hi")).ok
    # An input larger than a pipe buffer: the write fails with EPIPE once the trigger has exited.
    big = job("x" * 300_000)
    result = run_trigger("exit 4", big)
    assert result.exit_code == 4


def test_trigger_that_ignores_stdin_leaves_no_open_pipe() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        run_trigger("exit 0", job("x" * 300_000))
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_a_line_of_exactly_the_cut_size_gives_no_empty_line() -> None:
    pieces: list[str] = []
    stream_lines(io.BytesIO(b"x" * MAX_LINE_BYTES + b"\nnext\n"), pieces.append)
    assert [len(p) for p in pieces] == [MAX_LINE_BYTES, 4]


def test_a_character_split_by_a_cut_is_not_garbled() -> None:
    pieces: list[str] = []
    text = "a" * (MAX_LINE_BYTES - 1) + "é" + "z\n"  # é's two bytes straddle the cut
    stream_lines(io.BytesIO(text.encode()), pieces.append)
    assert "".join(pieces) == text.rstrip("\n")
    assert "\ufffd" not in "".join(pieces)


def test_trigger_printing_a_lot_before_reading_a_long_line_does_not_deadlock() -> None:
    # Both pipes exceed their buffers: stdin must be fed while stdout is drained.
    pieces: list[str] = []
    long_job = job("x" * 300_000)
    result = run_shell(
        "head -c 200000 /dev/zero | tr '\\0' a; cat > /dev/null",
        env={"PATH": PATH},
        emit=pieces.append,
        stdin=trigger_line(long_job) + "\n",
    )
    assert result.ok
    assert sum(len(p) for p in pieces) == 200_000


def test_each_job_gets_its_own_environment_from_the_one_built_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The daemon's environment is encoded once per runner: a job's envs and run facts go into
    that job's copy only, never into the next job's, and a name the daemon's environment holds
    is replaced for that job alone."""
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    runner = ShellRunner(base_env={"PATH": PATH, "SHARED": "daemon"})
    command = 'echo "${FIRST-unset} ${SECOND-unset} $SHARED $SQSJKR_ATTEMPT"'
    first = job(command, envs={"FIRST": "1", "SHARED": "first"})
    context = RunContext("ev-1", "msg-1", 0.0, 2, "host")
    assert runner.run(first, timeout=None, stop=StopSwitch(), context=context).ok
    assert run(runner, job(command, envs={"SECOND": "2"})).ok
    assert output_lines(caplog) == [
        "job msg-1 (event ev-1) | 1 unset first 2",
        "job msg-1 (event ev-1) | unset 2 daemon ",
    ]


def test_a_kill_whose_tripping_thread_is_slow_after_its_signal_is_still_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The heartbeat's thread sends SIGTERM, then loses the CPU before it notes that it did (a
    loaded host): the command's end must still be told a kill, not an error of exit -15."""
    import sqsjkr.daemon.runner as runner

    started, ended = tmp_path / "started", threading.Event()
    sent = runner._signal_group

    def signal_then_stall(pgid: int, signum: int) -> bool:
        reached = sent(pgid, signum)
        ended.wait(2)  # the worker sees the command end meanwhile, unless it waits for this
        return reached

    monkeypatch.setattr(runner, "_signal_group", signal_then_stall)
    stop = StopSwitch()

    def kill_once_started() -> None:
        wait_until(started.exists, timeout=10, what="the command to start")
        stop.trip(StopReason.KILLED)

    killer = threading.Thread(target=kill_once_started)
    killer.start()
    try:
        result = ShellRunner(kill_grace=1.0).run(
            job(f"touch {shlex.quote(str(started))}; sleep 10"), timeout=20, stop=stop
        )
    finally:
        ended.set()
        killer.join()
    assert result.exit_code == -signal.SIGTERM
    assert result.stopped is StopReason.KILLED
