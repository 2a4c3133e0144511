"""Tests of sqsjkr.config: templates, defaults, validation, overrides and the example file.

Error cases check that the message names the file and the field: that is what an operator reads.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from pathlib import Path

import pytest

from sqsjkr.contract.config import (
    DEFAULT_CONFIG_PATH,
    AccountConfig,
    Config,
    DedupeConfig,
    HistoryConfig,
    HttpConfig,
    KickerConfig,
    LockConfig,
    LogConfig,
    Overrides,
    ReportConfig,
    ScheduleConfig,
    SqsConfig,
    load_config,
    parse_config,
)
from sqsjkr.contract.duration import Duration, duration_value
from sqsjkr.contract.template import render_template
from sqsjkr.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

EXAMPLE = Path(__file__).resolve().parents[1] / "config.example.toml"

# The config file of the Go sqsjkr README.
GO_CONFIG = """\
[account]
id = "123456789012"
region = "ap-northeast-1"

[sqs]
queue_name = "sqsjkr-jobs"

[kicker]
max_concurrent_num = 5
life_time_trigger = "echo 'trigger' >> /tmp/trigger.log"
stats_port = 8062
"""

MINIMAL = """\
[account]
id = "012345678901"
region = "us-east-1"
[sqs]
queue_name = "q"
"""


def parse(text: str, **kwargs: object) -> Config:
    kwargs.setdefault("source", "/etc/sqsjkr/test.toml")
    kwargs.setdefault("env", {})
    return parse_config(text, **kwargs)  # type: ignore[arg-type]


def error_of(text: str, **kwargs: object) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, **kwargs)
    message = str(info.value)
    assert message.startswith("config /etc/sqsjkr/test.toml: "), message
    return message


def with_section(section: str, body: str) -> str:
    """MINIMAL with lines added to a section (created when missing), replacing its same keys."""
    text = MINIMAL
    for line in body.splitlines():
        key = line.split("=")[0].strip()
        text = re.sub(rf"^{key} = .*\n", "", text, flags=re.MULTILINE)
    header = f"[{section}]\n"
    if header in text:
        return text.replace(header, header + body + "\n")
    return text + header + body + "\n"


# --- happy paths -----------------------------------------------------------------------------


def test_default_path() -> None:
    assert DEFAULT_CONFIG_PATH == "/etc/sqsjkr/config.toml"


def test_go_format_file() -> None:
    config = parse(GO_CONFIG)
    assert config.account == AccountConfig(id="123456789012", region="ap-northeast-1")
    assert config.sqs == SqsConfig(queue_name="sqsjkr-jobs")
    assert config.kicker == KickerConfig(
        max_concurrent_num=5,
        life_time_trigger="echo 'trigger' >> /tmp/trigger.log",
        stats_port=8062,
    )


def test_all_defaults() -> None:
    config = parse(MINIMAL)
    assert config == Config(
        account=AccountConfig(id="012345678901", region="us-east-1", profile=None),
        sqs=SqsConfig(queue_name="q", wait_time_seconds=20, visibility_timeout=None),
        kicker=KickerConfig(
            max_concurrent_num=20,
            life_time_trigger=None,
            stats_port=8061,
            stats_socket=None,
            stats_host="127.0.0.1",
            delete_message="on_finish",
            shutdown_timeout=None,
            job_timeout=None,
            kill_grace=Duration.of_seconds(10),
        ),
        lock=LockConfig(
            backend="dynamodb",
            table="sqsjkr",
            retry_interval=Duration.of_seconds(5),
            lease=Duration.of_seconds(60),
        ),
        dedupe=DedupeConfig(backend="dynamodb"),
    )


def test_every_key_set() -> None:
    text = """\
[account]
id = "1"
region = "r"
profile = "p"
[sqs]
queue_name = "q"
wait_time_seconds = 0
visibility_timeout = 43200
[kicker]
max_concurrent_num = 1
life_time_trigger = "t"
stats_port = 0
stats_host = "0.0.0.0"
delete_message = "on_receive"
shutdown_timeout = "0s"
job_timeout = 3600
kill_grace = "2s"
[lock]
backend = "none"
table = "locks"
retry_interval = "1m30s"
lease = "5m"
[dedupe]
backend = "none"
"""
    config = parse(text)
    assert config.account.profile == "p"
    assert config.sqs == SqsConfig("q", 0, 43200)
    assert config.kicker == KickerConfig(
        1,
        "t",
        0,
        None,
        "0.0.0.0",
        "on_receive",
        Duration(0),
        Duration.of_seconds(3600),
        Duration.of_seconds(2),
    )
    assert config.lock == LockConfig(
        "none", "locks", Duration.of_seconds(90), Duration.of_seconds(300)
    )
    assert config.dedupe == DedupeConfig("none")


@pytest.mark.parametrize("key", ["profile", "life_time_trigger", "stats_socket"])
def test_empty_string_means_unset(key: str) -> None:
    section = "account" if key == "profile" else "kicker"
    config = parse(with_section(section, f'{key} = ""'))
    assert getattr(getattr(config, section), key) is None
    assert config.kicker.stats_port == 8061


@pytest.mark.parametrize(("value", "seconds"), [("2", 2), ('"250ms"', 0.25), ('"1h"', 3600)])
def test_retry_interval_forms(value: str, seconds: float) -> None:
    config = parse(with_section("lock", f"retry_interval = {value}"))
    assert config.lock.retry_interval.seconds == seconds


def test_config_is_frozen() -> None:
    config = parse(MINIMAL)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.sqs.queue_name = "other"  # type: ignore[misc]


# --- templates -------------------------------------------------------------------------------


def test_must_env() -> None:
    text = MINIMAL.replace('"012345678901"', '"{{ must_env "SQSJKR_ACCOUNT_ID" }}"')
    config = parse(text, env={"SQSJKR_ACCOUNT_ID": "000011112222"})
    assert config.account.id == "000011112222"


def test_must_env_unset_names_variable_and_file() -> None:
    text = MINIMAL.replace('"012345678901"', '"{{ must_env "SQSJKR_ACCOUNT_ID" }}"')
    message = error_of(text)
    assert "SQSJKR_ACCOUNT_ID" in message
    assert "line 2" in message


def test_must_env_set_but_empty_is_defined() -> None:
    # As in go-config (os.LookupEnv): set-but-empty is defined; the empty id then fails.
    text = MINIMAL.replace('"012345678901"', '"{{ must_env "ID" }}"')
    message = error_of(text, env={"ID": ""})
    assert "[account] id must not be empty" in message


def test_env_with_default() -> None:
    text = MINIMAL.replace('"us-east-1"', '"{{ env "AWS_REGION" "eu-west-1" }}"')
    assert parse(text).account.region == "eu-west-1"
    assert parse(text, env={"AWS_REGION": "ap-south-1"}).account.region == "ap-south-1"
    # go-config falls back to the default when the variable is set but empty.
    assert parse(text, env={"AWS_REGION": ""}).account.region == "eu-west-1"


def test_env_without_default_is_empty() -> None:
    assert render_template('a = "{{ env "NOPE" }}"', {}) == 'a = ""'
    assert render_template('a = "{{env "X"}}"', {"X": "x"}) == 'a = "x"'


def test_env_defaults_to_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQSJKR_TEST_QUEUE", "from-os-environ")
    text = MINIMAL.replace('"q"', '"{{ must_env "SQSJKR_TEST_QUEUE" }}"')
    assert parse_config(text).sqs.queue_name == "from-os-environ"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{ env `A` }}", "a"),
        ('{{ env "UNSET" `raw \\n "kept"` }}', 'raw \\n "kept"'),
        ('{{ env "UNSET" "tab\\there \\u00e9 \\x41 \\101 \\/" }}', "tab\there é A A /"),
        ('{{ env "UNSET" "\\"}}\\"" }}', '"}}"'),
        ('{{env "A"}}{{ env\t"A"\n}}', "aa"),
        ('x  \n {{- env "A" -}} \n y', "xay"),
        ('x {{- env "A" }} y', "xa y"),
        ('x {{ env "A" -}} y', "x ay"),
        ("x {{- /* a comment */ -}} y", "xy"),
        ("x{{/* a comment */}}y", "xy"),
        ('{{ "{{" }}', "{{"),
        ('{{ env "A" "}}" }}', "a"),
        ("no templates {here}", "no templates {here}"),
    ],
)
def test_template_forms(template: str, expected: str) -> None:
    assert render_template(template, {"A": "a"}) == expected


def test_values_are_substituted_raw() -> None:
    text = MINIMAL.replace("[sqs]", "[sqs]\n{{ env `EXTRA` }}")
    config = parse(text, env={"EXTRA": "wait_time_seconds = 3"})
    assert config.sqs.wait_time_seconds == 3


def test_templates_in_comments_are_not_rendered() -> None:
    text = '# id = "{{ must_env "UNSET" }}" {{ bogus }}\na = "#{{ env "A" }}" # {{ .X }}\n'
    assert render_template(text, {"A": "a"}) == text.replace('{{ env "A" }}', "a")


@pytest.mark.parametrize(
    "string",
    [
        '"x # {{ env `A` }}"',
        "'x # {{ env `A` }}'",
        '"""x\n# {{ env `A` }}"""',
        '"\\" # {{ env `A` }}"',
    ],
)
def test_hash_inside_strings_is_not_a_comment(string: str) -> None:
    assert render_template(f"s = {string}", {"A": "a"}) == f"s = {string}".replace(
        "{{ env `A` }}", "a"
    )


def test_multiline_string_closing_with_extra_quotes() -> None:
    text = 's = """a""""\n# {{ env "A" }}\nt = "{{ env "A" }}"'
    assert render_template(text, {"A": "a"}) == 's = """a""""\n# {{ env "A" }}\nt = "a"'


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{{ .Region }}", "unknown function .Region"),
        ('{{ getenv "A" }}', "unknown function getenv"),
        ("{{ must_env }}", "must_env takes exactly one argument"),
        ('{{ must_env "A" "B" }}', "must_env takes exactly one argument"),
        ("{{ env }}", "env takes a name"),
        ('{{ env "A" "B" "C" }}', "env takes a name"),
        ("{{ env A }}", "arguments must be quoted strings"),
        ('{{ env "A" | printf }}', "arguments must be quoted strings"),
        ("{{ }}", "empty action"),
        ('{{ env\f"A" }}', "unknown function env\f"),
        ('{{ env "A"', "unclosed action"),
        ('{{ env "A }}', "unterminated quoted string"),
        ("{{ env `A }}", "unterminated raw string"),
        ('{{ env "\\q" }}', "invalid escape"),
        ("{{/* open", "unclosed comment"),
    ],
)
def test_invalid_template(template: str, why: str) -> None:
    text = f"[account]\nid = {template}\n"
    message = error_of(text)
    assert "line 2" in message
    assert why in message
    assert template.split()[0] in message  # the action is quoted


def test_render_template_error_names_source() -> None:
    with pytest.raises(ConfigError, match=r"^config /x\.toml: line 1: .*NOPE"):
        render_template('{{ must_env "NOPE" }}', {}, source="/x.toml")


# --- required fields -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('id = "012345678901"\n', "[account] id"),
        ('region = "us-east-1"\n', "[account] region"),
        ('queue_name = "q"\n', "[sqs] queue_name"),
    ],
)
def test_required(line: str, field: str) -> None:
    message = error_of(MINIMAL.replace(line, ""))
    assert message == f"config /etc/sqsjkr/test.toml: {field} is required"


def test_empty_file_requires_account_id() -> None:
    assert error_of("").endswith("[account] id is required")


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('id = "012345678901"', "[account] id"),
        ('region = "us-east-1"', "[account] region"),
        ('queue_name = "q"', "[sqs] queue_name"),
    ],
)
def test_required_not_empty(line: str, field: str) -> None:
    key = line.split()[0]
    message = error_of(MINIMAL.replace(line, f'{key} = ""'))
    assert message.endswith(f"{field} must not be empty")


def test_integer_account_id_tells_to_quote_it() -> None:
    message = error_of(MINIMAL.replace('"012345678901"', "123456789012"))
    assert "[account] id must be a string" in message
    assert 'id = "123456789012"' in message
    assert "start with 0" in message


# --- types and ranges ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "line", "expected"),
    [
        ("account", "region = 1", "[account] region must be a string, got 1 (integer)"),
        ("account", "profile = true", "[account] profile must be a string, got true (boolean)"),
        ("sqs", "queue_name = ['a']", '[sqs] queue_name must be a string, got ["a"] (array)'),
        ("sqs", "wait_time_seconds = 1.5", "[sqs] wait_time_seconds must be an integer, got 1.5"),
        ("sqs", "wait_time_seconds = 21", "[sqs] wait_time_seconds must be between 0 and 20"),
        ("sqs", "wait_time_seconds = -1", "[sqs] wait_time_seconds must be between 0 and 20"),
        (
            "sqs",
            'visibility_timeout = "30"',
            '[sqs] visibility_timeout must be an integer, got "30"',
        ),
        (
            "sqs",
            "visibility_timeout = 43201",
            "[sqs] visibility_timeout must be between 0 and 43200",
        ),
        (
            "kicker",
            "max_concurrent_num = 0",
            "[kicker] max_concurrent_num must be at least 1, got 0",
        ),
        ("kicker", "max_concurrent_num = true", "[kicker] max_concurrent_num must be an integer"),
        ("kicker", "life_time_trigger = 1", "[kicker] life_time_trigger must be a string, got 1"),
        ("kicker", "stats_port = 65536", "[kicker] stats_port must be between 0 and 65535"),
        ("kicker", "stats_port = -1", "[kicker] stats_port must be between 0 and 65535"),
        ("kicker", 'stats_port = "8061"', '[kicker] stats_port must be an integer, got "8061"'),
        ("kicker", "stats_socket = 1", "[kicker] stats_socket must be a string, got 1"),
        ("kicker", "stats_host = 1", "[kicker] stats_host must be a string, got 1"),
        ("kicker", 'stats_host = ""', '[kicker] stats_host must not be empty (use "0.0.0.0"'),
        ("lock", 'backend = "redis"', '[lock] backend must be "dynamodb" or "none", got "redis"'),
        ("lock", "backend = 1", "[lock] backend must be a string, got 1"),
        ("lock", 'table = ""', "[lock] table must not be empty"),
        ("lock", "table = 1", "[lock] table must be a string"),
        ("lock", "retry_interval = 0", "[lock] retry_interval must be greater than 0, got 0"),
        ("lock", 'retry_interval = "0s"', '[lock] retry_interval must be greater than 0, got "0s"'),
        ("lock", "retry_interval = -1", "[lock] retry_interval must not be negative, got -1"),
        (
            "lock",
            'retry_interval = "5x"',
            '[lock] retry_interval is invalid: invalid duration "5x"',
        ),
        ("lock", "retry_interval = true", "[lock] retry_interval must be an int number of seconds"),
        ("lock", "retry_interval = 1.5", "[lock] retry_interval must be an int number of seconds"),
        ("lock", 'lease = "500ms"', '[lock] lease must be at least 1s, got "500ms"'),
        ("lock", 'lease = "2h"', '[lock] lease must be at most 1h0m0s, got "2h"'),
        (
            "kicker",
            'delete_message = "never"',
            '[kicker] delete_message must be "on_finish" or "on_receive", got "never"',
        ),
        ("kicker", 'job_timeout = "0s"', '[kicker] job_timeout must be greater than 0, got "0s"'),
        ("kicker", 'shutdown_timeout = "soon"', "[kicker] shutdown_timeout is invalid"),
        ("kicker", "kill_grace = -1", "[kicker] kill_grace must not be negative, got -1"),
        ("dedupe", 'backend = "s3"', '[dedupe] backend must be "dynamodb" or "none", got "s3"'),
        ("dedupe", "backend = {}", "[dedupe] backend must be a string, got {} (table)"),
    ],
)
def test_type_and_range_errors(section: str, line: str, expected: str) -> None:
    message = error_of(with_section(section, line))
    assert expected in message


@pytest.mark.parametrize("section", ["account", "sqs", "kicker", "lock", "dedupe"])
def test_section_must_be_a_table(section: str) -> None:
    text = f'{section} = "x"\n' + MINIMAL.replace(f"[{section}]", "[unused]")
    message = error_of(text)
    assert f'[{section}] must be a table, got "x" (string)' in message


# --- stats endpoint --------------------------------------------------------------------------


def test_both_stats_keys_in_file() -> None:
    message = error_of(with_section("kicker", 'stats_port = 1\nstats_socket = "/s"'))
    assert "[kicker] stats_port and [kicker] stats_socket are both set" in message


def test_socket_only() -> None:
    kicker = parse(with_section("kicker", 'stats_socket = "/run/s.sock"')).kicker
    assert (kicker.stats_port, kicker.stats_socket) == (None, "/run/s.sock")


# --- overrides -------------------------------------------------------------------------------


def test_overrides_replace_file_values() -> None:
    text = with_section("account", 'profile = "file"') + '[lock]\ntable = "file"\n'
    config = parse(
        text, overrides=Overrides(lock_table="cli-table", profile="cli", region="eu-west-1")
    )
    assert config.lock.table == "cli-table"
    assert config.account.profile == "cli"
    assert config.account.region == "eu-west-1"


def test_overrides_supply_missing_required_region() -> None:
    config = parse(MINIMAL.replace('region = "us-east-1"\n', ""), overrides=Overrides(region="r"))
    assert config.account.region == "r"


def test_visibility_timeout_must_outlast_the_lease_unless_messages_go_on_receive() -> None:
    text = with_section("sqs", "visibility_timeout = 60")
    message = error_of(text)
    assert "[sqs] visibility_timeout (60 s) must be longer than [lock] lease (1m0s)" in message
    assert parse(with_section("sqs", "visibility_timeout = 61")).sqs.visibility_timeout == 61
    on_receive = text + '\n[kicker]\ndelete_message = "on_receive"\n'
    assert parse(on_receive).sqs.visibility_timeout == 60


def test_shutdown_timeout_comes_from_the_command_line_too() -> None:
    config = parse(MINIMAL, overrides=Overrides(shutdown_timeout="10m"))
    assert config.kicker.shutdown_timeout == Duration.of_seconds(600)
    message = error_of(MINIMAL, overrides=Overrides(shutdown_timeout="ten"))
    assert "[kicker] shutdown_timeout (from the command line) is invalid" in message


def test_override_values_are_validated() -> None:
    message = error_of(MINIMAL, overrides=Overrides(stats_port=70000))
    assert "[kicker] stats_port (from the command line) must be between 0 and 65535" in message
    message = error_of(MINIMAL, overrides=Overrides(lock_table=""))
    assert "[lock] table (from the command line) must not be empty" in message


def test_empty_profile_override_unsets_profile() -> None:
    text = with_section("account", 'profile = "file"')
    assert parse(text, overrides=Overrides(profile="")).account.profile is None


def test_stats_port_override_replaces_file_socket() -> None:
    text = with_section("kicker", 'stats_socket = "/file.sock"')
    kicker = parse(text, overrides=Overrides(stats_port=9000)).kicker
    assert (kicker.stats_port, kicker.stats_socket) == (9000, None)


def test_stats_socket_override_replaces_file_port() -> None:
    text = with_section("kicker", "stats_port = 9000")
    kicker = parse(text, overrides=Overrides(stats_socket="/cli.sock")).kicker
    assert (kicker.stats_port, kicker.stats_socket) == (None, "/cli.sock")


def test_stats_override_resolves_a_file_with_both() -> None:
    text = with_section("kicker", 'stats_port = 1\nstats_socket = "/s"')
    assert parse(text, overrides=Overrides(stats_port=2)).kicker.stats_port == 2


def test_both_stats_overrides() -> None:
    message = error_of(MINIMAL, overrides=Overrides(stats_port=1, stats_socket="/s"))
    assert "stats_port and stats_socket options are both given on the command line" in message


# --- unknown keys ----------------------------------------------------------------------------


def test_unknown_keys_warn(caplog: pytest.LogCaptureFixture) -> None:
    text = with_section("kicker", "max_concurent_num = 3") + "[extra]\na = 1\nb = 2\n"
    text = "top = 1\n" + text
    with caplog.at_level(logging.WARNING, logger="sqsjkr.config"):
        config = parse(text)
    assert config.kicker.max_concurrent_num == 20
    messages = [r.getMessage() for r in caplog.records if r.name == "sqsjkr.config"]
    assert len(messages) == 3, messages
    assert any("unknown config key [kicker] max_concurent_num" in m for m in messages)
    assert any("unknown config section [extra]" in m for m in messages)
    assert any("unknown config key top" in m for m in messages)
    assert all("(ignored" in m for m in messages)


def config_warnings(text: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    with caplog.at_level(logging.WARNING, logger="sqsjkr.config"):
        parse(text)
    return [r.getMessage() for r in caplog.records if r.name == "sqsjkr.config"]


@pytest.mark.parametrize(
    ("text", "warning"),
    [
        (
            with_section("kicker", "max_concurent_num = 3"),
            "unknown config key [kicker] max_concurent_num in /etc/sqsjkr/test.toml "
            "(ignored; did you mean max_concurrent_num?)",
        ),
        (
            with_section("lock", "retry_intreval = '1s'"),
            "[lock] retry_intreval in /etc/sqsjkr/test.toml (ignored; did you mean retry_interval?)",
        ),
        (
            MINIMAL + "[lcok]\ntable = 't'\n",
            "unknown config section [lcok] in /etc/sqsjkr/test.toml (ignored; did you mean [lock]?)",
        ),
        # A key of another section, or outside any section, is pointed to where it belongs.
        (
            with_section("kicker", "table = 't'"),
            "[kicker] table in /etc/sqsjkr/test.toml (ignored; did you mean [lock] table?)",
        ),
        (
            "stats_prot = 9000\n" + MINIMAL,
            "key stats_prot in /etc/sqsjkr/test.toml (ignored; did you mean [kicker] stats_port?)",
        ),
    ],
    ids=["misspelt-key", "misspelt-duration-key", "misspelt-section", "other-section", "top-level"],
)
def test_unknown_keys_suggest_the_closest_known_name(
    caplog: pytest.LogCaptureFixture, text: str, warning: str
) -> None:
    messages = config_warnings(text, caplog)
    assert len(messages) == 1, messages
    assert messages[0].endswith(warning), messages


def test_unknown_keys_with_nothing_close_get_no_suggestion(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = with_section("kicker", "zzz = 1") + "[extra]\na = 1\n"
    messages = config_warnings(text, caplog)
    assert len(messages) == 2, messages
    assert all(m.endswith("(ignored)") for m in messages), messages


def test_known_keys_do_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="sqsjkr.config"):
        parse_config(EXAMPLE.read_text(), env={})
    assert not caplog.records


# --- files and syntax ------------------------------------------------------------------------


def test_toml_syntax_error() -> None:
    message = error_of(MINIMAL + "oops = \n")
    assert "invalid TOML" in message
    assert "line 6" in message


def test_toml_syntax_error_after_rendering_says_so() -> None:
    message = error_of(MINIMAL + '{{ env "X" "a = \\n\\n" }}\n')
    assert "after template rendering" in message


def test_load_config(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_config(path, env={}).sqs.queue_name == "q"
    assert load_config(str(path), env={}, overrides=Overrides(region="x")).account.region == "x"


def test_load_config_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(MINIMAL.replace('queue_name = "q"', ""))
    with pytest.raises(ConfigError, match=rf"^config {re.escape(str(path))}: \[sqs\] queue_name"):
        load_config(path, env={})


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "x" / "y.toml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"config file {path} not found"


def test_unreadable_file(tmp_path: Path) -> None:
    # A directory fails to open for every user, root included.
    with pytest.raises(ConfigError, match=rf"^config {re.escape(str(tmp_path))}: cannot read"):
        load_config(tmp_path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(b'[account]\nid = "\xff"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)


# --- the example file ------------------------------------------------------------------------

SECTION_TYPES = {
    "account": AccountConfig,
    "sqs": SqsConfig,
    "kicker": KickerConfig,
    "lock": LockConfig,
    "dedupe": DedupeConfig,
    "schedule": ScheduleConfig,
    "history": HistoryConfig,
    "report": ReportConfig,
    "log": LogConfig,
    "http": HttpConfig,
}


def example_sections() -> dict[str, str]:
    """The example's text split by section header (comment lines included)."""
    parts = re.split(r"^\[(\w+)\]\n", EXAMPLE.read_text(), flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_example_loads() -> None:
    config = load_config(EXAMPLE, env={})
    assert config == Config(
        account=AccountConfig(id="123456789012", region="ap-northeast-1"),
        sqs=SqsConfig(queue_name="sqsjkr-jobs"),
        kicker=KickerConfig(),
        lock=LockConfig(),
        dedupe=DedupeConfig(),
    )


def test_example_loads_whatever_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its template examples sit in comments and must not need their variables.
    monkeypatch.delenv("SQSJKR_ACCOUNT_ID", raising=False)
    assert load_config(EXAMPLE).account.id == "123456789012"
    assert "must_env" in EXAMPLE.read_text()


@pytest.mark.parametrize("section", list(SECTION_TYPES))
def test_example_documents_every_field_with_its_default(section: str) -> None:
    text = example_sections()[section]
    for field in dataclasses.fields(SECTION_TYPES[section]):
        match = re.search(rf"^(?:# )?{field.name} = (.+)$", text, flags=re.MULTILINE)
        assert match, f"config.example.toml does not show [{section}] {field.name}"
        # The line just above a key is its description.
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        assert before.startswith("#"), f"[{section}] {field.name} has no comment"
        if field.default in (dataclasses.MISSING, None):
            continue
        shown = tomllib.loads(f"v = {match.group(1)}")["v"]
        if isinstance(field.default, Duration):
            shown = duration_value(shown, days=True)
        if isinstance(field.default, tuple):
            shown = tuple(shown)
        assert shown == field.default, f"[{section}] {field.name}: example differs from default"


@pytest.mark.parametrize(
    ("backends", "leases", "table"),
    [
        ({}, True, True),
        ({"lock": "none"}, True, True),  # dedupe claims still hold leases
        ({"lock": "none", "dedupe": "none"}, False, True),  # run history alone: no lease
        ({"lock": "none", "dedupe": "none", "history": "none"}, False, False),
    ],
)
def test_what_uses_the_table_and_what_takes_leases(
    backends: dict[str, str], leases: bool, table: bool
) -> None:
    text = MINIMAL + "".join(f'[{k}]\nbackend = "{v}"\n' for k, v in backends.items())
    config = parse(text)
    assert config.takes_leases() is leases
    assert config.uses_table() is table
