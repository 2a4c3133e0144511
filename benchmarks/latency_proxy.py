"""A local HTTP proxy that puts a network's round trip between the daemon and the AWS endpoint.

It delays each request and each response (jittered), sets TCP_NODELAY both ways, and logs every AWS call by action.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from urllib.parse import parse_qs

#: Header blocks bigger than this are not AWS traffic.
MAX_HEAD = 1 << 20


@dataclass(frozen=True)
class Call:
    """One HTTP request the proxy passed on: when it arrived, which AWS action, and how it went."""

    at: float  # time.time() when the request had arrived whole
    action: str
    entries: int  # entries of a batch call (DeleteMessageBatch, ...); 0 for other calls
    status: int  # the endpoint's HTTP status; 0 if it never answered

    def as_tuple(self) -> tuple[float, str, int, int]:
        return (self.at, self.action, self.entries, self.status)


def classify(headers: dict[str, str], body: bytes) -> tuple[str, int]:
    """(action, entries of a batch) of an AWS request in the JSON or the query protocol."""
    target = headers.get("x-amz-target", "")
    if target:
        # AmazonSQS.ReceiveMessage, DynamoDB_20120810.PutItem
        action = target.rsplit(".", 1)[-1]
        entries = 0
        if action.endswith("Batch"):
            try:
                entries = len(json.loads(body).get("Entries", []))
            except (ValueError, AttributeError):
                entries = 0
        return action, entries
    form = parse_qs(body.decode("utf-8", "replace"))
    action = form.get("Action", ["?"])[0]
    entries = sum(1 for key in form if key.endswith(".Id") and "Entry." in key)
    return action, entries


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise
        return None  # the peer closed between requests


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    """The raw chunked body, passed on as it came."""
    parts = []
    while True:
        size_line = await reader.readuntil(b"\r\n")
        parts.append(size_line)
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            # Trailers, if any, end with an empty line.
            while True:
                line = await reader.readuntil(b"\r\n")
                parts.append(line)
                if line == b"\r\n":
                    return b"".join(parts)
        parts.append(await reader.readexactly(size + 2))


async def _read_body(
    reader: asyncio.StreamReader, headers: dict[str, str], *, until_close: bool
) -> bytes:
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return await _read_chunked(reader)
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return await reader.read() if until_close else b""


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Upstream:
    """The connection to the endpoint behind one client connection, opened when needed.

    moto's server closes its connection after every response; AWS keeps it open. The proxy
    opens a new one to moto when moto closed the last, and keeps the client's connection open
    as AWS would, so that the daemon does not pay for a connection per call that it would not
    pay in a deployment.
    """

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def exchange(self, request: bytes, is_head: bool) -> tuple[str, list[str], bytes]:
        """Send request; the response's status line, headers and body (de-chunked)."""
        if self._streams is None:
            reader, writer = await asyncio.open_connection(*self._address, limit=MAX_HEAD)
            _nodelay(writer)
            self._streams = reader, writer
        reader, writer = self._streams
        writer.write(request)
        await writer.drain()
        head = await _read_head(reader)
        if head is None:
            raise ConnectionError("the endpoint closed the connection without answering")
        status_line, headers = _parse_head(head)
        close = headers.get("connection", "").lower() == "close"
        framed = "content-length" in headers or "transfer-encoding" in headers
        no_body = is_head or status_line.split()[1] in ("204", "304")
        body = b""
        if not no_body:
            body = await _read_body(reader, headers, until_close=not framed)
            if "chunked" in headers.get("transfer-encoding", "").lower():
                body = _dechunk(body)
        if close or not framed:
            self.close()
        lines = head.decode("latin-1").split("\r\n")[1:]
        kept = [
            line
            for line in lines
            if line
            and line.split(":", 1)[0].strip().lower()
            not in ("connection", "content-length", "transfer-encoding", "keep-alive")
        ]
        return status_line, kept, body

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


def _dechunk(raw: bytes) -> bytes:
    out = []
    rest = raw
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip(), 16)
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)


class LatencyProxy:
    """Forwards each client connection to upstream, a jittered half round trip each way."""

    def __init__(self, upstream: tuple[str, int], latency_ms: float, jitter_ms: float) -> None:
        self._upstream = upstream
        self._latency = latency_ms / 1000
        self._jitter = jitter_ms / 1000
        self.calls: list[Call] = []
        self.connections = 0  # opened by clients
        # The loop holds tasks weakly: a handler waiting on a long poll must not be collected.
        self.handlers: set[asyncio.Task[None]] = set()

    def one_way(self) -> float:
        """Half a round trip: latency/2 +- jitter/2, so a round trip is latency +- jitter."""
        half = self._latency / 2 + random.uniform(-self._jitter, self._jitter) / 2
        return max(0.0, half)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        _nodelay(writer)
        upstream = Upstream(self._upstream)
        try:
            while await self._exchange(reader, writer, upstream):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # a peer went away mid-request: so does this connection
        except asyncio.CancelledError:
            pass  # the proxy stops, say with a long poll of a daemon gone still open
        finally:
            self.handlers.discard(task)
            upstream.close()
            writer.close()

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: Upstream
    ) -> bool:
        """Pass one request and its response on; False when the client's connection is done."""
        head = await _read_head(reader)
        if head is None:
            return False
        request_line, headers = _parse_head(head)
        body = await _read_body(reader, headers, until_close=False)
        action, entries = classify(headers, body)
        call_index = len(self.calls)
        self.calls.append(Call(time.time(), action, entries, 0))
        await asyncio.sleep(self.one_way())
        status_line, response_headers, response_body = await upstream.exchange(
            head + body, request_line.startswith("HEAD ")
        )
        status = int(status_line.split()[1])
        self.calls[call_index] = Call(self.calls[call_index].at, action, entries, status)
        client_closes = headers.get("connection", "").lower() == "close"
        response_head = "\r\n".join(
            [
                status_line,
                *response_headers,
                f"Content-Length: {len(response_body)}",
                *(["Connection: close"] if client_closes else []),
                "",
                "",
            ]
        ).encode("latin-1")
        await asyncio.sleep(self.one_way())
        writer.write(response_head + response_body)
        await writer.drain()
        return not client_closes


def serve_proxy(
    conn: Connection,
    upstream_port: int,
    latency_ms: float,
    jitter_ms: float,
    cpus: set[int] | None,
) -> None:
    """Process entry: run the proxy on 127.0.0.1, send its port over conn, then answer conn's
    requests: an int n asks for the calls from the n-th on (and the count of connections that
    clients opened); None stops the proxy."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    asyncio.run(_serve(conn, upstream_port, latency_ms, jitter_ms))


async def _serve(conn: Connection, upstream_port: int, latency_ms: float, jitter_ms: float) -> None:
    proxy = LatencyProxy(("127.0.0.1", upstream_port), latency_ms, jitter_ms)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, limit=MAX_HEAD)
    conn.send(server.sockets[0].getsockname()[1])
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def on_request() -> None:
        try:
            since = conn.recv()
        except EOFError:
            since = None
        if since is None:
            if not done.done():
                done.set_result(None)
            return
        conn.send(([c.as_tuple() for c in proxy.calls[since:]], proxy.connections))

    loop.add_reader(conn.fileno(), on_request)
    async with server:
        await done
        loop.remove_reader(conn.fileno())
        for task in list(proxy.handlers):
            task.cancel()
        await asyncio.gather(*proxy.handlers, return_exceptions=True)
