"""`sqsjkr local`'s printing: its banner, the dashboard beside it, the demo's summary; the endpoint,
the fleet on it, the demo and the commands it runs and shows are sqsjkr/local's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import click

from sqsjkr.commands.dashboard import INSTALL_HINT, listening, preload, web_available
from sqsjkr.contract.config import load_config
from sqsjkr.contract.tokens import SCOPES, new_token
from sqsjkr.local.demo import (
    DEMO_JOBS,
    DEMO_QUEUE,
    OUTCOMES,
    SEND_COMMAND,
    closing_commands,
    shown_kill,
)
from sqsjkr.local.demo_scheduled import SCHEDULED_QUEUE
from sqsjkr.local.endpoint import LOCAL_QUEUE, LOCAL_SCHEDULE_GROUP, LOCAL_TABLE
from sqsjkr.local.site import LocalSite


def banner(site: LocalSite, stats_address: str, dashboard: str = "", api: str = "") -> str:
    """What local mode prints once it listens: where everything is, and how to send a job."""
    return (
        f"sqsjkr local: AWS endpoint {site.endpoint} (moto), queue {LOCAL_QUEUE} "
        f"(dead letters: {LOCAL_QUEUE}-dlq), table {LOCAL_TABLE}, "
        f"schedule group {LOCAL_SCHEDULE_GROUP}\n"
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2\n"
        + (f"Dashboard: {dashboard}\n" if dashboard else "")
        + (f"{api}\n" if api else "")
        + "Send a job from another shell:\n"
        f"{site.pasteable(*SEND_COMMAND)}\n"
        "Or set up another shell once, for every command (sqsjkr status, ...; the walk-through "
        "of each docs page starts with it):\n"
        f"{site.exports()}\n"
        "Stop: Ctrl-C"
    )


def import_dashboard() -> threading.Thread:
    """Import the dashboard (Flask and the rest, a second or so) while moto starts, so that the
    banner is not late for it."""

    thread = threading.Thread(target=preload, name="sqsjkr-web-import", daemon=True)
    thread.start()
    return thread


def start_dashboard(
    conf: Path, port: int, api_tokens: str | None = None
) -> tuple[str, Callable[[], None]]:
    """The web dashboard of local mode's fleet, on 127.0.0.1:port with its actions (this host's
    own user only), and the HTTP API beside it for the tokens of the file api_tokens: its URL,
    or why it is not served, and how to close it. A taken port (another local mode's, whose
    stats port sent this one to --stats-port 0) gives way to any free port, said beside the
    URL: the dashboard is never dropped for it."""
    if not web_available():
        return f"not served ({INSTALL_HINT})", lambda: None
    config, note = load_config(conf), ""
    try:
        served = listening(config, port=port, enable_actions=True, api_tokens=api_tokens)
    except OSError as exc:
        if port == 0:
            return f"not served ({exc.strerror})", lambda: None
        try:
            served = listening(config, port=0, enable_actions=True, api_tokens=api_tokens)
        except OSError as again:
            return f"not served ({again.strerror})", lambda: None
        note = f" (port {port} is taken: {exc.strerror}; --web-port chooses it)"
    served.start()
    return served.url + note, served.close


#: The name of the token local mode makes for its HTTP API (its actions are audited as api:local).
LOCAL_TOKEN = "local"


def api_lines(dashboard_url: str, api_tokens: str | None, token: str | None) -> str:
    """Where the HTTP API is, beside the dashboard at dashboard_url, and with which tokens: those
    of the file api_tokens, or the ready-made token, as the variables docs/api.md's example
    reads, ready to paste."""
    api = dashboard_url.split(" ", 1)[0] + "api/v1"
    if token is None:
        return f"HTTP API: {api}/ (docs/api.md), for the tokens of {api_tokens}"
    return (
        f"HTTP API: {api}/ (docs/api.md), with a token of every scope, for another shell:\n"
        f"  export SQSJKR_API={api} SQSJKR_TOKEN={token}"
    )


def tokens_file(directory: Path, api_tokens: str | None) -> tuple[str, str | None]:
    """The tokens file the HTTP API serves, and the token local mode made for it: api_tokens,
    or a file in directory granting a new token every scope."""
    if api_tokens is not None:
        return api_tokens, None
    token, lines = new_token(LOCAL_TOKEN, SCOPES)
    path = directory / "api-tokens.toml"
    path.write_text(lines)
    return str(path), token


@dataclass
class Printed:
    """Local mode's steps, printed (sqsjkr.local.mode.LocalFace): the banner, with the dashboard
    started beside it when web_port is given, the demo's kill, its summary and closing commands."""

    web_port: int | None
    importing: threading.Thread | None = None
    #: The HTTP API's tokens file (--api-tokens); None: local mode makes a token and prints it.
    api_tokens: str | None = None
    #: The stats address, then what the banner said of the dashboard: the summary repeats both.
    shown: list[str] = field(default_factory=list)

    def listening(self, site: LocalSite, stats_address: str) -> Callable[[], None]:
        url, close, api = "", _nothing, ""
        if self.web_port is not None:
            if self.importing is not None:
                self.importing.join()
            tokens, token = tokens_file(site.conf.parent, self.api_tokens)
            url, close = start_dashboard(site.conf, self.web_port, tokens)
            if url.startswith("http"):
                api = api_lines(url, tokens, token)
        click.echo(banner(site, stats_address, url, api))
        self.shown.extend((stats_address, url))
        return close

    def killable(self, site: LocalSite) -> None:
        click.echo(shown_kill(site))

    def done(self, site: LocalSite, counts: dict[str, int], dead: list[tuple[str, str]]) -> None:
        click.echo(demo_summary(counts, site, self.shown[0], dead, self.shown[1]))
        click.echo(closing_commands(site, self.shown[1]))


def _nothing() -> None:
    """Closes a dashboard that was not served."""


#: Why a job is counted under each of OUTCOMES, in the Go daemon's words (observability/stats.py).
OUTCOME_WHY = {
    "succeeded": "the command exited 0",
    "errored": "the command ran and exited non-zero, or was stopped at its timeout",
    "failed": "did not run (late past its life_time, its lock held, not a job) or was killed",
    "duplicates": "a message already received, dropped unrun",
}


def demo_summary(
    counts: dict[str, int],
    site: LocalSite,
    stats_address: str,
    dead: list[tuple[str, str]],
    dashboard: str = "",
) -> str:
    """What the demo did: the counters with the demo jobs behind each, and where to look next
    (the stats, and the dashboard as the banner showed it)."""
    lines = [
        f"Demo done: all {len(DEMO_JOBS)} messages have an outcome. Invocations counted on queue "
        f"{DEMO_QUEUE}"
        + (
            f" (the scheduled pipeline's and catch-up's runs, on {SCHEDULED_QUEUE}, are counted "
            "apart):"
            if site.demo_times is not None
            else ":"
        )
    ]
    for outcome in OUTCOMES:
        whats = [job.what for job in DEMO_JOBS if job.outcome == outcome]
        count = f"{counts[outcome]}"
        if outcome == "errored":
            count += f" (timed_out {counts.get('timed_out', 0)})"
        lines.append(f"  {outcome:<10} {count}: {OUTCOME_WHY[outcome]}")
        lines.extend(f"      - {what}" for what in whats)
    lines.append(f"Dead-letter queue {DEMO_QUEUE}-dlq ({site.dead_letter_url}):")
    if not dead:
        lines.append("  (no message there yet)")
    lines.extend(f"  body {body!r}, sqsjkr_error {error!r}" for body, error in dead)
    lines += [
        "Each job's output is in the log above (job MESSAGE_ID (event EVENT_ID) | LINE), and "
        "each report's JSON (sqsjkr.report).",
        f"Stats: curl -s http://{stats_address}/stats/metrics/v2"
        + ('  # each queue\'s own figures under "queues"' if site.demo_times is not None else ""),
    ]
    if dashboard:
        lines.append(f"Dashboard: {dashboard}")
    return "\n".join(lines)
