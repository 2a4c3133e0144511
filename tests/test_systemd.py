"""The systemd kit: the unit passes `systemd-analyze verify` and gives the daemon time to stop.

And sqsjkr.notify, the sd_notify protocol, against real AF_UNIX datagram sockets.
"""

from __future__ import annotations

import logging
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sqsjkr.contract.duration import parse_duration
from sqsjkr.observability.notify import NullNotifier, SystemdNotifier

from .conftest import Aws, Daemon, config_text

WAIT_FOR_RELEASE = "while [ ! -f release ]; do sleep 0.05; done"

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "sqsjkr.service"
ANALYZE = shutil.which("systemd-analyze")

#: SIGTERM to SIGKILL for jobs still running when the shutdown timeout ends.
KILL_GRACE = 10.0
#: The least time TimeoutStopSec= must leave after that to release locks and give back messages.
RELEASE_MARGIN = 30.0

RECEIVE_TIMEOUT = 2.0

needs_analyze = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze not installed (Debian: apt-get install systemd)"
)


# -- the unit -------------------------------------------------------------------------------------


def service_settings(text: str) -> dict[str, str]:
    """The [Service] section of a unit file; the last assignment of a key wins."""
    settings: dict[str, str] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]":
            key, _, value = line.partition("=")
            settings[key.strip()] = value.strip()
    return settings


_SPAN_UNITS = {
    **dict.fromkeys(["us", "usec", "\u00b5s"], 1e-6),
    **dict.fromkeys(["ms", "msec"], 1e-3),
    **dict.fromkeys(["", "s", "sec", "second", "seconds"], 1.0),
    **dict.fromkeys(["m", "min", "minute", "minutes"], 60.0),
    **dict.fromkeys(["h", "hr", "hour", "hours"], 3600.0),
    **dict.fromkeys(["d", "day", "days"], 86400.0),
    **dict.fromkeys(["w", "week", "weeks"], 604800.0),
}
_SPAN_PART = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z\u00b5]*)")


def systemd_seconds(span: str) -> float:
    """A systemd time span ("11min", "1h 30s", a bare number of seconds) in seconds."""
    if span.strip() == "infinity":
        return math.inf
    total, pos = 0.0, 0
    while pos < len(span.rstrip()):
        part = _SPAN_PART.match(span, pos)
        if part is None or part.group(2) not in _SPAN_UNITS:
            raise ValueError(f"not a systemd time span this test reads: {span!r}")
        total += float(part.group(1)) * _SPAN_UNITS[part.group(2)]
        pos = part.end()
    return total


def option_value(args: list[str], name: str) -> str:
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.partition("=")[2]
    raise AssertionError(f"{name} is not in ExecStart=: {shlex.join(args)}")


@pytest.mark.parametrize(
    ("span", "seconds"),
    [("11min", 660), ("660", 660), ("1h 30s", 3630), ("2min30s", 150), ("500ms", 0.5)],
)
def test_systemd_seconds_reads_time_spans(span: str, seconds: float) -> None:
    assert systemd_seconds(span) == seconds


def test_open_files_are_not_left_at_systemds_default_of_1024() -> None:
    settings = service_settings(UNIT.read_text())
    soft, _, hard = settings["LimitNOFILE"].partition(":")
    assert int(soft) >= 65536 and int(hard or soft) >= int(soft)


def test_stop_timeout_outlasts_the_daemons_own_stop() -> None:
    settings = service_settings(UNIT.read_text())
    shutdown = parse_duration(
        option_value(shlex.split(settings["ExecStart"]), "--shutdown-timeout")
    ).seconds
    stop = systemd_seconds(settings["TimeoutStopSec"])
    # Short of this, systemd SIGKILLs the daemon while it releases the locks of the jobs it
    # killed, and those locks stay held.
    assert stop > shutdown + KILL_GRACE + RELEASE_MARGIN, (
        f"TimeoutStopSec={settings['TimeoutStopSec']} ({stop:g} s) must exceed --shutdown-timeout "
        f"({shutdown:g} s) + {KILL_GRACE:g} s kill grace + {RELEASE_MARGIN:g} s to release"
    )


def system_units() -> Path:
    # Debian before the /usr merge keeps them in /lib.
    for candidate in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")):
        if (candidate / "sysinit.target").exists():
            return candidate
    pytest.skip("no systemd units on this host (/usr/lib/systemd/system)")


def verify(unit_text: str, root: Path) -> str:
    """All that `systemd-analyze verify` says about unit_text, and its exit status if not 0.

    verify insists that ExecStart='s program exists and is executable, and no test host has
    /usr/local/bin/sqsjkr. Rather than point ExecStart= elsewhere (and verify another text), the
    unit is verified as written under --root: a tmp root with a stub at the program's path and a
    copy of the host's units, since the unit's implicit dependencies (sysinit.target, ...) must
    load.
    Neither a running systemd nor the User= account is needed. --generators=no keeps the host's
    generators out (they need privileges); --man=no skips man pages (there are none).
    """
    units = root / system_units().relative_to("/")
    shutil.copytree(system_units(), units, symlinks=True)
    # The prefixes ("-", "@", "+", ...) are ExecStart= flags, not part of the path.
    program = shlex.split(service_settings(unit_text)["ExecStart"])[0].lstrip("-@:+!")
    stub = root / program.lstrip("/")
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\n")
    stub.chmod(0o755)
    unit = root / "etc/systemd/system/sqsjkr.service"
    unit.parent.mkdir(parents=True)
    unit.write_text(unit_text)
    assert ANALYZE is not None
    result = subprocess.run(
        [ANALYZE, "verify", f"--root={root}", "--man=no", "--generators=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    said = (result.stdout + result.stderr).strip()
    return said + (f"\n(exit status {result.returncode})" if result.returncode else "")


@needs_analyze
def test_unit_verifies_without_a_word(tmp_path: Path) -> None:
    # verify exits 0 on an unknown key or a bad value (it ignores them, as systemd would), so
    # anything it says at all is a failure.
    assert verify(UNIT.read_text(), tmp_path) == ""


@needs_analyze
def test_verify_catches_a_typo(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert "\nKillMode=mixed\n" in text
    said = verify(text.replace("\nKillMode=mixed\n", "\nKilMode=mixed\n"), tmp_path)
    assert "Unknown key 'KilMode'" in said


# -- sd_notify ------------------------------------------------------------------------------------


@pytest.fixture
def path_socket(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket and its NOTIFY_SOCKET value, a path."""
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(RECEIVE_TIMEOUT)
        yield sock, path


@pytest.fixture
def abstract_socket() -> Iterator[tuple[socket.socket, str]]:
    """A bound datagram socket and its NOTIFY_SOCKET value, an abstract name ("@...")."""
    name = f"sqsjkr-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(RECEIVE_TIMEOUT)
        yield sock, "@" + name


def datagrams(sock: socket.socket) -> list[bytes]:
    """The next datagram (waiting for it) and any already queued behind it."""
    got = [sock.recv(4096)]
    sock.setblocking(False)
    try:
        while True:
            got.append(sock.recv(4096))
    except BlockingIOError:
        pass
    finally:
        sock.settimeout(RECEIVE_TIMEOUT)
    return got


CALLS: list[tuple[Callable[[SystemdNotifier], None], bytes]] = [
    (lambda n: n.ready(), b"READY=1"),
    (lambda n: n.status("busy 2, idle 18"), b"STATUS=busy 2, idle 18"),
    (lambda n: n.stopping(), b"STOPPING=1"),
    (lambda n: n.watchdog(), b"WATCHDOG=1"),
]
CALL_IDS = ["ready", "status", "stopping", "watchdog"]


@pytest.mark.parametrize(("call", "expected"), CALLS, ids=CALL_IDS)
def test_each_call_sends_exactly_its_datagram(
    path_socket: tuple[socket.socket, str],
    call: Callable[[SystemdNotifier], None],
    expected: bytes,
) -> None:
    sock, name = path_socket
    call(SystemdNotifier.from_environment({"NOTIFY_SOCKET": name}))
    assert datagrams(sock) == [expected]


@pytest.mark.parametrize(("call", "expected"), CALLS, ids=CALL_IDS)
def test_abstract_namespace_socket(
    abstract_socket: tuple[socket.socket, str],
    call: Callable[[SystemdNotifier], None],
    expected: bytes,
) -> None:
    sock, name = abstract_socket
    call(SystemdNotifier.from_environment({"NOTIFY_SOCKET": name}))
    assert datagrams(sock) == [expected]


def test_status_stays_one_assignment(path_socket: tuple[socket.socket, str]) -> None:
    sock, name = path_socket
    SystemdNotifier(name).status("busy 1\nREADY=1")
    assert datagrams(sock) == [b"STATUS=busy 1 READY=1"]


def test_without_notify_socket_nothing_is_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_socket(*args: object) -> None:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", no_socket)
    notifier = SystemdNotifier.from_environment({"WATCHDOG_USEC": "60000000"})
    notifier.ready()
    notifier.status("busy 0, idle 20")
    notifier.watchdog()
    notifier.stopping()
    assert not notifier.enabled
    assert notifier.watchdog_interval is None  # no one to ping


def test_a_notify_socket_that_is_no_unix_socket_turns_notifying_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notifier = SystemdNotifier.from_environment({"NOTIFY_SOCKET": "relative/notify"})
    notifier.ready()
    assert not notifier.enabled
    assert "not a unix socket" in caplog.text


def test_null_notifier_does_nothing() -> None:
    notifier = NullNotifier()
    notifier.ready()
    notifier.status("busy 0, idle 20")
    notifier.watchdog()
    notifier.stopping()
    assert notifier.watchdog_interval is None


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({"WATCHDOG_USEC": "60000000"}, 30.0),
        ({"WATCHDOG_USEC": "300000000", "WATCHDOG_PID": "4242"}, 150.0),
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "1"}, None),  # another process's
        ({"WATCHDOG_USEC": "60000000", "WATCHDOG_PID": "me"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_watchdog_interval_is_half_of_watchdog_usec_when_meant_for_us(
    env: dict[str, str], interval: float | None
) -> None:
    notifier = SystemdNotifier.from_environment(
        {"NOTIFY_SOCKET": "/run/systemd/notify", **env}, pid=4242
    )
    assert notifier.watchdog_interval == interval


def test_watchdog_pid_is_compared_with_our_own_pid() -> None:
    env = {"NOTIFY_SOCKET": "/run/systemd/notify", "WATCHDOG_USEC": "2000000"}
    ours = SystemdNotifier.from_environment({**env, "WATCHDOG_PID": str(os.getpid())})
    assert ours.watchdog_interval == 1.0
    theirs = SystemdNotifier.from_environment({**env, "WATCHDOG_PID": str(os.getppid())})
    assert theirs.watchdog_interval is None


def test_unset_keeps_the_protocol_from_the_jobs(path_socket: tuple[socket.socket, str]) -> None:
    sock, name = path_socket
    env = {"NOTIFY_SOCKET": name, "WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "4242", "HOME": "/"}
    notifier = SystemdNotifier.from_environment(env, pid=4242, unset=True)
    assert env == {"HOME": "/"}
    assert notifier.watchdog_interval == 1.0
    notifier.ready()
    assert datagrams(sock) == [b"READY=1"]


@pytest.mark.parametrize("gone", ["unlinked", "closed"])
def test_a_vanished_socket_warns_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, gone: str
) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
    if gone == "unlinked":
        path.unlink()
    notifier = SystemdNotifier(str(path))
    with caplog.at_level(logging.DEBUG, logger="sqsjkr.notify"):
        notifier.ready()
        notifier.watchdog()
        notifier.status("busy 0, idle 20")
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert "READY=1" in warnings[0].getMessage()


# -- the real daemon ------------------------------------------------------------------------------


def test_the_daemon_notifies_ready_status_watchdog_and_stopping(
    tmp_path: Path, aws: Aws, aws_env: dict[str, str]
) -> None:
    sock_path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(sock_path))
        sock.settimeout(15)
        conf = tmp_path / "config.toml"
        conf.write_text(config_text(aws, stats="stats_port = 0"))
        env = {**aws_env, "NOTIFY_SOCKET": str(sock_path), "WATCHDOG_USEC": "2000000"}
        daemon = Daemon(["run", "-c", str(conf)], env, tmp_path)
        try:
            seen: list[str] = []

            def until(message: str) -> None:
                """Read datagrams until message arrives."""
                while not seen or seen[-1] != message:
                    seen.append(sock.recv(4096).decode())

            until("READY=1")
            assert seen[-1] == "READY=1"
            until("STATUS=busy 0, idle 4")
            until("WATCHDOG=1")
            aws.send({"command": f"env > env.txt; {WAIT_FOR_RELEASE}"})
            until("STATUS=busy 1, idle 3")
            (tmp_path / "release").touch()
            until("STATUS=busy 0, idle 4")
            daemon.proc.send_signal(signal.SIGTERM)
            until("STOPPING=1")
            assert daemon.stop() == 0
        finally:
            daemon.kill()
    # Jobs do not inherit the protocol's variables: systemd's messages are not for them.
    job_env = (tmp_path / "env.txt").read_text()
    assert "NOTIFY_SOCKET" not in job_env and "WATCHDOG_USEC" not in job_env
