"""The dashboard's Flask application: its pages (server-rendered, every filter in the query string),
the guard before each request, its headers after, and the POST-only actions behind a CSRF token.
"""

from __future__ import annotations

import secrets
import time
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from flask import Flask, Response, abort, flash, g, redirect, render_template, request, url_for
from flask_wtf.csrf import CSRFError, CSRFProtect
from werkzeug.exceptions import HTTPException

from sqsjkr.contract.duration import parse_duration
from sqsjkr.errors import DurationError, SqsjkrError
from sqsjkr.fleet.audit import entry_json
from sqsjkr.fleet.daemons import ordered
from sqsjkr.fleet.failures import aws_failure
from sqsjkr.fleet.history import RUN_TYPE_PREFIX
from sqsjkr.fleet.redrive import malformed
from sqsjkr.fleet.wording import format_span, queues_text
from sqsjkr.web import run_view, views
from sqsjkr.web.actions import ACTIONS, Actions, confirm_title
from sqsjkr.web.cache import FRESH_SECONDS
from sqsjkr.web.fleet import Fleet
from sqsjkr.web.guard import HEADERS, Guard, Refused
from sqsjkr.web.shown import FILTERS, message_text, page_value, plain_output

#: How often an open page reads its live part again, in seconds.
REFRESH_SECONDS = 5


def create_app(fleet: Fleet, guard: Guard, *, enable_actions: bool = False) -> Flask:
    """The dashboard of fleet, behind guard; actions only when enable_actions."""
    app = Flask(__name__)
    app.config.update(
        SECRET_KEY=secrets.token_bytes(32),  # CSRF tokens: a restart asks for a new form
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        WTF_CSRF_SSL_STRICT=False,  # the Host check guards the origin; a proxy may end TLS
        SEND_FILE_MAX_AGE_DEFAULT=3600,
    )
    app.jinja_env.filters.update(FILTERS)
    app.jinja_env.finalize = page_value
    app.jinja_env.globals.update(
        refresh=REFRESH_SECONDS,
        fresh=FRESH_SECONDS,
        actions_on=enable_actions,
        run_key=views.run_key,
        exit_text=run_view.exit_text,
        error_line=run_view.error_line,
    )
    csrf = None
    if enable_actions:
        # Checked by the guard once the Host and the user are: see _guarded.
        app.config["WTF_CSRF_CHECK_DEFAULT"] = False
        csrf = CSRFProtect(app)
    app.extensions["sqsjkr"] = (fleet, guard, Actions(fleet), enable_actions)
    _guarded(app, guard, csrf)
    _pages(app, fleet)
    _fleet_pages(app, fleet)
    _actions(app, enable_actions)
    return app


def _guarded(app: Flask, guard: Guard, csrf: CSRFProtect | None) -> None:
    @app.before_request
    def check() -> Any:
        # Host, then sign-in, then the POST's origin and CSRF token: a foreign Host or a
        # stranger is refused before any form body is read.
        try:
            guard.check_host(request.headers.get("Host"))
            g.user = guard.user(request.remote_addr, request.headers.get)
            if request.method == "POST":
                guard.check_origin(request.headers.get("Origin"))
        except Refused as exc:
            return Response(exc.reason + "\n", exc.status, exc.headers, mimetype="text/plain")
        if csrf is not None and request.method == "POST":
            csrf.protect()
        return None

    @app.after_request
    def headers(response: Response) -> Response:
        response.headers.update(HEADERS)
        if request.endpoint != "static":
            response.headers["Cache-Control"] = "no-store"
        return response

    @app.errorhandler(Exception)
    def failed(exc: Exception) -> Any:
        if isinstance(exc, HTTPException):
            return _refused(exc)
        why = str(exc) if isinstance(exc, SqsjkrError) else aws_failure(exc)
        if why is None:
            raise exc
        return render_template("error.html", message=why), 502

    @app.errorhandler(CSRFError)
    def csrf_refused(exc: CSRFError) -> Any:
        why = (
            f"{exc.description} The form may be older than the dashboard: reload it and try again."
        )
        page = render_template(
            "error.html", heading="Action refused", message=why, back=_form_page(guard)
        )
        return page, 400


def _form_page(guard: Guard) -> str | None:
    """The page of a refused form, when the browser names it (the Referer of a same-origin POST)."""
    referrer = urlsplit(request.referrer or "")
    if referrer.scheme not in ("http", "https") or not guard.owns(referrer.netloc.lower()):
        return None
    return _local_path(urlunsplit(("", "", referrer.path, referrer.query, "")))


#: The heading of a refusal's page, by status.
REFUSALS = {400: "Bad request", 403: "Refused", 404: "Not found", 405: "Method not allowed"}


def _refused(exc: HTTPException) -> Any:
    """Flask's own refusals (404s, 403s) in the layout, with its navigation."""
    code = exc.code or 500
    heading = REFUSALS.get(code, exc.name)
    kept = {k: v for k, v in exc.get_headers() if k.lower() == "allow"}
    return render_template("error.html", heading=heading, message=exc.description), code, kept


def _pages(app: Flask, fleet: Fleet) -> None:
    @app.get("/")
    def overview() -> str:
        return render_template("overview.html", view=views.overview(fleet), now=fleet.clock())

    @app.get("/events")
    def events() -> str:
        wanted = views.EventFilter.of(request.args)
        page = views.events_page(fleet, wanted)
        return render_template(
            "events.html", page=page, wanted=wanted, states=views.STATES, now=fleet.clock()
        )

    @app.get("/event")
    def event() -> str:
        event_id = request.args.get("id", "")
        before = request.args.get("before") or None
        if not event_id or (before is not None and not before.startswith(RUN_TYPE_PREFIX)):
            abort(404, "no such event or page of runs")
        shown = views.event_page(fleet, event_id, before, request.args.get("pipeline") or None)
        if shown is None:
            abort(404, f"no event {event_id!r} in the history")
        return render_template(
            "event.html",
            page=shown,
            event_id=event_id,
            row=shown.row,
            runs=shown.runs,
            before=before,
            chart=views.chart_data(shown.runs, fleet.clock()),
            schedules=shown.schedules,
            now=fleet.clock(),
        )

    @app.get("/run")
    def run() -> Any:
        if not request.args.get("key") and request.args.get("message"):
            return _run_in_progress(fleet)
        record = _run_or_404(fleet)
        enabled = app.extensions["sqsjkr"][3]
        return render_template(
            "run.html",
            record=record,
            groups=run_view.field_groups(record),
            output=plain_output(record.output),
            rerun=enabled and views.may_rerun(fleet, record),
        )

    @app.get("/run.txt")
    def run_text() -> Response:
        record = _run_or_404(fleet)
        name = f"{record.event_id}-{record.message_id}.txt".replace('"', "")
        return Response(
            plain_output(record.output),
            mimetype="text/plain",
            headers={"Content-Disposition": f"attachment; filename*=UTF-8''{_ascii(name)}"},
        )


def _fleet_pages(app: Flask, fleet: Fleet) -> None:
    @app.get("/running")
    def running() -> str:
        shown = fleet.running()
        lives = {
            r.start.message_id: fleet.live(r.start.event_id, r.start.message_id) for r in shown
        }
        return render_template("running.html", running=shown, lives=lives, now=fleet.clock())

    @app.get("/daemons")
    def daemons() -> str:
        now = fleet.clock()
        members = ordered(fleet.members(), now)
        return render_template("daemons.html", members=members, now=now, queues_text=queues_text)

    @app.get("/locks")
    def locks() -> str:
        return render_template("locks.html", holdings=fleet.holdings(), now=fleet.clock())

    @app.get("/dead-letters")
    def dead_letters() -> str:
        return render_template(
            "dead_letters.html",
            queues=fleet.dead_letters(),
            message_text=message_text,
            malformed=malformed,
        )

    @app.get("/firings")
    def missed_firings() -> str:
        return render_template("firings.html", ledger=fleet.firings(), now=fleet.clock())

    @app.get("/audit")
    def audit() -> str:
        since = request.args.get("since", "7d")
        try:
            back = parse_duration(since, days=True).seconds
        except DurationError as exc:
            abort(400, f"since: {exc}")
        entries = fleet.audit(time.time() - back)
        return render_template(
            "audit.html", entries=[entry_json(e) for e in entries], since=since, span=format_span
        )


def _run_or_404(fleet: Fleet) -> Any:
    event_id, key = request.args.get("event", ""), request.args.get("key", "")
    record = fleet.run(event_id, key) if event_id and key else None
    if record is None:
        abort(404, "no such run (its record may have expired)")
    return record


def _run_in_progress(fleet: Fleet) -> Any:
    """The page of a run in progress (its live output growing), or its record once it ended."""
    event_id, message_id = request.args.get("event", ""), request.args.get("message", "")
    now_running = next(
        (r for r in fleet.running() if (r.start.event_id, r.start.message_id) == (event_id, message_id)),
        None,
    )  # fmt: skip
    if now_running is None:
        ended = [
            r
            for r in fleet.event_runs(event_id, views.RUNS_PER_PAGE, None)
            if r.message_id == message_id
        ]
        if not ended:
            abort(404, "no such run in progress (it may not have started yet)")
        return redirect(url_for("run", event=event_id, key=views.run_key(ended[0])), 303)
    live = fleet.live(event_id, message_id)
    return render_template("run_live.html", r=now_running, live=live, now=fleet.clock())


def _actions(app: Flask, enabled: bool) -> None:
    @app.post("/actions/<name>")
    def act(name: str) -> Any:
        fleet, guard, actions, _ = app.extensions["sqsjkr"]
        if not enabled:
            abort(403, "actions are off: start the dashboard with --enable-actions")
        if name not in ACTIONS:
            abort(404, f"no action {name!r}")
        if not guard.may_act(g.user):
            abort(403, "actions need a signed-in user (--auth-header or --basic-auth-file)")
        form = {k: v for k, v in request.form.items() if k != "csrf_token"}
        back = _local_path(form.pop("next", "")) or url_for("overview")
        if form.pop("confirmed", "") != "yes":
            # A kill names a message: the step shows which run that is before it is stopped.
            run = views.running_run(fleet, form.get("target", "")) if name == "kill" else None
            return render_template(
                "confirm.html",
                name=name,
                title=confirm_title(name, form),
                form=form,
                back=back,
                run=run,
                now=fleet.clock(),
            )
        outcome = actions.run(name, g.user, form)
        for line in outcome.lines:
            flash(line, "ok" if outcome.ok else "error")
        return redirect(back, 303)


def _local_path(target: str) -> str | None:
    r"""target when it is a path of this dashboard (no scheme, no host): never an open redirect.
    Browsers read a backslash as a slash and drop tabs and newlines from a URL, so "/\evil.com"
    and "/\t/evil.com" would lead to evil.com."""
    if "\\" in target or any(ord(c) < 0x20 or ord(c) == 0x7F for c in target):
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return None
    return target


def _ascii(text: str) -> str:
    return quote(text, safe="")
