"""The dashboard's actions: each one a call into the fleet layer, as its CLI command makes, audited with the
dashboard's user as the actor ("web:<user>@<host>"), and what it did as lines for the page.
"""

from __future__ import annotations

import getpass
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import click

from sqsjkr.errors import ActionError, NotHeld, UnlockRefused, quote
from sqsjkr.fleet.audit import Actor, Auditor, auditor_as, aws_identity
from sqsjkr.fleet.dead_letters import queues_of
from sqsjkr.fleet.failures import failure_text
from sqsjkr.fleet.kill import KillAnswer, answer_line, heartbeat_seconds, kill_runs, need_claims
from sqsjkr.fleet.pause import (
    parse_until,
    pause_events,
    pause_text,
    pauses_store,
    resume_events,
    scope_text,
)
from sqsjkr.fleet.redrive import redrive_letters
from sqsjkr.fleet.route import Route, clear_route, honour_lines, routes_store, set_route
from sqsjkr.fleet.step_rerun import trigger_run
from sqsjkr.fleet.trigger import trigger_event, trigger_firing
from sqsjkr.fleet.unlock import FORCE_WARNING, removed_text, unlock_held
from sqsjkr.web.fleet import Fleet


@dataclass
class Outcome:
    """What an action did, line by line; ok False when it did not do what was asked."""

    lines: list[str] = field(default_factory=list)
    ok: bool = True


Form = Mapping[str, str]


class Actions:
    """Runs the actions of one dashboard; the fleet's cache is dropped after each one."""

    def __init__(self, fleet: Fleet, host: str | None = None) -> None:
        self.fleet = fleet
        self.host = host or socket.gethostname()
        self._identity: str | None = None
        self._mutex = threading.Lock()

    def auditor(self, user: str | None) -> Auditor:
        """The Auditor of user (None: the OS user who runs a loopback dashboard)."""
        with self._mutex:
            if self._identity is None:
                self._identity = aws_identity(self.fleet.store.session)
        actor = Actor(self.actor_name(user), self._identity)
        return auditor_as(self.fleet.store.client, self.fleet.store.table, actor)

    def actor_name(self, user: str | None) -> str:
        return f"web:{user or _os_login()}@{self.host}"

    def run(self, name: str, user: str | None, form: Form) -> Outcome:
        """Run action name with form's fields; its failures as an Outcome that is not ok."""
        action = ACTIONS.get(name)
        if action is None:
            raise ActionError(f"no action {quote(name)}")
        try:
            return action(self, user, form)
        except (click.UsageError, click.ClickException) as exc:
            return Outcome([exc.format_message()], ok=False)
        except Exception as exc:
            return Outcome([failure_text(exc)], ok=False)
        finally:
            self.fleet.cache.forget()

    # -- the actions ----------------------------------------------------------------------------

    def pause(self, user: str | None, form: Form) -> Outcome:
        events = _scope(form)
        now = time.time()
        until = form.get("until", "").strip()
        ends = parse_until(until, now) if until else None
        store = pauses_store(self.fleet.table)
        by = self.actor_name(user)
        made = pause_events(store, self.auditor(user), by, events, now, ends, _reason(form))
        return Outcome([f"paused {pause_text(p, now)}" for p in made])

    def resume(self, user: str | None, form: Form) -> Outcome:
        events = _scope(form)
        store = pauses_store(self.fleet.table)
        lifted = resume_events(store, self.auditor(user), events, _reason(form))
        if not lifted:
            return Outcome(["nothing was paused"], ok=False)
        return Outcome([f"resumed {scope_text(p)}" for p in lifted])

    def unlock(self, user: str | None, form: Form) -> Outcome:
        lock_id = _required(form, "lock_id")
        slot_text = form.get("slot", "").strip()
        if slot_text and not slot_text.isdigit():
            raise ActionError(f"slot {quote(slot_text)} is not a slot number")
        slot = int(slot_text) if slot_text else None
        # A live lease is removed only when its lock_id was typed in full.
        force = form.get("typed_lock_id", "") == lock_id
        now = time.time()
        try:
            lock = unlock_held(
                self.fleet.table, self.auditor(user), lock_id, slot, force, _reason(form), now
            )
        except UnlockRefused as exc:
            return Outcome([f"{exc}: type its lock_id to remove a live lease"], ok=False)
        except NotHeld as exc:
            return Outcome([str(exc)], ok=False)
        lines = [removed_text(lock, now)]
        if lock.state(now) == "live":
            lines.append(f"warning: {FORCE_WARNING}")
        return Outcome(lines)

    def redrive(self, user: str | None, form: Form) -> Outcome:
        queues = queues_of(self.fleet.config, form.get("queue") or None, self.fleet.sqs)
        ids = form.get("message_ids", "").split()
        lines: list[str] = []
        run = redrive_letters(
            queues,
            self.auditor(user),
            ids or None,
            form.get("force") == "yes",
            _reason(form),
            say=lines.append,
            warn=lambda line: lines.append(f"sqsjkr: warning: {line}"),
        )
        lines += [f"error: {error}" for error in run.errors]
        lines.append(f"{run.moved} moved, {len(run.skipped)} left as malformed")
        return Outcome(lines, ok=not run.errors)

    def trigger(self, user: str | None, form: Form) -> Outcome:
        event_id = _required(form, "event_id")
        lines: list[str] = []
        store = self.fleet.store
        name = form.get("schedule", "").strip() or None
        sent = trigger_event(
            self.fleet.config, store, self.auditor(user), event_id, name, _reason(form),
            lines.append,
        )  # fmt: skip
        lines.insert(0, f"sent message {sent.message_id} to queue {sent.to.name}: {sent.to.why}")
        if sent.warning is not None:
            lines.append(f"warning: {sent.warning}")
        return Outcome(lines)

    def trigger_firing(self, user: str | None, form: Form) -> Outcome:
        """Run a missed firing: the schedule's message sent as that firing."""
        event_id = _required(form, "event_id")
        firing = _required(form, "firing")
        notes: list[str] = []
        sent = trigger_firing(
            self.fleet.config,
            self.fleet.store,
            self.auditor(user),
            event_id,
            firing,
            _reason(form),
            notes.append,
            force=form.get("force") == "yes",
        )
        lines = [f"sent message {sent.message_id} to queue {sent.to.name} as the {firing} firing"]
        lines += notes
        if sent.warning is not None:
            lines.append(f"warning: {sent.warning}")
        return Outcome(lines)

    def trigger_run(self, user: str | None, form: Form) -> Outcome:
        """Run a failed (or skipped) step of a pipeline's run again, as `trigger STEP --run KEY`."""
        step = _required(form, "event_id")
        key = _required(form, "run")
        sent = trigger_run(
            self.fleet.config,
            self.fleet.store,
            self.auditor(user),
            step,
            key,
            _reason(form),
            force=form.get("force") == "yes",
        )
        again = "" if sent.rerun is None else f" as its re-run {sent.rerun}"
        lines = [
            f"asked step {sent.step} of run {key} of pipeline {sent.pipeline} again{again}: "
            f"sent message {sent.message_id} to queue {sent.queue} ({sent.why}); the steps "
            "after it follow once it succeeds"
        ]
        if sent.warning is not None:
            lines.append(f"warning: {sent.warning}")
        return Outcome(lines)

    def kill(self, user: str | None, form: Form) -> Outcome:
        target = _required(form, "target")
        store = self.fleet.store
        need_claims(store, "the dashboard's config")
        lines: list[str] = []
        by = self.actor_name(user)
        results = kill_runs(store, self.auditor(user), by, target, _reason(form), lines.append)
        beat = heartbeat_seconds(store.config)
        lines += [answer_line(run, result, beat) for run, result in results]
        return Outcome(lines, ok=any(r.answer is not KillAnswer.ENDED for _, r in results))

    def route(self, user: str | None, form: Form) -> Outcome:
        event_id = _required(form, "event_id")
        table = self.fleet.table
        store = routes_store(table)
        config, auditor = self.fleet.config, self.auditor(user)
        if form.get("clear") == "yes":
            done = [clear_route(store, table, auditor, event_id, _reason(form))]
            return Outcome(done + honour_lines(config, cleared=True))
        queue = _required(form, "queue").strip()
        made = Route(event_id, queue, time.time(), _reason(form), self.actor_name(user))
        done = set_route(config, store, table, auditor, made, force=form.get("force") == "yes")
        return Outcome(done + honour_lines(config, cleared=False))


#: Every action by its name in /actions/NAME.
ACTIONS: dict[str, Callable[[Actions, str | None, Form], Outcome]] = {
    "pause": Actions.pause,
    "resume": Actions.resume,
    "unlock": Actions.unlock,
    "redrive": Actions.redrive,
    "trigger": Actions.trigger,
    "trigger_firing": Actions.trigger_firing,
    "trigger_run": Actions.trigger_run,
    "kill": Actions.kill,
    "route": Actions.route,
}


def confirm_title(name: str, form: Form) -> str:
    """What a confirm step asks, in words: "Run the 2030-01-31T04:28:00Z firing of nightly"."""
    event = form.get("event_id") or "every event"
    scope = "every event" if form.get("scope") == "all" else event
    titles = {
        "pause": f"Pause {scope}",
        "resume": f"Resume {'every pause' if form.get('scope') == 'all' else event}",
        "unlock": f"Unlock {form.get('lock_id', '')}"
        + (f", slot {form['slot']}" if form.get("slot") else ""),
        "redrive": f"Redrive dead letters of queue {form.get('queue', '')}",
        "trigger": f"Run {event} now",
        "trigger_firing": f"Run the {form.get('firing', '')} firing of {event}",
        "trigger_run": f"Run step {event} of pipeline run {form.get('run', '')} again",
        "kill": f"Kill the run of message {form.get('target', '')}",
        "route": f"Clear the route of {event}"
        if form.get("clear")
        else f"Route {event} to queue {form.get('queue', '')}",
    }
    return titles.get(name, name)


def _scope(form: Form) -> list[str] | None:
    """The events an action names: event_id, or None for all (scope=all)."""
    if form.get("scope") == "all":
        return None
    return [_required(form, "event_id")]


def _required(form: Form, name: str) -> str:
    value = form.get(name, "")
    if not value:
        raise ActionError(f"the form has no {name}")
    return value


def _reason(form: Form) -> str:
    return form.get("reason", "").strip()[:500]


def _os_login() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "anonymous"
