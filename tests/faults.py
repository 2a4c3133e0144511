"""A fault-injecting HTTP proxy in front of moto: holds, fails or drops chosen AWS calls.

A daemon pointed at it (AWS_ENDPOINT_URL) sees what a slow or flaky network would show it.
"""

from __future__ import annotations

import http.client
import http.server
import json
import random
import socketserver
import sys
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Call:
    """One AWS request as the proxy saw it."""

    action: str  # "PutItem", "ReceiveMessage", ...
    body: bytes
    #: The method and path of a REST call, which has no action ("GET /schedules/nightly").
    route: str = ""

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.body or b"{}")
        except ValueError:
            return {}

    def item_type(self) -> str | None:
        """The Type key of the DynamoDB item the call writes or reads, if any."""
        return item_type(self.json)

    def request_key(self) -> str:
        """The request as the caller made it: the same for each try of one write, different for
        two writes (their items carry a new owner id, or time). botocore's idempotency token,
        new at each call, is left out."""
        request = {k: v for k, v in self.json.items() if k != "ClientRequestToken"}
        return f"{self.action or self.route} {json.dumps(request, sort_keys=True)}"


@dataclass
class Fault:
    """What to do with calls that match: hold the response for hold seconds after the call took
    effect; or answer with an error without forwarding; `times` calls at most (None: all), and
    of those only a share, drawn at random."""

    matches: Callable[[Call], bool]
    hold: float = 0.0
    error: tuple[int, str] | None = None  # (HTTP status, AWS error code)
    times: int | None = None
    hits: int = field(default=0)
    share: float = 1.0
    #: More fields of the error's body, made from the call (CancellationReasons, say).
    details: Callable[[Call], dict[str, Any]] | None = None
    #: Forward the call this many more times after the first (its answer is the first's): a
    #: SendMessage repeated puts that many more copies of the message on the queue.
    repeat: int = 0
    #: Forward the call, then close the connection without answering: it took effect, and its
    #: caller cannot know (botocore sees the connection closed, and tries again).
    drop: bool = False
    #: Called once the call took effect, before it is answered (SIGKILL its caller, say).
    after: Callable[[Call], None] | None = None
    #: Decided once the call took effect, from its answer (status, body): whether the fault
    #: takes it after all (an error then replaces the answer). A ReceiveMessage is known to
    #: carry a message only from its answer.
    confirm: Callable[[Call, int, bytes], bool] | None = None

    def applies(self, call: Call, draw: Callable[[], float]) -> bool:
        """Whether this fault takes call: it matches, has times left, and draw() fell in its share."""
        if self.times is not None and self.hits >= self.times:
            return False
        return self.matches(call) and (self.share >= 1 or draw() < self.share)


#: The writes that DynamoDB refuses with TransactionConflictException while a transaction is
#: under way on their item.
PLAIN_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem"})


def transaction_conflicts(share: float) -> Fault:
    """Cancel a share of TransactWriteItems as DynamoDB does when another transaction is under
    way on one of their items, without forwarding them: nothing is written."""
    return Fault(
        lambda call: call.action == "TransactWriteItems",
        error=(400, "TransactionCanceledException"),
        share=share,
        details=conflict_reasons,
    )


def write_conflicts(share: float, types: Collection[str]) -> Fault:
    """Refuse a share of the plain writes of items of these Types as DynamoDB does when they
    meet a transaction in progress, without forwarding them."""
    return Fault(
        lambda call: call.action in PLAIN_WRITES and call.item_type() in types,
        error=(400, "TransactionConflictException"),
        share=share,
    )


def conflict_reasons(call: Call) -> dict[str, Any]:
    """The CancellationReasons of a transaction cancelled for a conflict: on the event's summary
    item, where the claims and ends of one event's runs meet, else on one item at random."""
    writes = call.json.get("TransactItems", [])
    summaries = [i for i, w in enumerate(writes) if item_type(*w.values()) == "summary"]
    conflict = random.choice(summaries or list(range(len(writes))) or [0])
    codes = ["None"] * max(1, len(writes))
    codes[conflict] = "TransactionConflict"
    reasons: list[dict[str, str]] = [{"Code": code} for code in codes]
    reasons[conflict]["Message"] = "Transaction is ongoing for the item."
    return {
        "message": "Transaction cancelled, please refer cancellation reasons for specific "
        f"reasons [{', '.join(codes)}]",
        "CancellationReasons": reasons,
    }


class FaultProxy:
    """Forwards every request to upstream, applying the first Fault that applies to it."""

    def __init__(self, upstream: str, *, seed: int = 17) -> None:
        self._upstream = urlsplit(upstream)
        self._random = random.Random(seed)  # the draws of Faults' shares
        self._lock = threading.Lock()
        self._faults: list[Fault] = []
        self.calls: list[Call] = []
        #: Each call with the answer its caller got, in the order of the answers: (call, HTTP
        #: status, body); None for an answer that was dropped.
        self.answers: list[tuple[Call, int, bytes | None]] = []
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                proxy._handle(self)

            do_GET = do_POST

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                # A client killed mid-call resets its connection: no error of the proxy's.
                if not isinstance(sys.exc_info()[1], ConnectionError):
                    super().handle_error(request, client_address)

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def add(self, fault: Fault) -> Fault:
        with self._lock:
            self._faults.append(fault)
        return fault

    def remove(self, fault: Fault) -> None:
        with self._lock:
            self._faults.remove(fault)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _fault_for(self, call: Call) -> Fault | None:
        with self._lock:
            self.calls.append(call)
            for fault in self._faults:
                if fault.applies(call, self._random.random):
                    fault.hits += 1
                    return fault
        return None

    def _handle(self, handler: http.server.BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length)
        target = handler.headers.get("X-Amz-Target", "")
        route = f"{handler.command} {urlsplit(handler.path).path}"
        call = Call(target.rpartition(".")[2], body, "" if target else route)
        fault = self._fault_for(call)
        if fault is not None and fault.error is not None and fault.confirm is None:
            self._refuse(handler, call, fault)
            return
        headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
        status, data, reply_headers = self._forward(handler, body, headers)
        if fault is not None and fault.confirm is not None:
            if not fault.confirm(call, status, data):
                with self._lock:
                    fault.hits -= 1
                fault = None
            elif fault.error is not None:
                self._refuse(handler, call, fault)
                return
        for _ in range(0 if fault is None else fault.repeat):
            self._forward(handler, body, headers)
        if fault is not None and fault.after is not None:
            fault.after(call)
        if fault is not None and fault.drop:
            self._record(call, status, None)
            handler.close_connection = True  # no answer: the connection just closes
            return
        if fault is not None and fault.hold:
            time.sleep(fault.hold)  # the call took effect; its answer is late
        self._record(call, status, data)
        reply(handler, status, data, reply_headers)

    def _refuse(
        self, handler: http.server.BaseHTTPRequestHandler, call: Call, fault: Fault
    ) -> None:
        """Answer call with fault's error."""
        assert fault.error is not None
        status, code = fault.error
        fields = {"__type": code, "message": "injected"}
        fields.update(fault.details(call) if fault.details else {})
        data = json.dumps(fields).encode()
        self._record(call, status, data)
        reply(handler, status, data, {"Content-Type": "application/x-amz-json-1.0"})

    def _record(self, call: Call, status: int, data: bytes | None) -> None:
        with self._lock:
            self.answers.append((call, status, data))

    def _forward(
        self, handler: http.server.BaseHTTPRequestHandler, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        connection = http.client.HTTPConnection(
            self._upstream.hostname, self._upstream.port, timeout=60
        )
        try:
            connection.request(handler.command, handler.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            reply_headers = {
                k: v
                for k, v in response.getheaders()
                if k.lower() not in ("transfer-encoding", "connection", "content-length")
            }
            return response.status, data, reply_headers
        finally:
            connection.close()


def item_type(request: dict[str, Any]) -> str | None:
    """The Type key of the item a DynamoDB write (or read) request names, if any."""
    item = request.get("Item") or request.get("Key") or {}
    return item.get("Type", {}).get("S")


def reply(
    handler: http.server.BaseHTTPRequestHandler,
    status: int,
    body: bytes,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer handler's request; a client that gave up waiting only closes the connection."""
    try:
        handler.send_response(status)
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    except OSError:
        handler.close_connection = True
