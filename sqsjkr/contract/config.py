"""The config file: TOML in the Go sqsjkr layout, rendered through env templates first.

Every invalid value is a ConfigError that starts with `config <source>: ` and names `[section] key`.
"""

from __future__ import annotations

import datetime
import difflib
import json
import logging
import os
import re
import sys
import zoneinfo
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from sqsjkr.contract.duration import Duration, duration_value
from sqsjkr.contract.http_call import LOOPBACK
from sqsjkr.contract.limits import MAX_VISIBILITY_SECONDS
from sqsjkr.contract.template import render_template
from sqsjkr.errors import ConfigError, DurationError

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DEFAULT_CONFIG_PATH = "/etc/sqsjkr/config.toml"
#: The variable that names the config when none is given (every command's --conf, and
#: sqsjkr.Fleet()): a shell beside `sqsjkr local` exports it once.
CONFIG_ENV = "SQSJKR_CONF"
_DEFAULT_STATS_PORT = 8061  # the port mackerel-plugin-sqsjkr reads
_POSITIVE = Duration(1)  # the least duration that is not zero: 1 ns
# A lease renews every third of itself: under a second that is a storm of writes. Its message's
# visibility outlasts it, and SQS caps visibility at 12 hours.
_MIN_LEASE = Duration.of_seconds(1)
_MAX_LEASE = Duration.of_seconds(3600)

log = logging.getLogger("sqsjkr.config")


@dataclass(frozen=True)
class AccountConfig:
    """[account]: where the queue and the table live."""

    id: str
    region: str
    profile: str | None = None


@dataclass(frozen=True)
class SqsConfig:
    """[sqs]: the queue jobs are received from."""

    queue_name: str
    wait_time_seconds: int = 20
    #: None: derived from [lock] lease (see lease.lease_timing), or 30 s with delete_message = "on_receive".
    visibility_timeout: int | None = None


@dataclass(frozen=True)
class QueueConfig:
    """One queue the daemon receives from, with its own workers: [sqs] (with [kicker]'s workers
    and delete_message), then each [[queues]] table."""

    name: str
    max_concurrent_num: int = 20
    wait_time_seconds: int = 20
    #: None: derived from [lock] lease, as for [sqs] visibility_timeout.
    visibility_timeout: int | None = None
    delete_message: str = "on_finish"
    #: Messages received beyond the free workers, kept in flight until a worker is free.
    prefetch: int = 0


#: A host with at most this many workers of a queue prefetches unless told otherwise.
FEW_WORKERS = 2
#: The most messages one ReceiveMessage returns.
_RECEIVE_BATCH = 10


def default_prefetch(workers: int, delete_message: str = "on_finish") -> int:
    """The prefetch of a queue whose config does not set one: with few workers, enough for one
    receive to fill a batch (each run's end is then written with the next job's claim, and a
    receive serves ten jobs); none with more, which would hold work other hosts could start,
    nor when messages are deleted on receipt, whose crash would lose the prefetched jobs."""
    if workers > FEW_WORKERS or delete_message != "on_finish":
        return 0
    return _RECEIVE_BATCH - workers


@dataclass(frozen=True)
class KickerConfig:
    """[kicker]: the workers, job limits, shutdown, the life_time trigger and the stats endpoint."""

    max_concurrent_num: int = 20
    life_time_trigger: str | None = None
    stats_port: int | None = _DEFAULT_STATS_PORT  # None when the unix socket is used
    stats_socket: str | None = None
    stats_host: str = "127.0.0.1"
    #: "on_finish": delete a message once its job has finished (at-least-once); "on_receive":
    #: as soon as it is received, as the Go daemon did (at-most-once).
    delete_message: str = "on_finish"
    shutdown_timeout: Duration | None = None  # None: wait for running jobs without limit
    job_timeout: Duration | None = None  # None: jobs without a timeout field run without limit
    kill_grace: Duration = Duration.of_seconds(10)  # between SIGTERM and SIGKILL
    #: How old the daemon's copy of the fleet's pauses may get before it reads them again.
    pause_refresh: Duration = Duration.of_seconds(60)
    #: How often the daemon refreshes its item, which `sqsjkr daemons` lists.
    member_refresh: Duration = Duration.of_seconds(60)
    #: [sqs]'s queue: messages received beyond the free workers (see QueueConfig.prefetch);
    #: None: default_prefetch of each queue's workers.
    prefetch: int | None = None
    #: How many events get /metrics series of their own; later ones share event_id="(other)".
    metrics_max_events: int = 500


@dataclass(frozen=True)
class LockConfig:
    """[lock]: the store of lock_id locks."""

    backend: str = "dynamodb"
    table: str = "sqsjkr"
    retry_interval: Duration = Duration.of_seconds(5)
    #: How long a lock or a job's dedupe claim outlives a daemon that stopped renewing it.
    lease: Duration = Duration.of_seconds(60)


@dataclass(frozen=True)
class DedupeConfig:
    """[dedupe]: the store of seen message ids."""

    backend: str = "dynamodb"


@dataclass(frozen=True)
class ScheduleConfig:
    """[schedule]: one-time jobs through EventBridge Scheduler (`sqsjkr send --at`)."""

    role_arn: str | None = None  # the module's scheduler_role_arn; required by --at and --in
    group: str = "sqsjkr"  # the module's schedule group, named as the module (default "sqsjkr")
    timezone: str = "UTC"  # of --at times written without a UTC offset
    #: What runs the module's schedules (its schedule_engine): "scheduler", the schedules of
    #: `group`, or "rules", the EventBridge rules that target the queues. Read by `schedules`.
    engine: str = "scheduler"
    #: How often the fleet looks for missed firings of schedules with catch_up (one daemon at a
    #: time, by a lease); 0 turns catch-up off on this daemon. docs/schedules.md, Catch-up.
    catch_up_interval: Duration = Duration.of_seconds(600)


@dataclass(frozen=True)
class HistoryConfig:
    """[history]: a record of every run and a summary per event."""

    backend: str = "dynamodb"  # "dynamodb" (the [lock] table) or "none"
    output_tail: int = 16 * 1024  # bytes of the end of each run's output kept; 0 keeps none
    retention: Duration = Duration.of_seconds(30 * 86400)  # how long run records are kept
    #: How often a running job's output tail is written for `history --follow`, if it grew.
    live_output_interval: Duration = Duration.of_seconds(10)


@dataclass(frozen=True)
class ReportConfig:
    """[report]: commands, and a webhook, told of each run in horenso's report format."""

    reporters: tuple[str, ...] = ()  # `sh -c` commands given each run's report when it ends
    noticers: tuple[str, ...] = ()  # `sh -c` commands given each run's report when it starts
    report_on: str = "always"  # or "failure": reporters only hear of runs that did not succeed
    webhook_url: str | None = None  # POSTed the same JSON with a one-line "text" (Slack)
    timeout: Duration = Duration.of_seconds(30)  # a reporter running longer is stopped
    max_concurrent: int = 4  # reporters running at once; more wait their turn


@dataclass(frozen=True)
class HttpConfig:
    """[http]: where HTTP jobs may go."""

    #: URL prefixes an HTTP job may call; a message naming any other URL is refused as malformed.
    allow: tuple[str, ...] = LOOPBACK


@dataclass(frozen=True)
class LogConfig:
    """[log]: how the daemon writes its log (to stderr, which systemd sends to the journal)."""

    format: str = "text"  # "text" or "json" (--log-format overrides)


@dataclass(frozen=True)
class CheckConfig:
    """[check]: how `status --check` judges scheduled events."""

    #: How long after a firing was due (and its flexible window) it may go without a run
    #: before the check calls it late: the time a queue, a lock and a daemon's poll may take.
    grace: Duration = Duration.of_seconds(300)


@dataclass(frozen=True)
class Config:
    """The whole validated config."""

    account: AccountConfig
    sqs: SqsConfig
    kicker: KickerConfig
    lock: LockConfig
    dedupe: DedupeConfig
    schedule: ScheduleConfig = ScheduleConfig()
    history: HistoryConfig = HistoryConfig()
    report: ReportConfig = ReportConfig()
    log: LogConfig = LogConfig()
    http: HttpConfig = HttpConfig()
    #: Every queue received from; the first is [sqs]'s when it names one. Empty: [sqs] only.
    queues: tuple[QueueConfig, ...] = ()
    check: CheckConfig = CheckConfig()

    def all_queues(self) -> tuple[QueueConfig, ...]:
        """The queues the daemon receives from, [sqs]'s first."""
        return self.queues or (_sqs_queue(self.sqs, self.kicker),)

    def takes_leases(self) -> bool:
        """Whether jobs hold leased items ([lock] lease applies): locks, group slots, claims."""
        return "dynamodb" in (self.lock.backend, self.dedupe.backend)

    def uses_table(self) -> bool:
        """Whether anything is kept in the [lock] table: leased items, or run history."""
        return self.takes_leases() or self.history.backend == "dynamodb"


def _sqs_queue(sqs: SqsConfig, kicker: KickerConfig) -> QueueConfig:
    """[sqs]'s queue, with [kicker]'s workers and delete mode: the defaults of [[queues]] too."""
    return QueueConfig(
        name=sqs.queue_name,
        max_concurrent_num=kicker.max_concurrent_num,
        wait_time_seconds=sqs.wait_time_seconds,
        visibility_timeout=sqs.visibility_timeout,
        delete_message=kicker.delete_message,
        prefetch=_prefetch(kicker, kicker.max_concurrent_num, kicker.delete_message),
    )


def _prefetch(kicker: KickerConfig, workers: int, delete_message: str) -> int:
    """A queue's prefetch when its own table does not set one: [kicker]'s, or the default."""
    if kicker.prefetch is None:
        return default_prefetch(workers, delete_message)
    return kicker.prefetch


@dataclass(frozen=True)
class Overrides:
    """Command-line options that replace file values; None means the option was not given."""

    lock_table: str | None = None
    profile: str | None = None
    region: str | None = None
    stats_port: int | None = None
    stats_socket: str | None = None
    shutdown_timeout: str | None = None
    log_format: str | None = None


_SECTIONS: dict[str, type] = {
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
    "check": CheckConfig,
}
_BACKENDS = ("dynamodb", "none")
_ROLE_ARN = re.compile(r"arn:aws[a-z-]*:iam::[0-9]{12}:role/[\w+=,.@/-]+")
#: The terraform module's schedule_engine values, as [schedule] engine takes them.
SCHEDULE_ENGINES = ("scheduler", "rules")
_SCHEDULE_GROUP = re.compile(r"[0-9A-Za-z._-]{1,64}")


# --- validation ------------------------------------------------------------------------------


def _show(value: object) -> str:
    """A value as the user wrote it in TOML, with its TOML type."""
    if isinstance(value, bool):
        text, kind = ("true" if value else "false"), "boolean"
    elif isinstance(value, str):
        text, kind = json.dumps(value, ensure_ascii=False), "string"
    elif isinstance(value, int):
        text, kind = str(value), "integer"
    elif isinstance(value, float):
        text, kind = repr(value), "float"
    elif isinstance(value, list):
        text, kind = json.dumps(value, default=str, ensure_ascii=False), "array"
    elif isinstance(value, dict):
        text, kind = json.dumps(value, default=str, ensure_ascii=False), "table"
    elif isinstance(value, (datetime.date, datetime.time)):
        text, kind = value.isoformat(), "datetime"
    else:
        text, kind = repr(value), type(value).__name__
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({kind})"


@dataclass(frozen=True)
class _Table:
    """One [section] after overrides, with typed getters whose errors name the field."""

    source: str
    section: str
    values: Mapping[str, Any]
    from_cli: frozenset[str] = frozenset()

    def fail(self, key: str, problem: str) -> ConfigError:
        where = " (from the command line)" if key in self.from_cli else ""
        # "[kicker]", or an array's table as "[[queues]] #2".
        section = self.section if self.section.startswith("[") else f"[{self.section}]"
        return ConfigError(f"config {self.source}: {section} {key}{where} {problem}")

    def string(self, key: str, default: str | None = None, *, required: bool = False) -> str:
        """A non-empty string."""
        if key not in self.values:
            if required or default is None:
                raise self.fail(key, "is required")
            return default
        value = self.values[key]
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_show(value)}")
        if value == "":
            raise self.fail(key, "must not be empty")
        return value

    def optional_string(self, key: str) -> str | None:
        """A string where empty means unset, as in Go."""
        value = self.values.get(key, "")
        if not isinstance(value, str):
            raise self.fail(key, f"must be a string, got {_show(value)}")
        return value or None

    def integer(self, key: str, default: int, low: int, high: int | None = None) -> int:
        value = self.values.get(key, default)
        # bool is an int subclass in Python, but `true` is not a number in TOML.
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, f"must be an integer, got {_show(value)}")
        if high is None and value < low:
            raise self.fail(key, f"must be at least {low}, got {value}")
        if high is not None and not low <= value <= high:
            raise self.fail(key, f"must be between {low} and {high}, got {value}")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.string(key, default)
        if value not in choices:
            allowed = " or ".join(json.dumps(c) for c in choices)
            raise self.fail(key, f"must be {allowed}, got {_show(value)}")
        return value

    def duration(
        self,
        key: str,
        default: Duration,
        *,
        low: Duration = _POSITIVE,
        high: Duration | None = None,
        days: bool = False,
    ) -> Duration:
        result = self.optional_duration(key, low=low, high=high, days=days)
        return default if result is None else result

    def optional_duration(
        self,
        key: str,
        *,
        low: Duration = _POSITIVE,
        high: Duration | None = None,
        days: bool = False,
    ) -> Duration | None:
        """A duration between low and high; None when the key is absent. days: "d" is a unit
        too (sqsjkr's own keys only, never one the Go daemon read)."""
        if key not in self.values:
            return None
        value = self.values[key]
        try:
            result = duration_value(value, days=days)
        except DurationError as e:
            reason = str(e)
            # Reasons are either a predicate ("must not be negative") or a complete sentence
            # that already quotes the text ("invalid duration "x": ...").
            if reason.startswith("must"):
                raise self.fail(key, f"{reason}, got {_show(value)}") from None
            raise self.fail(key, f"is invalid: {reason}") from None
        if result.ns < low.ns:
            limit = "greater than 0" if low == _POSITIVE else f"at least {low}"
            raise self.fail(key, f"must be {limit}, got {_show(value)}")
        if high is not None and result.ns > high.ns:
            raise self.fail(key, f"must be at most {high}, got {_show(value)}")
        return result

    def strings(self, key: str) -> tuple[str, ...]:
        """An array of non-empty strings; empty when the key is absent."""
        value = self.values.get(key, [])
        if not isinstance(value, list):
            raise self.fail(key, f"must be an array of strings, got {_show(value)}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                raise self.fail(key, f"item {i} must be a non-empty string, got {_show(item)}")
        return tuple(value)


def _tables(source: str, data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Split the document into the known sections, warning about everything else."""
    tables: dict[str, dict[str, Any]] = {}
    for name, value in data.items():
        if name == "queues":
            continue  # an array of tables, read by _queue_configs
        dataclass_type = _SECTIONS.get(name)
        if dataclass_type is None:
            if isinstance(value, dict):
                hint = _did_you_mean(name, {section: f"[{section}]" for section in _SECTIONS})
                log.warning("unknown config section [%s] in %s (ignored%s)", name, source, hint)
            else:
                hint = _did_you_mean(name, _keys_of_sections())
                log.warning("unknown config key %s in %s (ignored%s)", name, source, hint)
            continue
        if not isinstance(value, dict):
            raise ConfigError(f"config {source}: [{name}] must be a table, got {_show(value)}")
        known = {f.name: f.name for f in fields(dataclass_type)}
        for key in value:
            if key not in known:
                # A misspelling of this section's keys, else a key of another section exactly.
                hint = _did_you_mean(key, known) or _did_you_mean(
                    key, _keys_of_sections(), cutoff=1.0
                )
                log.warning("unknown config key [%s] %s in %s (ignored%s)", name, key, source, hint)
        tables[name] = dict(value)
    return tables


def _keys_of_sections() -> dict[str, str]:
    """Each key of the known sections, spelled "[section] key"."""
    return {
        f.name: f"[{section}] {f.name}"
        for section, dataclass_type in _SECTIONS.items()
        for f in fields(dataclass_type)
    }


def _did_you_mean(name: str, spellings: Mapping[str, str], cutoff: float = 0.6) -> str:
    """ "; did you mean X?" with the spelling of the known name closest to name, or ""."""
    close = difflib.get_close_matches(name, list(spellings), n=1, cutoff=cutoff)
    return f"; did you mean {spellings[close[0]]}?" if close else ""


def _apply_overrides(
    source: str, tables: dict[str, dict[str, Any]], overrides: Overrides
) -> dict[str, set[str]]:
    """Replace file values with command-line ones; returns the keys each section got that way."""
    from_cli: dict[str, set[str]] = {name: set() for name in _SECTIONS}

    def put(section: str, key: str, value: object) -> None:
        tables.setdefault(section, {})[key] = value
        from_cli[section].add(key)

    if overrides.region is not None:
        put("account", "region", overrides.region)
    if overrides.profile is not None:
        put("account", "profile", overrides.profile)
    if overrides.lock_table is not None:
        put("lock", "table", overrides.lock_table)
    # An empty --stats-socket is "not given", as with Go's flag default.
    socket = overrides.stats_socket or None
    if overrides.stats_port is not None and socket is not None:
        raise ConfigError(
            f"config {source}: the stats_port and stats_socket options are both "
            "given on the command line; give only one"
        )
    kicker = tables.setdefault("kicker", {})
    if overrides.shutdown_timeout is not None:
        put("kicker", "shutdown_timeout", overrides.shutdown_timeout)
    if overrides.log_format is not None:
        put("log", "format", overrides.log_format)
    if overrides.stats_port is not None:
        kicker.pop("stats_socket", None)
        put("kicker", "stats_port", overrides.stats_port)
    if socket is not None:
        kicker.pop("stats_port", None)
        put("kicker", "stats_socket", socket)
    return from_cli


def parse_config(
    text: str,
    *,
    source: str = "<config>",
    env: Mapping[str, str] | None = None,
    overrides: Overrides = Overrides(),
) -> Config:
    """Render, parse and validate a config file's text; command-line overrides win over the file.

    Overrides replace file values before anything is checked, so `--region` can supply a
    region missing from the file and `--stats-port` replaces a file's stats_socket.
    """
    rendered = render_template(text, os.environ if env is None else env, source=source)
    try:
        data = tomllib.loads(rendered)
    except tomllib.TOMLDecodeError as e:
        note = ""
        if rendered.count("\n") != text.count("\n"):
            note = " (line numbers are those of the file after template rendering)"
        raise ConfigError(f"config {source}: invalid TOML: {e}{note}") from None

    tables = _tables(source, data)
    from_cli = _apply_overrides(source, tables, overrides)

    def table(name: str) -> _Table:
        return _Table(source, name, tables.get(name, {}), frozenset(from_cli.get(name, ())))

    account_config = _account_config(table("account"))

    sqs = table("sqs")
    more_queues = data.get("queues", [])
    sqs_config = _sqs_config(sqs, more_queues)

    kicker_config = _kicker_config(table("kicker"))

    lock_config = _lock_config(table("lock"))
    queues = _queue_configs(source, more_queues, sqs, sqs_config, kicker_config)
    for where, queue in queues:
        visibility = queue.visibility_timeout
        if (
            queue.delete_message == "on_finish"
            and visibility is not None
            and visibility <= lock_config.lease.seconds
        ):
            raise ConfigError(
                f"config {source}: {where} visibility_timeout ({visibility} s) must be longer "
                f"than [lock] lease ({lock_config.lease}), or a message would reappear while its "
                "job still runs; leave visibility_timeout unset to derive it from the lease"
            )

    dedupe = table("dedupe")
    dedupe_config = DedupeConfig(backend=dedupe.choice("backend", DedupeConfig.backend, _BACKENDS))

    return Config(
        account_config,
        sqs_config,
        kicker_config,
        lock_config,
        dedupe_config,
        _schedule_config(table("schedule")),
        _history_config(table("history")),
        _report_config(table("report")),
        LogConfig(format=table("log").choice("format", LogConfig.format, ("text", "json"))),
        _http_config(table("http")),
        tuple(queue for _, queue in queues) if more_queues else (),
        check=_check_config(table("check")),
    )


def _account_config(account: _Table) -> AccountConfig:
    if "id" in account.values:
        raw_id = account.values["id"]
        if isinstance(raw_id, int) and not isinstance(raw_id, bool):
            raise account.fail(
                "id",
                f'must be a string, got {_show(raw_id)}: quote it (id = "{raw_id}") '
                "since AWS account ids may start with 0",
            )
    return AccountConfig(
        id=account.string("id", required=True),
        region=account.string("region", required=True),
        profile=account.optional_string("profile"),
    )


def _sqs_config(sqs: _Table, more_queues: object) -> SqsConfig:
    return SqsConfig(
        queue_name=sqs.string(
            "queue_name",
            # A placeholder when the first [[queues]] has no name: its own check names it.
            (_first_queue_name(more_queues) or "?") if more_queues else None,
            required=not more_queues,
        ),
        wait_time_seconds=sqs.integer("wait_time_seconds", SqsConfig.wait_time_seconds, 0, 20),
        visibility_timeout=(
            sqs.integer("visibility_timeout", 0, 0, MAX_VISIBILITY_SECONDS)
            if "visibility_timeout" in sqs.values
            else None
        ),
    )


def _kicker_config(kicker: _Table) -> KickerConfig:
    port_set = "stats_port" in kicker.values
    stats_port = kicker.integer("stats_port", _DEFAULT_STATS_PORT, 0, 65535)
    stats_socket = kicker.optional_string("stats_socket")
    if port_set and stats_socket is not None:
        raise ConfigError(
            f"config {kicker.source}: [kicker] stats_port and [kicker] stats_socket are both set; "
            "set only one (stats_port for TCP, stats_socket for a unix socket)"
        )
    stats_host = kicker.values.get("stats_host", KickerConfig.stats_host)
    if stats_host == "":
        raise kicker.fail(
            "stats_host", 'must not be empty (use "0.0.0.0" for all interfaces, as the Go sqsjkr)'
        )
    return KickerConfig(
        max_concurrent_num=kicker.integer("max_concurrent_num", KickerConfig.max_concurrent_num, 1),
        life_time_trigger=kicker.optional_string("life_time_trigger"),
        stats_port=None if stats_socket is not None else stats_port,
        stats_socket=stats_socket,
        stats_host=kicker.string("stats_host", KickerConfig.stats_host),
        delete_message=kicker.choice(
            "delete_message", KickerConfig.delete_message, ("on_finish", "on_receive")
        ),
        shutdown_timeout=kicker.optional_duration("shutdown_timeout", low=Duration(0)),
        job_timeout=kicker.optional_duration("job_timeout"),
        kill_grace=kicker.duration("kill_grace", KickerConfig.kill_grace, low=Duration(0)),
        pause_refresh=kicker.duration(
            "pause_refresh",
            KickerConfig.pause_refresh,
            low=Duration.of_seconds(1),
            high=KickerConfig.pause_refresh,
        ),
        member_refresh=kicker.duration(
            "member_refresh",
            KickerConfig.member_refresh,
            low=Duration.of_seconds(1),
            high=_MAX_MEMBER_REFRESH,
        ),
        prefetch=(
            kicker.integer("prefetch", 0, 0, _MAX_PREFETCH) if "prefetch" in kicker.values else None
        ),
        metrics_max_events=kicker.integer(
            "metrics_max_events", KickerConfig.metrics_max_events, 0, _MAX_METRICS_EVENTS
        ),
    )


def _lock_config(lock: _Table) -> LockConfig:
    return LockConfig(
        backend=lock.choice("backend", LockConfig.backend, _BACKENDS),
        table=lock.string("table", LockConfig.table),
        retry_interval=lock.duration("retry_interval", LockConfig.retry_interval),
        lease=lock.duration("lease", LockConfig.lease, low=_MIN_LEASE, high=_MAX_LEASE),
    )


#: The longest [kicker] member_refresh: a daemon is shown lost after three of them.
_MAX_MEMBER_REFRESH = Duration.of_seconds(3600)

#: The most events /metrics may give series of their own ([kicker] metrics_max_events): up to
#: 1.3 KiB of the daemon's memory each.
_MAX_METRICS_EVENTS = 100_000

#: Messages a queue may take beyond its free workers ([kicker] prefetch, [[queues]] prefetch).
_MAX_PREFETCH = 100


def _first_queue_name(more_queues: object) -> str | None:
    """The first [[queues]] name, which stands for [sqs] queue_name when that is not set."""
    if isinstance(more_queues, list) and more_queues and isinstance(more_queues[0], dict):
        name = more_queues[0].get("name")
        return name if isinstance(name, str) and name else None
    return None


def _queue_configs(
    source: str, more_queues: object, sqs: _Table, sqs_config: SqsConfig, kicker: KickerConfig
) -> list[tuple[str, QueueConfig]]:
    """[sqs]'s queue (when it names one), then each [[queues]] table, with [kicker]'s and
    [sqs]'s values as the defaults of what a [[queues]] table leaves out; each with the name
    that errors give its table."""
    if not isinstance(more_queues, list) or not all(isinstance(q, dict) for q in more_queues):
        raise ConfigError(
            f"config {source}: queues must be an array of tables ([[queues]] sections), "
            f"got {_show(more_queues)}"
        )
    default = _sqs_queue(sqs_config, kicker)
    queues = [("[sqs]", default)] if "queue_name" in sqs.values or not more_queues else []
    known = {f.name: f.name for f in fields(QueueConfig)}
    for i, raw in enumerate(more_queues):
        table = _Table(source, f"[[queues]] #{i + 1}", raw)
        for key in raw:
            if key not in known:
                hint = _did_you_mean(key, known)
                log.warning("unknown config key [[queues]] #%d %s in %s (ignored%s)",
                            i + 1, key, source, hint)  # fmt: skip
        visibility = default.visibility_timeout
        if "visibility_timeout" in raw:
            visibility = table.integer("visibility_timeout", 0, 0, MAX_VISIBILITY_SECONDS)
        workers = table.integer("max_concurrent_num", default.max_concurrent_num, 1)
        delete = table.choice("delete_message", default.delete_message, ("on_finish", "on_receive"))
        prefetch = _prefetch(kicker, workers, delete)
        queue = QueueConfig(
            name=table.string("name", required=True),
            max_concurrent_num=workers,
            wait_time_seconds=table.integer("wait_time_seconds", default.wait_time_seconds, 0, 20),
            visibility_timeout=visibility,
            delete_message=delete,
            prefetch=table.integer("prefetch", prefetch, 0, _MAX_PREFETCH),
        )
        queues.append((table.section, queue))
    names = [queue.name for _, queue in queues]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(
                f"config {source}: queue {name!r} is named twice ([sqs] queue_name and "
                "[[queues]] name): each queue may appear once"
            )
    return queues


#: A run record must fit a DynamoDB item (400 KB) with room to spare.
_MAX_OUTPUT_TAIL = 256 * 1024


#: The longest [history] live_output_interval: a follower waits at most this long to see output.
_MAX_LIVE_OUTPUT_INTERVAL = Duration.of_seconds(3600)


def _history_config(history: _Table) -> HistoryConfig:
    return HistoryConfig(
        backend=history.choice("backend", HistoryConfig.backend, _BACKENDS),
        output_tail=history.integer("output_tail", HistoryConfig.output_tail, 0, _MAX_OUTPUT_TAIL),
        retention=history.duration(
            "retention", HistoryConfig.retention, low=Duration.of_seconds(3600), days=True
        ),
        live_output_interval=history.duration(
            "live_output_interval",
            HistoryConfig.live_output_interval,
            low=Duration.of_seconds(1),
            high=_MAX_LIVE_OUTPUT_INTERVAL,
        ),
    )


def _report_config(report: _Table) -> ReportConfig:
    url = report.optional_string("webhook_url")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise report.fail(
                "webhook_url", f"must be an http:// or https:// URL, got {_show(url)}"
            )
    return ReportConfig(
        reporters=report.strings("reporters"),
        noticers=report.strings("noticers"),
        report_on=report.choice("report_on", ReportConfig.report_on, ("always", "failure")),
        webhook_url=url,
        timeout=report.duration("timeout", ReportConfig.timeout),
        max_concurrent=report.integer("max_concurrent", ReportConfig.max_concurrent, 1, 64),
    )


#: The longest [check] grace: a firing later than a day is missed, not late.
_MAX_CHECK_GRACE = Duration.of_seconds(86400)


def _check_config(check: _Table) -> CheckConfig:
    return CheckConfig(
        grace=check.duration("grace", CheckConfig.grace, low=Duration(0), high=_MAX_CHECK_GRACE)
    )


def _http_config(http: _Table) -> HttpConfig:
    if "allow" not in http.values:
        return HttpConfig()
    allow = http.strings("allow")
    for i, prefix in enumerate(allow):
        problem = _url_prefix_problem(prefix)
        if problem:
            raise http.fail("allow", f"item {i} {problem}, got {_show(prefix)}")
    return HttpConfig(allow=allow)


def _url_prefix_problem(prefix: str) -> str:
    """Why prefix cannot be an [http] allow prefix, or "" if it can."""
    parts = urlsplit(prefix)
    try:
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        port_ok = False
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        return "must be an http:// or https:// URL with a host"
    if parts.query or parts.fragment or prefix.endswith(("?", "#")):
        # Only scheme, host, port and path are compared: a query would be ignored.
        return "must not have a query or a fragment"
    return ""


def _schedule_config(schedule: _Table) -> ScheduleConfig:
    role_arn = schedule.optional_string("role_arn")
    if role_arn is not None and not _ROLE_ARN.fullmatch(role_arn):
        raise schedule.fail(
            "role_arn",
            f"must be an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME), got {_show(role_arn)}",
        )
    group = schedule.string("group", ScheduleConfig.group)
    if not _SCHEDULE_GROUP.fullmatch(group):
        raise schedule.fail(
            "group", f"must be 1 to 64 letters, digits, '.', '-' or '_', got {_show(group)}"
        )
    zone = schedule.string("timezone", ScheduleConfig.timezone)
    try:
        zoneinfo.ZoneInfo(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise schedule.fail(
            "timezone", f'must be an IANA time zone such as "Asia/Tokyo", got {_show(zone)}'
        ) from None
    engine = schedule.choice("engine", ScheduleConfig.engine, SCHEDULE_ENGINES)
    catch_up = schedule.duration(
        "catch_up_interval",
        ScheduleConfig.catch_up_interval,
        low=Duration(0),
        high=_MAX_CATCH_UP_INTERVAL,
    )
    return ScheduleConfig(
        role_arn=role_arn, group=group, timezone=zone, engine=engine, catch_up_interval=catch_up
    )


#: The longest [schedule] catch_up_interval: a missed firing waits at most this for a look.
_MAX_CATCH_UP_INTERVAL = Duration.of_seconds(3600)


def load_config(
    path: str | os.PathLike[str],
    *,
    env: Mapping[str, str] | None = None,
    overrides: Overrides = Overrides(),
) -> Config:
    """Read and validate the config file at path (see parse_config)."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise ConfigError(f"config file {source} not found") from None
    except OSError as e:
        raise ConfigError(f"config {source}: cannot read the file: {e.strerror or e}") from None
    try:
        # utf-8-sig: tolerate the byte-order mark some Windows editors write.
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config {source}: the file is not UTF-8 text: {e}") from None
    return parse_config(text, source=source, env=env, overrides=overrides)
