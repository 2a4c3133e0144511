"""`sqsjkr local`'s printing: its banner, the dashboard beside it, the demo's summary; the endpoint,
the fleet on it, the demo and the commands it runs and shows are sqsjkr/local's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import click

from sqsjkr.commands.dashboard import INSTALL_HINT, listening, preload, web_available
from sqsjkr.contract.config import load_config
from sqsjkr.local.demo import (
    DEMO_JOBS,
    DEMO_QUEUE,
    OUTCOMES,
    DemoWatch,
    closing_commands,
    send_demo,
    shown_kill,
)
from sqsjkr.local.endpoint import LOCAL_QUEUE, LOCAL_SCHEDULE_GROUP, LOCAL_TABLE
from sqsjkr.local.mode import prepared, serve_local
from sqsjkr.local.site import LocalSite


def banner(site: LocalSite, stats_address: str, dashboard: str = "") -> str:
    """What local mode prints once it listens: where everything is, and how to send a job."""
    return (
        f"sqsjkr local: AWS endpoint {site.endpoint} (moto), queue {LOCAL_QUEUE} "
        f"(dead letters: {LOCAL_QUEUE}-dlq), table {LOCAL_TABLE}, "
        f"schedule group {LOCAL_SCHEDULE_GROUP}\n"
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2\n"
        + (f"Dashboard: {dashboard}\n" if dashboard else "")
        + "Send a job from another shell:\n"
        f"{site.pasteable('send', '--command', 'echo hello')}\n"
        "Stop: Ctrl-C"
    )


def import_dashboard() -> threading.Thread:
    """Import the dashboard (Flask and the rest, a second or so) while moto starts, so that the
    banner is not late for it."""

    thread = threading.Thread(target=preload, name="sqsjkr-web-import", daemon=True)
    thread.start()
    return thread


def start_dashboard(conf: Path, port: int) -> tuple[str, Callable[[], None]]:
    """The web dashboard of local mode's fleet, on 127.0.0.1:port with its actions (this host's
    own user only): its URL, or why it is not served, and how to close it."""
    if not web_available():
        return f"not served ({INSTALL_HINT})", lambda: None
    try:
        served = listening(load_config(conf), port=port, enable_actions=True)
    except OSError as exc:
        return f"not served ({exc.strerror}: pass another --web-port, or 0)", lambda: None
    served.start()
    return served.url, served.close


def run_local(
    stop: threading.Event,
    force: threading.Event,
    *,
    demo: bool,
    port: int,
    stats_port: int,
    workers: int,
    web_port: int | None = None,
) -> None:
    """Start the endpoint, create the queue and table, serve until stop.

    The banner (and the demo) wait for the stats server to listen, so a taken stats port fails
    before anything is printed or sent.
    """
    importing = None if web_port is None else import_dashboard()
    with prepared(port=port, stats_port=stats_port, workers=workers) as (site, sqs):
        #: The stats address, then what the banner said of the dashboard: the summary repeats both.
        listening_at: list[str] = []
        closing: list[Callable[[], None]] = []

        def killable() -> None:
            click.echo(shown_kill(site))

        def done(counts: dict[str, int], dead: list[tuple[str, str]]) -> None:
            click.echo(demo_summary(counts, site, listening_at[0], dead, listening_at[1]))
            click.echo(closing_commands(site))

        watch = DemoWatch(sqs, site, killable, done)

        def receiving() -> None:
            if demo:
                send_demo(sqs, site.queue_url)
                watch.start(listening_at[0])

        def on_listening(stats_address: str) -> None:
            shown = ""
            if web_port is not None:
                if importing is not None:
                    importing.join()
                shown, close = start_dashboard(site.conf, web_port)
                closing.append(close)
            click.echo(banner(site, stats_address, shown))
            listening_at.extend((stats_address, shown))

        try:
            serve_local(site, stop, force, on_listening=on_listening, on_receiving=receiving)
        finally:
            watch.close()
            for close in closing:
                close()


def demo_summary(
    counts: dict[str, int],
    site: LocalSite,
    stats_address: str,
    dead: list[tuple[str, str]],
    dashboard: str = "",
) -> str:
    """What the demo did: the counters with the demo jobs behind each, and where to look next
    (the stats, and the dashboard as the banner showed it)."""
    lines = [f"Demo done: all {len(DEMO_JOBS)} messages have an outcome. Invocations counted:"]
    for outcome in OUTCOMES:
        whats = [job.what for job in DEMO_JOBS if job.outcome == outcome]
        count = f"{counts[outcome]}"
        if outcome == "errored":
            count += f" (timed_out {counts.get('timed_out', 0)})"
        lines.append(f"  {outcome:<10} {count}")
        lines.extend(f"      - {what}" for what in whats)
    lines.append(f"Dead-letter queue {DEMO_QUEUE}-dlq ({site.dead_letter_url}):")
    if not dead:
        lines.append("  (no message there yet)")
    lines.extend(f"  body {body!r}, sqsjkr_error {error!r}" for body, error in dead)
    lines += [
        "Each job's output is in the log above (job MESSAGE_ID (event EVENT_ID) | LINE), and "
        "each report's JSON (sqsjkr.report).",
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2",
    ]
    if dashboard:
        lines.append(f"Dashboard: {dashboard}")
    return "\n".join(lines)
