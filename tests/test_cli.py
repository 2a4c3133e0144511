"""The `sqsjkr` command line: Go flag spelling, exit codes and one-line errors, and `send`.

`sqsjkr local` has tests/test_local.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest

from sqsjkr import __version__
from sqsjkr.commands.cli import SUBCOMMANDS, SUMMARIES, cli, translate_go_args
from sqsjkr.commands.options import UsageFailure
from sqsjkr.commands.send import send
from sqsjkr.contract.duration import parse_duration
from sqsjkr.contract.http_call import HttpCall
from sqsjkr.contract.job import MESSAGE_FIELDS, parse_job
from sqsjkr.errors import InvalidJobError
from sqsjkr.fleet.job_fields import option_of

from .conftest import (
    SQSJKR_COMMAND,
    Aws,
    Cli,
    Result,
    config_text,
    sqsjkr_argv,
    wait_until,
)


def sqsjkr(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        sqsjkr_argv(*args),
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], ["run"]),
        (["-conf", "c.toml"], ["run", "--conf", "c.toml"]),
        (["--conf=c.toml", "-lock-table", "t"], ["run", "--conf", "c.toml", "--lock-table", "t"]),
        (
            ["-conf", "c", "-log-level", "debug", "-profile", "p", "-region", "r"],
            ["run", "--conf", "c", "--log-level", "debug", "--profile", "p", "--region", "r"],
        ),
        (["-stats-port=9000"], ["run", "--stats-port", "9000"]),
        (["-stats-socket", "/s"], ["run", "--stats-socket", "/s"]),
        (["-version"], ["--version"]),
        (["--version"], ["--version"]),
        (["run", "-c", "x"], ["run", "-c", "x"]),
        (["send", "--command", "true"], ["send", "--command", "true"]),
        (["--help"], ["--help"]),
    ],
)
def test_go_flags_are_translated(argv: list[str], expected: list[str]) -> None:
    assert translate_go_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-conf", "c", "-bogus"], "flag provided but not defined: -bogus"),
        (["-conf"], "flag needs an argument: -conf"),
        (["-conf", "c", "extra"], "unexpected argument 'extra'"),
    ],
)
def test_bad_go_flags_are_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageFailure, match=message):
        translate_go_args(argv)


@pytest.mark.parametrize("flag", ["--version", "-version"])
def test_version(flag: str) -> None:
    result = sqsjkr(flag)
    assert result.returncode == 0
    assert result.stdout.strip() == f"sqsjkr {__version__}"


#: `python -m sqsjkr ARGS` that writes the names of the modules it imported to the file in
#: SQSJKR_MODULES as it exits (-X importtime misses importlib's, the lazy subcommands' own).
_LIST_MODULES = (
    "import atexit, os, sys\n"
    "atexit.register(lambda: open(os.environ['SQSJKR_MODULES'], 'w').write('\\n'.join(sys.modules)))\n"
    "from sqsjkr.commands.cli import main\n"
    "main(sys.argv[1:])\n"
)


def imported_modules(*args: str, env: dict[str, str] | None = None) -> set[str]:
    """The modules `python -m sqsjkr ARGS` imports."""
    with tempfile.TemporaryDirectory() as tmp:
        listing = Path(tmp, "modules")
        subprocess.run(
            [sys.executable, "-c", _LIST_MODULES, *args],
            capture_output=True,
            timeout=60,
            env=(os.environ if env is None else env) | {"SQSJKR_MODULES": str(listing)},
        )
        return set(listing.read_text().split())


def no_credentials(tmp_path: Path) -> dict[str, str]:
    """An environment in which botocore finds no AWS credentials: a daemon's start fails at its
    first call, once everything it runs with is imported."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    nowhere = str(tmp_path / "nowhere")
    return env | {
        "AWS_CONFIG_FILE": nowhere,
        "AWS_SHARED_CREDENTIALS_FILE": nowhere,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    }


def test_run_imports_no_other_subcommand(tmp_path: Path) -> None:
    conf = tmp_path / "sqsjkr.toml"
    conf.write_text(
        '[account]\nid = "123456789012"\nregion = "us-east-1"\n[sqs]\nqueue_name = "jobs"\n'
        '[lock]\ntable = "t"\n[kicker]\nstats_port = 0\n'
    )
    modules = imported_modules("run", "-c", str(conf), env=no_credentials(tmp_path))
    assert "sqsjkr.daemon.service" in modules  # the report is read right: the daemon started
    others = [
        "sqsjkr.commands." + name
        for name in (
            "check",
            "crontab2tf",
            "dlq",
            "history",
            "local",
            "locks",
            "pause",
        )
    ] + ["sqsjkr.commands.send", "sqsjkr.commands.status", "sqsjkr.crontab", "sqsjkr.local", "moto"]
    assert sorted(modules & set(others)) == []


def test_help_lists_every_subcommand_with_its_summary() -> None:
    result = sqsjkr("--help")
    assert result.returncode == 0
    listed = result.stdout.split("Commands:", 1)[1]
    names = [line.split()[0] for line in listed.strip().splitlines()]
    assert names == sorted(SUBCOMMANDS)
    assert "Run the daemon." in listed
    assert "Convert a crontab" in listed


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_the_summary_help_lists_is_the_commands_own(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None
    assert not command.hidden and not command.deprecated and command.short_help is None
    listed = click.Command(name, help=SUMMARIES[name])
    for width in (20, 45, 60, 74, 200):
        assert listed.get_short_help_str(width) == command.get_short_help_str(width)


def test_help_imports_no_subcommand_and_a_command_no_daemon(tmp_path: Path) -> None:
    listed = imported_modules("--help")
    assert "sqsjkr.commands.cli" in listed  # the report is read right
    commands = {m for m in listed if m.startswith("sqsjkr.commands.")}
    assert commands <= {"sqsjkr.commands.cli", "sqsjkr.commands.options", "sqsjkr.commands.waiting"}
    assert "botocore" not in listed
    history = imported_modules("history", "-c", str(tmp_path / "nope.toml"))
    assert "sqsjkr.commands.history" in history
    assert not {"sqsjkr.daemon.service", "sqsjkr.daemon.loop", "prometheus_client"} & history


def one_line_error(result: subprocess.CompletedProcess[str] | Result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_missing_config_exits_2_with_one_line(tmp_path: Path) -> None:
    result = sqsjkr("run", "-c", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "nope.toml not found" in one_line_error(result)


def test_every_command_reads_its_config_from_sqsjkr_conf_unless_given(
    cli: Cli, tmp_path: Path
) -> None:
    """A shell beside `sqsjkr local` exports SQSJKR_CONF once (the banner prints the line)."""
    exported = tmp_path / "exported.toml"
    for command in ("status", "history", "firings"):
        done = cli(command, env={"SQSJKR_CONF": str(exported)})
        assert done.returncode == 2 and f"{exported} not found" in done.stderr, done
    given = cli("status", "-c", str(tmp_path / "given.toml"), env={"SQSJKR_CONF": str(exported)})
    assert "given.toml not found" in given.stderr, given


def test_go_spelling_reports_config_errors_the_same_way(tmp_path: Path) -> None:
    result = sqsjkr("-conf", str(tmp_path / "nope.toml"))
    assert result.returncode == 2
    assert "nope.toml not found" in one_line_error(result)


def test_config_error_names_the_field(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(
        '[account]\nid = "1"\nregion = "r"\n[sqs]\nqueue_name = "q"\n'
        '[kicker]\nstats_port = 1\nstats_socket = "/tmp/s"\n'
    )
    result = sqsjkr("run", "-c", str(conf))
    assert result.returncode == 2
    line = one_line_error(result)
    assert "stats_port" in line and "stats_socket" in line


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["run", "--stats-port", "x"], "--stats-port"),
        (["run", "--log-level", "loud"], "--log-level"),
        (["run", "--no-such-option"], "--no-such-option"),
        (["-conf", "c", "-nope"], "-nope"),
    ],
)
def test_bad_options_exit_2_with_one_line(args: list[str], text: str) -> None:
    result = sqsjkr(*args)
    assert result.returncode == 2
    assert text in one_line_error(result)


def write_conf(tmp_path: Path, aws: Aws) -> Path:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(aws, stats="stats_port = 8061"))
    return conf


#: A URL the daemon's default [http] allow lets an HTTP job call.
LOOPBACK = "http://127.0.0.1:8080/jobs/run"


def receive_bodies(aws: Aws) -> list[dict[str, object]]:
    """The bodies on the queue, each without the "origin": "send" that send marks it with."""
    response = aws.sqs.receive_message(QueueUrl=aws.queue_url, MaxNumberOfMessages=10)
    bodies = [json.loads(m["Body"]) for m in response.get("Messages", [])]
    assert all(body.pop("origin") == "send" for body in bodies), bodies
    return bodies


def test_send_builds_the_message_from_options(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    result = cli(
        "send", "-c", str(write_conf(tmp_path, aws)),
        "--command", "echo $A", "--env", "A=1", "--env", "B=x=y",
        "--event-id", "ev", "--lock-id", "L", "--life-time", "90", "--timeout", "30m",
        "--abort-if-locked",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    message_id = result.stdout.strip()
    response = aws.sqs.receive_message(QueueUrl=aws.queue_url)
    (message,) = response["Messages"]
    assert message["MessageId"] == message_id
    assert json.loads(message["Body"]) == {
        "origin": "send",
        "command": "echo $A",
        "envs": {"A": "1", "B": "x=y"},
        "event_id": "ev",
        "lock_id": "L",
        "life_time": 90,
        "timeout": "30m",
        "abort_if_locked": True,
    }


def test_send_builds_concurrency_groups_and_retries_from_options(
    tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    result = cli(
        "send", "-c", str(write_conf(tmp_path, aws)), "--command", "reindex",
        "--concurrency-key", "search-db", "--concurrency-limit", "3",
        "--retries", "4", "--retry-delay", "30s",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [body] = receive_bodies(aws)
    assert body == {
        "command": "reindex",
        "concurrency_key": "search-db",
        "concurrency_limit": 3,
        "retries": 4,
        "retry_delay": "30s",
    }
    job = parse_job(json.dumps(body), message_id="m", sent_at=0.0)
    assert (job.concurrency_key, job.concurrency_limit) == ("search-db", 3)
    assert (job.retries, job.retry_delay) == (4, parse_duration("30s"))


def test_send_builds_an_http_job_from_options(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    result = cli(
        "send", "-c", str(write_conf(tmp_path, aws)), "--http-url", LOOPBACK,
        "--http-method", "put", "--http-header", "Content-Type=application/json",
        "--http-header", "X-Token=a=b", "--http-body", '{"full": true}',
        "--http-timeout", "45", "--success-status", "200", "--success-status", "409",
        "--event-id", "reindex-api", "--retries", "2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [body] = receive_bodies(aws)
    assert body == {
        "http": {
            "url": LOOPBACK,
            "method": "put",
            "headers": {"Content-Type": "application/json", "X-Token": "a=b"},
            "body": '{"full": true}',
            "timeout": 45,
            "success_status": [200, 409],
        },
        "event_id": "reindex-api",
        "retries": 2,
    }
    job = parse_job(json.dumps(body), message_id="m", sent_at=0.0)
    assert job.command == ""
    assert job.http is not None
    assert (job.http.method, job.http.timeout) == ("PUT", parse_duration("45s"))
    assert job.http.succeeded(409) and not job.http.succeeded(201)


def test_every_message_field_has_a_send_option() -> None:
    """Each field of the daemon's message, and each part of "http", can be sent without --body;
    its errors name the option that set it."""
    options = {name for param in send.params for name in param.opts}
    http_parts = {f"http.{name}" for name in HttpCall.__dataclass_fields__}
    # A message's firing and origin are the sender's to write (a schedule's, send's), not
    # options; a pipeline comes whole, in a --body (docs/pipelines.md) or from the module.
    # catch_up is a schedule's (the module's).
    written = {"firing", "origin", "pipeline", "step", "pipeline_key", "rerun", "catch_up"}
    for field in (MESSAGE_FIELDS - written) | http_parts:
        error = InvalidJobError(f'field "{field}": wrong')
        option = option_of(error)
        assert option in options, f"{field}: no option of send sets it"


def test_send_takes_a_whole_body_and_a_delay(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    body = '{"command": "true", "life_time": "1h30m"}'
    # Long enough that a loaded machine's exit of the send and first receive stay inside it.
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", body, "--delay", "5")
    assert result.returncode == 0, result.stderr
    assert receive_bodies(aws) == []  # still delayed
    wait_until(lambda: receive_bodies(aws) == [json.loads(body)], what="delayed message")


def pipeline_body(step_job: dict[str, object], **fields: object) -> str:
    """A root a running true whose one step b (step_job) runs after it, and fields beside them."""
    steps = {"a": {}, "b": {"after": ["a"], "job": step_job}}
    return json.dumps(
        {"command": "true", "pipeline": {"name": "p", "root": "a", "steps": steps}, **fields}
    )


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["--body", '{"command": 1}'], 'invalid job, nothing sent: field "command"'),
        # A step's job is checked where its pipeline enters, not once its root has run.
        (
            ["--body", pipeline_body({"command": "x", "timeout": "soon"})],
            'nothing sent: field "pipeline.steps.b.job.timeout": invalid duration "soon"',
        ),
        # What the fleet's daemons mint, a sender may not set (docs/messages.md).
        (
            ["--body", pipeline_body({"command": "x"}, step="b")],
            'nothing sent: field "step": is set by the fleet\'s daemons, not by a sender',
        ),
        (
            ["--body", pipeline_body({"command": "x"}, pipeline_key="forged")],
            'nothing sent: field "pipeline_key": is set by the fleet\'s daemons',
        ),
        (
            [
                "--body",
                json.dumps(
                    {"command": "true", "firing": {"time": "2030-01-15T01:00:00Z", "schedule": "s"}}
                ),
            ],
            'nothing sent: field "firing": is set by the fleet\'s daemons',
        ),
        (["--command", "true", "--life-time", "soon"], '--life-time: field "life_time"'),
        (
            ["--command", "echo x", "--event-id", "E" * 5000],
            '--event-id: field "event_id": must be at most 2048 bytes, got 5000',
        ),
        (
            ["--body", '{"command": "true", "lock_id": "lk\\u0000x"}'],
            'nothing sent: field "lock_id": must not contain a NUL character',
        ),
        (
            ["--command", "true", "--life-time", "9" * 50_000],
            '--life-time: field "life_time": invalid duration "999',
        ),
        (["--command", "true", "--env", "NOEQUALS"], "--env 'NOEQUALS': expected KEY=VALUE"),
        (["--body", "{}", "--command", "true"], "either --body or the job options"),
        # Given, though 0 is false: the body and the options still conflict.
        (["--body", '{"command": "true"}', "--retries", "0"], "either --body or the job options"),
        ([], "--command, --http-url or --body is required"),
        (
            ["--command", "true", "--concurrency-limit", "2"],
            "--concurrency-limit needs --concurrency-key",
        ),
        (
            ["--command", "true", "--concurrency-key", "db", "--concurrency-limit", "1001"],
            '--concurrency-limit: field "concurrency_limit": must be between 1 and 1000',
        ),
        (["--command", "true", "--retries", "101"], '--retries: field "retries"'),
        (["--command", "true", "--retries", "-1"], '--retries: field "retries"'),
        (["--command", "true", "--retry-delay", "soon"], '--retry-delay: field "retry_delay"'),
        (["--command", "true", "--retry-delay", "-1m"], '--retry-delay: field "retry_delay"'),
        (["--command", "true", "--retries", "x"], "'--retries': 'x' is not a valid integer"),
        (["--command", "true", "--http-url", LOOPBACK], "either --command or --http-url"),
        (["--command", "true", "--http-body", "{}"], "--http-body needs --http-url"),
        (["--command", "true", "--success-status", "204"], "--success-status needs --http-url"),
        (["--http-url", "ftp://127.0.0.1/x"], '--http-url: field "http.url"'),
        (["--http-url", LOOPBACK, "--http-method", "TRACE"], '--http-method: field "http.method"'),
        (
            ["--http-url", LOOPBACK, "--http-header", "X-A"],
            "--http-header 'X-A': expected KEY=VALUE",
        ),
        (
            ["--http-url", LOOPBACK, "--http-header", "X-A=1\r\nX-B: 2"],
            '--http-header: field "http.headers.X-A": must not contain a line break',
        ),
        (
            # A name over the 100 characters an error quotes still names its option.
            ["--http-url", LOOPBACK, "--http-header", "X" * 150 + "\r\n=1"],
            '--http-header: field "http.headers.XXX',
        ),
        (
            ["--http-url", LOOPBACK, "--http-timeout", "soon"],
            '--http-timeout: field "http.timeout"',
        ),
        (
            ["--http-url", LOOPBACK, "--success-status", "99"],
            '--success-status: field "http.success_status"',
        ),
    ],
)
def test_send_refuses_invalid_jobs_and_sends_nothing(
    tmp_path: Path, aws: Aws, args: list[str], text: str, cli: Cli
) -> None:
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), *args)
    assert result.returncode == 2
    assert text in one_line_error(result)
    assert aws.queue_counts() == (0, 0)


def test_send_reads_the_body_from_standard_input(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    body = '{"command": "echo from-stdin", "event_id": "piped"}\n'
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", "-", stdin=body)
    assert result.returncode == 0, result.stderr
    assert receive_bodies(aws) == [json.loads(body)]


def test_send_reads_the_body_from_a_file(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    job = tmp_path / "job.json"
    job.write_text('{"command": "echo from-a-file", "lock_id": "L"}')
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", f"@{job}")
    assert result.returncode == 0, result.stderr
    assert receive_bodies(aws) == [json.loads(job.read_text())]


def test_send_refuses_a_body_from_stdin_that_is_not_utf8(
    tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    conf = str(write_conf(tmp_path, aws))
    result = cli("send", "-c", conf, "--body", "-", stdin=b'{"command": "echo \xff"}')
    assert result.returncode == 2
    assert "invalid job, nothing sent: body is not valid UTF-8" in result.stderr
    assert aws.queue_counts() == (0, 0)


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ("@{tmp}/missing.json", "--body @{tmp}/missing.json: cannot read {tmp}/missing.json: "),
        ("@", "--body @: expected a file name after @"),
        ("@{tmp}", "cannot read {tmp}: Is a directory"),
    ],
    ids=["missing", "no-name", "directory"],
)
def test_send_refuses_a_body_file_it_cannot_read(
    tmp_path: Path, aws: Aws, body: str, text: str, cli: Cli
) -> None:
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", body.format(tmp=tmp_path))
    assert result.returncode == 2
    assert text.format(tmp=tmp_path) in one_line_error(result)
    assert aws.queue_counts() == (0, 0)


def test_send_warns_of_unknown_fields_with_the_closest_known_name(
    tmp_path: Path, aws: Aws, cli: Cli
) -> None:
    body = '{"command": "true", "lock_id": "L", "abort_if_lock": true, "colour": "red"}'
    result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", body)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        'sqsjkr: warning: field "abort_if_lock" is not a job field and the daemon ignores it; '
        'did you mean "abort_if_locked"?',
        'sqsjkr: warning: field "colour" is not a job field and the daemon ignores it',
    ]
    # Sent all the same, as the Go daemon ignores unknown fields too.
    assert receive_bodies(aws) == [json.loads(body)]


def test_send_does_not_warn_of_known_fields(tmp_path: Path, aws: Aws, cli: Cli) -> None:
    shell = {
        "command": "true", "env": {"A": "1"}, "envs": {"B": "2"}, "event_id": "e",
        "lock_id": "L", "life_time": "1h", "timeout": 60, "abort_if_locked": True,
        "disable_life_time_trigger": True, "concurrency_key": "db", "concurrency_limit": 2,
        "retries": 3, "retry_delay": "30s", "origin": "send",
        "pipeline": {"name": "p", "root": "a", "steps": {"a": {"after": []}}}, "catch_up": "6h",
    }  # fmt: skip
    http = {"http": {"url": "http://127.0.0.1:8080/run"}}
    # The fields the fleet's daemons mint are refused (test_send_refuses_invalid_jobs_...).
    minted = {"firing", "step", "pipeline_key", "rerun"}
    assert set(shell) | set(http) | minted == MESSAGE_FIELDS
    for body in (shell, http):
        result = cli("send", "-c", str(write_conf(tmp_path, aws)), "--body", json.dumps(body))
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""


@pytest.mark.parametrize("field", sorted(MESSAGE_FIELDS))
def test_every_known_message_field_is_read_by_the_parser(field: str) -> None:
    """MESSAGE_FIELDS, which `send` checks against, lists only fields the daemon reads: a wrong
    type in any of them is refused, naming it."""
    body = {"command": "true", field: [1]} if field != "command" else {"command": [1]}
    with pytest.raises(InvalidJobError, match=f'field "{field}"'):
        parse_job(json.dumps(body), message_id="m", sent_at=0.0)


def test_bare_sqsjkr_runs_the_daemon_with_the_default_config_and_hints_when_missing() -> None:
    if Path("/etc/sqsjkr/config.toml").exists():
        pytest.skip("this machine has a real /etc/sqsjkr/config.toml")
    result = sqsjkr()
    assert result.returncode == 2
    line = one_line_error(result)
    assert "/etc/sqsjkr/config.toml not found" in line and "--conf" in line


def test_pip_install_gives_the_sqsjkr_command() -> None:
    assert SQSJKR_COMMAND, f"no sqsjkr command beside {sys.executable}: pip install the project"
    result = subprocess.run([SQSJKR_COMMAND, "--version"], capture_output=True, text=True)
    assert result.stdout.strip() == f"sqsjkr {__version__}"
