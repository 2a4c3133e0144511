"""Every AWS call the daemon and each command can make, read from the source, against the module.

The host and sender policies of terraform/iam.tf and the commands' table in terraform/README.md.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from sqsjkr.commands.cli import SUBCOMMANDS

from . import iam_calls
from .conftest import MOTO_EXTRAS, Aws, Start, counted, run_daemon, wait_until
from .test_terraform import TERRAFORM_DIR, expr, host_statements, load_config

DAEMON = SUBCOMMANDS["run"]
#: The commands that make no AWS call of their own, or none on a deployment's resources:
#: `run` has the host policy, `send` the sender's, `local` makes its own moto.
NOT_IN_THE_TABLE = {"run", "send", "local", "crontab2tf"}


def module_policy_actions(name: str) -> set[str]:
    """The actions the module's policy document name allows, in any statement."""
    module = load_config(TERRAFORM_DIR)
    if name == "host":
        statements = host_statements(module)
    else:
        policy = module.resource(f"aws_iam_policy.{name}")
        assert expr(policy["policy"]) == f"data.aws_iam_policy_document.{name}.json"
        statements = module.data[f"aws_iam_policy_document.{name}"]["statement"]
    return {action for statement in statements for action in statement["actions"]}


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
