"""Every AWS call the daemon and each command can make, read from the source, against the module.

The host and sender policies of terraform/iam.tf and the commands' table in terraform/README.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import pytest

from sqsjkr.commands.cli import SUBCOMMANDS

from . import iam_calls
from .conftest import MOTO_EXTRAS, REGION, Aws, Start, config_text, counted, run_daemon, wait_until
from .test_dlq import site as site  # noqa: F401 - the fixture
from .test_dlq import sqsjkr
from .test_terraform import TERRAFORM_DIR, expr, host_statements, load_config

DAEMON = SUBCOMMANDS["run"]
#: The commands that make no AWS call of their own, or none on a deployment's resources:
#: `run` has the host policy, `send` the sender's, `local` makes its own moto, `token` makes none.
NOT_IN_THE_TABLE = {"run", "send", "local", "crontab2tf", "token"}


def module_policy_actions(name: str) -> set[str]:
    """The actions the module's policy document name allows, in any statement."""
    module = load_config(TERRAFORM_DIR)
    if name == "host":
        statements = host_statements(module)
    else:
        policy = module.resource(f"aws_iam_policy.{name}")
        assert expr(policy["policy"]) == f"data.aws_iam_policy_document.{name}.json"
        statements = policy_statements(module, name)
    return {action for statement in statements for action in statement["actions"]}


def policy_statements(module: Any, name: str) -> list[dict[str, Any]]:
    """The statements of a policy document, with those of the documents it merges in."""
    document = module.data[f"aws_iam_policy_document.{name}"]
    statements = list(document.get("statement", []))
    for source in document.get("source_policy_documents", []):
        match = re.fullmatch(r"data\.aws_iam_policy_document\.(\w+)\.json", expr(source))
        assert match, source
        statements += policy_statements(module, match.group(1))
    return statements


#: What the viewer may run; `status --forget` is the one write among them, and is left out.
VIEWER_COMMANDS = ("status", "history", "daemons", "schedules", "locks", "audit")
#: What `dlq list` and `dlq show` call: the rest of `dlq` changes the dead letters.
DLQ_READS = {
    "sqs:GetQueueUrl",
    "sqs:GetQueueAttributes",
    "sqs:ReceiveMessage",
    "sqs:ChangeMessageVisibility",
}
#: Every command an operator may run.
OPERATOR_COMMANDS = (
    *VIEWER_COMMANDS,
    *("dlq", "pause", "resume", "route", "trigger", "unlock", "send", "kill"),
)
#: What AWS allows everyone (the audit item's who), and what is not a call (--at's role).
UNGRANTED = {"sts:GetCallerIdentity", "iam:PassRole"}


def commands_actions(names: tuple[str, ...]) -> set[str]:
    return set().union(*(iam_calls.actions(SUBCOMMANDS[name]) for name in names))


def test_the_viewer_policy_grants_the_reads_of_the_watching_commands_and_no_write() -> None:
    assert iam_calls.actions(SUBCOMMANDS["dlq"]) >= DLQ_READS
    # `status --forget` deletes a summary, after its audit item: the operator's.
    forget = {"dynamodb:DeleteItem", "dynamodb:PutItem", "sts:GetCallerIdentity"}
    reads = commands_actions(VIEWER_COMMANDS) - forget | DLQ_READS
    assert module_policy_actions("viewer") == reads


def test_the_operator_policy_grants_exactly_the_calls_of_the_operators_commands() -> None:
    granted = module_policy_actions("operator") - UNGRANTED
    assert granted == commands_actions(OPERATOR_COMMANDS) - UNGRANTED


def test_the_call_graph_finds_the_daemons_calls_and_no_other_commands() -> None:
    daemon = iam_calls.actions(DAEMON)
    # A group's slots are read by a Query, deep in the worker's calls (backends/groups.py).
    assert {"dynamodb:Query", "sqs:ReceiveMessage", "dynamodb:PutItem"} <= daemon
    # A TransactWriteItems is authorised by its parts, a batch call by its single one.
    assert not {"dynamodb:TransactWriteItems", "sqs:DeleteMessageBatch"} & daemon
    # `send` shares backends/sqs.py with the daemon, yet reaches none of its receives.
    assert "sqs:ReceiveMessage" not in iam_calls.actions(SUBCOMMANDS["send"])
    # `history` reads runs, and without an event the summaries first; --follow reads one
    # summary and one live output item at a time.
    assert iam_calls.actions(SUBCOMMANDS["history"]) == {
        "dynamodb:Query",
        "dynamodb:BatchGetItem",
        "dynamodb:GetItem",
    }


def test_the_host_policy_grants_every_call_of_the_daemon() -> None:
    missing = iam_calls.actions(DAEMON) - module_policy_actions("host")
    assert not missing, f"terraform/iam.tf's host policy lacks {sorted(missing)}"


def test_the_sender_policy_grants_exactly_the_calls_of_send() -> None:
    granted = module_policy_actions("sender") - {"iam:PassRole"}  # not a call: --at's schedule
    # STS answers GetCallerIdentity (the audit item's who) to everyone: no policy grants it.
    assert granted == iam_calls.actions(SUBCOMMANDS["send"]) - {"sts:GetCallerIdentity"}


def test_check_exercises_every_table_call_of_the_daemon() -> None:
    table_calls = {a for a in iam_calls.actions(DAEMON) if a.startswith("dynamodb:")}
    missing = table_calls - iam_calls.actions(SUBCOMMANDS["check"])
    assert not missing, f"`sqsjkr check` does not try {sorted(missing)}"


def readme_command_actions() -> dict[str, set[str]]:
    """The table of terraform/README.md that says what each command needs."""
    text = (TERRAFORM_DIR / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `sqsjkr (\w[\w-]*)[^`]*` \| ([^|]*) \|", text, re.MULTILINE)
    assert rows, "terraform/README.md has no table of the commands' actions"
    return {
        name: set(re.findall(r"`((?:sqs|dynamodb|sts|scheduler|events):\w+)`", cell))
        for name, cell in rows
    }


def test_the_readme_names_what_each_command_needs() -> None:
    documented = readme_command_actions()
    for name, target in SUBCOMMANDS.items():
        if name in NOT_IN_THE_TABLE:
            continue
        assert documented.get(name) == iam_calls.actions(target), name


def test_a_group_job_runs_on_a_host_holding_the_modules_policy(
    aws: Aws, start_daemon: Start, tmp_path: Path, host_user: Callable[[set[str]], None]
) -> None:
    aws.send({"command": "echo ran >> out", "concurrency_key": "db", "concurrency_limit": 2})
    host_user(module_policy_actions("host") | MOTO_EXTRAS)
    daemon, port = run_daemon(start_daemon, tmp_path, aws)
    wait_until(counted(port, succeeded=1), timeout=30, what="the group job run")
    assert (tmp_path / "out").read_text() == "ran\n"
    assert "not authorized" not in daemon.log
    assert daemon.stop() == 0


def test_a_viewer_watches_the_fleet_and_cannot_steer_it(
    site: Aws,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    host_user: Callable[[set[str]], None],
) -> None:
    conf = tmp_path / "config.toml"
    conf.write_text(config_text(site, stats="stats_port = 0"))
    host_user(module_policy_actions("viewer") | MOTO_EXTRAS)
    # Not `schedules`: moto, enforcing IAM, cannot check the signature of a REST call with a query
    # string (ListSchedules), whoever signs it; the derived actions above cover it.
    for command in [*(c for c in VIEWER_COMMANDS if c != "schedules"), "dlq list"]:
        code, out, err = sqsjkr(capsys, *command.split(), "-c", str(conf))
        assert "AccessDenied" not in err and "not authorized" not in err, (command, err)
        assert code == 0, (command, err)
    code, out, err = sqsjkr(capsys, "pause", "nightly", "-c", str(conf))
    assert code == 1 and "not done" in err and "AccessDenied" in err
    code, out, err = sqsjkr(capsys, "send", "--command", "true", "-c", str(conf))
    assert code == 1 and "AccessDenied" in err
    # Read as the viewer: the test's own clients hold keys that moto now refuses.
    viewer_sqs = replace(site, sqs=boto3.session.Session().client("sqs", region_name=REGION))
    assert viewer_sqs.queue_counts() == (0, 0)
