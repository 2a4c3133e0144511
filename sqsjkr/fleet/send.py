"""Sending a checked job to a queue: audited first, at most once while unfinished (unique_for),
answered at once by a handle that reads its state and waits for its run.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqsjkr.backends.audit import AuditEntry
from sqsjkr.backends.aws import AWS_ERRORS, describe, make_client
from sqsjkr.backends.sqs import (
    SendSettings,
    fifo_send_parameters,
    group_id_of,
    resolve_queue_url,
    send_settings,
)
from sqsjkr.contract import safe_json
from sqsjkr.contract.config import Config
from sqsjkr.contract.fields import field_error
from sqsjkr.contract.firing import Origin
from sqsjkr.contract.job import parse_job
from sqsjkr.contract.run import one_off
from sqsjkr.contract.when import OneTime
from sqsjkr.errors import RequestError
from sqsjkr.fleet.audit import ONE_OFF, Auditor, command_auditor
from sqsjkr.fleet.checks import retries_warning
from sqsjkr.fleet.fifo import fifo_parameters
from sqsjkr.fleet.history import Store, store_of
from sqsjkr.fleet.idempotency import Answered, IdempotentSends, fingerprint
from sqsjkr.fleet.jobs import JobHandle, JobState, job_state
from sqsjkr.fleet.unique import Earlier, Reservation, UniqueSends
from sqsjkr.observability.logs import shorten_command

_log = logging.getLogger(__name__)

#: SQS's longest DelaySeconds.
MAX_DELAY = 900


@dataclass(frozen=True)
class Outgoing:
    """A job body the daemon's parser accepted, and the queue it goes to, with its SQS
    parameters: DelaySeconds for a standard queue, the FIFO group (and deduplication id)."""

    body: str
    queue_name: str
    queue_url: str
    delay: int = 0
    fifo: dict[str, str] | None = None


#: The fields of a run that the fleet mints, never a sender: a firing's claim (from a schedule, a
#: trigger or catch-up), a pipeline's step and its run's key (from the daemon that ran the steps
#: before it, once the run's state says the step is due), a step's re-run (from `trigger --run`,
#: asked in the run's state first). A sender's would forge them.
MINTED_FIELDS = ("firing", "step", "pipeline_key", "rerun")


def check_by_hand(fields: Mapping[str, object]) -> None:
    """InvalidJobError naming the first field of MINTED_FIELDS a sender's job sets. A root's
    `step` naming its own pipeline's root is no step of a run but the root itself (the terraform
    module's `job_messages` writes it): its run is keyed by the send's own message id."""
    for name in MINTED_FIELDS:
        value = fields.get(name)
        if value is None or (name == "step" and _is_root(fields, value)):
            continue
        raise field_error(name, "is set by the fleet's daemons, not by a sender")


def _is_root(fields: Mapping[str, object], step: object) -> bool:
    pipeline = fields.get("pipeline")
    return isinstance(pipeline, dict) and isinstance(step, str) and pipeline.get("root") == step


def by_hand(body: str) -> str:
    """body marked `"origin": "send"`: a job sent by hand (or by a program), not a firing; an
    InvalidJobError for a field only the fleet sets (check_by_hand)."""
    try:
        fields = safe_json.loads(body)
    except ValueError:  # safe_json's JsonError
        return body  # not JSON: the parser's refusal says why
    if not isinstance(fields, dict):
        return body  # not a job: the parser's refusal says why
    check_by_hand(fields)
    # Whatever origin the body gave: a sender's job is a send, and says so.
    fields["origin"] = Origin.SEND.value
    return json.dumps(fields, ensure_ascii=False)


def addressed(
    config: Config,
    sqs: Any,
    body: str,
    queue_name: str | None,
    *,
    delay: int,
    group_id: str | None,
    dedupe_id: str | None,
    later: bool,
    warn: Callable[[str], None],
) -> Outgoing:
    """A checked body addressed to its queue (default: [sqs] queue_name), with the queue's SQS
    parameters; warn is told at once when the job's retries can take it to the dead-letter queue."""
    body = by_hand(body)
    queue_name = queue_name or config.sqs.queue_name
    queue_url = resolve_queue_url(sqs, queue_name, config.account.id)
    settings = send_settings(sqs, queue_url)
    retries = retries_warning(queue_name, settings, body)
    if retries is not None:
        warn(retries)
    fifo = fifo_parameters(
        queue_name, settings, body, group_id, dedupe_id, delay=delay, later=later
    )
    return Outgoing(body, queue_name, queue_url, delay, fifo)


@dataclass(frozen=True)
class Sent:
    """What a send did: the job's handle; earlier, when unique_for found the unfinished
    identical job and sent nothing; why its audit item does not name the message, if it does not."""

    handle: JobHandle
    earlier: bool = False
    audit_problem: str | None = None


def audit_send(
    audit: Auditor, body: str, queue_name: str, reason: str, when: OneTime | None = None
) -> tuple[AuditEntry, str]:
    """The audit item of a send (now, or at when), written before it; and its detail."""
    parsed = parse_job(body, message_id="(not sent)", sent_at=0.0)
    detail = f"{shorten_command(parsed.what)} to queue {queue_name}" + (
        "" if when is None else f" at {when.iso}"
    )
    # A job sent without an event_id is its message's own event: named once it is sent.
    target = ONE_OFF if one_off(parsed.event_id, parsed.message_id) else parsed.event_id
    return audit("send", target, reason=reason, detail=detail), detail


def check_send(delay: int, unique_for: float | None, unique_key: str | None) -> None:
    """RequestError, before anything is written or sent, for a delay SQS would refuse or a
    uniqueness window that is not a number of seconds above 0 (nan, inf, negative)."""
    if isinstance(delay, bool) or not isinstance(delay, int) or not 0 <= delay <= MAX_DELAY:
        raise RequestError(
            f"delay {delay!r}: give whole seconds from 0 to {MAX_DELAY} (SQS DelaySeconds)"
        )
    if unique_for is not None and not (
        isinstance(unique_for, int | float) and 0 < unique_for < math.inf
    ):
        raise RequestError(
            f"unique_for {unique_for!r}: give the seconds a send stays unique, a number above "
            "0, or None"
        )
    if unique_key is not None and (unique_for is None or not unique_key):
        raise RequestError(
            "unique_key names what makes a send unique (a tenant and a report, say): give it "
            "with unique_for, and not empty"
        )


def send_job(
    store: Store,
    audit: Auditor,
    out: Outgoing,
    *,
    reason: str = "",
    unique_for: float | None = None,
    unique_key: str | None = None,
    unique_scope: str | None = None,
) -> Sent:
    """Put the job on its queue now, audited first, and return its handle.

    unique_for (seconds): while a job sent with it in the last unique_for seconds is
    unfinished, and is the same (same queue, and the same unique_key, or the same body without
    one), return that job's handle, earlier, and send nothing. unique_scope: whose unique_key
    it is (an API token's name): another scope's key of the same text is another key."""
    check_send(out.delay, unique_for, unique_key)
    sqs = make_client(store.session, "sqs")
    if unique_for is None:
        return _send(store, sqs, audit, out, reason)
    uniques = UniqueSends(store.client, store.table)

    def unfinished(earlier: Earlier) -> bool:
        return not job_state(store, earlier.message_id, earlier.event_id).ended

    with store.reading():
        held = uniques.reserve(
            out.queue_name, out.body, unfinished, key=unique_key, scope=unique_scope
        )
    if isinstance(held, Earlier):
        handle = JobHandle(held.message_id, held.event_id, out.queue_name, store, True)
        return Sent(handle, True)
    return _send_held(store, sqs, audit, out, reason, uniques, held, unique_for)


def _send_held(
    store: Store,
    sqs: Any,
    audit: Auditor,
    out: Outgoing,
    reason: str,
    uniques: UniqueSends,
    held: Reservation,
    unique_for: float,
) -> Sent:
    try:
        sent = _send(store, sqs, audit, out, reason)
    except BaseException:
        uniques.let_go(held)  # nothing was sent: the next send may send it
        raise
    try:
        uniques.hold(held, sent.handle.message_id, sent.handle.event_id, unique_for)
    except AWS_ERRORS as exc:
        # The job was sent: its answer stands, not a failure a retry would send again. Its
        # item names no message, so identical sends are refused as busy until it lapses.
        _log.warning(
            "message %s was sent, but its unique_for item could not name it (%s): identical "
            "jobs are refused for a minute, then sent",
            sent.handle.message_id,
            describe(exc),
        )
    return sent


def _send(store: Store, sqs: Any, audit: Auditor, out: Outgoing, reason: str) -> Sent:
    entry, detail = audit_send(audit, out.body, out.queue_name, reason)
    request: dict[str, Any] = {"QueueUrl": out.queue_url, "MessageBody": out.body}
    if out.fifo is None:
        request["DelaySeconds"] = out.delay
    else:
        request.update(out.fifo)
    message_id = str(sqs.send_message(**request)["MessageId"])
    problem = audit.amend(entry, f"{detail}, message {message_id}")
    event_id = parse_job(out.body, message_id=message_id, sent_at=0.0).event_id
    return Sent(JobHandle(message_id, event_id, out.queue_name, store), audit_problem=problem)


class Sender:
    """Jobs sent from a program: each checked with the daemon's parser, audited as this OS user,
    answered by its handle. One boto3 session; safe to share between threads."""

    def __init__(
        self, config: Config, store: Store | None = None, audit: Auditor | None = None
    ) -> None:
        self.config = config
        self.store = store or store_of(config)
        self._sqs = make_client(self.store.session, "sqs")
        self._audit = audit or command_auditor(config)
        self._queues: dict[str, tuple[str, SendSettings]] = {}
        self._mutex = threading.Lock()

    def send(
        self,
        job: str | Mapping[str, Any],
        *,
        queue: str | None = None,
        delay: int = 0,
        unique_for: float | None = None,
        unique_key: str | None = None,
        reason: str = "",
        unique_scope: str | None = None,
        idempotency_key: str | None = None,
    ) -> JobHandle:
        """Put job (a message body, or its fields as a dict) on queue (default: [sqs]
        queue_name) and return its handle at once. InvalidJobError for a job the daemon would
        refuse, RequestError for a bad delay or unique_for: nothing is sent. unique_for,
        unique_key, unique_scope: see send_job; the handle's deduplicated says whether this
        send was one. idempotency_key: a retry of this request (the same key from this
        auditor's actor, within IDEMPOTENCY_SECONDS) answers the first send's handle, sending
        nothing; IdempotencyKeyReused when the key came with another request."""
        check_send(delay, unique_for, unique_key)
        out = self.outgoing(job, queue, delay)
        request = {
            "job": job if isinstance(job, str) else dict(job),
            "queue": queue,
            "delay": delay,
            "unique_for": unique_for,
            "unique_key": unique_key,
            "unique_scope": unique_scope,
            "reason": reason,
        }

        def send() -> JobHandle:
            return send_job(
                self.store,
                self._audit,
                out,
                reason=reason,
                unique_for=unique_for,
                unique_key=unique_key,
                unique_scope=unique_scope,
            ).handle

        if idempotency_key is None:
            return send()
        return self._idempotent(idempotency_key, fingerprint(request), send)

    def _idempotent(self, key: str, request: str, send: Callable[[], JobHandle]) -> JobHandle:
        """send() once per key of this actor's and request; the first answer otherwise."""
        if not key:
            raise RequestError("an idempotency key may not be empty")
        sends = IdempotentSends(self.store.client, self.store.table)
        with self.store.reading():
            held = sends.begin(self._audit.actor.user, key, request)
        if isinstance(held, Answered):
            return JobHandle(
                held.message_id, held.event_id, held.queue, self.store, held.deduplicated
            )
        try:
            handle = send()
        except BaseException:
            sends.let_go(held)  # nothing was sent: a retry of the request may send it
            raise
        answered = Answered(handle.message_id, handle.event_id, handle.queue, handle.deduplicated)
        try:
            sends.answer(held, answered)
        except Exception as exc:
            # The job is sent: its answer stands. A retry of the request may send it again once
            # the item's pending minute has passed, which is what a lost item can do no better.
            _log.warning(
                "the answer of idempotency key %r was not kept (%s): a retry may send message "
                "%s's job again",
                key,
                describe(exc),
                handle.message_id,
            )
        return handle

    def outgoing(self, job: str | Mapping[str, Any], queue: str | None, delay: int) -> Outgoing:
        """job checked with the daemon's parser (InvalidJobError) and addressed to queue."""
        body = by_hand(job if isinstance(job, str) else json.dumps(job))
        parse_job(body, message_id="(not sent)", sent_at=0.0, http_allow=self.config.http.allow)
        name = queue or self.config.sqs.queue_name
        url, settings = self._queue(name)
        fifo = None
        if settings.fifo:
            # An id of its own: content-based deduplication would drop a repeat of the body.
            group = group_id_of(parse_job(body, message_id="-", sent_at=0.0).event_id)
            fifo = fifo_send_parameters(group, f"send-{secrets.token_hex(16)}")
        return Outgoing(body, name, url, 0 if fifo else delay, fifo)

    def job(self, message_id: str, event_id: str | None = None) -> JobState:
        """The state of the job of message_id (see fleet.jobs.job_state)."""
        return job_state(self.store, message_id, event_id)

    def _queue(self, name: str) -> tuple[str, SendSettings]:
        with self._mutex:
            if name not in self._queues:
                url = resolve_queue_url(self._sqs, name, self.config.account.id)
                self._queues[name] = (url, send_settings(self._sqs, url))
            return self._queues[name]
