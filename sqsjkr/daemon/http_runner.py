"""Running an HTTP job: one call through urllib3, on a thread of its own that a stop can cut short;
and Runners, which sends each job to the runner of its kind (HTTP or shell).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError as ConnectTimeout
from urllib3.exceptions import (
    HTTPError,
    LocationValueError,
    NewConnectionError,
    ProtocolError,
    ReadTimeoutError,
    SSLError,
)
from urllib3.exceptions import TimeoutError as HttpTimeout

from sqsjkr import __version__
from sqsjkr.contract.http_call import HttpCall, origin
from sqsjkr.contract.job import Job
from sqsjkr.contract.run import RunContext
from sqsjkr.daemon.live import LiveTails, watching
from sqsjkr.daemon.output import Lines, Output, Tail
from sqsjkr.daemon.runner import HOST_ERRNOS, JobRunner, RunResult, StopReason, StopSwitch
from sqsjkr.errors import HostFault
from sqsjkr.observability.logs import JobLog

log = logging.getLogger("sqsjkr.runner")
output_log = logging.getLogger("sqsjkr.output")

#: The exit_code of an HTTP job that got no answer (cut off, timed out, stopped): statuses are
#: 100-599, and 0 is a success.
NO_ANSWER = 1
#: Longest wait for a connection to be made. A stop cannot cut a connect short, so this is also
#: the longest a stop waits for a call that is still connecting.
CONNECT_SECONDS = 10.0
#: Of an answer's body, at most this many times the kept tail is read (and at least
#: MIN_READ_BYTES, for the log): the rest is never read, so a huge answer costs no memory.
READ_FACTOR = 4
MIN_READ_BYTES = 64 * 1024
_CHUNK_BYTES = 16 * 1024
#: The headers that say which run a call is (RunContext.headers), lower-cased.
CONTEXT_PREFIX = "x-sqsjkr-"


class HttpRunner:
    """Runs HTTP jobs: job.http, through one urllib3 PoolManager that close() closes.

    Never follows a redirect (it could leave the [http] allow prefixes) and never retries: a
    job's retries are the daemon's business.
    """

    def __init__(
        self, *, tail_bytes: int = 0, max_connections: int = 10, live: LiveTails | None = None
    ) -> None:
        """tail_bytes: how much of the end of each answer's body its result keeps;
        max_connections: connections kept open per host (one per job running at once); live:
        where that tail is read while the call runs (the live output's writer)."""
        self._tail_bytes = tail_bytes
        self._live = live
        self._manager = urllib3.PoolManager(maxsize=max_connections, retries=False)
        # Connections that a stop can reach: urllib3 hands out no other handle on a pooled
        # connection in use.
        self._manager.pool_classes_by_scheme = {"http": _HttpPool, "https": _HttpsPool}

    def close(self) -> None:
        self._manager.clear()

    def run(
        self,
        job: Job,
        *,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None = None,
    ) -> RunResult:
        """job.http with its own timeout, else timeout (None: until the answer or a stop)."""
        with watching(self._live, job, self._tail_bytes) as tail:
            return self._run(job, timeout, stop, context, tail)

    def _run(
        self,
        job: Job,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None,
        tail: Tail,
    ) -> RunResult:
        call = job.http
        assert call is not None, "HttpRunner runs HTTP jobs only"
        limit = call.timeout.seconds if call.timeout is not None else timeout
        jlog = JobLog(log, job)
        output = JobLog(output_log, job)
        exchange = _Exchange(
            call,
            headers=merged_headers(call, context),
            limit=limit,
            read_bytes=max(READ_FACTOR * self._tail_bytes, MIN_READ_BYTES),
            tail=tail,
            emit=lambda line: output.info("| %s", line),
        )
        started = time.monotonic()
        thread = _CallThread(exchange, lambda: exchange.make(self._manager, stop))
        try:
            thread.start()
        except RuntimeError as exc:  # "can't start new thread"
            raise HostFault(f"could not start a thread for the HTTP call: {exc}") from exc
        reason = stop.wait(limit)
        if reason is None:
            stop.trip(StopReason.TIMED_OUT)
            reason = stop.wait(0)
        if reason is not StopReason.ENDED:
            jlog.warning("%s: abandoning the call to %s", _reason(reason), origin(call.url))
            exchange.abort()
        thread.join()
        return exchange.result(reason, time.monotonic() - started, jlog)


class Runners:
    """A JobRunner for both kinds of job: HTTP jobs to http, the others to shell."""

    def __init__(self, shell: JobRunner, http: HttpRunner) -> None:
        self._shell = shell
        self._http = http

    def run(
        self,
        job: Job,
        *,
        timeout: float | None,
        stop: StopSwitch,
        context: RunContext | None = None,
    ) -> RunResult:
        runner: JobRunner = self._http if job.http is not None else self._shell
        return runner.run(job, timeout=timeout, stop=stop, context=context)

    def close(self) -> None:
        self._http.close()


def merged_headers(call: HttpCall, context: RunContext | None) -> dict[str, str]:
    """The headers a call sends: a User-Agent, the message's headers over it, and the run's
    X-Sqsjkr-* headers. A message's own X-Sqsjkr-* headers are dropped: it cannot pretend to be
    another run. Names are matched without regard to case, as HTTP does."""
    merged = {"User-Agent": f"sqsjkr/{__version__}"}
    own = {k: v for k, v in call.headers.items() if not k.lower().startswith(CONTEXT_PREFIX)}
    for layer in (own, context.headers() if context is not None else {}):
        names = {name.lower() for name in layer}
        merged = {k: v for k, v in merged.items() if k.lower() not in names}
        merged.update(layer)
    return merged


#: The reasons a call is stopped from outside it (not its timeout).
_STOPPERS = frozenset({StopReason.CANCELLED, StopReason.KILLED})


def _reason(reason: StopReason | None) -> str:
    if reason is StopReason.TIMED_OUT or reason is StopReason.KILLED:
        return reason.value
    return "stopped"


@dataclass
class _Answer:
    """What came back: the status, and whether the body was read to its end."""

    status: int
    complete: bool = False


class _Exchange:
    """One call, made on its own thread; abort() from another thread cuts it short."""

    def __init__(
        self,
        call: HttpCall,
        *,
        headers: Mapping[str, str],
        limit: float | None,
        read_bytes: int,
        tail: Tail,
        emit: Callable[[str], None],
    ) -> None:
        self.call = call
        self._headers = dict(headers)
        self._limit = limit
        #: The connect timeout: the call's own limit when shorter.
        self.connect = CONNECT_SECONDS if limit is None else min(CONNECT_SECONDS, limit)
        self._read_bytes = read_bytes
        self._tail = tail
        self._lines = Lines(emit)
        self._mutex = threading.Lock()
        self._connection: HTTPConnection | None = None
        self._aborted = False
        self.answer: _Answer | None = None
        self.error: BaseException | None = None

    def make(self, manager: urllib3.PoolManager, stop: StopSwitch) -> None:
        """Make the call and read its answer; runs on the call's own thread."""
        try:
            if stop.wait(0) is None:  # else stopped before it began: no call at all
                self._make(manager)
        except BaseException as exc:  # kept for result(): this thread must end quietly
            self.error = exc
        finally:
            stop.trip(StopReason.ENDED)

    def _make(self, manager: urllib3.PoolManager) -> None:
        call = self.call
        response = manager.request(
            call.method,
            call.url,
            headers=self._headers,
            body=None if call.body is None else call.body.encode(),
            timeout=urllib3.Timeout(connect=self.connect, read=self._limit),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        self.answer = _Answer(response.status)
        try:
            self.answer.complete = self._read(response)
        finally:
            self._lines.close()
            if not self.answer.complete or self._aborted:
                # Unread bytes are left on it, or it is shut: it cannot serve another call.
                response.close()
            response.release_conn()

    def _read(self, response: Any) -> bool:
        """Read the body into the tail and the log, up to read_bytes: whether it all came."""
        read = 0
        # What has come so far, not a whole chunk: the live output shows a slow body as it
        # arrives (urllib3 1.26 has no read1, and waits for whole chunks).
        read_some = getattr(response, "read1", response.read)
        while read < self._read_bytes:
            data = read_some(min(_CHUNK_BYTES, self._read_bytes - read))
            if not data:
                return True
            read += len(data)
            self._tail.add(data)
            self._lines.feed(data)
        return False

    def attach(self, connection: HTTPConnection) -> None:
        """The connection the call goes over (called on the call's thread)."""
        with self._mutex:
            self._connection = connection
            if self._aborted:
                _shut(connection)

    def abort(self) -> None:
        """End the call now: its socket is shut, so the call's thread wakes with an error."""
        with self._mutex:
            self._aborted = True
            if self._connection is not None:
                _shut(self._connection)

    def result(self, reason: StopReason | None, seconds: float, jlog: JobLog) -> RunResult:
        """The call's RunResult, once its thread has ended."""
        text, total = self._tail.snapshot()
        output = Output(merged=text, stdout=text, stderr="", merged_bytes=total)
        answer, error = self.answer, self.error
        status = answer.status if answer is not None else NO_ANSWER
        where = origin(self.call.url)
        if reason is not StopReason.ENDED or isinstance(error, ReadTimeoutError):
            # Stopped by the daemon or a kill, as it was; else the call's own timeout ran out.
            stopped = reason if reason in _STOPPERS else StopReason.TIMED_OUT
            return RunResult(status, seconds, stopped=stopped, output=output)
        if error is not None:
            start_error = _start_error(error, where, self.connect) if answer is None else None
            if start_error is not None:
                return RunResult(NO_ANSWER, seconds, start_error=start_error, output=output)
            if isinstance(error, HTTPError):
                jlog.error("the call to %s failed: %s", where, _describe(error))
            else:
                jlog.error("the call to %s failed", where, exc_info=error)
            return RunResult(status, seconds, output=output)
        assert answer is not None
        cut = "" if answer.complete else f" (its body read up to {self._read_bytes} bytes)"
        # At DEBUG: the job's one INFO line is its end's (worker.py), an error's status in it.
        jlog.debug("%s answered %d%s", where, answer.status, cut)
        # A body left unread is no failure: the status is the answer.
        return RunResult(0 if self.call.succeeded(status) else status, seconds, output=output)


def _start_error(error: BaseException, where: str, connect: float) -> str | None:
    """Why the call could not be made at all (nothing reached the service), or None. Raises
    HostFault when the host is short of something (descriptors, memory): not the job's fault."""
    cause = error.__cause__ or error.__context__
    if isinstance(error, NewConnectionError):
        if isinstance(cause, OSError) and cause.errno in HOST_ERRNOS:
            raise HostFault(f"could not connect to {where}: {cause.strerror or cause}") from error
        return f"could not connect to {where}: {_describe(error)}"
    if isinstance(error, ConnectTimeout):
        return f"could not connect to {where}: no connection within {connect:g}s"
    if isinstance(error, SSLError):
        return f"could not connect to {where}: {_describe(error)}"
    if isinstance(error, UnicodeEncodeError):
        # Not shown: the value may be a secret.
        return f"the call to {where} cannot be made: a header value is not Latin-1 text"
    if isinstance(error, (LocationValueError, ValueError)):
        # A header name http.client refuses (one with a colon, ...): no try can ever send it.
        return f"the call to {where} cannot be made: {error}"
    return None


def _describe(error: BaseException) -> str:
    """The innermost reason of a urllib3 error, without the connection's repr."""
    cause = error.__cause__ or error.__context__
    if isinstance(error, NewConnectionError) and isinstance(cause, OSError):
        return cause.strerror or str(cause)
    if isinstance(error, ProtocolError) and len(error.args) > 1:
        return f"{error.args[0]} ({error.args[1]})"
    if isinstance(error, HttpTimeout):
        return "timed out"
    return str(error) or type(error).__name__


def _shut(connection: HTTPConnection) -> None:
    sock = connection.sock
    if sock is None:
        return
    # The plain socket's shutdown, under TLS too: SSLSocket's own would change its state under
    # the thread reading it. A shut socket wakes that thread's blocked read at once.
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class _CallThread(threading.Thread):
    """The thread of one call: its connections find the call through it."""

    def __init__(self, exchange: _Exchange, target: Callable[[], None]) -> None:
        super().__init__(target=target, name="sqsjkr-http")
        self.exchange = exchange


def _attach(connection: HTTPConnection) -> None:
    thread = threading.current_thread()
    if isinstance(thread, _CallThread):
        thread.exchange.attach(connection)


class _Reachable:
    """Tells the call on whose thread it works which connection it is: a kept-alive one when it
    sends, a new one once connected."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        _attach(self)  # type: ignore[arg-type]
        super().request(*args, **kwargs)  # type: ignore[misc]

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        _attach(self)  # type: ignore[arg-type]


class _HttpConnection(_Reachable, HTTPConnection):
    pass


class _HttpsConnection(_Reachable, HTTPSConnection):
    pass


class _HttpPool(HTTPConnectionPool):
    ConnectionCls = _HttpConnection


class _HttpsPool(HTTPSConnectionPool):
    ConnectionCls = _HttpsConnection
