"""Every command against an endpoint that answers garbage or drops the connection: one line, an exit
code, no traceback, and nothing reported as done.
"""

from __future__ import annotations

import http.server
import socket
import struct
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from .conftest import Result, sqsjkr

#: What the endpoint answers, by mode: a body no protocol can read, a page with lines of its own.
GARBAGE = b"<<garbage\n\x1b[31m{not json"
ERROR_PAGE = b"<html>\n<body>\nInternal error\n</body>\n</html>\n"

#: Every command that calls AWS, with the arguments it needs to make a call.
COMMANDS = [
    ["status"],
    ["audit"],
    ["history", "nightly"],
    ["locks"],
    ["unlock", "L"],
    ["pause", "--all"],
    ["resume", "--all"],
    ["kill", "nightly"],
    ["route"],
    ["route", "heavy", "--queue", "slow"],
    ["route", "heavy", "--clear"],
    ["trigger", "nightly"],
    ["dlq", "list"],
    ["dlq", "show", "m-1"],
    ["dlq", "redrive", "m-1"],
    ["dlq", "delete", "m-1"],
    ["dlq", "purge", "--yes"],
    ["send", "--command", "true"],
    ["send", "--command", "true", "--in", "1h"],
    ["send", "--list-scheduled"],
    ["send", "--cancel", "at.nightly.20300101T000000"],
]
#: The commands tried against every kind of broken endpoint: one per service and reading path
#: (the table, the queue, the scheduler, STS and the audit write). Every command meets garbage,
#: which goes furthest into the parsers; an error page and a reset end in botocore's retries,
#: alike for all.
EVERY_MODE = [
    ["status"],
    ["dlq", "list"],
    ["send", "--command", "true", "--in", "1h"],
    ["pause", "--all"],
]
CASES = [
    pytest.param(mode, args, id=f"{mode}-{' '.join(args)}")
    for mode in ("garbage", "error-page", "reset")
    for args in COMMANDS
    if mode == "garbage" or args in EVERY_MODE
]


class Endpoint(http.server.BaseHTTPRequestHandler):
    """Answers every request as the server's mode says."""

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        mode = self.server.mode  # type: ignore[attr-defined]
        if mode == "reset":
            # An RST instead of an answer: linger on, with no time to linger.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()
            return
        status, body = (200, GARBAGE) if mode == "garbage" else (500, ERROR_PAGE)
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving(mode: str) -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    server.mode = mode  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(params=["garbage", "error-page", "reset"])
def broken_endpoint(request: pytest.FixtureRequest) -> Iterator[str]:
    with serving(request.param) as url:
        yield url


@pytest.fixture
def conf(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        '[account]\nid = "123456789012"\nregion = "us-east-1"\n'
        '[sqs]\nqueue_name = "jobs"\n[lock]\ntable = "sqsjkr"\n'
        '[schedule]\nrole_arn = "arn:aws:iam::123456789012:role/scheduler"\n'
    )
    return path


@pytest.fixture
def run_against(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., Result]:
    """`sqsjkr ARGS` in this process with boto3 pointed at endpoint: an exception that escapes
    the entry point's one-line errors fails the test as a traceback would."""

    def run(endpoint: str, *args: str) -> Result:
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB"):
            monkeypatch.delenv(name, raising=False)
        return Result(*sqsjkr(capsys, *args))

    return run


@pytest.mark.parametrize(("mode", "args"), CASES)
def test_every_command_fails_in_one_line_against_a_broken_endpoint(
    mode: str, conf: Path, args: list[str], run_against: Callable[..., Result]
) -> None:
    with serving(mode) as endpoint:
        result = run_against(endpoint, *args, "-c", str(conf))
    assert "Traceback" not in result.stderr
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert result.stdout == ""  # nothing reported as listed, paused or sent
    [line] = result.stderr.splitlines()
    assert line.startswith("sqsjkr: error: ")
    assert "\x1b" not in line


def test_the_check_plugin_is_unknown_against_a_broken_endpoint(
    broken_endpoint: str, conf: Path, run_against: Callable[..., Result]
) -> None:
    result = run_against(broken_endpoint, "status", "--check", "-c", str(conf))
    assert "Traceback" not in result.stderr
    assert result.returncode == 3
    [line] = result.stdout.splitlines()
    assert line.startswith("SQSJKR UNKNOWN - ")


def test_the_preflight_check_reports_a_broken_endpoint(
    broken_endpoint: str, conf: Path, run_against: Callable[..., Result]
) -> None:
    result = run_against(broken_endpoint, "check", "-c", str(conf))
    assert "Traceback" not in result.stderr
    assert result.returncode != 0
    assert "\x1b" not in result.stdout + result.stderr
