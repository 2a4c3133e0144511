"""Tests of the terraform module in terraform/: its resources, policies, variables and example.

The example's jobs go through the module's own message expression and then the daemon's own parser.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sqsjkr.contract.duration import Duration, parse_duration
from sqsjkr.contract.firing import SCHEDULE_ARN, SCHEDULED_TIME, Firing, Origin
from sqsjkr.contract.http_call import LOOPBACK, METHODS, HttpCall
from sqsjkr.contract.http_call import allowed as url_allowed
from sqsjkr.contract.job import parse_job
from sqsjkr.errors import DurationError, InvalidJobError

from . import iam_calls, pipeline_calls
from .conftest import sqsjkr_argv

TERRAFORM_DIR = Path(__file__).resolve().parent.parent / "terraform"
EXAMPLE_FILE = TERRAFORM_DIR / "examples" / "multi-job" / "main.tf"
TERRAFORM = shutil.which("terraform")
#: A filesystem mirror of the hashicorp/aws provider (registry.terraform.io/hashicorp/aws/...),
#: so that `terraform init` needs no network.
PLUGIN_DIR = Path(os.environ.get("SQSJKR_TF_PLUGIN_DIR", "/opt/tf-plugins"))

#: The attributes of var.jobs exactly as written in variables.tf: a crontab converter writes maps
#: of this shape, so a renamed or retyped attribute breaks it.
JOB_SCHEMA = {
    "schedule_expression": "optional(string)",
    "command": "optional(string)",
    "catch_up": "optional(string)",
    "envs": "optional(map(string), {})",
    "event_id": "optional(string)",
    "lock_id": "optional(string)",
    "life_time": "optional(string)",
    "timeout": "optional(string)",
    "abort_if_locked": "optional(bool, false)",
    "disable_life_time_trigger": "optional(bool, false)",
    "concurrency_key": "optional(string)",
    "concurrency_limit": "optional(number)",
    "retries": "optional(number)",
    "retry_delay": "optional(string)",
    "http": "optional(object({url = string, method = optional(string), "
    "headers = optional(map(string)), body = optional(string), timeout = optional(string), "
    "success_status = optional(list(number))}))",
    "after": "optional(list(string), [])",
    "on_failure": "optional(list(string), [])",
    "enabled": "optional(bool, true)",
    "description": "optional(string)",
    "schedule_expression_timezone": "optional(string)",
    "flexible_time_window": "optional(number)",
}

#: The message fields the daemon reads; the other attributes belong to the schedule or rule.
MESSAGE_FIELDS = {
    "command",
    "envs",
    "event_id",
    "lock_id",
    "life_time",
    "timeout",
    "abort_if_locked",
    "disable_life_time_trigger",
    "concurrency_key",
    "concurrency_limit",
    "retries",
    "retry_delay",
    "http",
    "catch_up",  # read from the schedule by the daemon's catch-up
}

REQUIRED_OUTPUTS = {
    "queue_url": "aws_sqs_queue.jobs.id",
    "queue_arn": "aws_sqs_queue.jobs.arn",
    "dlq_arn": "aws_sqs_queue.dlq.arn",
    "table_name": "aws_dynamodb_table.locks.name",
    "host_policy_arn": "aws_iam_policy.host.arn",
}

VALID_SCHEDULES = [
    "cron(0 3 * * ? *)",
    "cron(30 19 ? * SAT *)",
    "cron(0/15 8-18 ? * MON-FRI *)",
    "cron(0 0 L * ? *)",
    "cron(5 * * * ? 2030)",
    "rate(1 minute)",
    "rate(5 minutes)",
    "rate(1 day)",
    "rate(12 hours)",
    "at(2030-01-31T09:30:00)",
]
#: Invalid in EventBridge and refused by the module's validation as well.
INVALID_SCHEDULES = [
    "cron(0 3 * * *)",
    "cron(0 3 * * ? * *)",
    "0 3 * * ? *",
    "rate(1 minutes)",
    "rate(5 minute)",
    "rate(0 minutes)",
    "rate(5 seconds)",
    "rate(5  minutes)",
    "rate(05 minutes)",
    "at(2030-01-31 09:30:00)",
    "at(2030-01-31T09:30)",
]
#: Invalid in EventBridge but beyond a one-line regex: only this file's checker catches them.
INVALID_CRON_DAYS = [
    "cron(0 3 * * * *)",
    "cron(0 3 ? * ? *)",
    "cron(60 3 * * ? *)",
    "cron(0 24 * * ? *)",
    "cron(0 3 * 13 ? *)",
]


# --- reading the HCL -------------------------------------------------------------------------


def load_hcl(path: Path) -> dict[str, Any]:
    """A .tf file as python-hcl2 parses it, with literal strings unquoted and unescaped."""
    import hcl2  # here, not at the top: importing it costs each xdist worker's collection

    options = getattr(hcl2, "SerializationOptions", None)
    if options is None:
        # Older releases shape strings and blocks differently; these helpers read version 8's.
        pytest.fail("tests/test_terraform.py needs python-hcl2 >= 8: pip install -U python-hcl2")
    with path.open(encoding="utf-8") as file:
        parsed = hcl2.load(
            file, serialization_options=options(strip_string_quotes=True, with_comments=False)
        )
    return strip_markers(parsed)


def strip_markers(value: Any) -> Any:
    """value without python-hcl2's bookkeeping keys (__is_block__ and the like)."""
    if isinstance(value, dict):
        return {k: strip_markers(v) for k, v in value.items() if not k.startswith("__")}
    if isinstance(value, list):
        return [strip_markers(item) for item in value]
    return value


def literal(value: Any) -> Any:
    """A literal value as terraform reads it: $${ and %%{ are the escapes of ${ and %{."""
    if isinstance(value, str):
        assert not is_expression(value), f"expected a literal, got the expression {value}"
        return value.replace("$${", "${").replace("%%{", "%{")
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal(item) for item in value]
    return value


def is_expression(value: object) -> bool:
    return isinstance(value, str) and value.startswith("${") and value.endswith("}")


def expr(value: object) -> str:
    """The text of an expression, without the ${ } that python-hcl2 wraps it in."""
    assert isinstance(value, str), f"expected an expression, got {value!r}"
    return value[2:-1] if is_expression(value) else value


def split_top_level(text: str, separator: str = ",") -> list[str]:
    """text split at separators outside brackets and strings: HCL lists, objects and calls."""
    parts: list[str] = []
    depth = 0
    in_string = False
    start = 0
    index = 0
    while index < len(text):
        char = text[index]
        if in_string:
            if char == "\\":
                index += 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:index].strip())
            start = index + 1
        index += 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def hcl_string(escaped: str) -> str:
    """The value of the body of an HCL string literal, whose backslash escapes JSON shares."""
    return str(json.loads(f'"{escaped}"'))


@dataclass
class Config:
    """The blocks of every .tf file of one directory (not its subdirectories)."""

    files: dict[str, str] = field(default_factory=dict)
    resources: dict[str, dict[str, Any]] = field(default_factory=dict)
    data: dict[str, dict[str, Any]] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    modules: dict[str, dict[str, Any]] = field(default_factory=dict)
    terraform: list[dict[str, Any]] = field(default_factory=list)

    def resource(self, address: str) -> dict[str, Any]:
        assert address in self.resources, f"no resource {address} in {sorted(self.resources)}"
        return self.resources[address]

    def default(self, value: object) -> Any:
        """A literal, or the default of the variable that a bare var.NAME refers to."""
        if not is_expression(value):
            return value
        match = re.fullmatch(r"var\.(\w+)", expr(value))
        assert match, f"expected a literal or a variable, got {value}"
        variable = self.variables[match.group(1)]
        assert "default" in variable, f"variable {match.group(1)} has no default"
        return variable["default"]


@functools.cache
def load_config(directory: Path) -> Config:
    """Read once per run: the tests only read it."""
    config = Config()
    for path in sorted(directory.glob("*.tf")):
        config.files[path.name] = path.read_text(encoding="utf-8")
        parsed = load_hcl(path)
        for block in parsed.get("resource", []):
            for kind, named in block.items():
                for name, body in named.items():
                    config.resources[f"{kind}.{name}"] = body
        for block in parsed.get("data", []):
            for kind, named in block.items():
                for name, body in named.items():
                    config.data[f"{kind}.{name}"] = body
        for kind, into in (
            ("variable", config.variables),
            ("output", config.outputs),
            ("module", config.modules),
        ):
            for block in parsed.get(kind, []):
                into.update(block)
        for block in parsed.get("locals", []):
            config.locals.update(block)
        config.terraform.extend(parsed.get("terraform", []))
    return config


@pytest.fixture(scope="module")
def module() -> Config:
    return load_config(TERRAFORM_DIR)


@pytest.fixture(scope="module")
def example() -> Config:
    return load_config(EXAMPLE_FILE.parent)


def example_call() -> dict[str, Any]:
    """The example's call of this module."""
    calls = [c for c in load_config(EXAMPLE_FILE.parent).modules.values() if c["source"] == "../.."]
    assert len(calls) == 1, f"expected one call of the module in the example, got {len(calls)}"
    return calls[0]


def example_jobs() -> dict[str, dict[str, Any]]:
    """The jobs of the example; test_example_shows_every_kind_of_job fails on none."""
    if not EXAMPLE_FILE.exists():
        return {}
    return dict(literal(load_config(EXAMPLE_FILE.parent).locals.get("jobs", {})))


# --- the module's message expression, evaluated in Python --------------------------------------


def job_defaults(module: Config) -> dict[str, Any]:
    """The value each optional attribute of var.jobs takes when a job leaves it out."""
    defaults: dict[str, Any] = {}
    for name, declared in job_schema(module).items():
        match = re.fullmatch(r"optional\((.+)\)", declared)
        if match:
            # optional(TYPE) or optional(TYPE, DEFAULT); TYPE may hold commas of its own.
            default = (split_top_level(match.group(1))[1:] or [None])[0]
            defaults[name] = {"{}": {}, "[]": [], "false": False, "true": True, None: None}[default]
    return defaults


def job_schema(module: Config) -> dict[str, str]:
    declared = expr(module.variables["jobs"]["type"])
    match = re.fullmatch(r"map\(object\(\{(.*)\}\)\)", declared)
    assert match, f"var.jobs is not a map(object(...)): {declared}"
    schema: dict[str, str] = {}
    for attribute in split_top_level(match.group(1)):
        name, _, kind = attribute.partition("=")
        schema[name.strip()] = kind.strip()
    return schema


def message_expression(module: Config) -> tuple[str, str, dict[str, str]]:
    """(key variable, job variable, {message field: its expression}) of local.job_messages."""
    text = expr(module.locals["job_messages"])
    # A map of filtered objects: the if clause is what leaves unset fields out of the body.
    match = re.fullmatch(
        r"\{for (\w+), (\w+) in var\.jobs : \1 => "
        r"\{for (\w+), (\w+) in \{(.*)\} : \3 => \4 if \4 != null\}\}",
        text,
    )
    assert match, f"local.job_messages is not the expected filtered map: {text}"
    key_name, job_name, fields = match.group(1), match.group(2), match.group(5)
    expressions: dict[str, str] = {}
    for item in split_top_level(fields):
        name, _, value = item.partition("=")
        expressions[name.strip()] = value.strip()
    return key_name, job_name, expressions


def build_message(module: Config, key: str, job: dict[str, Any]) -> dict[str, Any]:
    """The object the module jsonencodes for job `key`, evaluating its expression's forms."""
    key_name, job_name, expressions = message_expression(module)
    values = {**job_defaults(module), **job}
    attribute = rf"{job_name}\.(\w+)"
    message: dict[str, Any] = {}
    for name, text in expressions.items():
        if match := re.fullmatch(attribute, text):
            value = values.get(match.group(1))
        elif match := re.fullmatch(rf"coalesce\({attribute}, {key_name}\)", text):
            value = values.get(match.group(1)) or key
        elif match := re.fullmatch(rf"length\({attribute}\) > 0 \? {attribute} : null", text):
            assert match.group(1) == match.group(2), text
            value = values.get(match.group(1)) or None
        elif match := re.fullmatch(rf"{attribute} \? true : null", text):
            value = True if values.get(match.group(1)) else None
        elif match := re.fullmatch(
            rf"{attribute} == null \? null : "
            rf"\{{for (\w+), (\w+) in {attribute} : \2 => \3 if \3 != null\}}",
            text,
        ):
            # An object attribute, with its own unset parts left out.
            assert match.group(1) == match.group(4), text
            inner = values.get(match.group(1))
            value = None if inner is None else {k: v for k, v in inner.items() if v is not None}
        else:
            pytest.fail(f"local.job_messages: no evaluator for {name} = {text}")
        if value is not None:
            message[name] = value
    return message


def body_of(message: dict[str, Any]) -> str:
    # jsonencode sorts keys and writes no spaces.
    return json.dumps(message, sort_keys=True, separators=(",", ":"))


# --- EventBridge schedule expressions ----------------------------------------------------------

_RATE = re.compile(r"rate\(([1-9][0-9]*) (minute|minutes|hour|hours|day|days)\)")
# (name, characters allowed, numeric range) per cron field, after AWS's cron reference.
_CRON_FIELDS = [
    ("minutes", r"[0-9,*/-]+", (0, 59)),
    ("hours", r"[0-9,*/-]+", (0, 23)),
    ("day-of-month", r"[0-9,*/?LW-]+", (1, 31)),
    ("month", r"[0-9A-Z,*/-]+", (1, 12)),
    ("day-of-week", r"[0-9A-Z,*/?L#-]+", (1, 7)),
    ("year", r"[0-9,*/-]+", (1970, 2199)),
]


def schedule_problem(expression: str) -> str | None:
    """Why EventBridge would refuse expression, or None."""
    if rate := _RATE.fullmatch(expression):
        singular = not rate.group(2).endswith("s")
        if singular != (rate.group(1) == "1"):
            return "rate() takes a singular unit for 1 and a plural one above"
        return None
    if re.fullmatch(r"at\(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\)", expression):
        return None
    cron = re.fullmatch(r"cron\((.*)\)", expression)
    if not cron:
        return "neither cron(...), rate(N unit) nor at(yyyy-mm-ddThh:mm:ss)"
    fields = cron.group(1).split(" ")
    if len(fields) != 6:
        return f"cron() needs 6 fields, got {len(fields)}"
    if (fields[2] == "?") == (fields[4] == "?"):
        return "cron() needs ? in exactly one of day-of-month and day-of-week"
    for value, (name, allowed, (low, high)) in zip(fields, _CRON_FIELDS, strict=True):
        if not re.fullmatch(allowed, value):
            return f"cron() {name} {value!r} has characters it does not allow"
        for item in value.split(","):
            # Past a "/" is an increment, not a value of the field.
            for number in re.findall(r"[0-9]+", item.split("/")[0].split("#")[0]):
                if not low <= int(number) <= high:
                    return f"cron() {name} {number} is outside {low}-{high}"
    return None


def validation_regex(module: Config, subject: str) -> str:
    """The pattern a validation of var.jobs applies to subject (e.g. "job.life_time")."""
    patterns = set()
    for validation in module.variables["jobs"].get("validation", []):
        condition = validation["condition"]
        for escaped in re.findall(
            rf'regex\("((?:[^"\\]|\\.)*)", {re.escape(subject)}\)', condition
        ):
            patterns.add(hcl_string(escaped))
    assert len(patterns) == 1, f"expected one validation regex on {subject}, got {patterns}"
    return patterns.pop()


# --- files and versions --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "versions.tf",
        "variables.tf",
        "outputs.tf",
        "sqs.tf",
        "dynamodb.tf",
        "schedules.tf",
        "scheduler.tf",
        "pipelines.tf",
        "iam.tf",
        "README.md",
        "examples/multi-job/main.tf",
    ],
)
def test_module_file_exists(name: str) -> None:
    assert (TERRAFORM_DIR / name).is_file()


def lower_bound(constraint: str) -> tuple[int, ...]:
    """The version after >= in a constraint such as ">= 5.27, < 7.0"."""
    bounds = [part.strip()[2:].strip() for part in constraint.split(",") if ">=" in part]
    assert len(bounds) == 1, f"expected one >= bound in {constraint!r}"
    return tuple(int(number) for number in bounds[0].split("."))


def aws_provider_constraint(config: Config) -> str:
    for block in config.terraform:
        for providers in block.get("required_providers", []):
            if "aws" in providers:
                assert providers["aws"]["source"] == "hashicorp/aws"
                return str(providers["aws"]["version"])
    pytest.fail("no required_providers entry for aws")


def test_versions_allow_what_the_module_uses(module: Config) -> None:
    # optional() with a default needs terraform 1.3; a rule's `state` needs the AWS provider 5.27.
    assert lower_bound(module.terraform[0]["required_version"]) >= (1, 3)
    assert lower_bound(aws_provider_constraint(module)) >= (5, 27)
    for address, body in module.resources.items():
        if address.startswith("aws_cloudwatch_event_rule."):
            assert "state" in body
            assert "is_enabled" not in body, "is_enabled is deprecated from provider 5.27"


def test_example_pins_the_module_provider_range(module: Config, example: Config) -> None:
    assert aws_provider_constraint(example) == aws_provider_constraint(module)


# --- variables and outputs ---------------------------------------------------------------------


def test_every_variable_has_a_description_and_a_type(module: Config, example: Config) -> None:
    for config in (module, example):
        assert config.variables
        for name, variable in config.variables.items():
            assert str(variable.get("description", "")).strip(), f"variable {name}: no description"
            assert variable.get("type"), f"variable {name}: no type"


def test_jobs_variable_has_exactly_the_agreed_schema(module: Config) -> None:
    assert job_schema(module) == JOB_SCHEMA


def test_every_output_has_a_description(module: Config) -> None:
    for name, output in module.outputs.items():
        assert str(output.get("description", "")).strip(), f"output {name}: no description"


@pytest.mark.parametrize(("name", "source"), REQUIRED_OUTPUTS.items())
def test_output_gives_the_resource_attribute(module: Config, name: str, source: str) -> None:
    assert name in module.outputs
    assert expr(module.outputs[name]["value"]) == source


def test_output_of_rule_arns_covers_every_rule(module: Config) -> None:
    value = expr(module.outputs["rule_arns"]["value"])
    assert re.fullmatch(
        r"\{for (\w+), (\w+) in aws_cloudwatch_event_rule\.job : \1 => \2\.arn\}", value
    )


# --- SQS -----------------------------------------------------------------------------------------


def test_queue_redrives_to_the_dlq_after_five_receives(module: Config) -> None:
    module.resource("aws_sqs_queue.dlq")
    redrive = expr(module.resource("aws_sqs_queue.jobs")["redrive_policy"])
    match = re.fullmatch(r"jsonencode\(\{(.*)\}\)", redrive)
    assert match, redrive
    entries = dict(part.split(" = ", 1) for part in split_top_level(match.group(1)))
    assert entries == {
        "deadLetterTargetArn": "aws_sqs_queue.dlq.arn",
        "maxReceiveCount": "var.max_receive_count",
    }
    assert module.variables["max_receive_count"]["default"] == 5


def test_queue_retentions_come_from_variables(module: Config) -> None:
    queue = module.resource("aws_sqs_queue.jobs")
    dlq = module.resource("aws_sqs_queue.dlq")
    assert expr(queue["message_retention_seconds"]) == "var.message_retention_seconds"
    assert expr(dlq["message_retention_seconds"]) == "var.dlq_message_retention_seconds"
    # A message moved to the DLQ keeps its first enqueue time, so the DLQ must keep it longer.
    assert module.default(dlq["message_retention_seconds"]) >= module.default(
        queue["message_retention_seconds"]
    )
    assert 0 < module.default(queue["visibility_timeout_seconds"]) <= 43200


def test_only_this_modules_senders_may_send_to_the_queue(module: Config) -> None:
    policy = module.resource("aws_sqs_queue_policy.jobs")
    assert "count" not in policy, "the scheduler role needs the policy even without jobs"
    assert expr(policy["queue_url"]) == "aws_sqs_queue.jobs.id"
    assert expr(policy["policy"]) == "data.aws_iam_policy_document.queue.json"
    document = module.data["aws_iam_policy_document.queue"]
    [role] = document["statement"]
    [dynamic] = document["dynamic"]
    assert expr(dynamic["statement"]["for_each"]) == "length(local.rule_jobs) > 0 ? [1] : []"
    [rules] = dynamic["statement"]["content"]
    for statement in (role, rules):
        assert statement.get("effect", "Allow") == "Allow"
        assert statement["actions"] == ["sqs:SendMessage"]
        assert [expr(r) for r in statement["resources"]] == ["aws_sqs_queue.jobs.arn"]
    assert role["principals"] == [{"type": "AWS", "identifiers": ["${aws_iam_role.scheduler.arn}"]}]
    assert rules["principals"] == [{"type": "Service", "identifiers": ["events.amazonaws.com"]}]
    [condition] = rules["condition"]
    assert condition["variable"] == "aws:SourceArn"
    assert condition["test"] in ("ArnEquals", "ArnLike")
    assert "aws_cloudwatch_event_rule.job" in expr(condition["values"])
    assert "*" not in expr(condition["values"])


def test_the_queue_policy_of_older_versions_is_moved_not_replaced(module: Config) -> None:
    assert re.search(
        r"moved \{\s*from = aws_sqs_queue_policy\.jobs\[0\]\s*to\s*= aws_sqs_queue_policy\.jobs\s*\}",
        module.files["sqs.tf"],
    )


# --- DynamoDB --------------------------------------------------------------------------------


def test_table_has_the_go_daemons_schema(module: Config) -> None:
    table = module.resource("aws_dynamodb_table.locks")
    assert table["hash_key"] == "Id"
    assert table["range_key"] == "Type"
    attributes = {a["name"]: a["type"] for a in table["attribute"]}
    assert attributes == {"Id": "S", "Type": "S", "Expired": "N"}
    [index] = table["global_secondary_index"]
    assert index["name"] == "TypeExpiredIndex"
    assert (index["hash_key"], index["range_key"]) == ("Type", "Expired")
    assert module.default(index["projection_type"]) in ("KEYS_ONLY", "ALL")


def test_table_expires_dedupe_records_by_ttl(module: Config) -> None:
    [ttl] = module.resource("aws_dynamodb_table.locks")["ttl"]
    assert ttl == {"attribute_name": "Expired", "enabled": True}


def test_table_is_on_demand_by_default(module: Config) -> None:
    table = module.resource("aws_dynamodb_table.locks")
    assert module.default(table["billing_mode"]) == "PAY_PER_REQUEST"
    # Capacity only with PROVISIONED: DynamoDB refuses it on an on-demand table.
    assert expr(module.locals["provisioned"]) == 'var.billing_mode == "PROVISIONED"'
    for holder in (table, table["global_secondary_index"][0]):
        for setting in ("read_capacity", "write_capacity"):
            assert re.fullmatch(r"local\.provisioned \? var\.\w+ : null", expr(holder[setting]))


def test_point_in_time_recovery_is_a_variable_off_by_default(module: Config) -> None:
    [recovery] = module.resource("aws_dynamodb_table.locks")["point_in_time_recovery"]
    assert module.default(recovery["enabled"]) is False


# --- IAM -------------------------------------------------------------------------------------


def host_statements(module: Config) -> list[dict[str, Any]]:
    policy = module.resource("aws_iam_policy.host")
    assert expr(policy["policy"]) == "data.aws_iam_policy_document.host.json"
    return list(module.data["aws_iam_policy_document.host"]["statement"])


@pytest.fixture(scope="module")
def daemon_actions(once: Any) -> set[str]:
    """iam_calls.daemon_actions(), read once for the xdist workers: its call graph of sqsjkr's
    source costs a second of CPU."""
    return set(once("daemon-actions", lambda: sorted(iam_calls.daemon_actions())))


def test_host_policy_allows_only_the_daemons_calls(
    module: Config, daemon_actions: set[str]
) -> None:
    """Every call the daemon can make, read from its source: a call added to the daemon and not
    to the host policy fails here."""
    granted: set[str] = set()
    for statement in host_statements(module):
        assert statement.get("effect", "Allow") == "Allow"
        assert not {"not_actions", "not_resources", "principals"} & statement.keys()
        actions = set(statement["actions"])
        assert actions <= daemon_actions, f"{statement.get('sid')}: {actions - daemon_actions}"
        granted |= actions
    # Each of them is a call the daemon makes: a missing one breaks the daemon.
    assert granted == daemon_actions


#: Catch-up's reads of the module's schedules: GetSchedule on the group's schedules, and
#: ListSchedules, which takes no resource.
CATCH_UP_READS = {
    ("scheduler:GetSchedule",): [
        '${replace(aws_scheduler_schedule_group.jobs.arn, ":schedule-group/", ":schedule/")}/*'
    ],
    ("scheduler:ListSchedules",): ["*"],
}


def test_host_policy_names_its_resources(module: Config) -> None:
    for statement in host_statements(module):
        assert statement["resources"], f"{statement.get('sid')}: no resources"
        actions = tuple(statement["actions"])
        if actions in CATCH_UP_READS:
            assert [expr(r) for r in statement["resources"]] == CATCH_UP_READS[actions]
            continue
        for resource in statement["resources"]:
            assert "*" not in resource
            match = re.fullmatch(r"(aws_sqs_queue|aws_dynamodb_table)\.(\w+)\.arn", expr(resource))
            assert match, (
                f"{statement.get('sid')}: {resource} is not a queue or table of the module"
            )
            module.resource(f"{match.group(1)}.{match.group(2)}")
        services = {action.split(":")[0] for action in statement["actions"]}
        kinds = {expr(r).split("_")[1] for r in statement["resources"]}
        assert services == kinds, f"{statement.get('sid')}: actions of {services} on {kinds}"


def test_hosts_may_send_only_to_the_dlq_and_forward_routed_jobs_to_the_queue(
    module: Config,
) -> None:
    senders = [s for s in host_statements(module) if "sqs:SendMessage" in s["actions"]]
    assert {s["sid"]: [expr(r) for r in s["resources"]] for s in senders} == {
        "MoveMalformedMessagesToTheDLQ": ["aws_sqs_queue.dlq.arn"],
        "ForwardRoutedJobs": ["aws_sqs_queue.jobs.arn"],
    }


def test_every_host_action_says_why(module: Config, daemon_actions: set[str]) -> None:
    lines = [
        line
        for line in module.files["iam.tf"].splitlines()
        if re.search(r'"(sqs|dynamodb):\w+"', line)
    ]
    assert len(lines) >= len(daemon_actions)
    for line in lines:
        assert re.search(r"#\s*\S", line), f"no comment on: {line.strip()}"


# --- schedule rules --------------------------------------------------------------------------


def test_engine_is_the_scheduler_by_default_rules_on_request(module: Config) -> None:
    engine = module.variables["schedule_engine"]
    assert engine["default"] == "scheduler"
    [validation] = engine["validation"]
    assert expr(validation["condition"]) == 'contains(["scheduler", "rules"], var.schedule_engine)'
    # Only the jobs with a schedule: a pipeline's steps are sent by the daemons.
    for kind, local in (("rules", "rule_jobs"), ("scheduler", "scheduler_jobs")):
        assert expr(module.locals[local]) == (
            "{for key, job in var.jobs : key => job if job.schedule_expression != null "
            f'&& var.schedule_engine == "{kind}"}}'
        )


def test_one_rule_per_job_disabled_by_enabled_false(module: Config) -> None:
    rule = module.resource("aws_cloudwatch_event_rule.job")
    # The address of the old module's rules: users who keep them plan no change.
    assert expr(rule["for_each"]) == "local.rule_jobs"
    assert expr(rule["schedule_expression"]) == "each.value.schedule_expression"
    assert expr(rule["state"]) == 'each.value.enabled ? "ENABLED" : "DISABLED"'
    assert "var.name" in rule["name"] and "each.key" in rule["name"]


def test_each_target_puts_its_jobs_message_on_the_queue(module: Config) -> None:
    target = module.resource("aws_cloudwatch_event_target.job")
    assert expr(target["for_each"]) == "local.rule_jobs"
    assert expr(target["arn"]) == "aws_sqs_queue.jobs.arn"
    assert expr(target["rule"]) == "aws_cloudwatch_event_rule.job[each.key].name"
    # The firing's time and rule come from the event, through the input transformer.
    assert "input" not in target
    [transformer] = target["input_transformer"]
    assert literal(transformer["input_paths"]) == {"time": "$.time", "rule": "$.resources[0]"}
    assert expr(transformer["input_template"]) == "local.job_inputs[each.key]"


def test_each_engine_writes_its_firings_placeholders_and_the_schedules_own_expression_and_zone(
    module: Config,
) -> None:
    placeholders = expr(module.locals["firing_placeholders"])
    for placeholder in ("<time>", "<rule>", SCHEDULED_TIME, SCHEDULE_ARN):
        assert f'"{placeholder}"' in placeholders
    inputs = expr(module.locals["job_inputs"])
    assert 'origin = "schedule"' in inputs
    assert "expression = var.jobs[key].schedule_expression" in inputs
    zone = (
        'var.schedule_engine == "rules" ? "UTC" : coalesce(var.jobs[key].schedule_expression_'
        "timezone, var.schedule_expression_timezone)"
    )
    assert f"timezone = {zone}" in inputs
    # jsonencode escapes < and >: the placeholders are put back, or EventBridge would not see them.
    assert inputs.count('"\\\\u003c"') == 2, inputs


def test_message_has_the_daemons_field_names(module: Config) -> None:
    _, _, expressions = message_expression(module)
    assert set(expressions) == MESSAGE_FIELDS


def test_message_leaves_unset_fields_out(module: Config) -> None:
    message = build_message(
        module, "minimal", {"schedule_expression": "rate(1 day)", "command": "true"}
    )
    assert message == {"command": "true", "event_id": "minimal"}


def test_message_keeps_every_set_field(module: Config) -> None:
    job = {
        "schedule_expression": "rate(1 day)",
        "command": "true",
        "envs": {"A": "b"},
        "event_id": "named",
        "lock_id": "lock",
        "life_time": "1h",
        "timeout": "2h",
        "abort_if_locked": True,
        "disable_life_time_trigger": True,
        "concurrency_key": "db",
        "concurrency_limit": 3,
        "retries": 2,
        "retry_delay": "30s",
        "catch_up": "6h",
        "enabled": False,
        "description": "not part of the message",
    }
    expected = {k: v for k, v in job.items() if k in MESSAGE_FIELDS}
    assert build_message(module, "key", job) == expected
    parse_job(body_of(expected), message_id="m", sent_at=0)


def test_message_keeps_every_set_part_of_an_http_call(module: Config) -> None:
    call = {
        "url": "http://127.0.0.1:8080/run",
        "method": "PUT",
        "headers": {"X-A": "1"},
        "body": "{}",
        "timeout": "10s",
        "success_status": [200, 409],
    }
    job = {"schedule_expression": "rate(1 day)", "http": call, "retries": 0}
    message = build_message(module, "key", job)
    # retries = 0 is set, and sent: only null is left out.
    assert message == {"http": call, "event_id": "key", "retries": 0}
    assert parse_job(body_of(message), message_id="m", sent_at=0).http == http_call(call)


def test_message_leaves_an_http_calls_unset_parts_out(module: Config) -> None:
    # Terraform fills an object's unset optional attributes with null.
    call = {"url": "http://127.0.0.1/", "method": None, "headers": None, "body": None}
    call |= {"timeout": None, "success_status": None}
    job = {"schedule_expression": "rate(1 day)", "http": call}
    message = build_message(module, "key", job)
    assert message == {"http": {"url": "http://127.0.0.1/"}, "event_id": "key"}


def test_rules_refuse_what_only_the_scheduler_has(module: Config) -> None:
    [lifecycle] = module.resource("aws_cloudwatch_event_rule.job")["lifecycle"]
    conditions = [expr(p["condition"]) for p in lifecycle["precondition"]]
    assert (
        "coalesce(each.value.schedule_expression_timezone, var.schedule_expression_timezone)"
        ' == "UTC"'
    ) in conditions
    assert (
        '!startswith(each.value.schedule_expression, "at(") && '
        "each.value.flexible_time_window == null"
    ) in conditions
    assert "each.value.catch_up == null" in conditions


# --- EventBridge Scheduler ---------------------------------------------------------------------


def test_one_schedule_per_job_in_the_modules_group(module: Config) -> None:
    group = module.resource("aws_scheduler_schedule_group.jobs")
    assert expr(group["name"]) == "var.name"
    schedule = module.resource("aws_scheduler_schedule.job")
    assert expr(schedule["for_each"]) == "local.scheduler_jobs"
    assert expr(schedule["group_name"]) == "aws_scheduler_schedule_group.jobs.name"
    assert schedule["name"] == "${var.name}-${each.key}"
    assert expr(schedule["schedule_expression"]) == "each.value.schedule_expression"
    assert expr(schedule["state"]) == 'each.value.enabled ? "ENABLED" : "DISABLED"'
    assert (
        expr(schedule["description"])
        == 'coalesce(each.value.description, "sqsjkr job ${each.key}")'
    )
    [lifecycle] = schedule["lifecycle"]
    [name_check, input_check] = lifecycle["precondition"]
    assert expr(name_check["condition"]) == 'length("${var.name}-${each.key}") <= 64'
    # A pipeline's root carries every step's message: the Scheduler's limit on a target's input.
    assert expr(input_check["condition"]) == "length(local.job_inputs[each.key]) <= 8192"


def test_each_job_has_its_zone_or_the_modules(module: Config) -> None:
    schedule = module.resource("aws_scheduler_schedule.job")
    assert expr(schedule["schedule_expression_timezone"]) == (
        "coalesce(each.value.schedule_expression_timezone, var.schedule_expression_timezone)"
    )
    zone = module.variables["schedule_expression_timezone"]
    assert zone["default"] == "UTC", "the old module's cron expressions are UTC"
    [check] = zone["validation"]
    pattern = hcl_string(re.findall(r'regex\("((?:[^"\\]|\\.)*)"', check["condition"])[0])
    for good in ["UTC", "Asia/Tokyo", "America/Argentina/Buenos_Aires", "Etc/GMT+9"]:
        assert re.fullmatch(pattern, good)
    for bad in ["", "Asia/", "+09:00", "Asia Tokyo"]:
        assert not re.fullmatch(pattern, bad)


def test_flexible_time_window_is_off_unless_a_job_sets_minutes(module: Config) -> None:
    [window] = module.resource("aws_scheduler_schedule.job")["flexible_time_window"]
    assert expr(window["mode"]) == 'each.value.flexible_time_window == null ? "OFF" : "FLEXIBLE"'
    assert expr(window["maximum_window_in_minutes"]) == "each.value.flexible_time_window"


def test_each_schedule_puts_its_jobs_message_on_the_queue(module: Config) -> None:
    [target] = module.resource("aws_scheduler_schedule.job")["target"]
    assert expr(target["arn"]) == "aws_sqs_queue.jobs.arn"
    assert expr(target["role_arn"]) == "aws_iam_role.scheduler.arn"
    # The same body as the rules' targets, but for the firing's placeholders.
    assert expr(target["input"]) == "local.job_inputs[each.key]"
    assert [expr(d["arn"]) for d in target["dead_letter_config"]] == ["local.schedule_dlq_arn"]
    [retry] = target["retry_policy"]
    assert expr(retry["maximum_event_age_in_seconds"]) == (
        "var.retry_policy.maximum_event_age_in_seconds"
    )
    assert expr(retry["maximum_retry_attempts"]) == "var.retry_policy.maximum_retry_attempts"


def test_retry_policy_defaults_are_schedulers_own(module: Config) -> None:
    declared = expr(module.variables["retry_policy"]["type"])
    assert "maximum_event_age_in_seconds = optional(number, 86400)" in declared
    assert "maximum_retry_attempts = optional(number, 185)" in declared
    assert module.variables["retry_policy"]["default"] == {}


def test_only_the_modules_schedule_group_may_assume_the_role(module: Config) -> None:
    role = module.resource("aws_iam_role.scheduler")
    assert expr(role["assume_role_policy"]) == "data.aws_iam_policy_document.scheduler_trust.json"
    [statement] = module.data["aws_iam_policy_document.scheduler_trust"]["statement"]
    assert statement["actions"] == ["sts:AssumeRole"]
    assert statement["principals"] == [
        {"type": "Service", "identifiers": ["scheduler.amazonaws.com"]}
    ]
    [condition] = statement["condition"]
    assert (condition["test"], condition["variable"]) == ("ArnEquals", "aws:SourceArn")
    assert [expr(v) for v in condition["values"]] == ["aws_scheduler_schedule_group.jobs.arn"]


def test_scheduler_role_name_is_checked_against_iams_limit(module: Config) -> None:
    role = module.resource("aws_iam_role.scheduler")
    assert role["name"] == "${var.name}-scheduler"
    [lifecycle] = role["lifecycle"]
    [check] = lifecycle["precondition"]
    assert expr(check["condition"]) == 'length("${var.name}-scheduler") <= 64'


def test_scheduler_role_may_only_send_to_the_queue_and_its_dlq(module: Config) -> None:
    policy = module.resource("aws_iam_role_policy.scheduler")
    assert expr(policy["role"]) == "aws_iam_role.scheduler.id"
    assert expr(policy["policy"]) == "data.aws_iam_policy_document.scheduler.json"
    statements = module.data["aws_iam_policy_document.scheduler"]["statement"]
    granted = set()
    for statement in statements:
        assert statement.get("effect", "Allow") == "Allow"
        assert statement["actions"] == ["sqs:SendMessage"]
        granted |= {expr(r) for r in statement["resources"]}
    assert granted == {"aws_sqs_queue.jobs.arn", "local.schedule_dlq_arn"}


def test_senders_may_touch_only_sqsjkrs_one_time_schedules(module: Config) -> None:
    statements = {s["sid"]: s for s in module.data["aws_iam_policy_document.sender"]["statement"]}
    one_time = statements["OneTimeSchedules"]
    assert set(one_time["actions"]) == {
        "scheduler:CreateSchedule",
        "scheduler:GetSchedule",
        "scheduler:DeleteSchedule",
    }
    [resource] = one_time["resources"]
    assert resource.endswith("/at.*")
    assert "aws_scheduler_schedule_group.jobs.arn" in resource
    pass_role = statements["LetTheSchedulesSend"]
    assert pass_role["actions"] == ["iam:PassRole"]
    assert [expr(r) for r in pass_role["resources"]] == ["aws_iam_role.scheduler.arn"]
    assert pass_role["condition"][0]["values"] == ["scheduler.amazonaws.com"]
    send = statements["SendJobsNow"]
    assert [expr(r) for r in send["resources"]] == ["aws_sqs_queue.jobs.arn"]


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("schedule_group_name", "aws_scheduler_schedule_group.jobs.name"),
        ("scheduler_role_arn", "aws_iam_role.scheduler.arn"),
        ("sender_policy_arn", "aws_iam_policy.sender.arn"),
    ],
)
def test_scheduler_outputs(module: Config, name: str, source: str) -> None:
    assert expr(module.outputs[name]["value"]) == source


def test_output_of_schedule_arns_covers_every_schedule(module: Config) -> None:
    value = expr(module.outputs["schedule_arns"]["value"])
    assert re.fullmatch(
        r"\{for (\w+), (\w+) in aws_scheduler_schedule\.job : \1 => \2\.arn\}", value
    )


# --- validations -------------------------------------------------------------------------------

_UNITS = ["ns", "us", "\u00b5s", "\u03bcs", "ms", "s", "m", "h"]


@st.composite
def go_durations(draw: st.DrawFn) -> str:
    """Go durations in the form the module documents: numbers, optional fractions, units."""
    parts = draw(
        st.lists(
            st.tuples(
                st.integers(0, 100_000),
                st.none() | st.text("0123456789", min_size=1, max_size=4),
                st.sampled_from(_UNITS),
            ),
            min_size=1,
            max_size=4,
        )
    )
    return "".join(f"{n}{'.' + f if f else ''}{unit}" for n, f, unit in parts)


@pytest.mark.parametrize("subject", ["job.timeout", "job.retry_delay", "job.http.timeout"])
def test_every_duration_has_the_same_check(module: Config, subject: str) -> None:
    assert validation_regex(module, subject) == validation_regex(module, "job.life_time")


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/run",
        "https://jobs.internal.example.com/run?x=1",
        "http://[::1]/",
        "http://localhost",
        "ftp://127.0.0.1/",
        "http:///run",
        "127.0.0.1:8080/run",
        "http://user@/x",
        "http://user:secret@127.0.0.1/x",
        "http://:8080/",
    ],
)
def test_module_checks_http_urls_as_the_daemon_does(module: Config, url: str) -> None:
    # regex() in terraform finds a match anywhere, as re.search does.
    accepted = bool(re.search(validation_regex(module, "job.http.url"), url))
    try:
        parse_job(json.dumps({"http": {"url": url}}), message_id="m", sent_at=0)
    except InvalidJobError:
        parsed = False
    else:
        parsed = True
    assert accepted is parsed


def test_module_allows_the_daemons_http_methods(module: Config) -> None:
    [condition] = [
        v["condition"]
        for v in module.variables["jobs"]["validation"]
        if "job.http.method" in v["condition"]
    ]
    listed = re.search(r"contains\(\[([^]]*)\]", condition)
    assert listed, condition
    assert tuple(json.loads(f"[{listed.group(1)}]")) == METHODS


@settings(max_examples=150, deadline=None)
@given(duration=go_durations())
def test_module_accepts_go_durations_the_daemon_parses(module: Config, duration: str) -> None:
    assert re.fullmatch(validation_regex(module, "job.life_time"), duration)
    parse_duration(duration)


@pytest.mark.parametrize("text", ["", "90", "1d", "h", "1 h", "1H", "1h ", "1h30", "P1D"])
def test_module_refuses_what_the_daemon_refuses(module: Config, text: str) -> None:
    assert not re.fullmatch(validation_regex(module, "job.life_time"), text)
    with pytest.raises(DurationError):
        parse_duration(text)


@pytest.mark.parametrize("expression", VALID_SCHEDULES)
def test_valid_schedules_pass_both_checks(module: Config, expression: str) -> None:
    assert re.fullmatch(validation_regex(module, "job.schedule_expression"), expression)
    assert schedule_problem(expression) is None


@pytest.mark.parametrize("expression", INVALID_SCHEDULES)
def test_invalid_schedules_fail_both_checks(module: Config, expression: str) -> None:
    assert not re.fullmatch(validation_regex(module, "job.schedule_expression"), expression)
    assert schedule_problem(expression) is not None


@pytest.mark.parametrize("expression", INVALID_CRON_DAYS)
def test_checker_refuses_bad_cron_fields(expression: str) -> None:
    assert schedule_problem(expression) is not None


@pytest.mark.parametrize(
    ("key", "ok"),
    [("nightly-db-backup", True), ("v1.2_x", True), ("a b", False), ("a/b", False), ("", False)],
)
def test_job_keys_must_make_rule_names(module: Config, key: str, ok: bool) -> None:
    assert bool(re.fullmatch(validation_regex(module, "key"), key)) is ok


# --- the example -----------------------------------------------------------------------------


def test_example_calls_the_module_and_attaches_the_host_policy(example: Config) -> None:
    # The example's own jobs, and those of a -var-file (crontab2tf's output) over them.
    assert expr(example_call()["jobs"]) == "merge(local.jobs, var.jobs)"
    assert example.locals["jobs"]
    assert expr(example.variables["jobs"]["type"]) == "any"
    assert example.variables["jobs"]["default"] == {}
    attachments = [
        body
        for address, body in example.resources.items()
        if address.startswith("aws_iam_role_policy_attachment.")
    ]
    assert [expr(a["policy_arn"]) for a in attachments] == ["module.sqsjkr.host_policy_arn"]
    assert any("module.sqsjkr." in str(o["value"]) for o in example.outputs.values())


def test_example_shows_every_kind_of_job() -> None:
    jobs = example_jobs().values()
    assert len(jobs) >= 4
    assert any(j.get("enabled") is False for j in jobs), "a disabled job"
    assert any(j["schedule_expression"].startswith("rate(") for j in jobs), "a rate() job"
    assert any(j["schedule_expression"].startswith("cron(") and j.get("envs") for j in jobs), (
        "a cron job with envs"
    )
    assert any(j.get("lock_id") and j.get("life_time") and j.get("timeout") for j in jobs), (
        "a job with lock_id, life_time and timeout"
    )
    assert any(
        j.get("concurrency_key") and j.get("concurrency_limit", 1) > 1 and j.get("retries")
        for j in jobs
    ), "a job of a concurrency group, with retries"
    http_jobs = [j["http"] for j in jobs if j.get("http")]
    assert http_jobs, "an HTTP job"
    # The daemon's default [http] allow: an example that works without configuring it.
    assert all(url_allowed(call["url"], LOOPBACK) for call in http_jobs)


def each_example_job(check: Callable[[str, dict[str, Any]], None]) -> None:
    """check(key, job) for every job of the example; the failure names each job that failed.

    One test for all of them, not one per job: parametrising by the jobs would parse the
    example's HCL as each xdist worker collects, 0.16 s of CPU each time."""
    jobs = example_jobs()
    assert jobs, "the example has no jobs"
    failed: dict[str, str] = {}
    for key, job in jobs.items():
        try:
            check(key, job)
        except AssertionError as exc:
            failed[key] = str(exc)
    assert not failed, "\n".join(f"{key}: {why}" for key, why in failed.items())


def test_every_example_job_is_a_valid_schedule(module: Config) -> None:
    name = literal(example_call().get("name", module.variables["name"]["default"]))

    def check(key: str, job: dict[str, Any]) -> None:
        assert set(job) <= set(JOB_SCHEMA), f"unknown attributes {set(job) - set(JOB_SCHEMA)}"
        assert schedule_problem(job["schedule_expression"]) is None
        assert re.fullmatch(
            validation_regex(module, "job.schedule_expression"), job["schedule_expression"]
        )
        assert re.fullmatch(validation_regex(module, "key"), key)
        # EventBridge's limit on rule names, which the module checks only at plan time.
        assert len(f"{name}-{key}") <= 64

    each_example_job(check)


def test_every_example_job_reaches_the_daemon_intact(module: Config) -> None:
    each_example_job(lambda key, job: reaches_the_daemon_intact(module, key, job))


def reaches_the_daemon_intact(module: Config, key: str, job: dict[str, Any]) -> None:
    body = body_of(build_message(module, key, job))
    parsed = parse_job(body, message_id="m", sent_at=0)
    assert parsed.command == job.get("command", "")
    assert parsed.event_id == (job.get("event_id") or key)
    assert parsed.lock_id == job.get("lock_id")
    assert dict(parsed.envs) == job.get("envs", {})
    assert parsed.life_time == duration_or_none(job.get("life_time"))
    assert parsed.timeout == duration_or_none(job.get("timeout"))
    assert parsed.abort_if_locked is job.get("abort_if_locked", False)
    assert parsed.disable_life_time_trigger is job.get("disable_life_time_trigger", False)
    assert parsed.concurrency_key == job.get("concurrency_key")
    assert parsed.concurrency_limit == job.get("concurrency_limit", 1)
    assert parsed.retries == job.get("retries", 0)
    assert parsed.retry_delay == parse_duration(job.get("retry_delay", "1m"))
    assert parsed.http == http_call(job.get("http"))


def duration_or_none(text: str | None) -> Duration | None:
    return None if text is None else parse_duration(text)


def http_call(call: dict[str, Any] | None) -> HttpCall | None:
    """The HttpCall that a job's http attribute should become in the daemon."""
    if call is None:
        return None
    statuses = call.get("success_status")
    return HttpCall(
        url=call["url"],
        method=call.get("method", "POST").upper(),
        headers=call.get("headers", {}),
        body=call.get("body"),
        timeout=duration_or_none(call.get("timeout")),
        success_status=None if statuses is None else tuple(statuses),
    )


# --- formatting ----------------------------------------------------------------------------


@pytest.mark.skipif(shutil.which("terraform") is None, reason="terraform is not on PATH")
def test_terraform_fmt_is_clean() -> None:
    result = subprocess.run(
        ["terraform", "fmt", "-check", "-recursive", "-diff", str(TERRAFORM_DIR)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- terraform itself, offline ---------------------------------------------------------------

needs_providers = pytest.mark.skipif(
    TERRAFORM is None or not (PLUGIN_DIR / "registry.terraform.io" / "hashicorp" / "aws").is_dir(),
    reason=f"needs terraform on PATH and the hashicorp/aws provider in a filesystem mirror at "
    f"{PLUGIN_DIR} (set SQSJKR_TF_PLUGIN_DIR); without network, init cannot fetch it",
)

#: The module's provider in a root that needs no account. The one call a plan makes (the example's
#: caller identity) goes to moto by AWS_ENDPOINT_URL_STS: an `endpoints` block here would cost the
#: provider seconds of CPU in each of a plan's walks, more than the rest of the plan.
OFFLINE_PROVIDER = """\
provider "aws" {
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
}
"""


#: Go's collector at its default pace takes about a third of the CPU of a plan or show (terraform's
#: and the provider's, which inherits the environment). Left off until a process's heap nears the
#: limit, it costs a plan's processes about 1 GiB each at their peak, instead of 0.6 GiB.
GO_RUNTIME = {"GOGC": "off", "GOMEMLIMIT": "1GiB"}


def terraform(
    directory: Path, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """terraform ARGS in directory, with no user CLI config and env added to the environment;
    fails the test on an error."""
    env = {
        **os.environ,
        "TF_CLI_CONFIG_FILE": os.devnull,
        "TF_IN_AUTOMATION": "1",
        **GO_RUNTIME,
        **(env or {}),
    }
    env.pop("TF_PLUGIN_CACHE_DIR", None)
    result = subprocess.run(
        [str(TERRAFORM), *args],
        cwd=directory,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    if check:
        assert result.returncode == 0, (
            f"terraform {' '.join(args)}:\n{result.stdout}{result.stderr}"
        )
    return result


def copy_module(tmp_path: Path) -> Path:
    """A copy of the module, without the working files of a checkout's own init or apply."""
    copy = tmp_path / "terraform"
    shutil.copytree(TERRAFORM_DIR, copy, ignore=shutil.ignore_patterns(".terraform*", "*.tfstate*"))
    return copy


def init(directory: Path) -> None:
    """terraform init in directory, offline: the provider from PLUGIN_DIR, no backend."""
    terraform(directory, "init", "-backend=false", "-input=false", f"-plugin-dir={PLUGIN_DIR}")


def planned(directory: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """A plan's `terraform show -json`: planned_values, resource_changes and the rest."""
    terraform(directory, "plan", "-input=false", "-lock=false", "-out=plan.bin", *args, env=env)
    return dict(json.loads(terraform(directory, "show", "-json", "plan.bin").stdout))


@pytest.fixture(scope="session")
def once(
    tmp_path_factory: pytest.TempPathFactory, testrun_uid: str
) -> Callable[[str, Callable[[], Any]], Any]:
    """once(key, compute): compute()'s JSON value, computed once in a test run by the first
    xdist worker that asks; the others wait for it. A plan costs seconds of CPU."""
    shared = tmp_path_factory.getbasetemp().parent / f"once-{testrun_uid}"
    shared.mkdir(exist_ok=True)

    def get(key: str, compute: Callable[[], Any]) -> Any:
        path = shared / f"{key}.json"
        with open(shared / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                return json.loads(path.read_text())
            value = compute()
            path.write_text(json.dumps(value))
            return value

    return get


#: Jobs of the FIFO modules beside the example's: one name that is not a valid FIFO group id.
FIFO_JOBS = (
    '{nightly={schedule_expression="cron(0 3 * * ? *)", command="backup", '
    'event_id="nightly backup"}, hourly={schedule_expression="rate(1 hour)", command="x"}}'
)

#: More calls of the module beside the example's, so that one plan (seconds of CPU for the
#: provider's schema, again for `show`) covers both engines on a FIFO queue as well, and the
#: diamond pipeline of tests/test_terraform_pipelines.py with either engine.
EXTRA_MODULES = f"""\
module "fifo" {{
  source = "../.."
  fifo   = true
  jobs   = {FIFO_JOBS}
}}

module "fifo_rules" {{
  source          = "../.."
  fifo            = true
  schedule_engine = "rules"
  jobs            = {FIFO_JOBS}
}}

{pipeline_calls.diamond_calls("../..")}"""


@dataclass
class ExamplePlan:
    """The example's plan, with the jobs of a crontab given as a -var-file (crontab2tf's output)
    and EXTRA_MODULES beside it."""

    resources: dict[str, dict[str, Any]]  # the planned values of each resource, by address
    crontab_jobs: dict[str, dict[str, Any]]  # the jobs of the -var-file
    pipelines: dict[str, list[str]]  # the diamond's module.scheduler.pipelines
    bodies: dict[str, str]  # the diamond's module.scheduler.job_messages

    @property
    def schedules(self) -> dict[str, dict[str, Any]]:
        """The planned values of the example's schedules, by job key."""
        return by_key(self.resources, "module.sqsjkr.aws_scheduler_schedule.job")


@pytest.fixture(scope="module")
def example_plan(
    tmp_path_factory: pytest.TempPathFactory, moto_endpoint: str, once: Any
) -> ExamplePlan:
    return ExamplePlan(
        **once(
            "example-plan",
            lambda: plan_example(tmp_path_factory.mktemp("example"), moto_endpoint),
        )
    )


def plan_example(tmp_path: Path, moto_endpoint: str) -> dict[str, Any]:
    """ExamplePlan's fields: the example and EXTRA_MODULES planned with crontab2tf's output as a
    -var-file."""
    copy = copy_module(tmp_path)
    example = copy / "examples" / "multi-job"
    (example / "offline_override.tf").write_text(OFFLINE_PROVIDER)
    (example / "extra_modules.tf").write_text(EXTRA_MODULES)
    init(example)
    crontab = tmp_path / "crontab"
    crontab.write_text(
        "0 2 * * * /usr/local/bin/backup.sh --full\nCRON_TZ=Europe/Berlin\n*/5 * * * * poll\n"
    )
    tfvars = tmp_path / "crontab.tfvars"
    converted = subprocess.run(
        [*sqsjkr_argv("crontab2tf", str(crontab), "--timezone", "UTC", "-o", str(tfvars))],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert converted.returncode == 0, converted.stderr
    shown = planned(example, f"-var-file={tfvars}", env={"AWS_ENDPOINT_URL_STS": moto_endpoint})
    outputs = shown["planned_values"]["outputs"]
    return {
        "resources": {
            change["address"]: change["change"]["after"] or {}
            for change in shown["resource_changes"]
            if "create" in change["change"]["actions"]
        },
        "crontab_jobs": literal(load_hcl(tfvars)["jobs"]),
        "pipelines": outputs["pipelines"]["value"],
        "bodies": outputs["bodies"]["value"],
    }


@needs_providers
@pytest.mark.slow
def test_crontab2tf_output_joins_the_examples_jobs_through_var_file(
    example_plan: ExamplePlan,
) -> None:
    schedules, jobs = example_plan.schedules, example_plan.crontab_jobs
    assert set(schedules) == set(example_jobs()) | set(jobs)
    for key, job in jobs.items():
        assert schedules[key]["schedule_expression"] == job["schedule_expression"]
        assert schedules[key]["name"] == f"batch-jobs-{key}"
    # Each line's own zone, over the example's default (Asia/Tokyo).
    zones = {key: schedules[key]["schedule_expression_timezone"] for key in jobs}
    assert sorted(zones.values()) == ["Europe/Berlin", "UTC"]


@needs_providers
@pytest.mark.slow
def test_terraform_sends_the_messages_this_file_evaluates(
    module: Config, example_plan: ExamplePlan
) -> None:
    """Terraform's own jsonencode of local.job_messages, for every kind of job in the example
    (a concurrency group with retries, an HTTP call) and crontab2tf's: build_message reads the
    expression as terraform does, and the daemon takes what terraform sends."""
    for key, job in {**example_jobs(), **example_plan.crontab_jobs}.items():
        schedule = example_plan.schedules[key]
        [target] = schedule["target"]
        message = json.loads(target["input"])
        assert message.pop("origin") == "schedule", key
        assert message.pop("firing") == {
            "time": SCHEDULED_TIME,
            "schedule": SCHEDULE_ARN,
            "expression": schedule["schedule_expression"],
            "timezone": schedule["schedule_expression_timezone"],
        }, key
        assert message == build_message(module, key, job), key
        # The Scheduler substitutes its context attributes where they stand in the input.
        arn = f"arn:aws:scheduler:us-east-1:123456789012:schedule/batch-jobs/{schedule['name']}"
        sent = substituted(
            target["input"], {SCHEDULED_TIME: "2030-03-31T00:30:00Z", SCHEDULE_ARN: arn}
        )
        parsed = parse_job(sent, message_id="m", sent_at=0)
        assert parsed.origin is Origin.SCHEDULE
        assert parsed.firing == Firing(
            datetime(2030, 3, 31, 0, 30, tzinfo=timezone.utc).timestamp(),
            arn,
            schedule["schedule_expression"],
            schedule["schedule_expression_timezone"],
        ), key


def substituted(template: str, values: dict[str, str]) -> str:
    """A target's input as EventBridge sends it: each placeholder replaced by its value."""
    for placeholder, value in values.items():
        assert placeholder in template
        template = template.replace(placeholder, value)
    return template


def by_key(resources: dict[str, dict[str, Any]], address: str) -> dict[str, dict[str, Any]]:
    """The planned values of each instance of a for_each resource, by key."""
    return {
        name.split('"')[1]: values
        for name, values in resources.items()
        if name.startswith(f"{address}[")
    }


@needs_providers
@pytest.mark.slow
def test_rules_engine_plans_the_old_modules_rules(example_plan: ExamplePlan) -> None:
    resources = {
        address.removeprefix("module.fifo_rules."): values
        for address, values in example_plan.resources.items()
        if address.startswith("module.fifo_rules.")
    }
    assert set(by_key(resources, "aws_cloudwatch_event_rule.job")) == {"nightly", "hourly"}
    assert set(by_key(resources, "aws_cloudwatch_event_target.job")) == {"nightly", "hourly"}
    assert not by_key(resources, "aws_scheduler_schedule.job")
    # The group and the role serve `sqsjkr send --at` with either engine.
    assert {"aws_scheduler_schedule_group.jobs", "aws_iam_role.scheduler"} <= set(resources)


@needs_providers
@pytest.mark.slow
def test_terraform_module_makes_fifo_queues_whose_schedules_and_rules_set_the_group(
    example_plan: ExamplePlan,
) -> None:
    resources = example_plan.resources
    queue, dlq = (
        resources["module.fifo.aws_sqs_queue.jobs"],
        resources["module.fifo.aws_sqs_queue.dlq"],
    )
    assert (queue["name"], queue["fifo_queue"]) == ("sqsjkr.fifo", True)
    assert queue["content_based_deduplication"] is True  # EventBridge Scheduler requires it
    assert (dlq["name"], dlq["fifo_queue"]) == ("sqsjkr-dlq.fifo", True)
    # The Scheduler refuses a FIFO dead-letter queue: the schedules have a standard one.
    schedule_dlq = resources["module.fifo.aws_sqs_queue.schedule_dlq[0]"]
    assert (schedule_dlq["name"], schedule_dlq.get("fifo_queue")) == ("sqsjkr-scheduler-dlq", False)
    assert "module.fifo.aws_sqs_queue_policy.schedule_dlq[0]" in resources
    assert "module.sqsjkr.aws_sqs_queue.schedule_dlq[0]" not in resources  # a standard queue's DLQ
    schedules = by_key(resources, "module.fifo.aws_scheduler_schedule.job")
    groups = {
        key: [params["message_group_id"] for params in s["target"][0]["sqs_parameters"]]
        for key, s in schedules.items()
    }
    assert groups == {"nightly": ["nightly_backup"], "hourly": ["hourly"]}
    targets = by_key(resources, "module.fifo_rules.aws_cloudwatch_event_target.job")
    assert targets["nightly"]["sqs_target"] == [{"message_group_id": "nightly_backup"}]
    # A rule's message: the event's time and rule substituted, as the input transformer does.
    [transformer] = targets["nightly"]["input_transformer"]
    rule = "arn:aws:events:us-east-1:123456789012:rule/sqsjkr-nightly"
    sent = substituted(
        transformer["input_template"], {"<time>": "2030-01-31T03:00:00Z", "<rule>": rule}
    )
    parsed = parse_job(sent, message_id="m", sent_at=0)
    assert (parsed.origin, parsed.firing) == (
        Origin.SCHEDULE,
        Firing(
            datetime(2030, 1, 31, 3, tzinfo=timezone.utc).timestamp(),
            rule,
            "cron(0 3 * * ? *)",
            "UTC",
        ),
    )


#: A job that fails one check of the fields of issue 11 each, and the check's message.
REFUSED_JOBS = {
    'neither={schedule_expression="rate(1 day)"}': "Each job needs a command or an http call.",
    'both={schedule_expression="rate(1 day)", command="x", http={url="http://127.0.0.1/"}}': (
        "A job has either a command or an http call, not both."
    ),
    'no-key={schedule_expression="rate(1 day)", command="x", concurrency_limit=2}': (
        "concurrency_limit needs a concurrency_key."
    ),
    'limit={schedule_expression="rate(1 day)", command="x", concurrency_key="k", '
    "concurrency_limit=1001}": "concurrency_limit, when set, must be a whole number between 1 and 1000.",
    'retries={schedule_expression="rate(1 day)", command="x", retries=1.5}': (
        "retries, when set, must be a whole number between 0 and 100."
    ),
    'delay={schedule_expression="rate(1 day)", command="x", retry_delay="1d"}': (
        'retry_delay must be a Go duration such as "90s", "1h30m" or "1.5h".'
    ),
    'url={schedule_expression="rate(1 day)", http={url="ftp://127.0.0.1/"}}': (
        "http.url must be an http:// or https:// URL with a host"
    ),
    'method={schedule_expression="rate(1 day)", http={url="http://127.0.0.1/", method="TRACE"}}': (
        "http.method, when set, must be GET, POST, PUT, PATCH, DELETE or HEAD."
    ),
    'timeout={schedule_expression="rate(1 day)", http={url="http://127.0.0.1/", timeout="soon"}}': (
        'http.timeout must be a Go duration such as "90s", "1h30m" or "1.5h".'
    ),
    'status={schedule_expression="rate(1 day)", http={url="http://127.0.0.1/", '
    "success_status=[99]}}": "http.success_status, when set, must be a non-empty list of status codes",
    'late={schedule_expression="rate(1 day)", command="x", catch_up="soon"}': (
        'catch_up must be a duration such as "6h", "90m" or "2d"'
    ),
}

#: The jobs of a call with the rules engine and a time zone on a FIFO queue, which preconditions
#: check: the zone and catch_up are refused, a job every minute is not.
ENGINE_JOBS = """{
    nightly = { schedule_expression = "cron(0 3 * * ? *)", command = "backup" }
    poll    = { schedule_expression = "rate(1 minute)", command = "x" }
    late    = { schedule_expression = "rate(1 day)", command = "x", catch_up = "6h" }
  }"""

ENGINE_ARGUMENTS = {
    "fifo": True,
    "schedule_engine": "rules",
    "schedule_expression_timezone": "Asia/Tokyo",
}


def refused_root() -> str:
    """One root of every module call a plan refuses, each for its own reasons: "jobs" fails the
    variables' validations of REFUSED_JOBS, "engine" preconditions, and the calls of
    pipeline_calls.REFUSED the checks of a pipeline's steps and graph.

    Each call's jobs are merged with the root's var.jobs, as the example's are: a root variable
    is unknown in terraform's validate walk, which leaves var.jobs's validations to the plan walk,
    where the preconditions of the calls that pass them are checked too. With literal jobs, a
    failed validation ends the plan before its plan walk, and would take a root (a plan, seconds
    of CPU) of its own."""
    calls = {
        "jobs": ("{" + ", ".join(REFUSED_JOBS) + "}", {}),
        "engine": (ENGINE_JOBS, ENGINE_ARGUMENTS),
        **{name: (pipeline_calls.hcl(jobs), {}) for name, jobs in pipeline_calls.REFUSED.items()},
    }
    return (
        OFFLINE_PROVIDER
        + 'variable "jobs" {\n  type    = any\n  default = {}\n}\n'
        + "".join(
            pipeline_calls.call(name, f"merge({jobs}, var.jobs)", "../", **arguments)
            for name, (jobs, arguments) in calls.items()
        )
    )


@dataclass
class Refusals:
    """What the plan of refused_root() says, each message as one line of words."""

    validations: dict[str, str]  # by module call: the messages of its var.jobs's validations
    preconditions: str  # the preconditions' messages, which name no call (but name their jobs)

    @property
    def everything(self) -> str:
        return " ".join([*self.validations.values(), self.preconditions])


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory, once: Any) -> Refusals:
    def plan() -> dict[str, Any]:
        root = copy_module(tmp_path_factory.mktemp("refused")) / "refused"
        root.mkdir()
        (root / "main.tf").write_text(refused_root())
        init(root)
        result = terraform(root, "plan", "-input=false", "-lock=false", "-json", check=False)
        assert result.returncode == 1, result.stdout + result.stderr
        validations: dict[str, list[str]] = {}
        preconditions = []
        for line in result.stdout.splitlines():
            event = json.loads(line)
            if event["type"] != "diagnostic" or event["diagnostic"]["severity"] != "error":
                continue
            diagnostic = event["diagnostic"]
            words = " ".join(f"{diagnostic['summary']}: {diagnostic['detail']}".split())
            # A validation's snippet is the call's jobs argument, in `module "NAME"`.
            context = (diagnostic.get("snippet") or {}).get("context") or ""
            if match := re.fullmatch(r'module "(\w+)"', context):
                validations.setdefault(match.group(1), []).append(words)
            else:
                preconditions.append(words)
        return {
            "validations": {name: " ".join(said) for name, said in validations.items()},
            "preconditions": " ".join(preconditions),
        }

    return Refusals(**once("refusals", plan))


@needs_providers
@pytest.mark.slow
def test_plan_refuses_time_zones_with_rules_but_not_frequent_jobs_on_a_fifo_queue(
    refusals: Refusals,
) -> None:
    assert "Job nightly has a time zone other than UTC" in refusals.preconditions
    assert (
        "Job late sets catch_up, which reads EventBridge Scheduler's schedules"
        in refusals.preconditions
    )
    # Each body carries its firing's time: content-based deduplication drops only the repeated
    # deliveries of one firing, so a job every minute on a FIFO queue is no longer refused.
    assert "more often" not in refusals.everything


@needs_providers
@pytest.mark.slow
def test_plan_refuses_bad_groups_retries_and_http_calls(refusals: Refusals) -> None:
    for message in REFUSED_JOBS.values():
        assert message in refusals.validations["jobs"], message


def test_terraform_working_files_are_ignored_by_git() -> None:
    root = TERRAFORM_DIR.parent
    if shutil.which("git") is None or not (root / ".git").exists():
        pytest.skip("not a git checkout")
    leftovers = [
        "terraform/.terraform/providers/x",
        "terraform/examples/multi-job/.terraform/modules/modules.json",
        "terraform/examples/multi-job/.terraform.lock.hcl",
        "terraform/examples/multi-job/terraform.tfstate",
        "terraform/examples/multi-job/terraform.tfstate.backup",
    ]
    checked = subprocess.run(
        ["git", "check-ignore", "--no-index", *leftovers],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert checked.stdout.split() == leftovers
