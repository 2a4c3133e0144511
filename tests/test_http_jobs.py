"""HTTP jobs: the call's contract and the [http] allow list of the config.

The runner and the daemon come with them.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sqsjkr.contract.config import HttpConfig, parse_config
from sqsjkr.contract.http_call import LOOPBACK, allowed, parse_http
from sqsjkr.contract.job import parse_job
from sqsjkr.errors import ConfigError, InvalidJobError

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
