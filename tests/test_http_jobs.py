"""HTTP jobs: the call's contract and allow list, the runner against a real HTTP server on
127.0.0.1, and the real daemon (a subprocess against moto) running them end to end.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sqsjkr import __version__
from sqsjkr.backends.history import DynamoHistory
from sqsjkr.backends.live import MemoryLive
from sqsjkr.contract.config import HttpConfig, parse_config
from sqsjkr.contract.http_call import LOOPBACK, allowed, parse_http
from sqsjkr.contract.job import Job, parse_job
from sqsjkr.contract.run import RunContext, RunOutcome, RunRecord
from sqsjkr.daemon.http_runner import HttpRunner, Runners
from sqsjkr.daemon.live import LiveTails, LiveWriter
from sqsjkr.daemon.runner import RunResult, ShellRunner, StopReason, StopSwitch
from sqsjkr.errors import ConfigError, InvalidJobError

from .conftest import (
    Aws,
    Cli,
    Daemon,
    Result,
    Start,
    config_text,
    counted,
    free_port,
    run_on,
    wait_until,
)
from .faults import reply

# --- a service to call ---------------------------------------------------------------------------

#: What /huge says it will send: far more than any runner may read.
HUGE_BYTES = 1 << 30
FAIL_BODY = "first line\n" + "y" * 3000 + "\nthe-end\n"


@dataclass(frozen=True)
class Seen:
    """One request the service got."""

    method: str
    path: str
    headers: Message
    body: bytes


class Service:
    """An HTTP server on 127.0.0.1 whose answer depends on the last part of the path."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[Seen] = []
        self.release = threading.Event()  # ends every /slow call still waiting
        self.huge_written: int | None = None  # bytes /huge wrote before its client went away
        service = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: calls reuse pooled connections

            def do_GET(self) -> None:
                self.answer()

            def do_POST(self) -> None:
                self.answer()

            def do_PUT(self) -> None:
                self.answer()

            def answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                service.seen.append(Seen(self.command, self.path, self.headers, body))
                service.route(self, self.path.rsplit("/", 1)[-1], body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.scheme = "http"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,))
        self._thread.start()

    def url(self, path: str) -> str:
        host = "localhost" if self.scheme == "https" else "127.0.0.1"  # the certificate's name
        return f"{self.scheme}://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [seen.path for seen in self.seen]

    def route(self, handler: BaseHTTPRequestHandler, name: str, body: bytes) -> None:
        if name == "slow":
            self.release.wait(60)
            reply(handler, 200, b"late")
        elif name == "fail":
            reply(handler, 500, FAIL_BODY.encode())
        elif name == "missing":
            reply(handler, 404, b"not here")
        elif name == "redirect":
            reply(handler, 302, b"", {"Location": self.url("/ok")})
        elif name == "huge":
            self.huge_written = self._endless(handler)
        elif name == "stream":  # half the body, then the rest once released
            handler.send_response(200)
            handler.send_header("Content-Length", "14")
            handler.end_headers()
            handler.wfile.write(b"part 1\n")
            handler.wfile.flush()
            self.release.wait(60)
            handler.wfile.write(b"part 2\n")
        else:
            reply(handler, 200, b"done: " + body)

    @staticmethod
    def _endless(handler: BaseHTTPRequestHandler) -> int:
        handler.send_response(200)
        handler.send_header("Content-Length", str(HUGE_BYTES))
        handler.end_headers()
        written = 0
        chunk = b"z" * 65536
        try:
            while written < HUGE_BYTES:
                handler.wfile.write(chunk)
                written += len(chunk)
        except OSError:
            handler.close_connection = True
        return written

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()


@pytest.fixture
def service() -> Iterator[Service]:
    server = Service()
    yield server
    server.close()


@pytest.fixture
def tls_service(tmp_path: Path) -> Iterator[tuple[Service, Path]]:
    """A service over HTTPS with a certificate of its own for localhost; (it, the cert file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.now(timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    server = Service(tls=context)
    yield server, cert_file
    server.close()


@pytest.fixture
def runner() -> Iterator[HttpRunner]:
    http = HttpRunner(tail_bytes=1000)
    yield http
    http.close()


def http_job(url: str, **call: Any) -> Job:
    body = json.dumps({"http": {"url": url, **call}, "event_id": "poke"})
    return parse_job(body, message_id="m-1", sent_at=1_700_000_000.25)


CONTEXT = RunContext("poke", "m-1", 1_700_000_000.25, 2, "batch-7")


def call_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sqsjkr-http"]


def stopped_while_waiting(
    runner: HttpRunner, service: Service, reason: StopReason = StopReason.CANCELLED
) -> RunResult:
    """A call to /slow, stopped by the daemon (CANCELLED) or a kill while it waits for the
    answer."""
    stop = StopSwitch()
    results: list[RunResult] = []
    job = http_job(service.url("/slow"))
    calling = threading.Thread(
        target=lambda: results.append(runner.run(job, timeout=None, stop=stop))
    )
    calling.start()
    wait_until(lambda: "/slow" in service.paths(), what="the slow call to arrive")
    stop.trip(reason)
    calling.join(20)  # the service would answer only at the test's end
    assert not calling.is_alive(), "the stopped call still runs"
    return results[0]


# --- the contract: parse_http and allowed() -----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "prefix", "expected"),
    [
        ("http://localhost/run", "http://localhost/", True),
        ("http://localhost:8080/run", "http://localhost/", True),  # no port: any port
        ("http://localhost.evil.com/run", "http://localhost/", False),
        ("http://localhost@evil.com/", "http://localhost/", False),  # userinfo, host evil.com
        ("http://evil.com/?http://localhost/", "http://localhost/", False),
        ("https://localhost/", "http://localhost/", False),  # another scheme
        ("http://10.0.0.5:8080/jobs/a", "http://10.0.0.5:8080/jobs/", True),
        ("http://10.0.0.5:8081/jobs/a", "http://10.0.0.5:8080/jobs/", False),
        ("http://10.0.0.5/jobs/a", "http://10.0.0.5:8080/jobs/", False),
        ("http://10.0.0.5:8080/admin", "http://10.0.0.5:8080/jobs/", False),
        ("http://10.0.0.5:8080/jobs", "http://10.0.0.5:8080/jobs/", False),
        ("http://LOCALHOST/x", "http://localhost/", True),  # host names have no case
        ("http://[::1]:9000/x", "http://[::1]/", True),
    ],
)
def test_allowed_compares_scheme_host_port_and_path(url: str, prefix: str, expected: bool) -> None:
    assert allowed(url, [prefix]) is expected


def test_the_default_allows_loopback_only() -> None:
    assert allowed("http://127.0.0.1:9/x", LOOPBACK)
    assert allowed("http://localhost/x", LOOPBACK)
    assert not allowed("http://169.254.169.254/latest/meta-data/", LOOPBACK)
    assert not allowed("http://127.0.0.2/", LOOPBACK)


def test_parse_http_fills_defaults_and_reads_every_field() -> None:
    call = parse_http({"url": "http://localhost/"}, LOOPBACK)
    assert (call.method, dict(call.headers), call.body, call.timeout) == ("POST", {}, None, None)
    assert call.succeeded(204) and not call.succeeded(301) and not call.succeeded(500)
    full = parse_http(
        {
            "url": "http://localhost/x",
            "method": "put",
            "headers": {"Authorization": "Bearer t"},
            "body": "{}",
            "timeout": "1m",
            "success_status": [404, 200],
        },
        LOOPBACK,
    )
    assert (
        full.method == "PUT" and full.body == "{}" and full.headers == {"Authorization": "Bearer t"}
    )
    assert full.timeout is not None and full.timeout.seconds == 60
    assert full.succeeded(404) and full.succeeded(200) and not full.succeeded(201)


@pytest.mark.parametrize(
    ("value", "field", "problem"),
    [
        ({"url": "http://example.com/"}, "http.url", "under no [http] allow prefix"),
        ({"url": "ftp://localhost/"}, "http.url", "http:// or https://"),
        ({"url": "http://localhost/", "method": "TRACE"}, "http.method", "must be one of"),
        (
            {"url": "http://localhost/", "headers": {"A": "b\r\nX-Evil: 1"}},
            "http.headers.A",
            "line",
        ),
        ({"url": "http://localhost/", "success_status": []}, "http.success_status", "non-empty"),
        ({"url": "http://localhost/", "success_status": [99]}, "http.success_status", "100-599"),
        ({"url": "http://localhost/", "timeout": "soon"}, "http.timeout", ""),
    ],
)
def test_parse_http_names_the_field_at_fault(value: Any, field: str, problem: str) -> None:
    with pytest.raises(InvalidJobError) as caught:
        parse_http(value, LOOPBACK)
    assert field in str(caught.value) and problem in str(caught.value)


def test_a_message_gives_command_or_http_not_both() -> None:
    body = json.dumps({"command": "true", "http": {"url": "http://localhost/"}})
    with pytest.raises(InvalidJobError, match="either"):
        parse_job(body, message_id="m", sent_at=0.0)


# --- [http] allow in the config ------------------------------------------------------------------

BASE = '[account]\nid = "1"\nregion = "r"\n[sqs]\nqueue_name = "q"\n'


def test_http_allow_defaults_to_loopback_and_takes_prefixes() -> None:
    assert parse_config(BASE).http == HttpConfig(allow=LOOPBACK)
    text = BASE + '[http]\nallow = ["https://hooks.internal:8443/jobs/", "http://10.0.0.5/"]\n'
    assert parse_config(text).http.allow == (
        "https://hooks.internal:8443/jobs/",
        "http://10.0.0.5/",
    )
    assert parse_config(BASE + "[http]\nallow = []\n").http.allow == ()


@pytest.mark.parametrize(
    ("allow", "problem"),
    [
        ('"http://localhost/"', "must be an array of strings"),
        ('["localhost"]', "item 0 must be an http:// or https:// URL with a host"),
        ('["http://ok/", "ftp://files/"]', "item 1 must be an http:// or https:// URL"),
        ('["http://h:99999/"]', "item 0 must be an http:// or https:// URL"),
        ('["http:///path"]', "item 0 must be an http:// or https:// URL with a host"),
        ('["http://h/?token=1"]', "item 0 must not have a query"),
        ('[""]', "item 0 must be a non-empty string"),
    ],
)
def test_a_bad_http_allow_is_a_config_error_naming_it(allow: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=r"\[http\] allow") as caught:
        parse_config(BASE + f"[http]\nallow = {allow}\n")
    assert problem in str(caught.value)


# --- the runner, against a real server ------------------------------------------------------------


def test_a_2xx_succeeds_with_the_body_and_the_run_headers(
    service: Service, runner: HttpRunner
) -> None:
    job = http_job(
        service.url("/hook/ok?x=1"),
        method="PUT",
        body="héllo",
        headers={"X-Team": "ops", "x-sqsjkr-attempt": "99", "X-Sqsjkr-Forged": "yes"},
    )
    result = runner.run(job, timeout=None, stop=StopSwitch(), context=CONTEXT)
    assert (result.exit_code, result.stopped, result.start_error) == (0, None, None)
    assert result.ok
    assert result.output.merged == result.output.stdout == "done: héllo"
    assert result.output.stderr == ""
    [seen] = service.seen
    assert (seen.method, seen.path, seen.body) == ("PUT", "/hook/ok?x=1", "héllo".encode())
    assert seen.headers["X-Team"] == "ops"
    assert seen.headers["User-Agent"] == f"sqsjkr/{__version__}"
    # The run's own headers, and only those: the message's try at one is overridden.
    assert seen.headers.get_all("X-Sqsjkr-Attempt") == ["2"]
    assert seen.headers["X-Sqsjkr-Event-Id"] == "poke"
    assert seen.headers["X-Sqsjkr-Message-Id"] == "m-1"
    assert seen.headers["X-Sqsjkr-Scheduled-At"] == "2023-11-14T22:13:20.250Z"
    assert seen.headers["X-Sqsjkr-Host"] == "batch-7"
    assert "X-Sqsjkr-Forged" not in seen.headers


def test_an_event_id_a_header_cannot_carry_is_sent_percent_encoded(
    service: Service, runner: HttpRunner
) -> None:
    """Before, a call whose event_id held "日本" or a line break could never be made."""
    event_id = "nightly 日本\n100%"
    context = RunContext(event_id, "m-1", 1_700_000_000.25, 1, "batch-7")
    result = runner.run(
        http_job(service.url("/ok")), timeout=None, stop=StopSwitch(), context=context
    )
    assert (result.exit_code, result.start_error) == (0, None)
    [seen] = service.seen
    assert seen.headers["X-Sqsjkr-Event-Id"] == "nightly%20%E6%97%A5%E6%9C%AC%0A100%25"
    assert unquote(seen.headers["X-Sqsjkr-Event-Id"]) == event_id


def test_a_500_errs_with_its_status_and_the_tail_of_its_body(
    service: Service, runner: HttpRunner
) -> None:
    result = runner.run(http_job(service.url("/fail")), timeout=None, stop=StopSwitch())
    assert (result.exit_code, result.stopped, result.start_error) == (500, None, None)
    assert not result.ok
    assert result.output.merged == FAIL_BODY[-1000:]


def test_success_status_decides_what_succeeds(service: Service, runner: HttpRunner) -> None:
    gone = http_job(service.url("/missing"), success_status=[404])
    assert runner.run(gone, timeout=None, stop=StopSwitch()).exit_code == 0
    ok_but_unlisted = http_job(service.url("/ok"), success_status=[404])
    assert runner.run(ok_but_unlisted, timeout=None, stop=StopSwitch()).exit_code == 200
    assert (
        runner.run(http_job(service.url("/missing")), timeout=None, stop=StopSwitch()).exit_code
        == 404
    )


def test_a_redirect_is_the_answer_and_is_not_followed(service: Service, runner: HttpRunner) -> None:
    result = runner.run(http_job(service.url("/redirect")), timeout=None, stop=StopSwitch())
    assert result.exit_code == 302
    assert service.paths() == ["/redirect"]  # /ok, where it pointed, was never called


def test_the_calls_own_timeout_wins_over_the_jobs(service: Service, runner: HttpRunner) -> None:
    job = http_job(service.url("/slow"), timeout="300ms")
    result = runner.run(job, timeout=3600.0, stop=StopSwitch())
    assert result.stopped is StopReason.TIMED_OUT and not result.ok
    assert result.start_error is None
    assert call_threads() == []


def test_the_jobs_timeout_applies_without_the_calls_own(
    service: Service, runner: HttpRunner
) -> None:
    result = runner.run(http_job(service.url("/slow")), timeout=0.3, stop=StopSwitch())
    assert result.stopped is StopReason.TIMED_OUT
    assert call_threads() == []


def test_a_stop_abandons_a_slow_call_at_once_and_the_pool_still_works(
    service: Service, runner: HttpRunner
) -> None:
    # A kept-alive connection first: the stopped call goes over a reused one.
    assert runner.run(http_job(service.url("/ok")), timeout=None, stop=StopSwitch()).ok
    result = stopped_while_waiting(runner, service)
    assert result.stopped is StopReason.CANCELLED and result.start_error is None
    assert call_threads() == []
    again = runner.run(http_job(service.url("/ok")), timeout=None, stop=StopSwitch())
    assert again.ok and again.output.merged == "done: "


def test_a_stop_before_the_call_connects_makes_no_call(
    service: Service, runner: HttpRunner
) -> None:
    stop = StopSwitch()
    stop.trip(StopReason.CANCELLED)
    result = runner.run(http_job(service.url("/ok")), timeout=None, stop=stop)
    assert result.stopped is StopReason.CANCELLED
    assert service.seen == []


def test_a_refused_connection_fails_to_start(runner: HttpRunner) -> None:
    port = free_port()  # bound and closed again: nothing listens there
    result = runner.run(
        http_job(f"http://127.0.0.1:{port}/x?token=secret"), timeout=None, stop=StopSwitch()
    )
    assert result.start_error == f"could not connect to http://127.0.0.1:{port}: Connection refused"
    assert result.stopped is None and not result.ok


def test_a_header_http_cannot_carry_fails_to_start(service: Service, runner: HttpRunner) -> None:
    job = http_job(service.url("/ok"), headers={"Bad:Name": "x"})
    result = runner.run(job, timeout=None, stop=StopSwitch())
    assert result.start_error is not None and "cannot be made" in result.start_error
    assert service.seen == []


def test_https_checks_the_certificate_and_a_stop_cuts_a_tls_call_short(
    tls_service: tuple[Service, Path], runner: HttpRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, cert_file = tls_service
    untrusted = runner.run(http_job(service.url("/ok")), timeout=None, stop=StopSwitch())
    assert untrusted.start_error is not None
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.start_error
    # Trusted as a system certificate would be (OpenSSL reads SSL_CERT_FILE for each context).
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))
    assert runner.run(http_job(service.url("/ok")), timeout=None, stop=StopSwitch()).ok
    assert stopped_while_waiting(runner, service).stopped is StopReason.CANCELLED
    assert call_threads() == []


def test_a_huge_answer_is_read_only_so_far(service: Service) -> None:
    runner = HttpRunner(tail_bytes=1000)
    try:
        result = runner.run(http_job(service.url("/huge")), timeout=None, stop=StopSwitch())
    finally:
        runner.close()
    assert result.exit_code == 0
    assert result.output.merged == "z" * 1000
    # The connection was closed after a few reads: the service's writes failed long before
    # the gigabyte it announced (what the kernel's buffers took is all that went out).
    written = wait_until(lambda: service.huge_written, what="the service to stop writing")
    assert written < HUGE_BYTES // 8


def test_the_body_read_so_far_is_the_calls_live_output(service: Service) -> None:
    store, tails = MemoryLive(), LiveTails(0.02)
    http = HttpRunner(tail_bytes=100, live=tails)
    results: list[RunResult] = []
    job = http_job(service.url("/stream"))
    calling = threading.Thread(
        target=lambda: results.append(http.run(job, timeout=30, stop=StopSwitch()))
    )
    with LiveWriter(store, tails):
        calling.start()
        wait_until(lambda: store.read("poke", "m-1"), what="the live output of the call")
        found = store.read("poke", "m-1")
        assert found is not None and (found.output, found.printed) == ("part 1\n", 7)
        service.release.set()
        calling.join()
    http.close()
    assert results[0].ok and results[0].output.merged == "part 1\npart 2\n"
    assert results[0].output.merged_bytes == 14


def test_runners_send_each_job_to_its_own_runner(
    service: Service, runner: HttpRunner, tmp_path: Path
) -> None:
    runners = Runners(ShellRunner(tail_bytes=100), runner)
    shell = Job(message_id="m-2", command="echo $SQSJKR_ATTEMPT")
    assert (
        runners.run(shell, timeout=None, stop=StopSwitch(), context=CONTEXT).output.merged == "2\n"
    )
    call = runners.run(
        http_job(service.url("/ok")), timeout=None, stop=StopSwitch(), context=CONTEXT
    )
    assert call.ok and service.seen[0].headers["X-Sqsjkr-Attempt"] == "2"


# --- the daemon, end to end -----------------------------------------------------------------------


def start_with_http(
    start: Start, tmp_path: Path, aws: Aws, extra: str = "", **kicker: Any
) -> tuple[Daemon, int]:
    """The daemon on a config for aws plus extra sections, keeping 1000 bytes of output."""
    text = config_text(aws, stats="stats_port = 0", **kicker)
    daemon = run_on(start, tmp_path, text + "\n[history]\noutput_tail = 1000\n" + extra)
    return daemon, daemon.stats_port


def runs(aws: Aws, event_id: str) -> list[RunRecord]:
    return DynamoHistory(aws.dynamodb, aws.table, retention_seconds=1).runs(event_id, 10)


def test_the_daemon_runs_http_jobs_and_records_status_and_body(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service
) -> None:
    daemon, port = start_with_http(start_daemon, tmp_path, aws)
    aws.send({"http": {"url": service.url("/ok"), "body": "go"}, "event_id": "ok"})
    aws.send({"http": {"url": service.url("/fail")}, "event_id": "fail"})
    aws.send(
        {"http": {"url": service.url("/missing"), "success_status": [404]}, "event_id": "gone"}
    )
    aws.send({"http": {"url": service.url("/redirect"), "method": "GET"}, "event_id": "moved"})
    aws.send({"http": {"url": service.url("/slow")}, "event_id": "slow", "timeout": "1s"})
    # Not on loopback, so not under the default [http] allow: refused as malformed.
    metadata = aws.send({"http": {"url": "http://169.254.169.254/latest/meta-data/"}})
    wait_until(counted(port, succeeded=2, errored=3, timed_out=1, failed=1), what="all ended")
    daemon.wait_for_log(f"invalid message {metadata} deleted")
    assert daemon.stop() == 0
    [ok] = runs(aws, "ok")
    assert (ok.outcome, ok.exit_code, ok.output) == (RunOutcome.SUCCEEDED, 0, "done: go")
    [fail] = runs(aws, "fail")
    assert (fail.outcome, fail.exit_code) == (RunOutcome.ERRORED, 500)
    assert fail.output == FAIL_BODY[-1000:] and fail.stderr == ""
    assert runs(aws, "gone")[0].outcome is RunOutcome.SUCCEEDED
    [moved] = runs(aws, "moved")
    assert (moved.outcome, moved.exit_code) == (RunOutcome.ERRORED, 302)
    assert runs(aws, "slow")[0].outcome is RunOutcome.TIMED_OUT
    assert sorted(service.paths()) == ["/fail", "/missing", "/ok", "/redirect", "/slow"]
    assert aws.queue_counts() == (0, 0)


def test_a_call_that_reaches_its_own_http_timeout_timed_out_and_is_retried_as_asked(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service
) -> None:
    """http.timeout, not the job's timeout, limits the call: the run is timed_out, recorded,
    counted and its message deleted; with retries, it runs again and then ends for good."""
    daemon, port = start_with_http(start_daemon, tmp_path, aws)
    slow = {"url": service.url("/slow"), "timeout": "1s"}
    aws.send({"http": slow, "event_id": "once"})
    aws.send({"http": slow, "event_id": "twice", "retries": 1, "retry_delay": "0s"})
    wait_until(counted(port, timed_out=3), timeout=30, what="three calls timed out")
    assert daemon.stop() == 0
    [once] = runs(aws, "once")
    assert (once.outcome, once.final, once.error) == (
        RunOutcome.TIMED_OUT,
        True,
        "timed out after 1s",
    )
    twice = sorted(runs(aws, "twice"), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.final) for r in twice] == [
        (1, RunOutcome.TIMED_OUT, False),
        (2, RunOutcome.TIMED_OUT, True),
    ]
    assert "timed out after 1.0s (timeout 1s)" in daemon.log
    assert "Traceback" not in daemon.log and "Logging error" not in daemon.log
    assert service.paths() == ["/slow"] * 3
    assert aws.queue_counts() == (0, 0)


def test_a_url_outside_the_allow_list_is_malformed_and_never_called(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service
) -> None:
    allow = f'\n[http]\nallow = ["{service.url("/jobs/")}"]\n'
    daemon, port = start_with_http(start_daemon, tmp_path, aws, allow)
    outside = aws.send({"http": {"url": service.url("/admin/ok")}, "event_id": "outside"})
    # Loopback, which the default would allow: this daemon's list does not.
    other_port = aws.send({"http": {"url": f"http://127.0.0.1:{free_port()}/jobs/ok"}})
    aws.send({"http": {"url": service.url("/jobs/ok")}, "event_id": "inside"})
    wait_until(counted(port, succeeded=1, failed=2), what="one call, two refused")
    for message_id in (outside, other_port):
        daemon.wait_for_log(f"invalid message {message_id} deleted")
    assert "is under no [http] allow prefix" in daemon.log
    assert daemon.stop() == 0
    assert service.paths() == ["/jobs/ok"]
    assert runs(aws, "outside") == []
    assert aws.queue_counts() == (0, 0)


def test_a_shutdown_stops_a_slow_call_and_gives_its_message_back(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service
) -> None:
    daemon, _ = start_with_http(start_daemon, tmp_path, aws, shutdown_timeout="0s")
    aws.send({"http": {"url": service.url("/slow")}, "event_id": "long"})
    wait_until(lambda: service.paths() == ["/slow"], what="the call to arrive")
    assert daemon.stop() == 0  # the service answers only at the test's end
    [record] = runs(aws, "long")
    assert record.outcome is RunOutcome.STOPPED and not record.final
    assert "stopped: abandoning the call" in daemon.log
    assert aws.queue_counts() == (1, 0)  # visible again, to run elsewhere


def test_a_call_that_cannot_connect_is_retried(
    start_daemon: Start, tmp_path: Path, aws: Aws
) -> None:
    """Unlike a command that cannot start, a refused call may succeed once its service is back."""
    daemon, port = start_with_http(start_daemon, tmp_path, aws)
    url = f"http://127.0.0.1:{free_port()}/down"
    aws.send({"http": {"url": url}, "event_id": "down", "retries": 1, "retry_delay": "0s"})
    wait_until(counted(port, failed=2), what="the first call and its retry refused")
    assert daemon.stop() == 0
    records = sorted(runs(aws, "down"), key=lambda r: r.attempt)
    assert [(r.attempt, r.outcome, r.final) for r in records] == [
        (1, RunOutcome.FAILED_TO_START, False),
        (2, RunOutcome.FAILED_TO_START, True),
    ]
    assert aws.queue_counts() == (0, 0)


def test_the_daemon_sends_the_run_headers(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service
) -> None:
    daemon, port = start_with_http(start_daemon, tmp_path, aws)
    message_id = aws.send({"http": {"url": service.url("/ok")}, "event_id": "hdr"})
    wait_until(counted(port, succeeded=1), what="the call")
    assert daemon.stop() == 0
    headers = service.seen[0].headers
    assert headers["X-Sqsjkr-Event-Id"] == "hdr"
    assert headers["X-Sqsjkr-Message-Id"] == message_id
    assert headers["X-Sqsjkr-Attempt"] == "1"
    assert headers["X-Sqsjkr-Host"] == socket.gethostname()
    assert headers["X-Sqsjkr-Scheduled-At"].endswith("Z")


def test_send_checks_the_url_against_its_configs_allow_list(
    tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    conf = tmp_path / "config.toml"
    allowed_prefix = "http://127.0.0.1:9/jobs/"
    conf.write_text(
        config_text(aws, stats="stats_port = 0") + f'[http]\nallow = ["{allowed_prefix}"]\n'
    )

    def send(*args: str) -> Result:
        return cli("send", "-c", str(conf), *args)

    # Loopback, which the default allows: this config does not.
    refused = send("--http-url", "http://127.0.0.1:9/admin")
    assert refused.returncode == 2
    assert "invalid job, nothing sent" in refused.stderr and "[http] allow" in refused.stderr
    assert aws.queue_counts() == (0, 0)
    sent = send(
        "--http-url", allowed_prefix + "run", "--http-method", "put",
        "--http-header", "X-Team=ops", "--http-body", "{}", "--event-id", "ev",
    )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    [message] = aws.sqs.receive_message(QueueUrl=aws.queue_url)["Messages"]
    assert json.loads(message["Body"]) == {
        "origin": "send",
        "http": {
            "url": allowed_prefix + "run",
            "method": "put",
            "headers": {"X-Team": "ops"},
            "body": "{}",
        },
        "event_id": "ev",
    }


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--http-method", "GET"], "needs --http-url"),
        (
            ["--http-url", "http://127.0.0.1/", "--command", "true"],
            "either --command or --http-url",
        ),
        (["--http-url", "http://127.0.0.1/", "--http-header", "NoValue"], "expected KEY=VALUE"),
    ],
)
def test_send_refuses_http_options_that_do_not_fit(
    tmp_path: Path, aws: Aws, args: list[str], problem: str, cli: Cli
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 0"))
    result = cli("send", "-c", str(conf), *args)
    assert result.returncode == 2 and problem in result.stderr
    assert aws.queue_counts() == (0, 0)


def told_once(path: Path) -> bool:
    """Whether a reporter has written its whole JSON document to path."""
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def test_a_call_is_named_by_its_origin_wherever_it_leaves_the_daemon(
    start_daemon: Start, tmp_path: Path, aws: Aws, service: Service, cli: Cli
) -> None:
    """Its path or query may hold a token: not in the log, the run record, the noticers' and
    reporters' JSON, the webhook, nor status and history."""
    noticed, reported = tmp_path / "noticed.json", tmp_path / "reported.json"
    report = (
        "\n[report]\n"
        f"reporters = [\"cat > '{reported}'\"]\n"
        f"noticers = [\"cat > '{noticed}'\"]\n"
        f'webhook_url = "{service.url("/hook")}"\n'
    )
    daemon, port = start_with_http(start_daemon, tmp_path, aws, report)
    aws.send({"http": {"url": service.url("/q?token=SECRET")}, "event_id": "tok"})
    wait_until(counted(port, succeeded=1), what="the call")
    wait_until(lambda: "/hook" in service.paths(), what="the webhook")
    for path in (noticed, reported):
        wait_until(lambda path=path: told_once(path), what=f"{path.name} written")
    assert daemon.stop() == 0
    named = f"POST http://127.0.0.1:{service.port}"
    [ended] = [line for line in daemon.log.splitlines() if " succeeded in " in line]
    assert ended.endswith(f": {named}")
    [record] = runs(aws, "tok")
    assert record.command == named
    told = noticed.read_text() + reported.read_text()
    assert json.loads(noticed.read_text())["command"] == named
    assert json.loads(reported.read_text())["command"] == named
    [hook] = [seen for seen in service.seen if seen.path == "/hook"]
    assert json.loads(hook.body)["command"] == named
    conf = daemon.conf
    commands = (["status"], ["status", "--json"], ["history", "tok"], ["history", "tok", "--json"])
    shown = [cli(*args, "-c", conf) for args in commands]
    assert all(result.returncode == 0 for result in shown), [r.stderr for r in shown]
    assert named in shown[3].stdout
    leaked = [
        where
        for where, text in [
            ("log", daemon.log),
            ("reporters", told),
            ("webhook", hook.body.decode()),
            *(
                (" ".join(args), r.stdout + r.stderr)
                for args, r in zip(commands, shown, strict=True)
            ),
        ]
        if "SECRET" in text or "/q" in text
    ]
    assert leaked == []
