"""The listener of `sqsjkr web` against hostile clients, with real sockets: slow headers, bodies
too large for it, deep bodies, encoded slashes, a tokens file edited while it serves, and the
command's own edges (a taken port, `sqsjkr token new`'s output).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from sqsjkr.commands.dashboard import listening
from sqsjkr.commands.options import load
from sqsjkr.contract.run import RunOutcome
from sqsjkr.contract.tokens import read_tokens
from tests.api_fleet import TOKENS, Served, aws_environment, serve_api, tokens_file
from tests.conftest import Daemon, sqsjkr_argv, wait_until
from tests.web_fleet import WebFleet, make_fleet, module_env, record

PROBLEM = "application/problem+json"
#: An address of this host other than the clients' own (the whole of 127.0.0.0/8 is loopback).
HOSTILE = "127.0.0.2"


@pytest.fixture(scope="module")
def fleet(moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebFleet]:
    with module_env(moto_endpoint):
        yield make_fleet(tmp_path_factory.mktemp("listener"))


@pytest.fixture(scope="module")
def served(
    fleet: WebFleet, moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("listener-web")
    with serve_api(
        fleet,
        aws_environment(moto_endpoint),
        directory,
        "--api-tokens",
        str(tokens_file(directory)),
    ) as s:
        yield s


def address(served: Served) -> tuple[str, int]:
    host, port = served.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    return host, int(port)


def connect(where: tuple[str, int], source: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(10)
    sock.connect(where)
    return sock


def answer(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """What the listener sent before it closed the connection or went quiet for timeout."""
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
            if b"\r\n\r\n" in got and _complete(got):
                break
    except (TimeoutError, ConnectionResetError):
        pass
    return got


def _complete(raw: bytes) -> bool:
    head, _, body = raw.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            return len(body) >= int(value)
    return False


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the listener has closed (or refused) the connection: its answer, if any, read."""
    sock.setblocking(False)
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                return True
            if chunk.startswith(b"HTTP/1.1 503"):
                assert b"Retry-After:" in chunk, chunk
    except BlockingIOError:
        return False
    except (ConnectionResetError, BrokenPipeError):
        return True


def test_a_slowloris_leaves_a_client_with_a_token_and_the_dashboard_served(
    served: Served,
) -> None:
    """120 connections of one address, each sending a header line now and then and never its
    request's end: past the cap on one address's connections, each is refused at once, and the
    others' clients are answered meanwhile."""
    where = address(served)
    slow = []
    try:
        for _ in range(120):
            sock = connect(where, HOSTILE)
            sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            slow.append(sock)
        for round_ in range(2):
            for sock in slow:
                with contextlib.suppress(OSError):  # refused already
                    sock.sendall(f"X-Slow-{round_}: 1\r\n".encode())
            started = time.monotonic()
            auth = {"Authorization": f"Bearer {TOKENS['reader'][0]}"}
            api = requests.get(served.url + "api/v1/events", headers=auth, timeout=10)
            page = requests.get(served.url, timeout=10)
            assert api.status_code == 200 and page.status_code == 200, (api.text, page.text)
            assert time.monotonic() - started < 10
        from sqsjkr.web.server import Limits

        cap = Limits().per_client
        held = wait_until(
            lambda: (n := sum(not closed_by_server(s) for s in slow)) <= cap and n + 1,
            10,
            f"the listener to hold at most {cap} connections of one address",
        )
        assert held - 1 <= cap
    finally:
        for sock in slow:
            sock.close()


def test_a_request_whose_headers_or_body_come_too_slowly_is_closed(
    fleet: WebFleet, moto_endpoint: str
) -> None:
    """Header and request deadlines close a connection that sends a line now and then, one that
    says nothing, and one whose body trickles; a connection that keeps to them is served."""
    from sqsjkr.web.server import Limits

    limits = Limits(header_timeout=1.0, request_timeout=2.0)
    with module_env(moto_endpoint):
        dash = listening(load(str(fleet.conf)), port=0, limits=limits)
    dash.start()
    try:
        where = ("127.0.0.1", dash.guard.port)
        trickle, silent, slow_body = (connect(where) for _ in range(3))
        trickle.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        slow_body.sendall(
            b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{"
        )
        started = time.monotonic()
        closed: dict[str, float] = {}
        while len(closed) < 3 and time.monotonic() - started < 8:
            for name, sock in (("trickle", trickle), ("silent", silent), ("body", slow_body)):
                if name not in closed and closed_by_server(sock):
                    closed[name] = time.monotonic() - started
                elif name != "silent" and name not in closed:
                    try:
                        sock.sendall(b"X-Slow: 1\r\n" if name == "trickle" else b" ")
                    except OSError:
                        closed[name] = time.monotonic() - started
            time.sleep(0.2)  # the pace of the hostile client itself
        assert set(closed) == {"trickle", "silent", "body"}, closed
        assert closed["trickle"] < 4.5 and closed["silent"] < 4.5, closed
        assert 1.5 < closed["body"] < 6, closed
        assert requests.get(dash.url, timeout=5).status_code == 200
    finally:
        dash.close()


def test_a_large_declared_body_without_a_token_is_refused_unread(served: Served) -> None:
    sock = connect(address(served))
    sock.sendall(
        b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 209715200\r\n\r\n"
    )
    got = answer(sock)
    sock.close()
    status = got.split(b" ", 2)[1:2]
    assert status in ([b"401"], [b"413"]), got[:300]
    head, _, body = got.partition(b"\r\n\r\n")
    assert PROBLEM.encode() in head, head
    assert json.loads(body)["detail"] in ("the body is larger than 1 MiB", "unknown token")


def test_headers_past_the_cap_are_431_and_garbage_is_400_as_problems(served: Served) -> None:
    big = connect(address(served))
    big.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"x" * 70_000)
    got = answer(big)
    big.close()
    assert got.split(b" ", 2)[1] == b"431", got[:300]
    shown = json.loads(got.partition(b"\r\n\r\n")[2])
    assert shown["code"] == "http-431" and "larger than 64 KiB" in shown["detail"], shown
    bad = connect(address(served))
    bad.sendall(b"GET /api/v1/events HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
    got = answer(bad)
    bad.close()
    assert got.split(b" ", 2)[1] == b"400", got[:300]
    head, _, body = got.partition(b"\r\n\r\n")
    assert PROBLEM.encode() in head and json.loads(body)["code"] == "http-400", got


def test_a_chunked_body_past_the_cap_is_cut(served: Served) -> None:
    sock = connect(address(served))
    sock.sendall(
        b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (65536, b" " * 65536)
    sent = 0
    try:
        for _ in range(64):  # 4 MiB, if the listener read on
            sock.sendall(chunk)
            sent += len(chunk)
    except OSError:
        pass
    got = answer(sock)
    sock.close()
    assert got.startswith(b"HTTP/1.1 413"), got[:300]
    assert json.loads(got.partition(b"\r\n\r\n")[2])["detail"] == "the body is larger than 1 MiB"


def test_sqsjkr_web_on_a_taken_port_says_so_in_one_line(
    cli, fleet: WebFleet, aws_env: dict[str, str]
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("web", "-c", str(fleet.conf), "--listen", f"127.0.0.1:{port}")
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--listen 127.0.0.1:{port}" in lines[0], result.stderr


def test_a_body_over_1_mib_is_413_with_the_documented_detail(served: Served) -> None:
    huge = {"job": {"command": "echo " + "x" * 1024 * 1024}}
    refused = served.call("POST", "api/v1/jobs", json=huge)
    assert refused.status_code == 413 and refused.headers["Content-Type"] == PROBLEM
    assert refused.json()["detail"] == "the body is larger than 1 MiB"
    assert refused.json()["code"] == "http-413"


def test_a_body_nested_deep_is_a_400_naming_its_depth(served: Served) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for path, token in (("api/v1/jobs", "sender"), ("api/v1/pauses", "actor")):
        refused = served.call(
            "POST", path, token=token, data=deep, headers={"Content-Type": "application/json"}
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["code"] == "invalid-request"
        assert "nests deeper than" in refused.json()["detail"]


def test_an_id_with_a_slash_or_a_percent_is_reached_percent_encoded(
    served: Served, fleet: WebFleet
) -> None:
    for event in (f"team/report-{uuid.uuid4().hex[:6]}", f"50%off/{uuid.uuid4().hex[:6]}"):
        ran = record(event, time.time(), RunOutcome.SUCCEEDED)
        fleet.history().finished(ran)
        encoded = requests.utils.quote(event, safe="")
        one = served.call("GET", f"api/v1/events/{encoded}", token="reader")
        assert one.status_code == 200 and one.json()["event_id"] == event, one.text
        runs = served.call("GET", f"api/v1/events/{encoded}/runs", token="reader").json()
        assert [r["message_id"] for r in runs["items"]] == [ran.message_id]
        run = served.call("GET", f"api/v1/events/{encoded}/runs/{ran.message_id}")
        assert run.status_code == 200 and run.json()["event_id"] == event, run.text
    plain = served.call("GET", "api/v1/events/team/report", token="reader")
    assert plain.status_code == 404, plain.text


def test_methods_a_route_lacks_are_405_with_allow_before_the_scope(served: Served) -> None:
    deleted = served.call("DELETE", "api/v1/jobs", token="reader")
    assert deleted.status_code == 405 and deleted.json()["code"] == "http-405", deleted.text
    assert "POST" in deleted.headers["Allow"]
    redrive = served.call("OPTIONS", "api/v1/dead-letters/redrive", token="reader")
    allowed = {m.strip() for m in redrive.headers["Allow"].split(",")}
    assert "POST" in allowed and "GET" not in allowed, allowed
    got = served.call("GET", "api/v1/dead-letters/redrive", token="reader")
    assert got.status_code == 405 and "GET" not in got.headers["Allow"], got.text


def test_head_on_wait_answers_at_once(served: Served) -> None:
    started = time.monotonic()
    head = served.call(
        "HEAD", f"api/v1/jobs/{uuid.uuid4()}/wait", token="reader", params={"timeout": 30}
    )
    assert head.status_code == 200 and time.monotonic() - started < 10


def test_every_429_and_503_carries_retry_after() -> None:
    """The table's and the audit trail's failures, as the API answers them (no AWS fault is
    injected through moto: the mapping is what is checked)."""
    from sqsjkr import errors
    from sqsjkr.api.problems import problem_of, problem_response

    for error in (errors.StoreError("table x: throttled"), errors.AuditRefused("audit: no")):
        answer = problem_response(problem_of(error))
        assert answer.status_code == 503 and int(answer.headers["Retry-After"]) > 0


def edit(path: Path, text: str) -> None:
    """Replace a tokens file as an editor does, atomically, keeping its mode."""
    fresh = path.with_suffix(".new")
    fresh.write_text(text)
    fresh.chmod(0o600)
    fresh.replace(path)


def test_a_token_removed_from_the_file_is_refused_without_a_restart(
    fleet: WebFleet, moto_endpoint: str, tmp_path: Path
) -> None:
    tokens = tokens_file(tmp_path)
    tokens.chmod(0o600)
    with serve_api(
        fleet, aws_environment(moto_endpoint), tmp_path, "--api-tokens", str(tokens)
    ) as s:
        assert s.call("GET", "api/v1/events", token="reader").status_code == 200
        kept = tokens.read_text().split("\n\n")
        edit(tokens, "\n\n".join(t for t in kept if "[tokens.reader]" not in t))
        assert s.call("GET", "api/v1/events", token="reader").status_code == 401
        assert s.call("GET", "api/v1/events", token="sender").status_code == 200
        edit(tokens, "[tokens.broken\n")
        broken = s.call("GET", "api/v1/events", token="sender")
        assert broken.status_code == 503 and broken.json()["code"] == "tokens-unreadable"
        assert str(tokens) not in broken.text and "Retry-After" in broken.headers
        assert f'--api-tokens "{tokens}"' in s.process.log, s.process.log
        edit(tokens, "\n\n".join(kept))
        assert s.call("GET", "api/v1/events", token="reader").status_code == 200


def test_sqsjkr_web_refuses_a_tokens_file_that_others_may_write(
    fleet: WebFleet, moto_endpoint: str, tmp_path: Path
) -> None:
    tokens = tokens_file(tmp_path)
    tokens.chmod(0o666)
    web = Daemon(
        ["web", "-c", str(fleet.conf), "--listen", "127.0.0.1:0", "--api-tokens", str(tokens)],
        aws_environment(moto_endpoint),
        tmp_path,
    )
    try:
        exited = wait_until(lambda: web.proc.poll() is not None, 15, "sqsjkr web to refuse")
        assert exited and web.proc.returncode != 0, web.log
        assert str(tokens) in web.log and "chmod go-w" in web.log, web.log
        assert "Traceback" not in web.log
    finally:
        web.kill()


def test_token_new_appended_twice_is_a_tokens_file_granting_both(tmp_path: Path) -> None:
    path = tmp_path / "tokens.toml"
    path.write_text('[tokens.old]\nsha256 = "' + "a" * 64 + '"\nscopes = ["read"]')  # no newline
    secrets = []
    for name in ("deploy-bot", "ci"):
        command = shlex.join(sqsjkr_argv("token", "new", name, "--scope", "read,send"))
        made = subprocess.run(
            f"{command} >> {shlex.quote(str(path))}",
            shell=True,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        secrets.append(made.stderr.strip())
    granted = read_tokens(str(path))
    assert sorted(t.name for t in granted.values()) == ["ci", "deploy-bot", "old"]
    text = path.read_text()
    assert all(len(secret) == 43 and secret not in text for secret in secrets), secrets
