"""The HTTP API's types, declared once: each request's path, query and body, and each answer, as
pydantic models that both check the requests and make the OpenAPI document.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema

from sqsjkr.contract.limits import MAX_KEY_BYTES

#: The longest id, name or key a path or a field takes, in bytes of UTF-8 (a DynamoDB key's).
MAX_ID = MAX_KEY_BYTES
#: SQS's longest queue name (".fifo" included).
MAX_QUEUE_NAME = 80
#: The longest Idempotency-Key, quotes aside.
MAX_IDEMPOTENCY_KEY = 255
#: The longest reason an action is audited with.
MAX_REASON = 1000
#: The longest long poll of one call.
MAX_WAIT_SECONDS = 60
#: The largest page of a list.
MAX_PAGE = 500
#: The longest cursor: a page's position holds up to two ids (MAX_ID bytes each), in base64.
MAX_CURSOR = 4096
#: The longest span a list of firings or of the audit trail reaches back (90 days).
MAX_SPAN = 90 * 86400


def _key_bytes(value: str) -> str:
    """An id bounded as the daemon bounds a message's (contract/fields.py's key_text): its UTF-8
    at most a DynamoDB key's bytes. Refused here, before any audit item or write, rather than by
    DynamoDB halfway through an action."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        # "\ud800" in JSON decodes to a lone surrogate, which no AWS call takes.
        raise ValueError("must not contain an unpaired surrogate") from None
    if size > MAX_ID:
        raise ValueError(f"must be at most {MAX_ID} bytes of UTF-8, got {size}")
    return value


#: An event, message or lock id, a schedule's name, a unique_key: a DynamoDB key's text, of at
#: most MAX_ID bytes (maxLength says characters; a character may take up to four bytes).
IdText = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_ID,
        pattern="^[^\\x00]+$",
        description=f"At most {MAX_ID} bytes of UTF-8, no NUL",
    ),
    AfterValidator(_key_bytes),
]
#: A queue's name, as SQS allows it.
QueueName = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUEUE_NAME, pattern="^[A-Za-z0-9_-]+(\\.fifo)?$"),
]


class Strict(BaseModel):
    """A request's path or query: an unknown parameter is an error, not ignored. Their values
    arrive as text, so "5" may be read as the integer 5."""

    model_config = ConfigDict(extra="forbid")


class Body(BaseModel):
    """A request's JSON body: an unknown field is an error, and no value is coerced to its
    field's type (true is not 1, 0 is not false, "5" is not 5)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Open(BaseModel):
    """An answer's object: the fields shown are always there; others may be added."""

    model_config = ConfigDict(extra="allow")


# -- paths ---------------------------------------------------------------------------------------


class JobPath(Strict):
    message_id: IdText


class EventPath(Strict):
    event_id: IdText


class RunPath(Strict):
    event_id: IdText
    message_id: IdText


class LockPath(Strict):
    lock_id: IdText


# -- queries -------------------------------------------------------------------------------------


class JobQuery(Strict):
    event_id: IdText | None = Field(None, description="The job's event, when known: fewer reads")


class WaitQuery(JobQuery):
    timeout: float = Field(
        30, ge=0, le=MAX_WAIT_SECONDS, description="Seconds to wait for the job to end, at most 60"
    )


class Page(Strict):
    cursor: str | None = Field(
        None,
        max_length=MAX_CURSOR,
        description="The `next` of the previous page, given back with the same route and "
        "filters; none: the first page",
    )
    limit: int = Field(100, ge=1, le=MAX_PAGE, description="Items on a page")


class RunsQuery(Page):
    failed: bool = Field(False, description="Only the runs that did not succeed")


class FiringsQuery(Page):
    event_id: IdText | None = None
    since: float = Field(86400, ge=60, le=MAX_SPAN, description="Seconds back from now")
    missed: bool = Field(False, description="Only the firings that did not run")


class AuditQuery(Page):
    since: float = Field(86400, ge=1, le=MAX_SPAN, description="Seconds back from now")


#: What a queue parameter or field may name.
FLEET_QUEUE = (
    "One of the fleet's job queues: the config's, or one a route names (default: [sqs] "
    "queue_name); any other is answered 404 not-found, as one that does not exist"
)


class QueueQuery(Page):
    queue: QueueName | None = Field(None, description=FLEET_QUEUE)


class LetterQuery(Strict):
    queue: QueueName | None = Field(None, description=FLEET_QUEUE)


# -- headers --------------------------------------------------------------------------------------


class SubmitHeaders(BaseModel):
    """A submit's headers: Idempotency-Key, the others ignored (Authorization is the token's)."""

    model_config = ConfigDict(extra="ignore")

    idempotency_key: str | None = Field(
        None,
        alias="Idempotency-Key",
        min_length=1,
        max_length=MAX_IDEMPOTENCY_KEY + 2,
        pattern='^"?[\\x21\\x23-\\x7e]+"?$',
        description='A key of the request, as the IETF draft "The Idempotency-Key HTTP Header '
        'Field" has it (a UUID, say; quoted or not): a retry with the same key and body within '
        "a day answers the first answer and sends nothing; the same key with another body is "
        "422 idempotency-key-reused. Each token's keys are its own.",
    )

    def key(self) -> str | None:
        """The key, unquoted (the draft's value is a structured field's string)."""
        if self.idempotency_key is None:
            return None
        return self.idempotency_key.removeprefix('"').removesuffix('"') or None


# -- bodies --------------------------------------------------------------------------------------


class Reason(Body):
    reason: str = Field("", max_length=MAX_REASON, description="Why, for the audit trail")


def _nullable(kind: str | list[str], description: str, **more: Any) -> dict[str, Any]:
    """A message's optional field: null is as absent (the parser reads it so)."""
    kinds = [kind] if isinstance(kind, str) else kind
    one_of = [{"type": k, **more} for k in kinds]
    return {"anyOf": [*one_of, {"type": "null"}], "description": description}


_DURATION = ["integer", "string"]
_KEY = {"maxLength": MAX_ID}
#: A job's message, as docs/messages.md lists its fields: the types the daemon's parser takes
#: (contract/job.py), which checks the job; a field of another type is 400 invalid-job, naming
#: it. A field it does not know it ignores, and so may a job carry one.
JOB_SCHEMA: dict[str, Any] = {
    "title": "Message",
    "type": "object",
    "additionalProperties": True,
    "description": "The message's fields, as docs/messages.md gives them (a command or an http "
    "call), checked as the daemon checks them: a field it refuses is 400 invalid-job naming "
    "it; one it does not know is ignored. Those the fleet mints (firing, step, pipeline_key, "
    "rerun) are refused.",
    "properties": {
        "command": _nullable("string", "Run as sh -c COMMAND; required unless http"),
        "envs": _nullable(
            "object",
            "Added to the daemon's environment",
            additionalProperties={"type": "string"},
        ),
        "env": _nullable("object", "As envs; envs wins", additionalProperties={"type": "string"}),
        "event_id": _nullable("string", "The schedule's name (default: the message id)", **_KEY),
        "lock_id": _nullable("string", "Jobs of one lock_id never run at once", **_KEY),
        "life_time": _nullable(_DURATION, 'Cancel if older: seconds or a Go duration ("90s")'),
        "abort_if_locked": _nullable("boolean", "Give up at once when the lock is held"),
        "disable_life_time_trigger": _nullable("boolean", "No trigger when it is cancelled"),
        "timeout": _nullable(_DURATION, "Stop the job after this long"),
        "http": _nullable(
            "object",
            "An HTTP call instead of command: url (required, under [http] allow), method, "
            "headers, body, timeout, success_status",
        ),
        "concurrency_key": _nullable(
            "string", "At most concurrency_limit jobs of this key run at once", **_KEY
        ),
        "concurrency_limit": _nullable(
            "integer", "The size of the concurrency_key's group", minimum=1, maximum=1000
        ),
        "retries": _nullable(
            "integer",
            "Run an errored or timed-out job again, this many times at most",
            minimum=0,
            maximum=100,
        ),
        "retry_delay": _nullable(_DURATION, "The wait before the first retry; it doubles"),
        "pipeline": _nullable("object", "The pipeline this message is the root of"),
        "catch_up": _nullable(_DURATION, "In a schedule's message: run a missed firing late"),
        "origin": {"description": "Who sent it: a submit's is always send, whatever it says"},
        "firing": {"type": "null", "description": "Minted by the fleet: refused"},
        "step": {"type": "null", "description": "Minted by the fleet: refused"},
        "pipeline_key": {"type": "null", "description": "Minted by the fleet: refused"},
        "rerun": {"type": "null", "description": "Minted by the fleet: refused"},
    },
}


class Submit(Reason):
    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "job": {"command": "echo hello", "event_id": "hello"},
                    "unique_key": "hello-2026-11-28",
                    "unique_for": "10m",
                }
            ]
        }
    )

    job: Annotated[dict[str, Any], WithJsonSchema(JOB_SCHEMA)]
    unique_key: IdText | None = Field(
        None,
        description="With unique_for: what makes two jobs the same (default: the whole body); "
        "a token's keys are its own, and another token's job of the same key is not this one",
    )
    unique_for: str | None = Field(
        None,
        min_length=1,
        max_length=40,
        description='A duration ("10m"): while an identical job sent that long ago is unfinished, '
        "answer it instead of sending",
    )
    queue: QueueName | None = Field(None, description=FLEET_QUEUE)
    delay: int = Field(0, ge=0, le=900, description="SQS's DelaySeconds")


class Trigger(Reason):
    schedule: IdText | None = Field(None, description="Which schedule, when it has several")


class TriggerFiring(Trigger):
    at: str = Field(
        min_length=1,
        max_length=64,
        description="The firing's time: RFC 3339, or a wall time in the schedule's zone",
    )
    force: bool = Field(False, description="Run it again although a run of it is recorded")


class TriggerRun(Reason):
    run: str = Field(
        min_length=1,
        max_length=512,
        description="The pipeline's run key: its root's message id (sent by hand), or "
        "<schedule>@<time> (fired)",
    )
    force: bool = Field(False, description="Run it again although it succeeded or runs now")
    queue: IdText | None = Field(
        None,
        description="The queue (default: a fired run's schedule's target, else [sqs] queue_name)",
    )


class Pausing(Reason):
    events: list[IdText] | None = Field(
        None, min_length=1, max_length=100, description="The events; none: every event"
    )
    until: str | None = Field(
        None, min_length=1, max_length=64, description='"2h", or an RFC 3339 time; none: resumed'
    )


class Resuming(Reason):
    events: list[IdText] | None = Field(None, min_length=1, max_length=100)


class Routing(Reason):
    queue: QueueName
    force: bool = Field(False, description="Route to a queue no live daemon serves")


class Unlocking(Reason):
    slot: int | None = Field(None, ge=0, le=999, description="A concurrency group's slot")
    force: bool = Field(False, description="Remove a lock whose lease is live")


class Redriving(Reason):
    message_ids: list[IdText] | None = Field(
        None, min_length=1, max_length=100, description="The letters; none: every one"
    )
    queue: QueueName | None = Field(None, description=FLEET_QUEUE)
    force: bool = Field(False, description="Redrive letters the daemon would refuse again")


# -- answers -------------------------------------------------------------------------------------


#: The operations a job's answer leads to, as OpenAPI links: its state, and the wait for its end,
#: each by the message id (and the event id, which saves reads) of the answer.
_JOB_OPERATIONS = {
    "state": ("jobs_job_jobs__message_id__get", "The job's state now"),
    "wait": ("jobs_wait_jobs__message_id__wait_get", "The job's state once it has ended"),
}


def job_links(*names: str) -> dict[str, Any]:
    """The OpenAPI links of an answer that names a job: to each of names' operations."""
    return {
        name: {
            "operationId": _JOB_OPERATIONS[name][0],
            "description": _JOB_OPERATIONS[name][1],
            "parameters": {
                "path.message_id": "$response.body#/message_id",
                "query.event_id": "$response.body#/event_id",
            },
        }
        for name in names
    }


class Submitted(BaseModel):
    model_config = ConfigDict(openapi_extra={"links": job_links("state", "wait")})  # type: ignore[typeddict-unknown-key]

    message_id: str
    event_id: str
    deduplicated: bool = Field(description="An identical unfinished job was answered: none sent")


class Job(Open):
    model_config = ConfigDict(
        extra="allow",
        openapi_extra={"links": job_links("wait")},  # type: ignore[typeddict-unknown-key]
    )

    message_id: str
    event_id: str
    phase: Literal["queued", "waiting", "running", "ended", "unknown"] = Field(
        description="unknown: no daemon has left a trace of it and no queue can hold it (an id "
        "SQS never gives): a mistyped id, or no job of this fleet"
    )
    outcome: str | None = Field(description="ended: how its run ended (null: no record kept)")
    traced: bool = Field(description="false: no daemon has left a trace of it yet")
    host: str | None
    started_at: float | None
    waiting_for: str | None
    waiting_key: str | None
    record: dict[str, Any] | None


class Listed(Open):
    next: str | None = Field(description="The cursor of the next page; null: the last page")


class Events(Listed):
    items: list[dict[str, Any]] = Field(description="Each event's status and verdict")


class Runs(Listed):
    items: list[dict[str, Any]] = Field(description="Run records, newest first")


class Firings(Listed):
    items: list[dict[str, Any]] = Field(description="Firings, newest first")


class Schedules(Listed):
    items: list[dict[str, Any]]


class Daemons(Listed):
    items: list[dict[str, Any]]


class DeadLetters(Listed):
    items: list[dict[str, Any]]


class AuditEntries(Listed):
    items: list[dict[str, Any]] = Field(description="Audit entries, newest first")


class Event(Open):
    event_id: str
    verdict: Literal["OK", "WARNING", "CRITICAL", "UNKNOWN"]
    reasons: list[str]


class Run(Open):
    event_id: str
    message_id: str
    outcome: str
    output: str | None


class Letter(Open):
    message_id: str
    body: str


class Live(Open):
    event_id: str
    message_id: str
    output: str
    printed: int
    at: float
    host: str


class Locks(Listed):
    items: list[dict[str, Any]] = Field(
        description="Each held lock, held slot and waiting job, its kind (lock, slot, waiting) "
        "first"
    )


class Triggered(Open):
    message_id: str
    event_id: str
    queue: str
    firing: str | None = Field(description="The firing's time it was sent as, if one")


class Killed(Open):
    runs: list[dict[str, Any]]


class Paused(Open):
    pauses: list[dict[str, Any]]


class Routed(Open):
    event_id: str
    queue: str | None


class Unlocked(Open):
    lock_id: str


class Redriven(Open):
    moved: int
    skipped: list[str]
    errors: list[str]
