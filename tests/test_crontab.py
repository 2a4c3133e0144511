"""`sqsjkr crontab2tf`: crontab parsing, exact conversion to EventBridge cron in UTC, refusals, output.

The property test evaluates both cron dialects independently of the code under test.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqsjkr.commands.cli import cli, main
from sqsjkr.contract.job import parse_job
from sqsjkr.crontab.eventbridge import (
    Conversion,
    ConvertOptions,
    TerraformJob,
    convert_crontab,
    convert_job,
    zone_offsets,
)
from sqsjkr.crontab.parse import (
    FIELDS,
    CronJob,
    CrontabProblems,
    EnvSetting,
    decode_crontab,
    parse_crontab,
    parse_env_line,
    parse_field,
    read_crontab,
    split_percent,
)
from sqsjkr.crontab.tfvars import hcl_string
from sqsjkr.errors import CrontabError

# Conversions look at the zones' offsets from this instant on, so results do not depend on today.
NOW = datetime(2025, 1, 1, tzinfo=timezone.utc)
TERRAFORM = shutil.which("terraform")
KEY = re.compile(r"[A-Za-z0-9._-]{1,40}")


def convert(
    text: str,
    zone: str = "UTC",
    *,
    dst: Any = None,
    split: bool = False,
    system: bool = False,
    engine: Any = "rules",
) -> Conversion:
    """Most tests here are of the UTC conversion for rules; test_crontab_dst.py has the scheduler's."""
    options = ConvertOptions(
        zone, engine=engine, accept_dst_shift=dst, split_dom_dow=split, now=NOW
    )
    entries, problems = read_crontab(text, system=system)
    return convert_crontab(entries, options, problems=problems)


def expressions(line: str, zone: str = "UTC", **kwargs: Any) -> list[str]:
    return [job.schedule_expression for job in convert(line + "\n", zone, **kwargs).jobs]


def only_job(text: str) -> CronJob:
    (job,) = [e for e in parse_crontab(text) if isinstance(e, CronJob)]
    return job


# --- parsing ---------------------------------------------------------------------------------


def test_comments_blank_lines_and_leading_blanks_are_skipped() -> None:
    entries = parse_crontab(
        "# m h dom mon dow command\n\n   \n\t# indented comment\n  0 1 * * * a\n"
    )
    assert [type(e) for e in entries] == [CronJob]
    assert entries[0].line.number == 5


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A=b", ("A", "b")),
        ("A = b c  ", ("A", "b c")),
        ('A = "  b "', ("A", "  b ")),
        ("A='x'  ", ("A", "x")),
        ("'A B'=x", ("A B", "x")),
        ('A=""', ("A", "")),
        ("A=it's", ("A", "it's")),
        ("A=x # not a comment", ("A", "x # not a comment")),
        ("A=", None),  # cronie: an empty value needs quotes
        ('A="x" y', None),
        ('A="x', None),
        ("0 2 * * * A=b", None),
        ("@daily A=b", None),
    ],
)
def test_env_lines_as_cronie_reads_them(text: str, expected: tuple[str, str] | None) -> None:
    assert parse_env_line(text) == expected


@pytest.mark.parametrize(
    ("index", "text", "expected"),
    [
        (0, "*/15", {0, 15, 30, 45}),
        (0, "1-30/5", {1, 6, 11, 16, 21, 26}),
        (0, "1,2,5-7", {1, 2, 5, 6, 7}),
        (1, "*", set(range(24))),
        (1, "08", {8}),
        (2, "*/10", {1, 11, 21, 31}),
        (3, "jan-mar,DEC", {1, 2, 3, 12}),
        (3, "Jan-Jun/2", {1, 3, 5}),
        (4, "MON-fri", {1, 2, 3, 4, 5}),
        (4, "sun", {0}),
        (4, "7", {7}),
        (4, "5-7", {5, 6, 7}),
        (4, "*/2", {0, 2, 4, 6}),
    ],
)
def test_fields(index: int, text: str, expected: set[int]) -> None:
    assert parse_field(text, FIELDS[index]) == expected


def test_day_of_week_seven_is_sunday() -> None:
    assert only_job("0 0 * * 7 x").schedule.weekdays == {0}
    assert only_job("0 0 * * 5-7 x").schedule.weekdays == {5, 6, 0}
    assert only_job("0 0 * * 0-7 x").schedule.weekdays == set(range(7))


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("5/10 * * * * x", "write 5-59/10 or 5"),
        ("60 * * * * x", "bad minute field '60'"),
        ("0 24 * * * x", "bad hour field"),
        ("0 0 0 * * x", "bad day-of-month field"),
        ("0 0 * 13 * x", "bad month field"),
        ("0 0 * * fri-mon x", "runs backwards"),
        ("*/0 * * * * x", "positive number"),
        ("0 0 * january * x", "not a number 1-12 or a name"),
        ("0 0 L * * x", "bad day-of-month field 'L'"),
        ("0 0 ? * * x", "bad day-of-month field"),
        ("0 0 1- * * x", "a value is missing"),
        ("0 0 * * * * x", "a sixth time field"),
        ("0 0 * * *", "no command"),
        ("0 0 * *", "neither an environment setting nor a job"),
        ("@reboot /usr/local/bin/start", "@reboot runs at boot"),
        ("@every 5m x", "unknown shortcut '@every'"),
        ("@Daily x", "unknown shortcut"),
        ("* * * * * %stdin only", "the command before '%' is empty"),
        ("0 0 * * * x\r", "carriage return"),
        ("=x", "empty name"),
    ],
)
def test_refused_lines_name_the_line(line: str, reason: str) -> None:
    with pytest.raises(CrontabError) as caught:
        parse_crontab(f"# header\n{line}\n")
    message = str(caught.value)
    assert message.startswith(f"crontab line 2 ({json.dumps(line.strip())}): ")
    assert reason in message


@pytest.mark.parametrize(
    ("shortcut", "fields"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
    ],
)
def test_shortcuts_mean_their_fields(shortcut: str, fields: str) -> None:
    short, long = only_job(f"{shortcut} x").schedule, only_job(f"{fields} x").schedule
    assert (short.minutes, short.hours, short.days, short.months, short.weekdays) == (
        long.minutes,
        long.hours,
        long.days,
        long.months,
        long.weekdays,
    )
    assert short.text == shortcut
    assert expressions(f"{shortcut} x") == expressions(f"{fields} x")


def test_cronie_no_log_dash_is_accepted() -> None:
    job = only_job("-0 3 * * * quiet")
    assert job.command == "quiet"
    assert job.schedule.hours == {3}


def test_not_utf8_names_the_line() -> None:
    with pytest.raises(CrontabError, match="crontab line 2: not UTF-8"):
        decode_crontab(b"A=1\n0 0 * * * caf\xe9\n")


# --- % in commands ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "command", "stdin"),
    [
        ("mail -s hi root", "mail -s hi root", ""),
        ("cat%Hello%World", "cat", "Hello\nWorld\n"),
        ("cat%Hello%", "cat", "Hello\n"),
        ("cat%", "cat", ""),
        ("cat%%", "cat", "\n"),
        (r"date +\%Y-\%m-\%d", "date +%Y-%m-%d", ""),
        (r"echo \\%in", "echo \\\\", "in\n"),
        (r"echo \x%a\%b\c", r"echo \x", "a%b\\c\n"),
        ("cat%a\\", "cat", "a\\\n"),
        ("cat%%\\\\", "cat", "\n\\\\"),
    ],
)
def test_percent_splits_as_cron_does(written: str, command: str, stdin: str) -> None:
    assert split_percent(written) == (command, stdin)


@pytest.mark.parametrize(
    ("written", "output"),
    [
        ("cat%Hello%World", "Hello\nWorld\n"),
        (r"tr a-z A-Z%it's \%50 of $HOME `id` \"q\"", 'IT\'S %50 OF $HOME `ID` \\"Q\\"\n'),
        ("""read line; printf '[\\%s]' "$line" "it's"%first%second""", "[first][it's]"),
        ("wc -l%%%", "2\n"),
        (r"echo '\%s' $0", "%s sh\n"),
    ],
)
def test_translated_command_feeds_stdin_like_cron(written: str, output: str) -> None:
    job = only_job(f"0 0 * * * {written}\n")
    # sqsjkr runs `sh -c COMMAND` with no stdin.
    result = subprocess.run(
        ["sh", "-c", job.shell_command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=10,
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.replace("/bin/sh", "sh") == output


# --- environment lines -----------------------------------------------------------------------


def test_jobs_get_the_env_lines_above_them() -> None:
    conversion = convert(
        "A=1\n0 0 * * * first\nB = two\nA=3\n0 1 * * * second\nC=late\n",
    )
    first, second = conversion.jobs
    assert first.envs == {"A": "1"}
    assert second.envs == {"A": "3", "B": "two"}
    assert [type(e) for e in parse_crontab("A=1\n0 0 * * * x\n")] == [EnvSetting, CronJob]


def test_mailto_is_dropped_with_a_warning() -> None:
    conversion = convert("MAILTO=ops@example.com\nMAILFROM=cron\n0 0 * * * x\n")
    assert conversion.jobs[0].envs == {}
    assert len(conversion.warnings) == 2
    assert conversion.warnings[0].startswith("crontab line 1: MAILTO is ignored")
    assert "sends no mail" in conversion.warnings[0]
    assert "daemon's log" in conversion.warnings[0]


def test_shell_other_than_bin_sh_warns_and_stays() -> None:
    conversion = convert("SHELL=/bin/sh\n0 0 * * * x\nSHELL=/bin/bash\n0 1 * * * y\n")
    assert [w.split(":")[0] for w in conversion.warnings] == ["crontab line 3"]
    assert "sh -c" in conversion.warnings[0]
    assert conversion.jobs[1].envs == {"SHELL": "/bin/bash"}


def test_tz_is_environment_only_and_warns() -> None:
    conversion = convert("TZ=Asia/Tokyo\n0 2 * * * x\n")
    assert conversion.jobs[0].schedule_expression == "cron(0 2 * * ? *)"
    assert conversion.jobs[0].envs == {"TZ": "Asia/Tokyo"}
    assert "CRON_TZ" in conversion.warnings[0]


def test_cron_tz_sets_the_zone_of_the_lines_below() -> None:
    conversion = convert("0 2 * * * a\nCRON_TZ=Asia/Tokyo\n0 2 * * * b\n", "UTC")
    a, b = conversion.jobs
    assert (a.schedule_expression, b.schedule_expression) == (
        "cron(0 2 * * ? *)",
        "cron(0 17 * * ? *)",
    )
    assert b.envs == {}
    assert b.description.startswith("crontab (Asia/Tokyo): ")


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("CRON_TZ=Mars/Olympus", "CRON_TZ: 'Mars/Olympus' is not a known IANA time zone"),
        ("RANDOM_DELAY=10", "cronie delays the jobs below by a random number of minutes"),
    ],
)
def test_refused_settings_name_the_line(line: str, reason: str) -> None:
    with pytest.raises(CrontabError, match=re.escape(f'crontab line 1 ("{line}"): {reason}')):
        convert(f"{line}\n0 0 * * * x\n")


def test_system_crontab_drops_the_user_column_and_warns() -> None:
    text = "17 * * * * root cd / && run-parts --report /etc/cron.hourly\n@daily www x\n"
    conversion = convert(text, system=True)
    assert [job.command for job in conversion.jobs] == [
        "cd / && run-parts --report /etc/cron.hourly",
        "x",
    ]
    assert [w.split("'")[1] for w in conversion.warnings] == ["root", "www"]
    assert "daemon's user" in conversion.warnings[0]
    with pytest.raises(CrontabError, match="no command after the user 'root'"):
        convert("0 0 * * * root\n", system=True)
    with pytest.raises(CrontabError, match="no user and command after the schedule"):
        convert("@daily\n", system=True)


def test_system_crontab_without_system_is_refused_on_every_user_column() -> None:
    text = "SHELL=/bin/sh\n17 * * * * root cd / && run-parts --report /etc/cron.hourly\n"
    with pytest.raises(CrontabError) as caught:
        convert(text)
    message = str(caught.value)
    assert message.startswith('crontab line 2 ("17 * * * * root cd / && run-parts')
    assert "the command starts with 'root', a user name" in message
    assert "Pass --system" in message
    # Written with a path, a command called root is a command.
    assert convert("0 0 * * * ./root x\n").jobs[0].command == "./root x"


def passwd_user(on_path: bool) -> str:
    """A user of this host other than root, on PATH as a command or not."""
    for entry in pwd.getpwall():
        name = entry.pw_name
        usable = name != "root" and re.fullmatch(r"[a-z_][a-z0-9_-]*", name)
        if usable and (shutil.which(name) is not None) is on_path:
            return name
    pytest.skip(f"this host has no user that is {'' if on_path else 'not '}a command on PATH")


def test_a_user_of_this_host_in_the_command_column_warns() -> None:
    user = passwd_user(on_path=False)  # www-data, backup, mail without mailutils, ...
    conversion = convert(f"# header\n0 0 * * * {user} /usr/local/bin/job\n")
    assert conversion.jobs[0].command == f"{user} /usr/local/bin/job"
    (warning,) = conversion.warnings
    assert warning.startswith(f"crontab line 2: the command starts with {user!r}, a user")
    assert "pass --system" in warning
    # A user column is followed by a command: a word alone is the command.
    assert convert(f"0 0 * * * {user}\n").warnings == ()
    assert convert(f"0 0 * * * {user} x\n", system=True).jobs[0].command == "x"


def test_a_user_name_that_is_also_a_command_is_a_command() -> None:
    command = passwd_user(on_path=True)  # sync, man, ... on most hosts
    conversion = convert(f"0 0 * * * {command} -x\n")
    assert conversion.jobs[0].command == f"{command} -x"
    assert conversion.warnings == ()


def test_system_flag_on_a_user_crontab_is_refused() -> None:
    with pytest.raises(CrontabError) as caught:
        convert("0 2 * * * /usr/local/bin/backup.sh --full\n", system=True)
    assert "'/usr/local/bin/backup.sh' is not a user name" in str(caught.value)
    assert "drop --system" in str(caught.value)


# --- conversion ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "line", "expected"),
    [
        ("UTC", "0 3 * * 0 x", ["cron(0 3 ? * SUN *)"]),
        ("UTC", "0 3 * * 7 x", ["cron(0 3 ? * SUN *)"]),
        ("UTC", "30 9 * * mon-fri x", ["cron(30 9 ? * MON-FRI *)"]),
        ("UTC", "*/15 8-18 1,15 */3 * x", ["cron(0/15 8-18 1,15 1,4,7,10 ? *)"]),
        ("UTC", "0 0 1-31 * mon x", ["cron(0 0 * * ? *)"]),  # either field matches every day
        ("UTC", "0 0 1,15 * 0-6 x", ["cron(0 0 * * ? *)"]),
        ("UTC", "0 12 * * 1,3,5 x", ["cron(0 12 ? * MON,WED,FRI *)"]),
        ("Asia/Tokyo", "0 2 * * * x", ["cron(0 17 * * ? *)"]),
        ("Asia/Tokyo", "30 1 * * mon x", ["cron(30 16 ? * SUN *)"]),
        ("Asia/Tokyo", "0 8 * * sat,sun x", ["cron(0 23 ? * FRI,SAT *)"]),
        ("Asia/Tokyo", "0 10 * * sat,sun x", ["cron(0 1 ? * SUN,SAT *)"]),
        ("Asia/Tokyo", "0 2 1 * * x", ["cron(0 17 L * ? *)"]),
        ("Asia/Tokyo", "0 2 15 * * x", ["cron(0 17 14 * ? *)"]),
        ("Asia/Tokyo", "0 2 1,15 * * x", ["cron(0 17 14 * ? *)", "cron(0 17 L * ? *)"]),
        ("Asia/Tokyo", "0 10 1 * * x", ["cron(0 1 1 * ? *)"]),
        ("Asia/Tokyo", "0 0 31 * * x", ["cron(0 15 30 1,3,5,7,8,10,12 ? *)"]),
        ("Asia/Tokyo", "0 2 * 1 * x", ["cron(0 17 1-30 1 ? *)", "cron(0 17 31 12 ? *)"]),
        ("Asia/Tokyo", "0 8,9 * * mon x", ["cron(0 0 ? * MON *)", "cron(0 23 ? * SUN *)"]),
        (
            "Asia/Tokyo",
            "0 2 1,31 * * x",
            ["cron(0 17 30,31 1,3-12 ? *)", "cron(0 17 L 2 ? *)"],
        ),
        ("Asia/Kolkata", "0 9 * * * x", ["cron(30 3 * * ? *)"]),
        ("Asia/Kolkata", "0,30 9,10 * * * x", ["cron(0 4,5 * * ? *)", "cron(30 3,4 * * ? *)"]),
        ("Asia/Kolkata", "0,30 9 * * * x", ["cron(0 4 * * ? *)", "cron(30 3 * * ? *)"]),
        ("Asia/Kolkata", "*/15 * * * * x", ["cron(0/15 * * * ? *)"]),
        ("Asia/Kolkata", "0 */6 * * * x", ["cron(30 0/6 * * ? *)"]),
        ("Asia/Kolkata", "0 2 * * mon x", ["cron(30 20 ? * SUN *)"]),
        ("Asia/Kathmandu", "0 0 * * * x", ["cron(15 18 * * ? *)"]),
        ("America/Sao_Paulo", "0 22 * * fri x", ["cron(0 1 ? * SAT *)"]),
        ("America/Sao_Paulo", "0 22 31 * * x", ["cron(0 1 1 1,2,4,6,8,9,11 ? *)"]),
    ],
)
def test_conversion(zone: str, line: str, expected: list[str]) -> None:
    assert zone_offsets(zone, NOW).fixed
    assert expressions(line, zone) == expected


@pytest.mark.parametrize(
    ("zone", "line"),
    [
        ("Asia/Tokyo", "0 2 * 2 * x"),  # 17:00 UTC on Feb 1-27 or 1-28: leap years differ
        ("America/Sao_Paulo", "0 23 28 * * x"),  # Feb 28 becomes Mar 1 or Feb 29
        ("Asia/Tokyo", "0 2 * 3 mon x"),  # Mondays in March: some are Sundays in February
    ],
)
def test_day_shifts_with_no_exact_equivalent_are_refused(zone: str, line: str) -> None:
    with pytest.raises(CrontabError) as caught:
        convert(f"{line}\n", zone)
    message = str(caught.value)
    assert message.startswith(f'crontab line 1 ("{line}"): ')
    assert "no exact EventBridge equivalent" in message


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Sao_Paulo"])
@pytest.mark.parametrize(
    "line", ["0 0 31 4 * x", "0 0 30 2 * x", "0 0 31 4,6 * x", "0 0 30,31 2 * x"]
)
def test_dates_that_never_occur_are_refused_naming_the_line(zone: str, line: str) -> None:
    with pytest.raises(CrontabError) as caught:
        convert(f"# header\n{line}\n", zone)
    message = str(caught.value)
    assert message.startswith(f'crontab line 2 ("{line}"): day-of-month ')
    assert "never runs it" in message


def test_a_split_line_whose_days_of_the_month_never_occur_is_refused() -> None:
    with pytest.raises(CrontabError, match="write \\* as its day-of-month"):
        convert("0 0 31 4 mon x\n", split=True)


def test_february_29_is_a_date() -> None:
    assert expressions("0 0 29 2 * x") == ["cron(0 0 29 2 ? *)"]
    assert expressions("0 0 29-31 2 * x") == ["cron(0 0 29 2 ? *)"]


def test_both_day_fields_are_refused_unless_split() -> None:
    with pytest.raises(CrontabError, match=r"crontab line 1 .*either.*--split-dom-dow"):
        convert("0 9 1,15 * mon report\n")
    jobs = convert("0 9 1,15 * mon report\n", "Asia/Tokyo", split=True).jobs
    assert [job.schedule_expression for job in jobs] == [
        "cron(0 0 1,15 * ? *)",
        "cron(0 0 ? * MON *)",
    ]
    dom, dow = jobs
    assert dom.key.endswith("-dom") and dow.key.endswith("-dow")
    assert dom.lock_id == dow.lock_id == dom.key.removesuffix("-dom")
    assert "run on days matching both" in dom.description


def test_star_day_field_with_both_restricted_is_refused() -> None:
    # "*/2" starts with "*": cron ANDs the day fields, which one EventBridge rule cannot do.
    with pytest.raises(CrontabError, match="matching both"):
        convert("0 0 */2 * mon x\n", split=True)


# --- daylight saving time --------------------------------------------------------------------


def test_dst_zone_is_refused_naming_the_line_and_zone() -> None:
    with pytest.raises(CrontabError) as caught:
        convert("PATH=/bin\n0 2 * * * backup\n", "Europe/Berlin")
    message = str(caught.value)
    assert message.startswith('crontab line 2 ("0 2 * * * backup"): Europe/Berlin changes')
    assert "UTC+01:00, UTC+02:00" in message
    assert "--accept-dst-shift" in message


@pytest.mark.parametrize(
    ("choice", "expected", "drift"),
    [
        (
            "standard",
            "cron(0 1 * * ? *)",
            "1h later by the local clock while Europe/Berlin is at UTC+02:00",
        ),
        (
            "daylight",
            "cron(0 0 * * ? *)",
            "1h earlier by the local clock while Europe/Berlin is at UTC+01:00",
        ),
    ],
)
def test_dst_zone_with_a_chosen_offset_says_runs_drift(
    choice: str, expected: str, drift: str
) -> None:
    conversion = convert("0 2 * * * backup\n", "Europe/Berlin", dst=choice)
    (job,) = conversion.jobs
    assert job.schedule_expression == expected
    assert drift in job.description
    assert f"({choice} time)" in job.description
    assert conversion.warnings == (f"Europe/Berlin: {job.description.split(' -- ')[1]}",)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("*/15 * * * * poll", "cron(0/15 * * * ? *)"),
        ("@hourly poll", "cron(0 * * * ? *)"),
        ("30 * * * * poll", "cron(30 * * * ? *)"),
    ],
)
def test_dst_zone_converts_exactly_what_no_offset_moves(line: str, expected: str) -> None:
    (job,) = convert(f"{line}\n", "America/New_York").jobs
    assert job.schedule_expression == expected
    assert " -- " not in job.description


def test_dst_zone_refuses_fixed_time_jobs_even_when_utc_would_match() -> None:
    # "0-23" is not "*": cron catches such a job up or skips it at a change, UTC does not.
    with pytest.raises(CrontabError, match="changes its UTC offset"):
        convert("0 0-23 * * * x\n", "Europe/Berlin")
    # Half-hour daylight saving moves minutes too.
    with pytest.raises(CrontabError, match="changes its UTC offset"):
        convert("0 * * * * x\n", "Australia/Lord_Howe")


# --- ids -------------------------------------------------------------------------------------


def test_ids_are_stable_and_independent_of_other_lines() -> None:
    alone = convert("0 2 * * * /usr/local/bin/backup.sh --full >/dev/null 2>&1\n").jobs[0]
    assert alone.key == "backup-sh-full-" + alone.key.rsplit("-", 1)[1]
    assert alone.lock_id == alone.key
    crowded = convert(
        "A=1\n0 1 * * * other\n# note\n0 2 * * * /usr/local/bin/backup.sh --full >/dev/null 2>&1\n"
        "0 3 * * * more\n",
        "Asia/Tokyo",
    ).jobs[1]
    assert crowded.key == alone.key
    moved = convert("0 3 * * * /usr/local/bin/backup.sh --full >/dev/null 2>&1\n").jobs[0]
    assert moved.key != alone.key


def test_keys_are_short_rule_names_even_for_long_split_lines() -> None:
    command = "/opt/app/bin/" + "very-long-name-" * 10 + ".sh --with --many --options"
    jobs = convert(f"0,30 9 1,15 * mon {command}\n", "Asia/Kolkata", split=True).jobs
    keys = [job.key for job in jobs]
    assert len(keys) == len(set(keys)) == 4
    assert all(KEY.fullmatch(key) for key in keys), keys
    assert len({job.lock_id for job in jobs}) == 1
    assert [key.rsplit("-", 2)[1:] for key in keys] == [
        ["dom", "1"],
        ["dom", "2"],
        ["dow", "1"],
        ["dow", "2"],
    ]
    assert convert("* * * * * !!!\n").jobs[0].key.startswith("job-")


@settings(max_examples=60, deadline=None)
@given(
    name=st.text("abcdefghij-_", min_size=1, max_size=50),
    prefix=st.text("abc0._-", max_size=6),
    command=st.sampled_from(["x", "/opt/a-very-long-directory/bin/the-job --with --options"]),
)
def test_keys_keep_rule_names_within_64_characters(name: str, prefix: str, command: str) -> None:
    # What the module names a rule or schedule: <name>-<key>.
    max_length = 63 - len(name)
    if len(prefix) + 14 > max_length:
        return  # too short for a split line's keys: refused, see the next test
    text = f"0,30 9 1,15 * mon {command}\n0 2 * * * {command}\n"
    options = ConvertOptions(
        "Asia/Kolkata",
        engine="rules",
        split_dom_dow=True,
        now=NOW,
        key_prefix=prefix,
        max_key_length=max_length,
    )
    jobs = convert_crontab(parse_crontab(text), options).jobs
    keys = [job.key for job in jobs]
    assert len(set(keys)) == len(keys) == 5
    for job in jobs:
        assert job.key.startswith(prefix) and job.lock_id.startswith(prefix)
        assert len(f"{name}-{job.key}") <= 64, job.key
        assert re.fullmatch(r"[0-9A-Za-z._-]{1,62}", job.key)


def test_keys_that_cannot_fit_are_refused_naming_the_line() -> None:
    options = ConvertOptions(
        "Asia/Kolkata", engine="rules", split_dom_dow=True, now=NOW, max_key_length=13
    )
    entries = parse_crontab("0 2 * * * fits\n0,30 9 1,15 * mon split\n")
    with pytest.raises(CrontabError) as caught:
        convert_crontab(entries, options)
    message = str(caught.value)
    assert message.startswith('crontab line 2 ("0,30 9 1,15 * mon split"): its keys need 14')
    assert "--max-key-length 13" in message
    short = convert_crontab(entries[:1], options).jobs[0].key
    assert len(short) == 13 and short.startswith("fits-")


def test_cli_key_prefix_and_max_key_length(tmp_path: Path) -> None:
    result = run_cli(
        "crontab2tf",
        "-",
        "--timezone",
        "UTC",
        "--format",
        "json",
        "--key-prefix",
        "web1-",
        "--max-key-length",
        "20",
        input="0 2 * * * /usr/local/bin/backup.sh --full\n",
    )
    assert result.exit_code == 0, result.output
    (key,) = json.loads(result.stdout)["jobs"]
    assert re.fullmatch(r"web1-backup-[0-9a-f]{8}", key)
    for args, message in [
        (["--key-prefix", "web 1"], "--key-prefix 'web 1': only letters"),
        (["--key-prefix", "a-long-prefix-", "--max-key-length", "20"], "leaves no room"),
        (["--max-key-length", "63"], "63 is not in the range 1<=x<=62"),
    ]:
        refused = run_cli("crontab2tf", "-", "--timezone", "UTC", *args, input="@daily x\n")
        assert refused.exit_code == 2
        assert message in refused.output


def test_duplicate_lines_are_refused_naming_both() -> None:
    with pytest.raises(CrontabError, match=r"crontab line 3 .*same schedule and command as line 1"):
        convert("0 0 * * * x\nA=1\n0 0 * * * x\n")


# --- rendering -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("plain", '"plain"'),
        ('say "hi"', '"say \\"hi\\""'),
        ("a\\b", '"a\\\\b"'),
        ("a\nb\tc\r", '"a\\nb\\tc\\r"'),
        ("${HOME} and $${X}", '"$${HOME} and $$${X}"'),
        ("%{if x} 100%", '"%%{if x} 100%"'),
        ("\x01\x7f", '"\\u0001\\u007f"'),
        ("caf\u00e9", '"caf\u00e9"'),
    ],
)
def test_hcl_strings_are_escaped(text: str, literal: str) -> None:
    assert hcl_string(text) == literal


MIXED_CRONTAB = """\
# nightly things
MAILTO=ops@example.com
PATH=/usr/local/bin:/usr/bin:/bin
"WEIRD NAME" = "  padded  "
0 2 * * * /usr/local/bin/backup.sh --full > /var/log/backup.log 2>&1
*/15 * * * * echo "${HOME}" '\\%{x}' "\\\\" caf\u00e9%in "q"
0 12 * * 1-5 mail -s "daily" root%Hello%World
"""


def run_cli(*args: str, input: str | None = None) -> Any:
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def hcl_values(text: str) -> dict[str, Any]:
    """The value of each string in an HCL file as python-hcl2 reads it, template escapes undone."""
    import hcl2  # here, not at the top: importing it costs each xdist worker's collection

    loaded = hcl2.loads(
        text,
        serialization_options=hcl2.SerializationOptions(
            strip_string_quotes=True, with_comments=False
        ),
    )

    def unescape(value: Any) -> Any:
        if isinstance(value, dict):
            return {unescape(k): unescape(v) for k, v in value.items()}
        return value.replace("$${", "${").replace("%%{", "%{")

    return dict(unescape(loaded))


def test_cli_hcl_and_json_hold_the_same_jobs(tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(MIXED_CRONTAB, encoding="utf-8")
    hcl = run_cli("crontab2tf", str(crontab), "--timezone", "Asia/Tokyo")
    assert hcl.exit_code == 0, hcl.output
    as_json = run_cli("crontab2tf", str(crontab), "--timezone", "Asia/Tokyo", "--format", "json")
    assert as_json.exit_code == 0
    jobs = json.loads(as_json.stdout)["jobs"]
    assert hcl_values(hcl.stdout) == {"jobs": jobs}
    assert len(jobs) == 3
    line = MIXED_CRONTAB.splitlines()[5]
    echo = next(body for key, body in jobs.items() if key.startswith("echo-home"))
    assert echo == {
        "schedule_expression": "cron(0/15 * * * ? *)",
        "schedule_expression_timezone": "Asia/Tokyo",
        "command": only_job(line).shell_command,
        "event_id": echo["event_id"],
        "lock_id": echo["event_id"],
        "description": f"crontab (Asia/Tokyo): {line}",
        "envs": {"PATH": "/usr/local/bin:/usr/bin:/bin", "WEIRD NAME": "  padded  "},
    }
    assert """'"'"'%{x}'"'"' "\\\\" caf\u00e9""" in echo["command"]
    assert "MAILTO is ignored" in hcl.stderr
    # What a crontab cannot express, said where the user reads the output.
    assert "# A crontab cannot say that a job runs after another" in hcl.stdout
    for key, body in jobs.items():
        assert key == body["event_id"] and KEY.fullmatch(key)
        message = {k: body[k] for k in ("command", "envs", "event_id", "lock_id")}
        job = parse_job(json.dumps(message), message_id="m", sent_at=0.0)
        assert (job.command, job.event_id, job.lock_id) == (body["command"], key, key)


def test_cli_reads_stdin_and_writes_a_file(tmp_path: Path) -> None:
    out = tmp_path / "jobs.auto.tfvars"
    result = run_cli("crontab2tf", "-", "--timezone", "UTC", "-o", str(out), input="@daily x\n")
    assert result.exit_code == 0
    assert result.stdout == ""
    jobs = hcl_values(out.read_text(encoding="utf-8"))["jobs"]
    assert [body["schedule_expression"] for body in jobs.values()] == ["cron(0 0 * * ? *)"]


def test_cli_empty_crontab_gives_empty_jobs() -> None:
    result = run_cli("crontab2tf", "-", "--timezone", "UTC", input="# nothing\n")
    assert result.stdout.endswith("jobs = {}\n")
    assert hcl_values(result.stdout) == {"jobs": {}}


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ([], 2, "sqsjkr: --timezone is required: the IANA zone the crontab's times are in"),
        (["--timezone", "Mars/Olympus"], 2, "sqsjkr: --timezone: 'Mars/Olympus' is not a known"),
        (
            ["--timezone", "Europe/Berlin", "--engine", "rules"],
            1,
            'sqsjkr: error: crontab line 2 ("0 2 * * * backup"): Europe/Berlin changes its UTC offset',
        ),
    ],
)
def test_cli_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], code: int, message: str
) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text("PATH=/bin\n0 2 * * * backup\n")
    with pytest.raises(SystemExit) as exited:
        main(["crontab2tf", str(crontab), *args])
    assert exited.value.code == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(message)
    assert captured.err.count("\n") == 1


MANY_PROBLEMS = """\
A=1
0 0 31 4 * never
61 * * * * bad-minute
0 3 * * * fine
CRON_TZ=Mars/Olympus
0 1 * * * below-a-bad-zone
CRON_TZ=Europe/Berlin
0 2 * * * dst
@reboot boot
0 3 * * * fine
"""


def test_every_problem_line_is_reported_in_line_order() -> None:
    with pytest.raises(CrontabProblems) as caught:
        convert(MANY_PROBLEMS)
    problems = caught.value.problems
    # Line 6 is left out: its zone is line 5's problem.
    assert [p.line.number for p in problems] == [2, 3, 5, 8, 9, 10]
    assert "never runs it" in str(problems[0])
    assert "bad minute field" in str(problems[1])
    assert "CRON_TZ" in str(problems[2])
    assert "Europe/Berlin changes its UTC offset" in str(problems[3])
    assert "@reboot" in str(problems[4])
    assert "same schedule and command as line 4" in str(problems[5])
    assert str(caught.value).splitlines() == [str(p) for p in problems]


def test_cli_reports_every_problem_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(MANY_PROBLEMS)
    out = tmp_path / "jobs.tfvars"
    with pytest.raises(SystemExit) as exited:
        main(["crontab2tf", str(crontab), "--timezone", "UTC", "--engine", "rules", "-o", str(out)])
    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert [re.match(r"sqsjkr: error: crontab line (\d+) ", line)[1] for line in lines[:-1]] == [  # type: ignore[index]
        "2",
        "3",
        "5",
        "8",
        "9",
        "10",
    ]
    assert (
        lines[-1] == "sqsjkr: error: 6 crontab lines cannot be converted (above); nothing written"
    )
    assert not out.exists()


needs_terraform = pytest.mark.skipif(TERRAFORM is None, reason="terraform is not on PATH")


@needs_terraform
def test_hcl_output_is_terraform_fmt_clean(tmp_path: Path) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(MIXED_CRONTAB + "0 9 1 * mon split\n", encoding="utf-8")
    result = run_cli("crontab2tf", str(crontab), "--timezone", "Asia/Kolkata", "--split-dom-dow")
    assert result.exit_code == 0
    checked = subprocess.run(
        [str(TERRAFORM), "fmt", "-check", "-"],
        input=result.stdout,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull},
    )
    assert checked.returncode == 0, checked.stdout


@needs_terraform
@pytest.mark.parametrize(("fmt", "suffix"), [("hcl", ".tfvars"), ("json", ".tfvars.json")])
def test_terraform_reads_the_values_exactly(tmp_path: Path, fmt: str, suffix: str) -> None:
    crontab = tmp_path / "crontab"
    crontab.write_text(MIXED_CRONTAB, encoding="utf-8")
    out = tmp_path / f"jobs{suffix}"
    run_cli("crontab2tf", str(crontab), "--timezone", "UTC", "--format", fmt, "-o", str(out))
    (tmp_path / "main.tf").write_text('variable "jobs" {\n  type = any\n}\n')
    console = subprocess.run(
        [str(TERRAFORM), "console", f"-var-file={out}"],
        input="jsonencode(var.jobs)\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "TF_IN_AUTOMATION": "1"},
    )
    assert console.returncode == 0, console.stderr
    expected = {j.key: j.fields() for j in convert(MIXED_CRONTAB).jobs}
    assert json.loads(json.loads(console.stdout)) == expected


# --- the UTC schedule runs exactly when cron would -------------------------------------------

FIXED_ZONES = [
    "UTC",
    "Asia/Tokyo",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "America/Sao_Paulo",
    "Pacific/Marquesas",
    "Pacific/Kiritimati",
    "Pacific/Pago_Pago",
]
NAMES = {
    3: ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
    4: ["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
}
LIMITS = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


@st.composite
def cron_field(draw: st.DrawFn, index: int) -> str:
    low, high = LIMITS[index]

    def value() -> str:
        number = draw(st.integers(low, high))
        names = NAMES.get(index)
        if names and number - (index == 3) < len(names) and draw(st.booleans()):
            name = names[number - (index == 3)]
            return draw(st.sampled_from([name, name.upper(), name.title()]))
        return str(number)

    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["*", "n", "range", "step", "rangestep"]))
        if kind == "*":
            items.append("*")
        elif kind == "n":
            items.append(value())
        elif kind == "step":
            items.append(f"*/{draw(st.integers(1, high - low + 1))}")
        else:
            first, last = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
            item = f"{first}-{last}"
            if kind == "rangestep":
                item += f"/{draw(st.integers(1, 12))}"
            items.append(item)
    return ",".join(items)


def field_set(text: str, index: int) -> set[int]:
    """The test's own reading of a generated crontab field."""
    low, high = LIMITS[index]
    names = NAMES.get(index, [])
    values: set[int] = set()
    for item in text.split(","):
        base, _, step = item.partition("/")
        if base == "*":
            first, last = low, high
        elif "-" in base:
            first, last = (int(v) for v in base.split("-"))
        elif base.lower() in names:
            first = last = names.index(base.lower()) + (index == 3)
        else:
            first = last = int(base)
        values.update(range(first, last + 1, int(step or 1)))
    return values


def crontab_runs(fields: list[str], offset: int, start: date, days: int) -> Counter[datetime]:
    """UTC instants a crontab line runs at, cron(8)'s rules, in a zone at a fixed offset."""
    minutes, hours, doms, months, dows = (field_set(f, i) for i, f in enumerate(fields))
    weekdays = {d % 7 for d in dows}
    either = not (fields[2].startswith("*") or fields[4].startswith("*"))
    runs: Counter[datetime] = Counter()
    for n in range(-2, days + 2):
        local = start + timedelta(days=n)
        dom, dow = local.day in doms, local.isoweekday() % 7 in weekdays
        if local.month in months and ((dom or dow) if either else (dom and dow)):
            for hour in hours:
                for minute in minutes:
                    at = datetime(local.year, local.month, local.day, hour, minute)
                    runs[at - timedelta(minutes=offset)] += 1
    return runs


def eventbridge_set(text: str, low: int, high: int, names: list[str] | None = None) -> set[int]:
    """An EventBridge cron field's values (numbers or names; a/b = a, a+b, ... up to high)."""
    if text == "*":
        return set(range(low, high + 1))

    def number(value: str) -> int:
        return names.index(value) + low if names and value in names else int(value)

    values: set[int] = set()
    for item in text.split(","):
        if "/" in item:
            first, step = item.split("/")
            values.update(range(number(first), high + 1, int(step)))
        elif "-" in item:
            first, last = item.split("-")
            values.update(range(number(first), number(last) + 1))
        else:
            values.add(number(item))
    return values


def eventbridge_runs(expression: str, start: date, days: int) -> Counter[datetime]:
    match = re.fullmatch(r"cron\((\S+) (\S+) (\S+) (\S+) (\S+) \*\)", expression)
    assert match, expression
    minute, hour, dom, month, dow = match.groups()
    assert (dom == "?") != (dow == "?"), expression
    minutes, hours = eventbridge_set(minute, 0, 59), eventbridge_set(hour, 0, 23)
    months = eventbridge_set(month, 1, 12)
    weekday_names = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]
    runs: Counter[datetime] = Counter()
    for n in range(days):
        day = start + timedelta(days=n)
        last = (day + timedelta(days=1)).day == 1
        if dom == "L":
            on = last
        elif dom != "?":
            on = day.day in eventbridge_set(dom, 1, 31)
        else:  # EventBridge numbers weekdays 1-7 from Sunday
            on = day.isoweekday() % 7 + 1 in eventbridge_set(dow, 1, 7, weekday_names)
        if on and day.month in months:
            for h in hours:
                for m in minutes:
                    runs[datetime(day.year, day.month, day.day, h, m)] += 1
    return runs


@st.composite
def window_start(draw: st.DrawFn) -> date:
    # Month ends and starts of leap, common and century years, where exactness is hardest.
    year = draw(st.sampled_from([2023, 2024, 2100, 2000]))
    month = draw(st.integers(1, 12))
    day = draw(st.sampled_from([1, 26, 27, 28, 29, 30]))
    first = date(year, month, 1)
    return min(first + timedelta(days=day - 1), (first + timedelta(days=32)).replace(day=1))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fields=st.tuples(*(cron_field(i) for i in range(5))),
    zone=st.sampled_from(FIXED_ZONES),
    start=window_start(),
)
def test_utc_schedule_runs_exactly_when_cron_would(
    fields: tuple[str, ...], zone: str, start: date
) -> None:
    offsets = zone_offsets(zone, NOW)
    assert offsets.fixed
    offset = offsets.offsets[0]
    (job,) = parse_crontab(" ".join(fields) + " x\n")
    assert isinstance(job, CronJob)
    options = ConvertOptions(zone, engine="rules", split_dom_dow=True, now=NOW)
    try:
        converted, _ = convert_job(job, offsets, options)
    except CrontabError as refused:
        # Only dates can be inexpressible: any weekdays in every month always convert.
        assert not (fields[2] == "*" and fields[3] == "*"), refused
        return
    days = 3
    expected = crontab_runs(list(fields), offset, start, days)
    got: Counter[datetime] = Counter()
    for terraform_job in converted:
        got += eventbridge_runs(terraform_job.schedule_expression, start, days)
    window_end = datetime(start.year, start.month, start.day) + timedelta(days=days)
    expected = Counter(
        {at: n for at, n in expected.items() if at < window_end and at.date() >= start}
    )
    either = not (fields[2].startswith("*") or fields[4].startswith("*"))
    all_days = field_set(fields[2], 2) == set(range(1, 32))
    all_weekdays = {d % 7 for d in field_set(fields[4], 4)} == set(range(7))
    if either and not (all_days or all_weekdays):
        # Two rules for cron's "either day field": equal as sets (both run on shared days).
        assert set(got) == set(expected)
    else:
        assert got == expected


@pytest.mark.parametrize(
    ("zone", "line"),
    [
        ("Asia/Tokyo", "0 2 1 * *"),
        ("Asia/Tokyo", "0 2 1,31 * *"),
        ("Asia/Tokyo", "0 2 1,15,28-31 * *"),
        ("Asia/Tokyo", "30 0-8/4 * 1,3 *"),
        ("Asia/Tokyo", "0 0 31 * *"),
        ("Asia/Kolkata", "0,30 9,10 1,15 * mon"),
        ("America/Sao_Paulo", "0 22 31 * *"),
        ("America/Sao_Paulo", "0 21-23 30 4,6,9,11 *"),
        ("Pacific/Kiritimati", "59 13 1,2 * *"),
    ],
)
@pytest.mark.parametrize("year", [2023, 2099])
def test_tricky_lines_run_exactly_when_cron_would_for_two_years(
    zone: str, line: str, year: int
) -> None:
    fields = line.split()
    (job,) = parse_crontab(f"{line} x\n")
    assert isinstance(job, CronJob)
    offsets = zone_offsets(zone, NOW)
    converted, _ = convert_job(
        job, offsets, ConvertOptions(zone, engine="rules", split_dom_dow=True, now=NOW)
    )
    start = date(year, 1, 1)
    days = (date(year + 2, 1, 1) - start).days
    got: Counter[datetime] = Counter()
    for terraform_job in converted:
        got += eventbridge_runs(terraform_job.schedule_expression, start, days)
    expected = crontab_runs(fields, offsets.offsets[0], start, days)
    end = datetime(year + 2, 1, 1)
    expected = Counter({at: n for at, n in expected.items() if datetime(year, 1, 1) <= at < end})
    if "mon" in line:
        assert set(got) == set(expected)
    else:
        assert got == expected
    assert got


def test_terraform_job_fields_order_and_defaults() -> None:
    job = TerraformJob("k", "cron(0 0 * * ? *)", "x", "k", "d")
    assert list(job.fields()) == [
        "schedule_expression",
        "schedule_expression_timezone",
        "command",
        "event_id",
        "lock_id",
        "description",
    ]
    assert "envs" in TerraformJob("k", "e", "x", "k", "d", {"A": "1"}).fields()
