"""A running command's output: lines to the log as they come, and the last bytes of each stream.

Both pipes are read by the worker's own thread through one poll: no thread per stream, and
memory stays bounded whatever a job prints.
"""

from __future__ import annotations

import codecs
import math
import os
import select
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

#: Longest piece of output logged as one line; longer lines are split.
MAX_LINE_BYTES = 16 * 1024
#: Bytes read from a pipe at a time.
_READ_BYTES = 64 * 1024
#: How long a command's output may stay open after its process has exited before the
#: ExitWatch says that something else holds it.
HELD_OPEN_SECONDS = 1.0


@dataclass(frozen=True)
class Output:
    """The last bytes of what a command printed: both streams merged in the order read, and each."""

    merged: str = ""
    stdout: str = ""
    stderr: str = ""
    #: Bytes printed in all, both streams: what a reader of the live tail has seen is known by it.
    merged_bytes: int = 0


class Lines:
    """Cuts one stream into lines of at most MAX_LINE_BYTES, passing each to emit without its
    line ending. A character split by a cut is not garbled."""

    def __init__(self, emit: Callable[[str], None]) -> None:
        self._emit = emit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buffer = bytearray()
        self._cut = False

    def feed(self, data: bytes) -> None:
        self._buffer += data
        while True:
            end = self._buffer.find(b"\n", 0, MAX_LINE_BYTES)
            if end >= 0:
                size = end + 1
            elif len(self._buffer) >= MAX_LINE_BYTES:
                size = MAX_LINE_BYTES
            else:
                return
            piece = bytes(self._buffer[:size])
            del self._buffer[:size]
            self._piece(piece, final=piece.endswith(b"\n"))

    def close(self) -> None:
        """The stream ended: what is left is its last line."""
        if self._buffer:
            piece = bytes(self._buffer)
            self._buffer.clear()
            self._piece(piece, final=True)

    def _piece(self, piece: bytes, *, final: bool) -> None:
        text = self._decoder.decode(piece, final=final).rstrip("\r\n")
        # A line of exactly MAX_LINE_BYTES leaves only its newline for the next piece.
        if text or not self._cut:
            self._emit(text)
        self._cut = not piece.endswith(b"\n")


class Tail:
    """The last limit bytes added, and how many were added in all. Safe to read from another
    thread (the live output's writer) while one thread adds."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._data = bytearray()
        self._mutex = threading.Lock()
        self._total = 0

    def add(self, data: bytes) -> None:
        with self._mutex:
            self._total += len(data)
            if self._limit <= 0:
                return
            self._data += data[-self._limit :]
            if len(self._data) > 2 * self._limit:  # trimmed now and then, not at every add
                del self._data[: -self._limit]

    def text(self) -> str:
        return self.snapshot()[0]

    @property
    def total(self) -> int:
        """Bytes added in all."""
        with self._mutex:
            return self._total

    def snapshot(self) -> tuple[str, int]:
        """The last limit bytes as text, and the bytes added in all, at one moment."""
        with self._mutex:
            data = bytes(self._data[-self._limit :]) if self._limit > 0 else b""
            total = self._total
        return data.decode("utf-8", errors="replace"), total


def stream_lines(stream: IO[bytes], emit: Callable[[str], None]) -> None:
    """Pass each line of stream to emit (see Lines), never holding more than one line."""
    lines = Lines(emit)
    for data in iter(lambda: stream.read(_READ_BYTES), b""):
        lines.feed(data)
    lines.close()


@dataclass(frozen=True)
class ExitWatch:
    """A descriptor that turns readable once the command's own process has exited (a pidfd),
    and what to call if, by then, something else still holds its output open."""

    fd: int
    held_open: Callable[[], None]


def read_output(
    stdout: IO[bytes],
    stderr: IO[bytes],
    emit: Callable[[str], None],
    tail_bytes: int,
    *,
    wait: Callable[[], float | None] = lambda: None,
    exit_watch: ExitWatch | None = None,
    merged: Tail | None = None,
) -> Output:
    """Read both pipes to their end, passing their lines to emit; the last tail_bytes of each.

    wait is asked before each wait for output how long to wait at most (None: until there is
    some), so that the reading thread also keeps its caller's deadlines. merged, when given, is
    the Tail both streams go to (one that the live output's writer reads as the job runs)."""
    merged = merged if merged is not None else Tail(tail_bytes)
    out, err = stdout.fileno(), stderr.fileno()
    streams = {out: (Lines(emit), Tail(tail_bytes)), err: (Lines(emit), Tail(tail_bytes))}
    tails = {fd: tail for fd, (_, tail) in streams.items()}
    # poll rather than a selectors' epoll: three descriptors, watched for the length of one
    # command, cost no kernel object of their own to make, fill and close at every job.
    poller = select.poll()
    for fd in (out, err) if exit_watch is None else (out, err, exit_watch.fd):
        poller.register(fd, select.POLLIN)
    # Once the process has exited, its ends of the pipes are closed, and they end as soon as
    # they are read unless another process holds them: one it left in the background (given a
    # moment, in which a child just forked may still be closing its copies of them).
    held_at: float | None = None
    while streams:
        timeout = wait()
        if held_at is not None:
            left = max(0.0, held_at - time.monotonic())
            timeout = left if timeout is None else min(timeout, left)
        # Rounded up: a wait rounded down to 0 ms would spin until a deadline under 1 ms away.
        events = poller.poll(None if timeout is None else math.ceil(timeout * 1000))
        if held_at is not None and time.monotonic() >= held_at:
            assert exit_watch is not None
            exit_watch.held_open()
            held_at = None
        for fd, _ in events:
            if exit_watch is not None and fd == exit_watch.fd:
                poller.unregister(fd)
                held_at = time.monotonic() + HELD_OPEN_SECONDS
                continue
            # A hang-up without data reads as the stream's end.
            data = os.read(fd, _READ_BYTES)
            lines, tail = streams[fd]
            if not data:
                poller.unregister(fd)
                del streams[fd]
                lines.close()
                continue
            lines.feed(data)
            tail.add(data)
            merged.add(data)
    text, total = merged.snapshot()
    return Output(text, tails[out].text(), tails[err].text(), total)
