"""Terraform's `jobs` variable written out: a .tfvars file in HCL, or a .tfvars.json file.

HCL strings are escaped so that terraform reads back exactly the text given, template sequences included.
"""

from __future__ import annotations

import json
import re

from sqsjkr.crontab.eventbridge import Conversion

_HCL_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HCL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def render_json(conversion: Conversion) -> str:
    """A .tfvars.json file: {"jobs": {...}}; terraform reads its strings verbatim."""
    jobs = {job.key: job.fields() for job in conversion.jobs}
    return json.dumps({"jobs": jobs}, indent=2, ensure_ascii=False) + "\n"


def render_hcl(conversion: Conversion, timezone: str) -> str:
    """A .tfvars file setting `jobs`, formatted as `terraform fmt` formats it."""
    if conversion.engine == "scheduler":
        what = f"EventBridge Scheduler schedules in the crontab's zone ({timezone} or CRON_TZ's)."
    else:
        what = f"EventBridge schedules in UTC for a crontab whose times are in {timezone}."
    lines = ["# The `jobs` variable of the sqsjkr schedule module, from `sqsjkr crontab2tf`:"]
    lines.append(f"# {what}")
    # cron runs each line on its own clock: a chain of jobs is a guess of times, which only the
    # user can turn into a pipeline's after.
    lines.append("# A crontab cannot say that a job runs after another: for that, give the job")
    lines.append('# after = ["<key>"] instead of its schedule_expression (docs/pipelines.md).')
    if not conversion.jobs:
        return "\n".join([*lines, "jobs = {}", ""])
    lines.append("jobs = {")
    for job in conversion.jobs:
        lines.append(f"  {hcl_string(job.key, ascii_only=True)} = {{")
        fields = job.fields()
        envs = fields.pop("envs", None)
        lines += _hcl_attributes(
            [(name, hcl_string(str(value))) for name, value in fields.items()], "    "
        )
        if isinstance(envs, dict):
            lines.append("    envs = {")
            lines += _hcl_attributes(
                [(hcl_key(name), hcl_string(value)) for name, value in envs.items()], "      "
            )
            lines.append("    }")
        lines.append("  }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _hcl_attributes(pairs: list[tuple[str, str]], indent: str) -> list[str]:
    # terraform fmt lines up the "=" of consecutive one-line attributes.
    width = max(len(key) for key, _ in pairs)
    return [f"{indent}{key.ljust(width)} = {value}" for key, value in pairs]


def hcl_key(name: str) -> str:
    """An object key: bare when it is a plain identifier, else a quoted string."""
    if _HCL_IDENTIFIER.fullmatch(name) and name not in ("true", "false", "null"):
        return name
    return hcl_string(name, ascii_only=True)


def hcl_string(text: str, *, ascii_only: bool = False) -> str:
    """text as an HCL quoted string literal, template sequences escaped: its value is text."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _HCL_ESCAPES:
            out.append(_HCL_ESCAPES[ch])
        elif code < 0x20 or 0x7F <= code < 0xA0 or (ascii_only and code > 0x7E):
            # ASCII keys keep terraform fmt's column count equal to ours.
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
        else:
            out.append(ch)
    escaped = "".join(out).replace("${", "$${").replace("%{", "%%{")
    return f'"{escaped}"'
