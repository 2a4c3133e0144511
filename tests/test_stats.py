"""Tests for sqsjkr.stats: the counters and the HTTP endpoint, over real sockets.

Servers bind 127.0.0.1 port 0 or a unix socket under tmp_path, so tests can run in parallel.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sqsjkr.errors import SqsjkrError, StatsServerError
from sqsjkr.observability import server as server_module
from sqsjkr.observability.server import MAX_CONNECTIONS, StatsServer
from sqsjkr.observability.stats import Outcome, Stats, StatsSnapshot


class UnixHTTPConnection(http.client.HTTPConnection):
    """http.client over AF_UNIX, the way curl --unix-socket talks to the daemon."""

    def __init__(self, path: str | Path, timeout: float = 2.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = os.fspath(path)

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def tcp_port(server: StatsServer) -> int:
    return int(server.address.rsplit(":", 1)[1])


def fetch(
    conn: http.client.HTTPConnection, path: str, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    try:
        conn.request(method, path)
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


@pytest.fixture
def stats() -> Stats:
    return Stats(workers=3)


@pytest.fixture
def tcp_server(stats: Stats) -> Iterator[StatsServer]:
    server = StatsServer(stats, port=0)
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def sock_path(tmp_path: Path) -> Iterator[Path]:
    # AF_UNIX paths are limited to ~104 bytes and pytest's tmp_path can be longer than that.
    if len(str(tmp_path / "stats.sock")) < 100:
        yield tmp_path / "stats.sock"
        return
    with tempfile.TemporaryDirectory(prefix="sqsjkr-") as short:
        yield Path(short) / "stats.sock"


# --- counters -------------------------------------------------------------------------------


def test_new_stats_are_all_idle(stats: Stats) -> None:
    assert stats.snapshot() == StatsSnapshot(
        busy=0, idle=3, succeeded=0, failed=0, errored=0, duplicates=0
    )


def test_busy_plus_idle_is_workers(stats: Stats) -> None:
    stats.job_started()
    stats.job_started()
    snap = stats.snapshot()
    assert (snap.busy, snap.idle) == (2, 1)
    stats.job_finished()
    snap = stats.snapshot()
    assert (snap.busy, snap.idle) == (1, 2)
    assert stats.busy == 1  # what systemd's status line reads at every job's start and end


def test_job_started_beyond_capacity_is_a_bug(stats: Stats) -> None:
    for _ in range(3):
        stats.job_started()
    with pytest.raises(RuntimeError, match="3 workers"):
        stats.job_started()
    snap = stats.snapshot()
    assert (snap.busy, snap.idle) == (3, 0)


def test_job_finished_without_start_is_a_bug(stats: Stats) -> None:
    with pytest.raises(RuntimeError):
        stats.job_finished()
    assert stats.snapshot().idle == 3


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Stats(workers=0)


def test_count_each_outcome(stats: Stats) -> None:
    stats.count(Outcome.SUCCEEDED)
    stats.count(Outcome.SUCCEEDED)
    stats.count(Outcome.ERRORED)
    stats.count(Outcome.FAILED)
    stats.count(Outcome.DUPLICATE)
    stats.count(Outcome.DUPLICATE)
    stats.count(Outcome.DUPLICATE)
    snap = stats.snapshot()
    assert (snap.succeeded, snap.errored, snap.failed, snap.duplicates) == (2, 1, 1, 3)


def test_concurrent_updates_add_up() -> None:
    stats = Stats(workers=8)
    rounds = 2000
    barrier = threading.Barrier(8)

    def worker() -> None:
        barrier.wait()
        for _ in range(rounds):
            stats.job_started()
            stats.count(Outcome.SUCCEEDED)
            stats.count(Outcome.DUPLICATE)
            stats.job_finished()

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stats.snapshot() == StatsSnapshot(
        busy=0, idle=8, succeeded=8 * rounds, failed=0, errored=0, duplicates=8 * rounds
    )


def test_snapshot_shapes() -> None:
    snap = StatsSnapshot(busy=1, idle=2, succeeded=3, failed=4, errored=5, duplicates=6)
    assert snap.v1() == {"idle_worker": 2, "busy_worker": 1}
    assert snap.v2() == {
        "workers": {"busy": 1, "idle": 2},
        "invocations": {"succeeded": 3, "failed": 4, "errored": 5, "duplicates": 6, "timed_out": 0},
    }


def test_outcome_values_are_v2_keys() -> None:
    keys = set(StatsSnapshot(0, 0, 0, 0, 0, 0).v2()["invocations"])
    assert {o.value for o in Outcome} == keys


# --- TCP server -----------------------------------------------------------------------------


def test_v1_over_tcp(stats: Stats, tcp_server: StatsServer) -> None:
    stats.job_started()
    status, headers, body = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2), "/stats/metrics"
    )
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    # Byte-exact: the same compact JSON, in the same key order, as the Go daemon.
    assert body == b'{"idle_worker":2,"busy_worker":1}\n'


def test_v2_over_tcp(stats: Stats, tcp_server: StatsServer) -> None:
    stats.job_started()
    stats.count(Outcome.SUCCEEDED)
    stats.count(Outcome.FAILED)
    stats.count(Outcome.FAILED)
    stats.count(Outcome.DUPLICATE)
    status, headers, body = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2),
        "/stats/metrics/v2",
    )
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "workers": {"busy": 1, "idle": 2},
        "invocations": {"succeeded": 1, "failed": 2, "errored": 0, "duplicates": 1, "timed_out": 0},
    }


def test_urllib_and_query_string_ignored(tcp_server: StatsServer) -> None:
    import urllib.request

    url = f"http://{tcp_server.address}/stats/metrics?x=1"
    with urllib.request.urlopen(url, timeout=2) as resp:
        assert resp.status == 200
        assert json.loads(resp.read()) == {"idle_worker": 3, "busy_worker": 0}


def test_unknown_path_is_404_json(tcp_server: StatsServer) -> None:
    for path in ("/", "/stats", "/stats/metrics/v3", "/stats/metrics/"):
        status, headers, body = fetch(
            http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2), path
        )
        assert status == 404, path
        assert headers["Content-Type"] == "application/json"
        assert json.loads(body) == {"error": "not found"}


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
def test_other_methods_are_405(tcp_server: StatsServer, method: str) -> None:
    status, headers, body = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2),
        "/stats/metrics",
        method,
    )
    assert status == 405
    assert headers["Allow"] == "GET, HEAD"
    assert json.loads(body) == {"error": "method not allowed"}


def test_unknown_method_is_501_json(tcp_server: StatsServer) -> None:
    status, headers, body = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2),
        "/stats/metrics",
        "BREW",
    )
    assert status == 501
    assert headers["Content-Type"] == "application/json"
    assert "BREW" in json.loads(body)["error"]


def test_head_has_headers_only(tcp_server: StatsServer) -> None:
    status, headers, body = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2),
        "/stats/metrics",
        "HEAD",
    )
    assert status == 200
    assert headers["Content-Type"] == "application/json"
    assert int(headers["Content-Length"]) > 0
    assert body == b""


def test_server_header_hides_python_version(tcp_server: StatsServer) -> None:
    _, headers, _ = fetch(
        http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2), "/stats/metrics"
    )
    assert headers["Server"].startswith("sqsjkr/")
    assert "Python" not in headers["Server"]


def test_malformed_request_gets_json_400(tcp_server: StatsServer) -> None:
    with socket.create_connection(("127.0.0.1", tcp_port(tcp_server)), timeout=2) as sock:
        # A space in the target: the version parses, so the stdlib answers with full headers.
        sock.sendall(b"GET /stats metrics HTTP/1.1\r\n\r\n")
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400")
    assert b"Content-Type: application/json" in head
    assert "error" in json.loads(body)


def test_requests_are_logged_at_debug_not_stderr(
    tcp_server: StatsServer, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.DEBUG, logger="sqsjkr.stats"):
        fetch(
            http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server), timeout=2),
            "/stats/metrics",
        )
        tcp_server.close()  # joins the handler thread, so its log record is in
    assert any("/stats/metrics" in r.getMessage() for r in caplog.records)
    assert all(r.levelno == logging.DEBUG for r in caplog.records if "GET" in r.getMessage())
    assert capfd.readouterr().err == ""


def test_binds_loopback_by_default(tcp_server: StatsServer) -> None:
    assert tcp_server.address.startswith("127.0.0.1:")
    assert tcp_port(tcp_server) > 0


def test_ipv6_host() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("::1 not available")
    with StatsServer(Stats(1), host="::1", port=0) as server:
        assert server.address.startswith("[::1]:")
        status, _, body = fetch(
            http.client.HTTPConnection("::1", tcp_port(server), timeout=2), "/stats/metrics"
        )
        assert status == 200
        assert json.loads(body) == {"idle_worker": 1, "busy_worker": 0}


def test_occupied_port_raises_naming_it(stats: Stats) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = StatsServer(stats, port=port)
        with pytest.raises(StatsServerError, match=f"127.0.0.1:{port}") as info:
            server.start()
        assert isinstance(info.value, SqsjkrError)
        assert "in use" in str(info.value)
        assert "--stats-port" in str(info.value)
        server.close()


def test_exactly_one_of_port_and_socket_path(stats: Stats) -> None:
    with pytest.raises(ValueError):
        StatsServer(stats)
    with pytest.raises(ValueError):
        StatsServer(stats, port=0, socket_path="/tmp/x.sock")


def test_start_twice_and_after_close(stats: Stats) -> None:
    server = StatsServer(stats, port=0)
    server.start()
    with pytest.raises(RuntimeError):
        server.start()
    server.close()
    with pytest.raises(RuntimeError):
        server.start()


def test_close_before_start_and_twice(stats: Stats) -> None:
    server = StatsServer(stats, port=0)
    server.close()
    server.close()


def test_close_stops_listening(stats: Stats) -> None:
    server = StatsServer(stats, port=0)
    server.start()
    port = tcp_port(server)
    server.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_close_is_prompt_with_idle_clients(stats: Stats) -> None:
    server = StatsServer(stats, port=0)
    server.start()
    port = tcp_port(server)
    # One client connected and silent, one mid-way through its request headers.
    silent = socket.create_connection(("127.0.0.1", port), timeout=2)
    partial = socket.create_connection(("127.0.0.1", port), timeout=2)
    partial.sendall(b"GET /stats/metrics HTTP/1.1\r\nHost: x\r\n")
    # A keep-alive client that completed a request; connections are accepted in order, so
    # once it is answered both clients above have their handler threads.
    keep_alive = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    keep_alive.request("GET", "/stats/metrics", headers={"Connection": "keep-alive"})
    keep_alive.getresponse().read()
    try:
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 0.5
    finally:
        silent.close()
        partial.close()
        keep_alive.close()


def cut_while_dripping(port: int, every: float) -> bool:
    """Send a request line, then a header line every `every` seconds, until the server cuts the
    connection (True) or 15 s have passed (False)."""
    deadline = time.monotonic() + 15
    with socket.create_connection(("127.0.0.1", port), timeout=every) as sock:
        sock.sendall(b"GET /stats/metrics HTTP/1.1\r\n")
        while time.monotonic() < deadline:
            try:
                if sock.recv(1024) == b"":
                    return True
            except TimeoutError:
                pass
            except OSError:
                return True
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                return True
    return False


def test_a_request_that_does_not_come_in_time_is_cut(
    stats: Stats, tcp_server: StatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its client never goes quiet for the handler's read timeout, but its headers never end.
    monkeypatch.setattr(server_module, "REQUEST_SECONDS", 0.5, raising=False)
    monkeypatch.setattr(server_module, "MAX_CONNECTION_SECONDS", 60.0)
    assert cut_while_dripping(tcp_port(tcp_server), every=0.2)
    # A request that came is answered as before.
    status, _, _ = fetch(http.client.HTTPConnection("127.0.0.1", tcp_port(tcp_server)), "/")
    assert status == 404


def test_held_connections_make_way_for_a_request_that_comes(tcp_server: StatsServer) -> None:
    port = tcp_port(tcp_server)
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CONNECTIONS * 2)]
    try:
        for sock in held:
            sock.sendall(b"GET /stats/metrics HTTP/1.1\r\n")  # and nothing more
        # Each scrape takes the place of the oldest connection still waiting for its request.
        for _ in range(3):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            assert fetch(conn, "/stats/metrics")[0] == 200
    finally:
        for sock in held:
            sock.close()


# --- unix socket server ---------------------------------------------------------------------


def test_v2_over_unix_socket(stats: Stats, sock_path: Path) -> None:
    stats.count(Outcome.ERRORED)
    with StatsServer(stats, socket_path=str(sock_path)) as server:
        assert server.address == f"unix:{sock_path}"
        status, headers, body = fetch(UnixHTTPConnection(sock_path), "/stats/metrics/v2")
        assert status == 200
        assert headers["Content-Type"] == "application/json"
        assert json.loads(body) == {
            "workers": {"busy": 0, "idle": 3},
            "invocations": {
                "succeeded": 0,
                "failed": 0,
                "errored": 1,
                "duplicates": 0,
                "timed_out": 0,
            },
        }
        status, _, body = fetch(UnixHTTPConnection(sock_path), "/stats/metrics")
        assert (status, body) == (200, b'{"idle_worker":3,"busy_worker":0}\n')


def test_close_removes_socket_file_and_is_idempotent(stats: Stats, sock_path: Path) -> None:
    server = StatsServer(stats, socket_path=str(sock_path))
    server.start()
    assert sock_path.is_socket()
    server.close()
    assert not sock_path.exists()
    server.close()


def test_stale_socket_file_is_replaced(stats: Stats, sock_path: Path) -> None:
    # A bound but never listening socket leaves exactly what a crashed daemon leaves.
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(sock_path))
    assert sock_path.is_socket()
    with StatsServer(stats, socket_path=str(sock_path)):
        status, _, _ = fetch(UnixHTTPConnection(sock_path), "/stats/metrics")
        assert status == 200
    assert not sock_path.exists()


def test_live_socket_is_refused(stats: Stats, sock_path: Path) -> None:
    with socket.socket(socket.AF_UNIX) as live:
        live.bind(str(sock_path))
        live.listen()
        server = StatsServer(stats, socket_path=str(sock_path))
        with pytest.raises(StatsServerError, match="another process is listening") as info:
            server.start()
        assert str(sock_path) in str(info.value)
        assert sock_path.is_socket()
        server.close()
        assert sock_path.is_socket()  # close() leaves a socket it did not create


def test_second_server_on_same_socket_is_refused(stats: Stats, sock_path: Path) -> None:
    with StatsServer(stats, socket_path=str(sock_path)):
        with pytest.raises(StatsServerError, match="another process is listening"):
            StatsServer(stats, socket_path=str(sock_path)).start()
        status, _, _ = fetch(UnixHTTPConnection(sock_path), "/stats/metrics")
        assert status == 200


def test_regular_file_at_socket_path_is_kept(stats: Stats, sock_path: Path) -> None:
    sock_path.write_text("not a socket")
    with pytest.raises(StatsServerError, match="not a socket"):
        StatsServer(stats, socket_path=str(sock_path)).start()
    assert sock_path.read_text() == "not a socket"


def test_missing_socket_directory(stats: Stats, sock_path: Path) -> None:
    missing = sock_path.parent / "nope" / "stats.sock"
    with pytest.raises(StatsServerError, match="does not exist") as info:
        StatsServer(stats, socket_path=str(missing)).start()
    assert str(missing) in str(info.value)


def test_close_is_prompt_with_idle_unix_client(stats: Stats, sock_path: Path) -> None:
    server = StatsServer(stats, socket_path=str(sock_path))
    server.start()
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(str(sock_path))
    fetch(UnixHTTPConnection(sock_path), "/stats/metrics")
    try:
        started = time.monotonic()
        server.close()
        assert time.monotonic() - started < 0.5
        assert not sock_path.exists()
    finally:
        silent.close()
