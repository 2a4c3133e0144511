"""`sqsjkr schedules`: every event's schedule, read from the schedule group of EventBridge Scheduler
or from the EventBridge rules that target the queues, with its next fire times and its event's
last run, runs in progress and pause.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import click

from sqsjkr.commands.store import Where, store_options
from sqsjkr.commands.tables import aligned, echo_lines
from sqsjkr.contract.text import escape
from sqsjkr.errors import quote
from sqsjkr.fleet.history import store_of
from sqsjkr.fleet.schedules import (
    EventSchedule,
    EventState,
    Timing,
    event_states,
    read_schedules,
    schedule_json,
    timing,
)
from sqsjkr.fleet.wording import command_line, fire_text, local_time

#: The columns of `schedules`; the last holds its event's last run, then its runs in progress and
#: its marks.
SCHEDULES_HEADER = [
    "NAME",
    "EXPRESSION",
    "ZONE",
    "STATE",
    "NEXT",
    "EVENT",
    "COMMAND",
    "LAST RUN",
]


def schedule_row(schedule: EventSchedule, when: Timing, state: EventState | None) -> list[str]:
    fires = ", ".join(map(fire_text, when.fires.times)) or "-"
    if when.problem:
        fires = f"? ({when.problem})"
    elif not when.fires.exact:
        fires = f"~{fires} (counted from now)"
    row = [
        escape(schedule.name),
        escape(schedule.expression),
        escape(schedule.timezone),
        "enabled" if schedule.enabled else "DISABLED",
        f"next {fires}",
        "-" if schedule.event_id is None else escape(schedule.event_id),
        command_line(schedule.command),
    ]
    return row + state_cells(state)


def state_cells(state: EventState | None) -> list[str]:
    if state is None:
        return []
    last = state.summary.last_run if state.summary else None
    cells = [
        f"last {last.outcome.value} {local_time(last.ended_at)}" if last else "no run ended yet"
    ]
    cells += [
        f"running on {run.start.host}{' (stale)' if run.stale else ''}" for run in state.running
    ]
    cells += [] if state.route is None else [f"ROUTED to queue {state.route.queue}"]
    return cells + (["PAUSED"] if state.held is not None else [])


@click.command()
@store_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON array, an object per schedule.")
def schedules(where: Where, as_json: bool) -> None:
    """Show every event's schedule: expression, zone, enabled, next three fire times in its zone,
    the job it sends (event_id, command's first line), and its event's last run, runs in
    progress and pause.

    Read from [schedule] group in EventBridge Scheduler, or with [schedule] engine = "rules"
    from the EventBridge rules that target the queues.
    """
    config = where.config()
    store = store_of(config)
    found = read_schedules(config, store.session)
    now = time.time()
    instant = datetime.fromtimestamp(now, timezone.utc)
    states = event_states(store, found, now)
    shown = [(s, timing(s, instant), states.get(s.event_id or "")) for s in found]
    if as_json:
        click.echo(json.dumps([schedule_json(*each) for each in shown], indent=2))
        return
    if not found:
        missing = (
            "no EventBridge rule targets the queues"
            if config.schedule.engine == "rules"
            else f"no schedule in EventBridge Scheduler group {quote(config.schedule.group)}"
        )
        click.echo(f"sqsjkr: {missing}", err=True)
        return
    echo_lines(aligned([SCHEDULES_HEADER, *(schedule_row(*each) for each in shown)]))
