"""Reading a crontab as Vixie cron and cronie read it: env lines, five time fields, `%` stdin.

The result is what cron would run, and when in the crontab's local time; sqsjkr.eventbridge converts it.
"""

from __future__ import annotations

import pwd
import re
import shlex
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from sqsjkr.errors import CrontabError, quote

MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: Index = crontab's day-of-week number: 0 and 7 are both Sunday.
WEEKDAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

#: The @ shortcuts and the five fields each stands for. cronie flags some of them as if their
#: fields started with "*"; those flags only decide the day-of-month/day-of-week rule, which the
#: equivalent fields below get right by themselves.
SHORTCUTS = {
    "yearly": "0 0 1 1 *",
    "annually": "0 0 1 1 *",
    "monthly": "0 0 1 * *",
    "weekly": "0 0 * * 0",
    "daily": "0 0 * * *",
    "midnight": "0 0 * * *",
    "hourly": "0 * * * *",
}

# cron separates fields with blanks only; other whitespace belongs to a field or the command.
_BLANKS = " \t"
# C's isspace(), which cronie's env-line parser uses.
_SPACE = " \t\n\v\f\r"
_TOKEN = re.compile(r"([^ \t]+)[ \t]*")
_NUMBER = re.compile(r"[0-9]+")
# What a user name may look like (the portable set, plus the trailing $ of Samba machine accounts).
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\$?")
# The states of cronie's env-line parser, in the order it moves through them.
_NAME_START, _NAME, _EQ1, _EQ2, _VALUE_START, _VALUE, _DONE, _ERROR = range(8)


@dataclass(frozen=True)
class Line:
    """One line of the crontab, for error messages and descriptions."""

    number: int
    text: str

    def error(self, reason: str) -> LineError:
        return LineError(self, reason)


class LineError(CrontabError):
    """One line that cannot be converted; the message names it."""

    def __init__(self, line: Line, reason: str) -> None:
        super().__init__(f"crontab line {line.number} ({quote(line.text.strip())}): {reason}")
        self.line = line


class CrontabProblems(CrontabError):
    """Every line of a crontab that cannot be converted, in line order, one per line of str()."""

    def __init__(self, problems: Iterable[LineError]) -> None:
        self.problems = tuple(sorted(problems, key=lambda problem: problem.line.number))
        super().__init__("\n".join(str(problem) for problem in self.problems))


@dataclass(frozen=True)
class FieldSpec:
    """One of the five time fields: its name, range and value names."""

    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()


FIELDS = (
    FieldSpec("minute", 0, 59),
    FieldSpec("hour", 0, 23),
    FieldSpec("day-of-month", 1, 31),
    FieldSpec("month", 1, 12, MONTH_NAMES),
    FieldSpec("day-of-week", 0, 7, WEEKDAY_NAMES),
)


@dataclass(frozen=True)
class Schedule:
    """When a crontab line runs, in the crontab's local time, as cron's bit sets and flags."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]  # of the month, 1-31
    months: frozenset[int]  # 1-12
    weekdays: frozenset[int]  # 0-6, Sunday = 0
    # cron(8): when both day fields are restricted the line runs on days matching EITHER one;
    # "restricted" means the field does not start with "*" (so "*/2" counts as unrestricted).
    day_or: bool
    # cronie's "wildcard job" (minute or hour field starts with "*"): it follows the clock across
    # daylight-saving changes instead of catching up or skipping.
    wildcard: bool
    text: str  # the fields as written, one blank apart, or the @ shortcut

    @property
    def all_days(self) -> bool:
        return len(self.days) == 31

    @property
    def all_weekdays(self) -> bool:
        return len(self.weekdays) == 7


@dataclass(frozen=True)
class EnvSetting:
    """A NAME=value line: it sets the variable for every job below it."""

    line: Line
    name: str
    value: str


@dataclass(frozen=True)
class CronJob:
    """A job line: when it runs, what cron runs, and the environment settings above it."""

    line: Line
    schedule: Schedule
    command: str  # what cron passes to `sh -c`: the text before the first unescaped %
    stdin: str  # what cron writes to its stdin, "" for nothing
    written: str  # the command as written, % and all
    user: str | None  # the user column of a system crontab
    envs: Mapping[str, str] = field(default_factory=dict)

    @property
    def shell_command(self) -> str:
        """One `sh -c` command that runs like cron ran this line, stdin included."""
        if not self.stdin:
            return self.command
        # cron runs `/bin/sh -c COMMAND` with the text on a pipe; the same, spelled in shell.
        return f"printf %s {shlex.quote(self.stdin)} | /bin/sh -c {shlex.quote(self.command)}"


Entry = EnvSetting | CronJob


def decode_crontab(data: bytes) -> str:
    """The text of a crontab file; CrontabError names the line that is not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise CrontabError(f"crontab line {line}: not UTF-8 text") from None


def parse_crontab(text: str, *, system: bool = False) -> tuple[Entry, ...]:
    """The env settings and jobs of a crontab, in order; system=True reads a user column.

    CrontabProblems names every line cron would refuse or that has no exact meaning here.
    """
    entries, problems = read_crontab(text, system=system)
    if problems:
        raise CrontabProblems(problems)
    return entries


def read_crontab(
    text: str, *, system: bool = False
) -> tuple[tuple[Entry, ...], tuple[LineError, ...]]:
    """The entries of the lines that parse, and the problem of each line that does not."""
    entries: list[Entry] = []
    problems: list[LineError] = []
    envs: dict[str, str] = {}
    for number, raw in enumerate(text.split("\n"), start=1):
        try:
            entry = _parse_line(Line(number, raw), system=system, envs=envs)
        except LineError as problem:
            problems.append(problem)
            continue
        if isinstance(entry, EnvSetting):
            envs[entry.name] = entry.value
        if entry is not None:
            entries.append(entry)
    return tuple(entries), tuple(problems)


def _parse_line(line: Line, *, system: bool, envs: Mapping[str, str]) -> Entry | None:
    """The entry of one line, None for a comment or a blank line."""
    stripped = line.text.lstrip(_BLANKS)
    if not stripped or stripped.startswith("#"):
        return None
    if "\0" in line.text:
        raise line.error("contains a NUL character")
    setting = parse_env_line(stripped)
    if setting is not None:
        name, value = setting
        if not name:
            raise line.error("environment setting with an empty name")
        return EnvSetting(line, name, value)
    if "\r" in line.text:
        # cron would pass the carriage return to the shell as part of the command.
        raise line.error("contains a carriage return (DOS line endings?): run dos2unix")
    return _parse_job(line, stripped, system=system, envs=dict(envs))


def parse_env_line(text: str) -> tuple[str, str] | None:
    """(name, value) when text (without leading blanks) is an env setting to cronie, else None.

    A port of cronie's load_env: `NAME = value`, name or value optionally in matching single or
    double quotes (no escapes), blanks around "=" ignored, an unquoted value's trailing blanks
    dropped. An empty value needs quotes (NAME=""); anything after a closing quote but blanks
    makes the line not an env setting.
    """
    state = _NAME_START
    quote_char = ""
    name: list[str] = []
    value: list[str] = []
    target = name
    i = 0
    while state != _ERROR and i < len(text):
        c = text[i]
        if state in (_NAME_START, _VALUE_START):
            if c in "'\"":
                quote_char = c
                i += 1
            state += 1
            if i == len(text):
                break
            c = text[i]
        if state in (_NAME, _VALUE):
            if quote_char:
                if c == quote_char:
                    state += 1
                    i += 1
                    continue
                if state == _NAME and c == "=":
                    state = _ERROR
                    continue
            elif state == _NAME:
                if c in _SPACE:
                    i += 1
                    state += 1
                    continue
                if c == "=":
                    state += 1
                    continue
            target.append(c)
            i += 1
        elif state == _EQ1:
            if c == "=":
                state = _EQ2
                target = value
                quote_char = ""
            elif c not in _SPACE:
                state = _ERROR
            i += 1
        else:  # _EQ2 or _DONE: skip blanks; anything else moves on (from _DONE: to _ERROR)
            if c in _SPACE:
                i += 1
            else:
                state += 1
    if state == _DONE:
        return "".join(name), "".join(value)
    if state == _VALUE and not quote_char:
        return "".join(name), "".join(value).rstrip(_SPACE)
    return None


def split_percent(command: str) -> tuple[str, str]:
    """(command, stdin) as cron splits a line's command at its first unescaped `%`.

    Before it `\\%` is a literal % (the backslash goes) and other backslashes stay. After it each
    `%` is a newline, `\\%` a literal %, and a newline ends the text unless it already does.
    """
    kept: list[str] = []
    escaped = False
    rest: str | None = None
    for i, ch in enumerate(command):
        if escaped:
            if ch == "%":
                kept[-1] = "%"
            else:
                kept.append(ch)
            escaped = False
            continue
        if ch == "%":
            rest = command[i + 1 :]
            break
        kept.append(ch)
        escaped = ch == "\\"
    if not rest:
        return "".join(kept), ""
    data: list[str] = []
    escaped = False
    # Set only by characters cron writes itself, not by the backslashes it lets through.
    needs_newline = False
    for ch in rest:
        if escaped:
            if ch != "%":
                data.append("\\")
        elif ch == "%":
            ch = "\n"
        escaped = ch == "\\"
        if not escaped:
            data.append(ch)
            needs_newline = ch != "\n"
    if escaped:
        data.append("\\")
    if needs_newline:
        data.append("\n")
    return "".join(kept), "".join(data)


def parse_field(text: str, spec: FieldSpec) -> frozenset[int]:
    """The values of one time field (a list of `*`, N, N-M, names, each with an optional /step)."""
    values: set[int] = set()
    for item in text.split(","):
        base, slash, step_text = item.partition("/")
        if base == "*":
            low, high = spec.low, spec.high
        elif "-" in base:
            first, _, last = base.partition("-")
            low, high = _value(first, spec), _value(last, spec)
            if low > high:
                raise ValueError(f"range {item!r} runs backwards (cron has no wrap-around ranges)")
        else:
            low = high = _value(base, spec)
            if slash:
                # Vixie cron and cronie read "5/10" as 5 (they skip "/10"), other crons as
                # 5-max/10: refuse rather than pick one.
                raise ValueError(
                    f"{item!r}: a step after a single value means different things to different "
                    f"crons; write {base}-{spec.high}/{step_text} or {base}"
                )
        step = 1
        if slash:
            if not _NUMBER.fullmatch(step_text) or int(step_text) == 0:
                raise ValueError(f"{item!r}: the step must be a positive number")
            step = int(step_text)
        values.update(range(low, high + 1, step))
    return frozenset(values)


def _value(text: str, spec: FieldSpec) -> int:
    if _NUMBER.fullmatch(text):
        number = int(text)
        if not spec.low <= number <= spec.high:
            raise ValueError(f"{text!r} is out of range {spec.low}-{spec.high}")
        return number
    if text.lower() in spec.names:
        return spec.names.index(text.lower()) + (1 if spec.name == "month" else 0)
    if not text:
        raise ValueError("a value is missing")
    expected = f"{spec.low}-{spec.high}"
    if spec.names:
        expected += f" or a name ({spec.names[0]}-{spec.names[-1]})"
    raise ValueError(f"{text!r} is not a number {expected}")


def parse_schedule(fields: tuple[str, ...], text: str) -> Schedule:
    """The Schedule of five time fields; ValueError names the field at fault."""
    sets = []
    for value, spec in zip(fields, FIELDS, strict=True):
        try:
            sets.append(parse_field(value, spec))
        except ValueError as exc:
            raise ValueError(f"bad {spec.name} field {value!r}: {exc}") from None
    minute, hour, day, month, weekday = fields
    return Schedule(
        minutes=sets[0],
        hours=sets[1],
        days=sets[2],
        months=sets[3],
        weekdays=frozenset(w % 7 for w in sets[4]),
        day_or=not (day.startswith("*") or weekday.startswith("*")),
        wildcard=minute.startswith("*") or hour.startswith("*"),
        text=text,
    )


def _parse_job(line: Line, text: str, *, system: bool, envs: dict[str, str]) -> CronJob:
    rest = text
    if rest.startswith("-"):
        # cronie: "-" before the schedule only keeps cron from logging the run.
        rest = rest[1:]
    if rest.startswith("@"):
        keyword, rest = _take(rest)
        name = keyword[1:]
        if name == "reboot":
            raise line.error("@reboot runs at boot, which no schedule can express")
        if name not in SHORTCUTS:
            raise line.error(
                f"unknown shortcut {keyword!r} (cron knows @"
                + ", @".join(["reboot", *SHORTCUTS])
                + ")"
            )
        fields = tuple(SHORTCUTS[name].split())
        text_of_schedule = keyword
    else:
        taken = []
        for _ in FIELDS:
            token, rest = _take(rest)
            if not token:
                raise line.error(
                    "neither an environment setting nor a job (five time fields and a command)"
                )
            taken.append(token)
        fields = tuple(taken)
        text_of_schedule = " ".join(fields)
    try:
        schedule = parse_schedule(fields, text_of_schedule)
    except ValueError as exc:
        raise line.error(str(exc)) from None
    user = None
    if system:
        user, rest = _take(rest)
        if not user:
            raise line.error("no user and command after the schedule (--system reads a user)")
        if not _USER_NAME.fullmatch(user):
            raise line.error(
                f"{user!r} is not a user name: with --system the word after the schedule is the "
                "user to run as. Is this a user crontab (crontab -e)? Then drop --system"
            )
    elif _take(rest)[0] == "root" and shutil.which("root") is None:
        # Other user names are often commands too (mail, backup): see looks_like_user.
        raise line.error(
            "the command starts with 'root', a user name: this looks like a system crontab "
            "(/etc/crontab, /etc/cron.d/*), whose lines name the user before the command. Pass "
            "--system (or, if root really is a command, write its path)"
        )
    if not rest:
        raise line.error(f"no command after the user {user!r}" if user else "no command")
    if rest.startswith("*"):
        # cron's own check for the common typo: six time fields (as in EventBridge or Quartz).
        raise line.error("the command starts with '*': a sixth time field? crontab has five")
    command, stdin = split_percent(rest)
    if not command.strip(_SPACE):
        raise line.error("the command before '%' is empty")
    return CronJob(
        line=line,
        schedule=schedule,
        command=command,
        stdin=stdin,
        written=rest,
        user=user,
        envs=envs,
    )


def looks_like_user(command: str) -> str | None:
    """The first word of command when it is followed by more and names a user of this host's
    passwd database that is not a command on PATH: perhaps a system crontab's user column."""
    word, rest = _take(command)
    if not rest or not _USER_NAME.fullmatch(word):
        return None
    try:
        pwd.getpwnam(word)
    except KeyError:
        return None
    return word if shutil.which(word) is None else None


def _take(text: str) -> tuple[str, str]:
    """The first blank-separated token of text and what follows it, blanks skipped."""
    match = _TOKEN.match(text)
    if match is None:
        return "", text
    return match.group(1), text[match.end() :]
