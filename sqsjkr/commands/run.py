"""`sqsjkr run`: the daemon, until a stop signal; and `sqsjkr local`, the daemon on an embedded endpoint.

Both set up logging here; fleet.daemon, their door to the daemon, wires the config into it and
stops it on a signal.
"""

from __future__ import annotations

import click

from sqsjkr.commands.options import (
    Invocation,
    conf_option,
    load,
    lock_table_option,
    log_all_option,
    log_level_option,
    profile_option,
    region_option,
)
from sqsjkr.contract.config import Overrides
from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError
from sqsjkr.fleet.daemon import (
    LOG_FORMATS,
    exec_as_daemon,
    serve_until_stopped,
    setup_logging,
    stop_signals,
)


@click.command()
@conf_option
@lock_table_option
@log_level_option
@log_all_option
@profile_option
@region_option
@click.option(
    "--stats-port", type=click.IntRange(0, 65535), help="Stats HTTP port (overrides the file)."
)
@click.option("--stats-socket", metavar="PATH", help="Serve stats on this unix socket instead.")
@click.option(
    "--shutdown-timeout",
    metavar="DURATION",
    help='How long a stop waits for running jobs, e.g. "10m" (overrides [kicker] shutdown_timeout).',
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS),
    help="text or json lines (overrides [log] format).",
)
@click.pass_obj
def run(
    started_as: Invocation | None,
    conf: str,
    lock_table: str | None,
    log_level: str,
    log_all: bool,
    profile: str | None,
    region: str | None,
    stats_port: int | None,
    stats_socket: str | None,
    shutdown_timeout: str | None,
    log_format: str | None,
) -> None:
    """Run the daemon."""
    # First: the process may be exec'd again, and what it did before would be done twice.
    exec_as_daemon(started_as.command_line if started_as else None)
    setup_logging(log_level.lower(), log_format or "text", log_all=log_all)
    config = load(
        conf,
        Overrides(
            lock_table=lock_table,
            profile=profile,
            region=region,
            stats_port=stats_port,
            stats_socket=stats_socket,
            shutdown_timeout=shutdown_timeout,
            log_format=log_format,
        ),
    )
    if config.log.format != (log_format or "text"):
        setup_logging(log_level.lower(), config.log.format, log_all=log_all)  # as [log] format asks
    serve_until_stopped(config, conf)


def _duration(context: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A Go duration given on the command line, as the config's fields take it."""
    if value is None:
        return None
    try:
        parse_duration(value)
    except DurationError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


@click.command()
@click.option(
    "--demo", is_flag=True, help="Also send sample jobs, and sum up once they have all ended."
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="Port of the embedded AWS endpoint (default: any free port).",
)
@click.option(
    "--stats-port",
    type=click.IntRange(0, 65535),
    default=8061,
    show_default=True,
    help="Stats HTTP port (0: any free port).",
)
@click.option(
    "--web-port",
    type=click.IntRange(0, 65535),
    default=8070,
    show_default=True,
    help="Port of the web dashboard on 127.0.0.1, with the web extra (0: any free port).",
)
@click.option(
    "--workers",
    type=click.IntRange(1, 1000),
    default=4,
    show_default=True,
    help="Jobs run at once ([kicker] max_concurrent_num of local mode's config).",
)
@click.option(
    "--api-tokens",
    metavar="PATH",
    help="Serve the HTTP API beside the dashboard to the tokens of this TOML file (`sqsjkr "
    "token new` makes one); without it, to a token of every scope that local mode makes and prints.",
)
# The tests' own pace: the demo's pipeline fires sooner, and a kill waits for a shorter lease.
@click.option("--demo-first-firing", type=click.IntRange(1, 3600), default=None, hidden=True)
@click.option("--lease", callback=_duration, default=None, hidden=True)
@log_level_option
@log_all_option
def local(
    demo: bool,
    port: int,
    stats_port: int,
    web_port: int,
    workers: int,
    api_tokens: str | None,
    demo_first_firing: int | None,
    lease: str | None,
    log_level: str,
    log_all: bool,
) -> None:
    """Run the daemon on an embedded local AWS endpoint (moto), with its queue and table; it
    fires the endpoint's schedules, as EventBridge would."""
    # Here, not at the top: `sqsjkr run` must not pay for importing local mode.
    from sqsjkr.commands.local import Printed, import_dashboard
    from sqsjkr.contract.tokens import read_tokens
    from sqsjkr.local.mode import Pace, run_local

    if api_tokens is not None:
        read_tokens(api_tokens)  # a file it cannot use fails before anything starts
    setup_logging(log_level.lower(), log_all=log_all)
    with stop_signals() as (stop, force):
        # The dashboard is imported while moto starts, so that the banner is not late for it.
        importing = import_dashboard()
        pace = Pace(lease=lease) if demo_first_firing is None else Pace(demo_first_firing, lease)
        try:
            run_local(
                stop,
                force,
                Printed(web_port, importing, api_tokens),
                demo=demo,
                port=port,
                stats_port=stats_port,
                workers=workers,
                pace=pace,
            )
        finally:
            # Joined however local mode ends: a taken stats port fails at once, and an interpreter
            # that exits while this thread imports aborts ("FATAL: exception not rethrown").
            importing.join()
