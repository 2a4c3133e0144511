"""`sqsjkr trigger`: run an event now by sending its schedule's exact message to its queue, noted as
triggered (by whom, why); with --wait, follow that run in the history to its end (sqsjkr.fleet.trigger).
"""

from __future__ import annotations

import click

from sqsjkr.commands.options import UsageFailure, reason_option, warn
from sqsjkr.commands.store import Where, auditor, store_options
from sqsjkr.commands.tables import echo_lines, history_lines
from sqsjkr.commands.waiting import timeout_of, timeout_option
from sqsjkr.contract.config import Config
from sqsjkr.contract.run import RunOutcome, RunRecord
from sqsjkr.contract.text import escape
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.step_rerun import Rerun, trigger_run
from sqsjkr.fleet.trigger import trigger_event, wait_for_run
from sqsjkr.fleet.waiting import Deadline


@click.command()
@store_options
@click.argument("event_id")
@click.option(
    "--schedule",
    "schedule_name",
    metavar="NAME",
    help="The schedule to send, when the event has several that send different messages.",
)
@click.option(
    "--wait", is_flag=True, help="Follow the run to its end; exit 0 only if it succeeded."
)
@click.option(
    "--firing",
    metavar="TIME",
    help="Send it as the firing due at TIME (RFC 3339, or a wall time in the schedule's zone): "
    "a missed firing, which the ledger then shows filled.",
)
@click.option(
    "--run",
    "run_key",
    metavar="KEY",
    help="Run the step EVENT_ID again within the pipeline's run KEY (as `sqsjkr pipeline` shows "
    "it: a message id for a run sent by hand, SCHEDULE@TIME for a fired one).",
)
@click.option(
    "--force",
    is_flag=True,
    help="With --firing: even if that firing already ran; with --run: even a step that "
    "succeeded or runs now.",
)
@click.option(
    "--queue",
    "queue_name",
    metavar="NAME",
    help="With --run: the queue to send the step to (default: a fired run's schedule's target, "
    "else [sqs] queue_name; a route wins).",
)
@timeout_option("1h", "the run (--wait)")
@reason_option
def trigger(
    where: Where,
    event_id: str,
    schedule_name: str | None,
    wait: bool,
    firing: str | None,
    run_key: str | None,
    force: bool,
    queue_name: str | None,
    timeout: str,
    reason: str,
) -> int:
    """Run EVENT_ID now: send its schedule's message (to its queue, in its FIFO group), noted as
    triggered by you and why; prints the message id. With --firing, as that firing of the
    schedule: refused if a run of it is recorded, unless --force.

    The schedule is the one whose message carries EVENT_ID, whatever its name, read from
    [schedule] group in EventBridge Scheduler, or with [schedule] engine = "rules" from the rules
    that target the queues. An event routed elsewhere (`sqsjkr route`) is sent to its route.

    With --run KEY, EVENT_ID is a step (its event id or its name) of the pipeline's run KEY,
    begun by hand or by a firing: sent again from the pipeline that run began with, asked for
    in the run's item first; refused for a step that succeeded or runs now, unless --force. The
    steps after it then follow as usual.
    """
    limit = timeout_of(timeout)
    _check_options(firing, run_key, force, schedule_name, queue_name)
    config = where.config()
    if wait and config.history.backend == "none":
        raise UsageFailure(
            '--wait follows the run history, which is off ([history] backend = "none")'
        )
    store = store_of(config)
    if run_key is not None:
        sent_again = _run_again(config, store, event_id, run_key, reason, force, queue_name)
        if not wait:
            return 0
        return _waited(store, sent_again.event_id, sent_again.message_id, limit)
    sent = trigger_event(
        config,
        store,
        auditor(store),
        event_id,
        schedule_name,
        reason,
        lambda line: click.echo(f"sqsjkr: {line}", err=True),
        firing=firing,
        force=force,
    )
    message_id, to = sent.message_id, sent.to
    click.echo(message_id)
    if sent.warning is not None:
        warn(sent.warning)
    as_firing = "" if sent.firing is None else f" as its firing of {sent.firing.iso}"
    click.echo(f"sqsjkr: sent to queue {escape(to.name)}{as_firing}: {escape(to.why)}", err=True)
    if not wait:
        return 0
    return _waited(store, event_id, message_id, limit)


def _run_again(
    config: Config,
    store: Store,
    step: str,
    run_key: str,
    reason: str,
    force: bool,
    queue_name: str | None,
) -> Rerun:
    """--run: step sent again within the run of run_key; its message id printed, and where."""
    rerun = trigger_run(
        config, store, auditor(store), step, run_key, reason, force=force, queue=queue_name
    )
    click.echo(rerun.message_id)
    if rerun.warning is not None:
        warn(rerun.warning)
    again = "" if rerun.rerun is None else f" as its re-run {rerun.rerun}"
    click.echo(
        f"sqsjkr: step {escape(rerun.step)} of run {escape(run_key)} sent{again} to "
        f"queue {escape(rerun.queue)}: {escape(rerun.why)}",
        err=True,
    )
    return rerun


def _check_options(
    firing: str | None,
    run_key: str | None,
    force: bool,
    schedule_name: str | None,
    queue_name: str | None,
) -> None:
    if firing is not None and run_key is not None:
        raise UsageFailure("--firing and --run are exclusive: a run is named by one of them")
    if force and firing is None and run_key is None:
        raise UsageFailure("--force is for --firing or --run: a run now is never refused")
    if run_key is not None and schedule_name is not None:
        raise UsageFailure("--schedule is not for --run: the run keeps its own pipeline")
    if queue_name is not None and run_key is None:
        raise UsageFailure("--queue is for --run: otherwise the schedule names the queue")


def _waited(store: Store, event_id: str, message_id: str, limit: float | None) -> int:
    """Follow the message's run to its end and print it: 0 when it succeeded."""
    record = wait_for_run(store, event_id, message_id, Deadline(limit), _rerun)
    echo_lines(history_lines([record], output=True))
    return 0 if record.outcome is RunOutcome.SUCCEEDED else 1


def _rerun(record: RunRecord) -> None:
    click.echo(
        f"sqsjkr: the run on {escape(record.host)} ended {record.outcome.value}, "
        "and runs again; waiting",
        err=True,
    )
