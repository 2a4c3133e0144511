"""AWS sessions and clients, and the classification of AWS failures.

Endpoints are never set here: boto3's own AWS_ENDPOINT_URL* variables point sqsjkr at moto, ElasticMQ or LocalStack.
"""

from __future__ import annotations

import functools
import gzip
import json
import logging
import os
import platform
import random
import time
from collections.abc import Callable, Set
from typing import Any, TypeVar

import botocore
from botocore import handlers
from botocore.config import Config as BotoConfig
from botocore.exceptions import BotoCoreError, ClientError, DataNotFoundError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError
from botocore.loaders import JSONFileLoader, Loader
from botocore.session import Session

from sqsjkr import __version__
from sqsjkr.backends.answers import watch_answers
from sqsjkr.errors import ResourceMissingError, StoreError, StoreTooSlow

log = logging.getLogger("sqsjkr.aws")

T = TypeVar("T")

#: Errors of an AWS call that the daemon survives: it logs them and tries again later.
AWS_ERRORS = (BotoCoreError, ClientError, ResourceMissingError, StoreError)

#: Error codes that mean "try again later" rather than "this request is wrong".
TRANSIENT_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "InternalServerError",
        # A plain write that met a transaction in progress on its item: nothing was written.
        "TransactionConflictException",
    }
)
#: The CancellationReasons of a TransactWriteItems that say "try again", not "this is wrong".
TRANSIENT_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)


def make_session(*, region: str, profile: str | None = None) -> Session:
    """A session for the configured region and, when set, the shared-credentials profile.

    botocore's own: boto3's session would import s3transfer and more, which the daemon never uses,
    and cost a quarter of a second at every start.
    """
    session = Session(profile=profile or None)
    session.register_component("data_loader", _shared_loader())
    session.set_config_variable("region", region)
    return session


@functools.cache
def _shared_loader() -> Loader:
    """One loader of botocore's data files for every session of this process.

    Its cache holds only what the files say, which never changes while the process runs, and
    each new session would otherwise parse endpoints.json (a megabyte) again: a tenth of a
    second of CPU for every command the dashboard runs and every session a test makes.
    """
    return OwnServicesLoader(file_loader=OwnServicesFileLoader())


#: The services sqsjkr makes clients of: make_client refuses any other, since the loader keeps
#: the endpoints of these alone.
SERVICES = frozenset({"sqs", "dynamodb", "scheduler", "sts", "events", "iam"})


class OwnServicesLoader(Loader):
    """botocore's loader, whose list of the services it has models for is SERVICES': its own walks
    the directories of every service botocore knows (some 400) to learn that sqs and dynamodb are
    among them, once for the models and once for their endpoint rules: 60 ms of CPU at the start
    of each command and daemon."""

    def list_available_services(self, type_name: str) -> list[str]:
        return sorted(service for service in SERVICES if self._has(service, type_name))

    def load_service_model(
        self, service_name: str, type_name: str, api_version: str | None = None
    ) -> Any:
        """botocore's model, without the endpoint parameter that TransactWriteItems derives from
        its items (a JMESPath over every item's table at each call: a quarter of the Python work
        of a call of 40 items). It only ever names a table by its ARN, for an endpoint of that
        table's account, and sqsjkr's tables are names; the calls go where they went before."""
        model = super().load_service_model(service_name, type_name, api_version)
        if service_name == "dynamodb" and type_name == "service-2":
            # In place, once for the loader's cache: the same object is returned every time.
            model["operations"].get("TransactWriteItems", {}).pop("operationContextParams", None)
        return model

    def _has(self, service: str, type_name: str) -> bool:
        try:
            return bool(self.list_api_versions(service, type_name))
        except DataNotFoundError:
            return False


class OwnServicesFileLoader(JSONFileLoader):
    """botocore's loader of its JSON data files, which keeps of endpoints.json (every service's
    endpoints in every partition) the entries of SERVICES alone, as it reads the file: the rest
    would be 6.5 MiB of Python objects that a session holds for its life, and that parsed at once
    leave a daemon 6 MiB larger. SERVICES' endpoints resolve as before: their entries and each
    partition's own defaults are kept whole."""

    def load_file(self, file_path: str) -> Any:
        if os.path.basename(file_path) != "endpoints":
            return super().load_file(file_path)
        openers: tuple[tuple[str, Any], ...] = ((".json", open), (".json.gz", gzip.open))
        for extension, opener in openers:
            if os.path.isfile(file_path + extension):
                with opener(file_path + extension, "rb") as file:
                    text = file.read().decode("utf-8")
                return json.loads(text, object_pairs_hook=_own_services)
        return None


def _own_services(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object of endpoints.json as it is read; of a partition's services (the one mapping
    whose every value has its "endpoints"), only SERVICES'."""
    if pairs and all(isinstance(value, dict) and "endpoints" in value for _, value in pairs):
        return {name: value for name, value in pairs if name in SERVICES}
    return dict(pairs)


#: SQS long polls hold a connection for up to 20 s; its read timeout must outlast them.
SQS_READ_TIMEOUT = 40
SQS_CONNECT_TIMEOUT = 5
#: DynamoDB answers in milliseconds: a call that hangs longer than this is retried, so that one
#: hung call cannot outlast a lease. A connect of 2 s allows one lost SYN to be sent again.
DYNAMODB_CONNECT_TIMEOUT = 2
DYNAMODB_READ_TIMEOUT = 3
#: botocore's standard retry mode: three attempts in all, with jittered waits between them of
#: at most 1 s and 2 s (the throttling base; other errors wait far less).
ATTEMPTS = 3
BACKOFF_SECONDS = 1 + 2
#: A write refused for a conflict with another transaction on one of its items (nothing was
#: written) is tried again, at most this many tries in all, after jittered waits that start at
#: CONFLICT_FIRST_WAIT and double up to CONFLICT_MAX_WAIT (1.6 s in all at most). A transaction
#: holds its items for milliseconds; waits that small let the runs of one event on many hosts,
#: whose claims and ends all write the event's summary, pass each other.
CONFLICT_TRIES = 10
CONFLICT_FIRST_WAIT = 0.025
CONFLICT_MAX_WAIT = 0.25
#: No try after a conflict starts later than this after the first one.
CONFLICT_RETRY_SECONDS = 2
#: The longest one DynamoDB call can take, retries included, before it fails: tries after
#: conflicts start within 2 s, and the last one may take 3 x (2 s + 3 s) + 3 s = 18 s, so
#: 20 s. lease.MIN_SAFE_LEASE_SECONDS follows from it.
DYNAMODB_CALL_SECONDS: int = (
    CONFLICT_RETRY_SECONDS
    + ATTEMPTS * (DYNAMODB_CONNECT_TIMEOUT + DYNAMODB_READ_TIMEOUT)
    + BACKOFF_SECONDS
)


#: The User-Agent of every AWS call, fixed once: botocore would otherwise rebuild its own from a
#: dozen parts at every call (a sixth of a call's Python work), and this one says who called.
USER_AGENT = (
    f"sqsjkr/{__version__} botocore/{botocore.__version__} Python/{platform.python_version()}"
)

#: The services whose requests sqsjkr alone builds, from values its own code has typed and
#: checked (queue URLs, receipt handles, keys, lease times): botocore's check of each request
#: against the service model (a tenth of a call's work, a third of a TransactWriteItems') finds
#: nothing there that the service would not reject itself.
UNCHECKED_SERVICES = frozenset({"sqs", "dynamodb"})


#: botocore's per-call handlers that do nothing for sqsjkr's calls, each an (event, handler) of
#: its documented event system: a trace header for calls made inside Lambda, an API version
#: header for services that ask for one (neither SQS nor DynamoDB does), and headers telling
#: the service each call's id and attempt, which it needs not.
IDLE_HANDLERS = (
    ("before-call", handlers.add_recursion_detection_header),
    ("before-call", handlers.inject_api_version_header_if_needed),
    ("request-created", handlers.add_retry_headers),
)


def make_client(session: Session, service: str, *, max_pool: int = 10) -> Any:
    """A client whose connection pool fits every worker, with botocore's standard retries."""
    if service not in SERVICES:
        raise ValueError(f"{service!r} is not one of sqsjkr's services (aws.SERVICES)")
    dynamodb = service == "dynamodb"
    config = BotoConfig(
        retries={"mode": "standard", "total_max_attempts": ATTEMPTS},
        max_pool_connections=max(10, max_pool),
        connect_timeout=DYNAMODB_CONNECT_TIMEOUT if dynamodb else SQS_CONNECT_TIMEOUT,
        read_timeout=DYNAMODB_READ_TIMEOUT if dynamodb else SQS_READ_TIMEOUT,
        user_agent=USER_AGENT,
        parameter_validation=service not in UNCHECKED_SERVICES,
    )
    client = session.create_client(service, config=config)
    for event, handler in IDLE_HANDLERS:
        client.meta.events.unregister(event, handler)
    return watch_answers(client)


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ClientError, or "" for anything else."""
    if isinstance(exc, ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def is_transient(exc: BaseException) -> bool:
    """True for failures worth retrying: connection errors, throttling, 5xx, conflicts with
    another transaction."""
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if error_code(exc) in TRANSIENT_CODES or int(status or 0) >= 500:
            return True
        reasons = cancellation_reasons(exc)
        return bool(reasons) and _only_transient(reasons, TRANSIENT_REASONS)
    # Missing credentials or an unknown profile are BotoCoreErrors too, but retrying will not help.
    return isinstance(exc, (BotoConnectionError, HTTPClientError, StoreTooSlow))


def cancellation_reasons(exc: BaseException) -> list[str]:
    """The CancellationReasons codes of a cancelled TransactWriteItems, one per write ("None"
    for a write that was not the cause); [] for any other failure."""
    if not isinstance(exc, ClientError) or error_code(exc) != "TransactionCanceledException":
        return []
    reasons = exc.response.get("CancellationReasons") or []
    return [str(reason.get("Code") or "None") for reason in reasons]


def is_conflict(exc: BaseException) -> bool:
    """Whether exc refused a write, writing nothing, because another transaction was under way
    on one of its items: worth trying again at once. Never a failed condition: a cancellation
    that names one is the caller's answer (which item failed, and how), and no conflict."""
    if error_code(exc) == "TransactionConflictException":
        return True
    reasons = cancellation_reasons(exc)
    return _only_transient(reasons, {"TransactionConflict"})


def _only_transient(reasons: list[str], transient: Set[str]) -> bool:
    """Whether some reason is in transient and every other is "None"."""
    return any(r in transient for r in reasons) and all(
        r in transient or r == "None" for r in reasons
    )


def retry_conflicts(
    call: Callable[[], T],
    *,
    failed: BaseException | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """call(), tried again while another transaction's conflict refuses it (is_conflict), at most
    CONFLICT_TRIES tries in all, after bounded jittered waits; any other failure, or the last
    conflict, raises. failed: call's first try, which the caller made and which failed so."""
    backoff = Backoff(first=CONFLICT_FIRST_WAIT, cap=CONFLICT_MAX_WAIT)
    deadline = time.monotonic() + CONFLICT_RETRY_SECONDS
    tries = 0 if failed is None else 1
    while True:
        if failed is not None:
            if not is_conflict(failed) or tries >= CONFLICT_TRIES or time.monotonic() > deadline:
                raise failed
            delay = backoff.next_delay()
            log.debug("%s; trying again in %.3fs", describe(failed), delay)
            sleep(delay)
        tries += 1
        try:
            return call()
        except ClientError as exc:
            failed = exc


def describe(exc: BaseException) -> str:
    """A one-line account of an AWS failure for the log."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'Error')}: {error.get('Message', '')}".rstrip(": ")
    return f"{type(exc).__name__}: {exc}"


def raise_if_missing(exc: ClientError, table: str) -> None:
    """Raise ResourceMissingError, naming table and where it is configured, when exc is
    DynamoDB's answer that the table does not exist; else return, for the caller to go on."""
    if error_code(exc) == "ResourceNotFoundException":
        raise ResourceMissingError(
            f"DynamoDB table {table!r} not found (check [lock] table or --lock-table, "
            "and the region)"
        ) from exc


def conditional_write(
    call: Callable[..., Any], table: str, **request: Any
) -> tuple[bool, dict[str, Any]]:
    """Run a conditional DynamoDB write: (True, the item before it, when the request asks for
    ReturnValues="ALL_OLD") or (False, the item that failed the condition; {} if none).
    A conflict with another transaction is tried again (retry_conflicts); a missing table is
    named clearly.
    """
    try:
        response = retry_conflicts(
            lambda: call(TableName=table, ReturnValuesOnConditionCheckFailure="ALL_OLD", **request)
        )
    except ClientError as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False, dict(exc.response.get("Item") or {})
        raise_if_missing(exc, table)
        raise
    return True, dict(response.get("Attributes") or {})


def check_table(client: Any, table: str) -> bool:
    """Fail with a clear error unless table exists with the Id/Type keys sqsjkr writes.

    A read of an item that no one writes: harmless, and allowed by the hosts' IAM policy.
    """
    try:
        client.get_item(TableName=table, Key={"Id": {"S": "sqsjkr-probe"}, "Type": {"S": "probe"}})
    except ClientError as exc:
        raise_if_missing(exc, table)
        if error_code(exc) == "ValidationException":
            raise ResourceMissingError(
                f"DynamoDB table {table!r} does not have the keys sqsjkr needs (hash key Id and "
                f"range key Type, both strings): {describe(exc)}"
            ) from exc
        raise
    return True


def failed_condition(exc: ClientError, index: int) -> dict[str, Any] | None:
    """The item that failed the condition of the index-th write of a transaction cancelled by
    it ({} if none was there); None if the transaction failed for another reason."""
    if error_code(exc) != "TransactionCanceledException":
        return None
    reasons = exc.response.get("CancellationReasons") or []
    if index >= len(reasons) or reasons[index].get("Code") != "ConditionalCheckFailed":
        return None
    return dict(reasons[index].get("Item") or {})


def write_if_owner(
    call: Callable[..., Any], table: str, key: dict[str, Any], owner: str, **request: Any
) -> tuple[bool, dict[str, Any]]:
    """Update or delete a leased item (a lock, a dedupe claim) only while owner holds its lease.

    As conditional_write: (False, the item) when it has another Owner or no LeaseUntil, and
    (False, {}) when it is gone.
    """
    return conditional_write(call, table, **owner_condition(key, owner, **request))


def owner_condition(key: dict[str, Any], owner: str, **request: Any) -> dict[str, Any]:
    """The parts of a write request to key that make it apply only while owner holds the lease."""
    values = {**request.pop("ExpressionAttributeValues", {}), ":owner": {"S": owner}}
    names = {**request.pop("ExpressionAttributeNames", {}), "#owner": "Owner"}
    return {
        "Key": key,
        # OWNER is a DynamoDB reserved word.
        "ConditionExpression": "#owner = :owner AND attribute_exists(LeaseUntil)",
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        **request,
    }


def lease_time(unix_seconds: float) -> dict[str, str]:
    """A LeaseUntil value (or a time compared with one), to the millisecond: whole seconds would
    cut up to a second off leases of a few seconds."""
    return {"N": f"{unix_seconds:.3f}".rstrip("0").rstrip(".")}


def owner_of(item: dict[str, Any]) -> str | None:
    """The Owner attribute of a leased item, as write_if_owner checks it; None if it has none."""
    return item.get("Owner", {}).get("S")


def renew_lease(client: Any, table: str, key: dict[str, Any], owner: str, until: float) -> bool:
    """Move a leased item's LeaseUntil on to until, while owner holds it: False if it does not."""
    renewed, _ = write_if_owner(
        client.update_item,
        table,
        key,
        owner,
        UpdateExpression="SET LeaseUntil = :until",
        ExpressionAttributeValues={":until": lease_time(until)},
    )
    return renewed


class Backoff:
    """Capped exponential delays with jitter, so a fleet does not retry in step."""

    def __init__(self, first: float = 1.0, cap: float = 30.0) -> None:
        self._first = first
        self._cap = cap
        self._failures = 0

    def next_delay(self) -> float:
        delay = min(self._cap, self._first * 2**self._failures)
        self._failures += 1
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self._failures = 0
