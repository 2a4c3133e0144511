"""ShellRunner, run_shell, run_trigger and stream_lines, with real `sh -c` subprocesses."""

from __future__ import annotations

import gc
import io
import logging
import os
import shlex
import signal
import sys
import warnings
from pathlib import Path

import pytest

from sqsjkr.job import Job, trigger_line
from sqsjkr.runner import (
    MAX_LINE_BYTES,
    RunResult,
    ShellRunner,
    run_shell,
    run_trigger,
    stream_lines,
)

PATH = os.environ.get("PATH", "/usr/bin:/bin")


def output_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sqsjkr.output"]


def job(command: str, **kwargs: object) -> Job:
    kwargs.setdefault("message_id", "msg-1")
    kwargs.setdefault("event_id", "ev-1")
    return Job(command=command, **kwargs)  # type: ignore[arg-type]


# --- ShellRunner ------------------------------------------------------------------------------


def test_command_runs_with_daemon_env_plus_job_envs_job_wins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    runner = ShellRunner(base_env={"PATH": PATH, "FROM_DAEMON": "daemon", "SHARED": "daemon"})
    result = runner.run(
        job('echo "$FROM_DAEMON $FROM_JOB $SHARED"', envs={"FROM_JOB": "job", "SHARED": "job"})
    )
    assert result.ok
    assert output_lines(caplog) == ["[ev-1 msg-1] daemon job job"]


def test_default_base_env_is_the_daemon_environment(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    monkeypatch.setenv("SQSJKR_TEST_DAEMON_VAR", "inherited")
    result = ShellRunner().run(job('echo "$SQSJKR_TEST_DAEMON_VAR"'))
    assert result.ok
    assert output_lines(caplog) == ["[ev-1 msg-1] inherited"]


def test_exit_codes() -> None:
    runner = ShellRunner()
    ok = runner.run(job("true"))
    assert ok.exit_code == 0 and ok.ok
    failed = runner.run(job("exit 3"))
    assert failed.exit_code == 3 and not failed.ok


def test_killed_by_signal_gives_negative_code() -> None:
    result = ShellRunner().run(job("kill -KILL $$"))
    assert result.exit_code == -signal.SIGKILL
    assert not result.ok


def test_stdout_and_stderr_both_logged_with_tag(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    result = ShellRunner().run(
        job("echo to-stdout; echo to-stderr >&2", event_id="nightly", message_id="abc-123")
    )
    assert result.ok
    lines = output_lines(caplog)
    assert sorted(lines) == ["[nightly abc-123] to-stderr", "[nightly abc-123] to-stdout"]
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "sqsjkr.output")


def test_job_envs_never_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    secret = "s3cr3t-value-7f1c"
    result = ShellRunner().run(job("echo done; exit 2", envs={"API_TOKEN": secret}))
    assert result.exit_code == 2
    assert "[ev-1 msg-1] done" in output_lines(caplog)
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
    assert result == RunResult(exit_code=127, seconds=result.seconds)
    assert not result.ok
    assert lines == []
    assert "could not start sh" in caplog.text


def test_job_path_without_sh_still_runs(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    # Go: exec.Command("sh", ...) looks sh up in the daemon's PATH; cmd.Env (with the job's
    # PATH) applies only to what sh runs. A job setting PATH to its own bin dir worked there.
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    result = ShellRunner(base_env=dict(os.environ)).run(
        job('echo "$PATH"', envs={"PATH": str(tmp_path)})
    )
    assert result.ok
    assert output_lines(caplog) == [f"[ev-1 msg-1] {tmp_path}"]


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
    assert output_lines(caplog) == ["[life_time_trigger m-42] alert ops"]


def test_trigger_default_env_is_the_daemon_environment(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="sqsjkr.output")
    monkeypatch.setenv("SQSJKR_TEST_TRIGGER_VAR", "from-daemon")
    result = run_trigger('echo "$SQSJKR_TEST_TRIGGER_VAR"', job("true"))
    assert result.ok
    assert output_lines(caplog) == ["[life_time_trigger msg-1] from-daemon"]


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
