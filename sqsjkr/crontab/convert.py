"""`sqsjkr crontab2tf`'s work: its options checked, a crontab read and converted, and the jobs
variable rendered; commands/crontab2tf.py declares the options and prints.
"""

from __future__ import annotations

from sqsjkr.crontab.eventbridge import (
    DIGEST_LENGTH,
    KEY_CHARACTERS,
    Conversion,
    ConvertOptions,
    DstChoice,
    Engine,
    convert_crontab,
    load_zone,
)
from sqsjkr.crontab.parse import decode_crontab, read_crontab
from sqsjkr.crontab.tfvars import render_hcl, render_json


def options_problem(
    zone: str | None,
    engine: Engine,
    accept_dst_shift: DstChoice | None,
    key_prefix: str,
    max_key_length: int,
) -> str | None:
    """What is wrong with the command's options, in the words of a usage error; None: nothing."""
    if zone is None:
        return (
            "--timezone is required: the IANA zone the crontab's times are in (e.g. "
            "Asia/Tokyo, or UTC)"
        )
    if accept_dst_shift is not None and engine != "rules":
        return (
            "--accept-dst-shift is for --engine rules, which run in UTC; EventBridge Scheduler "
            "follows the zone's daylight saving time by itself"
        )
    try:
        load_zone(zone)
    except ValueError as exc:
        return f"--timezone: {exc}"
    if not KEY_CHARACTERS.fullmatch(key_prefix):
        return (
            f"--key-prefix {key_prefix!r}: only letters, digits, '.', '-' and '_' may name a rule"
        )
    if len(key_prefix) + DIGEST_LENGTH > max_key_length:
        return (
            f"--max-key-length {max_key_length} leaves no room after --key-prefix {key_prefix!r} "
            f"for the {DIGEST_LENGTH}-character hash that tells the keys apart"
        )
    return None


def convert_file(data: bytes, options: ConvertOptions, *, system: bool) -> Conversion:
    """The crontab file's bytes converted; CrontabProblems names every line that cannot be."""
    entries, problems = read_crontab(decode_crontab(data), system=system)
    return convert_crontab(entries, options, problems=problems)


def rendered(conversion: Conversion, output_format: str, zone: str) -> str:
    """The jobs variable as a .tfvars.json file ("json") or a .tfvars file (HCL)."""
    return render_json(conversion) if output_format == "json" else render_hcl(conversion, zone)
