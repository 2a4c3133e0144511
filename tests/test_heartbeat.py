"""Unit tests of the heartbeat: leases renewed, messages hidden again, losses reported, faults survived."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import pytest
from botocore.exceptions import EndpointConnectionError

from sqsjkr.backends.dedupe import MemoryDedupe
from sqsjkr.backends.lease import Lease, lease_timing
from sqsjkr.backends.locks import MemoryLocker
from sqsjkr.backends.sqs import Message
from sqsjkr.contract.job import Job
from sqsjkr.daemon.heartbeat import Heartbeat, InFlight, InFlightJobs
from sqsjkr.daemon.intake import hide_again

from .conftest import wait_until


class Source:
    """Records visibility changes; raises the queued errors first."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], int]] = []
        self.errors: list[Exception] = []

    def receive(self, max_messages: int) -> list[Message]:
        return []

    def delete(self, messages: Sequence[Message]) -> None:
        pass

    def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
        if self.errors:
            raise self.errors.pop(0)
        self.calls.append(([m.message_id for m in messages], seconds))

    def reject(self, message: Message, reason: str) -> None:
        pass


class CountingLocker(MemoryLocker):
    def __init__(self, *errors: Exception) -> None:
        super().__init__()
        self.renewals: list[str] = []
        self.errors = list(errors)

    def renew(self, lease: Lease) -> bool:
        self.renewals.append(lease.key)
        if self.errors:
            raise self.errors.pop(0)
        return super().renew(lease)


def in_flight(
    jobs: InFlightJobs, dedupe: MemoryDedupe, locker: MemoryLocker, n: int
) -> list[InFlight]:
    entries = []
    for i in range(n):
        entry = InFlight(Message(f"m{i}", f"rh{i}", "{}", 0.0), Job(f"m{i}", "true"))
        entry.claim = dedupe.claim(f"m{i}").lease
        entry.lock = locker.try_lock(f"L{i}", f"m{i}")
        jobs.add(entry)
        entries.append(entry)
    return entries


def heartbeat(
    jobs: InFlightJobs,
    source: Source,
    dedupe: MemoryDedupe,
    locker: MemoryLocker,
    visibility: int | None = 75,
    lease_lost: Callable[[], None] = lambda: None,
) -> Heartbeat:
    return Heartbeat(
        jobs,
        hide=hider(source, visibility),
        dedupe=dedupe,
        locker=locker,
        interval=0.01,
        lease_lost=lease_lost,
    )


def hider(source: Source, visibility: int | None) -> Callable[[list[InFlight]], None]:
    """The loop's hiding of one queue's messages; None: deleted on receipt, never hidden."""

    def hide(entries: list[InFlight]) -> None:
        if visibility is not None:
            hide_again(source, [entry.message for entry in entries], visibility)

    return hide


def beat(hb: Heartbeat) -> None:
    """One beat of each kind."""
    hb.renew()
    hb.hide()


def test_a_beat_hides_every_in_flight_message_and_renews_every_lease() -> None:
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker()
    in_flight(jobs, dedupe, locker, 3)
    beat(heartbeat(jobs, source, dedupe, locker))
    assert len(source.calls) == 1  # one batch for all messages
    ids, seconds = source.calls[0]
    assert sorted(ids) == ["m0", "m1", "m2"] and seconds == 75
    assert sorted(locker.renewals) == ["L0", "L1", "L2"]


def test_without_visibility_messages_are_left_alone() -> None:
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker()
    in_flight(jobs, dedupe, locker, 1)
    beat(heartbeat(jobs, source, dedupe, locker, visibility=None))
    assert source.calls == [] and locker.renewals == ["L0"]


def test_a_lost_lock_is_reported_loudly_and_dropped(caplog: pytest.LogCaptureFixture) -> None:
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker()
    (entry,) = in_flight(jobs, dedupe, locker, 1)
    assert entry.lock is not None
    locker.unlock(entry.lock)  # as if another daemon had taken it over
    lost: list[bool] = []
    beat(heartbeat(jobs, source, dedupe, locker, lease_lost=lambda: lost.append(True)))
    assert entry.lock is None
    assert 'job m0 LOST its lock "L0"' in caplog.text
    assert lost == [True]  # counted


def test_a_lease_given_back_during_the_beat_is_not_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker()
    (entry,) = in_flight(jobs, dedupe, locker, 1)

    class Releasing(CountingLocker):
        def renew(self, lease: Lease) -> bool:
            # The worker clears the field and unlocks while the renewal is on its way.
            entry.lock = None
            locker.unlock(lease)
            return locker.renew(lease)

    beat(heartbeat(jobs, source, dedupe, Releasing()))
    assert "LOST" not in caplog.text


def test_a_failing_store_is_skipped_for_the_rest_of_the_beat(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = EndpointConnectionError(endpoint_url="http://127.0.0.1:1")
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker(down)
    entries = in_flight(jobs, dedupe, locker, 3)
    source.errors.append(down)
    hb = heartbeat(jobs, source, dedupe, locker)
    beat(hb)
    assert len(locker.renewals) == 1  # not once per entry behind a dead endpoint
    assert all(e.lock is not None for e in entries)  # an error is not a loss
    assert "could not extend the visibility" in caplog.text
    assert "could not renew the lock" in caplog.text
    beat(hb)
    assert len(locker.renewals) == 4 and len(source.calls) == 1  # the next beat tries again


def test_the_heartbeat_survives_an_unexpected_error(caplog: pytest.LogCaptureFixture) -> None:
    jobs, source, dedupe, locker = InFlightJobs(), Source(), MemoryDedupe(), CountingLocker()
    in_flight(jobs, dedupe, locker, 1)
    source.errors.append(RuntimeError("a bug"))
    stop = threading.Event()
    thread = threading.Thread(target=heartbeat(jobs, source, dedupe, locker).run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: source.calls, what="a beat after the failed one")
    finally:
        stop.set()
        thread.join(5)
    assert "heartbeat failed" in caplog.text


@pytest.mark.parametrize(
    ("lease", "interval", "visibility"), [(60, 20, 75), (2, 2 / 3, 4), (3600, 1200, 4500)]
)
def test_lease_timing(lease: float, interval: float, visibility: int) -> None:
    assert lease_timing(lease) == (interval, visibility)


def test_in_flight_jobs_wait_until_empty() -> None:
    jobs = InFlightJobs()
    entry = InFlight(Message("m", "rh", "{}", 0.0), Job("m", "true"))
    jobs.add(entry)
    assert jobs.wait_empty(0.01) is False
    threading.Timer(0.05, jobs.discard, args=(entry,)).start()
    assert jobs.wait_empty(5) is True


def test_a_hung_sqs_call_does_not_hold_up_the_lease_renewals() -> None:
    jobs, dedupe, locker = InFlightJobs(), MemoryDedupe(), CountingLocker()
    in_flight(jobs, dedupe, locker, 1)
    release = threading.Event()

    class Hung(Source):
        def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
            release.wait(10)  # SQS accepts the connection and never answers

    stop = threading.Event()
    thread = threading.Thread(target=heartbeat(jobs, Hung(), dedupe, locker).run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: len(locker.renewals) >= 5, what="renewals go on")
    finally:
        stop.set()
        release.set()
        thread.join(5)
    assert not thread.is_alive()


def test_hiding_holds_the_lock_that_settling_waits_for_and_flushes_deletes() -> None:
    jobs, dedupe, locker = InFlightJobs(), MemoryDedupe(), CountingLocker()
    in_flight(jobs, dedupe, locker, 1)
    flushed: list[bool] = []
    holder: list[Heartbeat] = []

    class Checking(Source):
        def set_visibility(self, messages: Sequence[Message], seconds: int) -> None:
            assert holder[0].hiding.locked()
            super().set_visibility(messages, seconds)

    source = Checking()
    hb = Heartbeat(
        jobs,
        hide=hider(source, 75),
        dedupe=dedupe,
        locker=locker,
        interval=0.01,
        flush_deletes=lambda: flushed.append(holder[0].hiding.locked()),
    )
    holder.append(hb)
    hb.hide()
    assert len(source.calls) == 1
    assert flushed == [False]  # deletes go out after the lock is let go


class WatchedJobs(InFlightJobs):
    """Records each time a beat goes to sleep for want of work: the changes() it sleeps from."""

    def __init__(self) -> None:
        super().__init__()
        self.idle_waits: list[int] = []

    def wait_changed(self, since: int, stop: threading.Event) -> bool:
        self.idle_waits.append(since)
        return super().wait_changed(since, stop)


#: Absence of calls cannot be polled for: the idle heartbeat is watched for this long, which is
#: 30 of its beats (interval 0.01 s).
IDLE_WINDOW = 0.3


def test_an_idle_heartbeat_makes_no_call_and_wakes_for_a_job() -> None:
    jobs, source, dedupe, locker = WatchedJobs(), Source(), MemoryDedupe(), CountingLocker()
    flushes: list[int] = []
    hb = Heartbeat(
        jobs,
        hide=hider(source, 75),
        dedupe=dedupe,
        locker=locker,
        interval=0.01,
        flush_deletes=lambda: flushes.append(1),
    )
    stop = threading.Event()
    thread = threading.Thread(target=hb.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: len(jobs.idle_waits) == 2, what="both beats asleep")
        time.sleep(IDLE_WINDOW)
        assert (flushes, source.calls, locker.renewals) == ([], [], [])
        assert jobs.idle_waits == [0, 0]  # never woke up

        (entry,) = in_flight(jobs, dedupe, locker, 1)
        wait_until(lambda: len(locker.renewals) >= 2 and source.calls, what="beats for the job")
        before_end = len(flushes)
        jobs.discard(entry)
        ended = jobs.changes()
        wait_until(lambda: jobs.idle_waits.count(ended) == 2, what="both beats asleep again")
        # Beats go on just long enough to send the finished job's delete, whatever the receive
        # loop does meanwhile: two flushes at least, then none.
        assert len(flushes) >= before_end + 2
        counts = (len(flushes), len(source.calls), len(locker.renewals))
        time.sleep(IDLE_WINDOW)
        assert (len(flushes), len(source.calls), len(locker.renewals)) == counts
    finally:
        stop.set()
        thread.join(5)
    assert not thread.is_alive()


def test_a_stop_wakes_an_idle_heartbeat() -> None:
    jobs = WatchedJobs()
    hb = heartbeat(jobs, Source(), MemoryDedupe(), CountingLocker())
    stop = threading.Event()
    thread = threading.Thread(target=hb.run, args=(stop,))
    thread.start()
    wait_until(lambda: len(jobs.idle_waits) == 2, what="both beats asleep")
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
