"""One job's path on a worker thread: claim the message, check life_time, lock, run, give back.

Worker.handle says how the job ended and what to do with its message; the daemon loop does it.
Worker.start may leave a run's end to be written behind the worker (closing.ClosingRun).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass, replace
from typing import TypeVar

from sqsjkr.backends.aws import AWS_ERRORS, describe
from sqsjkr.backends.dedupe import Claim, ClaimState, DedupeStore, Retry, WantedLock
from sqsjkr.backends.groups import Groups, NoGroups
from sqsjkr.backends.history import History, NoHistory
from sqsjkr.backends.kills import KillRequested
from sqsjkr.backends.locks import Locker
from sqsjkr.backends.routes import job_id
from sqsjkr.contract.job import Job, is_expired
from sqsjkr.contract.limits import LONGEST_HIDE_SECONDS
from sqsjkr.contract.run import KillMark, RunOutcome, RunStart
from sqsjkr.daemon.ahead import LateNotes, plain
from sqsjkr.daemon.closing import (
    AHEAD_LINGER_SECONDS,
    BEHIND_LINGER_SECONDS,
    ClosingRun,
    EndsBehind,
    RunCloser,
)
from sqsjkr.daemon.heartbeat import InFlight
from sqsjkr.daemon.holds import Holds, LocksWanted, lock_with_claim
from sqsjkr.daemon.leases import LeaseKeeper
from sqsjkr.daemon.pipeline import Steps, step_ended
from sqsjkr.daemon.runner import JobRunner, RunResult, StopReason, StopSwitch, time_limit
from sqsjkr.daemon.runs import (
    DELETE,
    GIVE_BACK,
    LEAVE,
    PAUSE,
    Ending,
    NoListener,
    RunListener,
    RunProgress,
    Settle,
    killed,
)
from sqsjkr.errors import HostFault
from sqsjkr.observability.logs import JobLog, Moment, escape, shorten_command
from sqsjkr.observability.stats import Outcome

log = logging.getLogger("sqsjkr.worker")

T = TypeVar("T")

#: A finished claim's outcome that lets its pipeline's next steps run.
SUCCEEDED = RunOutcome.SUCCEEDED.value
#: The outcomes a job's `retries` run again; a cancel for life_time or an abort is final.
RETRIED = frozenset({RunOutcome.ERRORED, RunOutcome.TIMED_OUT})
#: The longest wait before a retry, however often retry_delay has doubled.
MAX_RETRY_DELAY = 86400.0


@dataclass(frozen=True)
class WorkerSettings:
    life_time_trigger: str | None = None
    lock_retry_interval: float = 5.0
    job_timeout: float | None = None
    #: A message whose job runs elsewhere is hidden until that lease ends plus this margin.
    hide_margin: int = 15
    #: The lease of locks and claims: a job starts only with FRESH_LEASE_SHARE of it left.
    lease: float = 60.0
    #: The queue's RedrivePolicy maxReceiveCount, if any: a retry is one more receive.
    max_receive_count: int | None = None


class Worker:
    """Takes one in-flight job from claim to its end; safe to call from many threads at once."""

    def __init__(
        self,
        *,
        dedupe: DedupeStore,
        locker: Locker,
        runner: JobRunner,
        stopping: threading.Event,
        settings: WorkerSettings,
        clock: Callable[[], float] = time.time,
        trigger: Callable[[str, Job, StopSwitch], RunResult],
        lease_lost: Callable[[], None] = lambda: None,
        history: History | None = None,
        listener: RunListener | None = None,
        groups: Groups | None = None,
        locks_wanted: LocksWanted | None = None,
        ends_behind: EndsBehind | None = None,
        steps: Steps | None = None,
    ) -> None:
        """locks_wanted and ends_behind: one each for the whole daemon, shared by the Workers of
        all its queues;
        steps: moves pipelines on as their steps end (none: a message's pipeline is ignored)."""
        self._dedupe = dedupe
        self._runner = runner
        self._stopping = stopping
        self._settings = settings
        self._clock = clock
        self._trigger = trigger
        self._history = history or NoHistory()
        self._groups = groups or NoGroups()
        self._listener = listener or NoListener()
        self._locks_wanted = locks_wanted or LocksWanted()
        self._ends_behind = ends_behind or EndsBehind()
        self._steps = steps
        self._keeper = LeaseKeeper(
            lease=settings.lease, stopping=stopping, clock=clock, lease_lost=lease_lost
        )
        self._holds = Holds(
            locker=locker,
            groups=self._groups,
            keeper=self._keeper,
            stopping=stopping,
            clock=clock,
            retry_interval=settings.lock_retry_interval,
        )
        self._closer = RunCloser(
            dedupe=dedupe,
            locker=locker,
            groups=self._groups,
            history=self._history,
            listener=self._listener,
            keeper=self._keeper,
            clock=clock,
        )

    def handle(self, entry: InFlight) -> Ending:
        """Take entry's job from its claim to its end, written before this returns."""
        started = self._start(entry, behind=False)
        return started.finish(False) if isinstance(started, ClosingRun) else started

    def start(self, entry: InFlight, notes: LateNotes | None = None) -> Ending | ClosingRun:
        """As handle, but a job that ran (or was refused once claimed) ends as a ClosingRun:
        its end is written by whoever calls finish(), off this worker's path, and may share the
        call of a next job's claim. Its claim, lock and slot stay in entry, renewed by the
        heartbeat, until then. notes: where a plain job's run (ahead.plain) is noted in
        progress, only if it goes on for a while."""
        return self._start(entry, behind=True, notes=notes)

    def claim_ahead(self, entries: Sequence[InFlight]) -> None:
        """Claim entries' jobs in one write, before their workers take them up; each claim
        taken is set on its entry (claim and ahead), for the heartbeat to renew while the job
        waits. A failed write is logged, and each worker claims its job itself: should the
        write have landed all the same (its answer lost at every try), that claim finds the job
        held, and hides its message until the lease taken ahead ends, when the job runs."""
        try:
            keys = {entry.job.message_id: entry.job.event_id for entry in entries}
            claims = self._dedupe.claim_ahead(keys)
        except AWS_ERRORS as exc:
            log.warning(
                "could not claim %d received job(s) ahead (%s); each is claimed at its turn",
                len(entries),
                describe(exc),
            )
            return
        for entry in entries:
            # A message received twice in one batch: the claim is the first copy's alone.
            claim = claims.pop(entry.job.message_id, None)
            if claim is not None:
                entry.claim, entry.ahead = claim.lease, claim

    def give_back(self, entry: InFlight) -> None:
        """entry's job goes back to the queue unrun (the daemon stops): its claim taken ahead,
        if any, is given up, so that the daemon that gets it next need not wait out its lease."""
        claim, entry.claim = entry.claim, None
        if claim is None:
            return
        try:
            self._dedupe.release(claim)
        except AWS_ERRORS as exc:
            JobLog(log, entry.job).warning(
                "could not give up its claim (%s); it runs once its lease ends", describe(exc)
            )

    def _start(
        self, entry: InFlight, *, behind: bool, notes: LateNotes | None = None
    ) -> Ending | ClosingRun:
        first = job_id(entry.message)
        if first != entry.job.message_id:
            # A routed copy runs as the job of the message first sent: claimed, recorded and
            # killed by its id, so that the copy and an original that came back after a crash
            # between the forward and its delete cannot both run.
            entry.job = replace(entry.job, message_id=first)
        wanted = lock_with_claim(entry.job)
        if wanted is None:
            return self._handle(entry, None, behind, notes)
        with ExitStack() as wanting:
            # A lock that another job here wants is not free: trying it in the claim's write
            # would only cost that write a second try.
            alone = wanting.enter_context(self._locks_wanted.wanting(wanted.lock_id))
            started = self._handle(entry, wanted if alone else None, behind)
            if not isinstance(started, ClosingRun):
                return started
            # Still wanted (and held) here until its end is written.
            until_closed = wanting.pop_all()
        return ClosingRun(functools.partial(_finish_within, until_closed, started))

    def _handle(
        self,
        entry: InFlight,
        lock: WantedLock | None,
        behind: bool,
        notes: LateNotes | None = None,
    ) -> Ending | ClosingRun:
        """handle(), with the lock that the claim's write may take if it is free."""
        job = entry.job
        jlog = JobLog(log, job)
        refused = self._refused(job, jlog)
        if refused is not None:
            return refused
        progress = RunProgress(job, entry.message, self._clock())
        # A copy of a message whose run's end is still being written behind: a duplicate once
        # that end is written, not a run in progress to hide from for a lease.
        self._ends_behind.wait(progress.claim_id)
        try:
            # A plain job's run (a routed copy's too, run as its first message) is noted late,
            # as one claimed ahead is: its claim writes one item. Else the run shows as in
            # progress in its event's summary from its claim on: in the claim's own write when
            # the store can, which takes a free lock too.
            late = notes if plain(entry.message, job) else None
            claim = self._ahead(entry)
            if claim is None:
                claim = self._dedupe.claim(
                    progress.claim_id,
                    message_id=job.message_id,
                    running=progress.note(),
                    lock=lock,
                    noting=late is None,
                )
        except AWS_ERRORS as exc:
            # Not run: unlike the Go daemon, a job that may be a duplicate waits for a later try.
            jlog.error(
                "not started: its dedupe record could not be written (%s); the message stays "
                "on the queue for a later try",
                describe(exc),
            )
            return Ending(PAUSE)
        holder = claim.holder
        if _another_holds(job, progress.claim_id, claim):
            assert holder is not None
            return self._duplicate(entry, progress, claim, holder, jlog)
        if claim.state is ClaimState.FINISHED:
            # How its run ended, as its claim kept it: what that end did not finish (its
            # pipeline's note, its next steps' sends) is done again from it.
            succeeded = None if claim.outcome is None else claim.outcome == SUCCEEDED
            if self._steps is not None and not self._steps.moved_on(job, jlog, succeeded):
                return Ending(LEAVE)
            jlog.info("duplicate message deleted: its job has run")
            return Ending(DELETE, (Outcome.DUPLICATE,))
        if claim.state is ClaimState.RUNNING:
            held_for = (claim.held_until or 0) - self._clock()
            hide = _hide_for(held_for + self._settings.hide_margin)
            jlog.info("is in progress on another daemon: message hidden for %ds", hide)
            return Ending(Settle(visible_in=hide), (Outcome.DUPLICATE,))
        if claim.state is ClaimState.WAITING:
            hide = _hide_for((claim.held_until or 0) - self._clock())
            jlog.info("waits for its retry: message hidden for %ds", hide)
            return Ending(Settle(visible_in=hide))
        assert claim.lease is not None
        if claim.state is ClaimState.KILLED:
            return self._killed_unclaimed(entry, progress, claim.lease.owner, claim, jlog)
        jlog.debug(
            "claimed its message (lease until %s)", Moment(claim.lease.until, "milliseconds")
        )
        entry.claim = claim.lease
        entry.lock = claim.lock  # taken by the claim's own write, when the store could
        progress.claimed(claim.lease.owner, claim.attempt)
        noting: AbstractContextManager[object] = nullcontext()
        if not claim.noted:
            if late is not None:
                noting = self._note_late(progress, jlog, late)
            else:
                self._note(progress, jlog)
        try:
            # A note written late lands before the run's end is written, or not at all.
            with noting:
                ending = self._claimed(entry, progress, jlog)
        except BaseException:
            # The claim is given up, and the job runs again later.
            self._closer.close(entry, Ending(LEAVE), progress, jlog)
            raise

        def finish(linger: bool) -> Ending:
            wait = 0.0
            if linger and not self._awaited(entry):
                wait = AHEAD_LINGER_SECONDS if late is not None else BEHIND_LINGER_SECONDS
            self._closer.close(entry, ending, progress, jlog, linger=wait)
            return step_ended(self._steps, entry.job, ending, jlog)

        if not behind:
            return finish(False)
        written = self._ends_behind.begin(progress.claim_id)

        def finish_behind(linger: bool) -> Ending:
            try:
                return finish(linger)
            finally:
                written()

        return ClosingRun(finish_behind)

    def _awaited(self, entry: InFlight) -> bool:
        """Whether another job may be waiting for what entry's job gives back: its group's
        slot, or its lock when another job here wants it. Its end is then written at once,
        without waiting for a claim's call to carry it."""
        if entry.slot is not None:
            return True
        return entry.lock is not None and self._locks_wanted.by_others(entry.lock.key)

    def _refused(self, job: Job, jlog: JobLog) -> Ending | None:
        """The end of a pipeline step's message that its run did not send (Steps.refusal): taken
        off the queue unrun, as an invalid message is. None when it may run."""
        if self._steps is None:
            return None
        try:
            why = self._steps.refusal(job)
        except AWS_ERRORS as exc:
            jlog.error(
                "not started: its pipeline's run could not be read (%s); the message stays on "
                "the queue for a later try",
                describe(exc),
            )
            return Ending(PAUSE)
        if why is None:
            return None
        jlog.error("not run, refused: %s", escape(why))
        return Ending(Settle(reject=why), (Outcome.FAILED,))

    def _killed_unclaimed(
        self, entry: InFlight, progress: RunProgress, owner: str, claim: Claim, jlog: JobLog
    ) -> Ending:
        """A kill request whose run's holder never acted on it (it died, or the run ended
        leaving a retry): this daemon finished the claim in its place, and records the kill."""
        progress.claimed(owner, claim.attempt)
        why = claim.kill.describe() if claim.kill is not None else "killed"
        jlog.warning(
            "not started: %s, and the daemon that held its run did not act on it (it stopped, "
            "or its run ended first)",
            escape(why),
        )
        ending = killed(claim.kill)
        self._closer.close(entry, ending, progress, jlog)
        return step_ended(self._steps, entry.job, ending, jlog)

    def _duplicate(
        self, entry: InFlight, progress: RunProgress, claim: Claim, holder: str, jlog: JobLog
    ) -> Ending:
        """Another message of the job's firing (or of its pipeline's step in one run) holds its
        claim (it runs, ran, or waits for its retry): this one is recorded as its duplicate and
        deleted. Should the holder's daemon die, the holder's own message, still on the queue,
        runs the firing once its lease ends (and moves its pipeline on)."""
        what = {
            # Finished: its run ended, whether it ran or was cancelled, aborted or killed.
            ClaimState.FINISHED: "has ended",
            ClaimState.RUNNING: "is in progress",
            ClaimState.WAITING: "waits for its retry",
        }.get(claim.state, "is taken")
        firing, run = entry.job.firing, entry.job.pipeline
        shared = f"the firing {firing.key}" if firing is not None else f"run {progress.claim_id}"
        if run is not None and not run.is_root:
            shared = f"step {run.step} of {shared}"
        why = f"a duplicate of message {holder}: {shared} {what}"
        jlog.info("not run, message deleted: %s", escape(why))
        ending = Ending(DELETE, (Outcome.DUPLICATE,), RunOutcome.DUPLICATE, why)
        record = replace(progress.record(ending, self._clock()), duplicate_of=holder)
        self._closer.duplicate(record, jlog)
        # Counted as a duplicate message, as ever, and not among runs (stats, /metrics).
        return Ending(DELETE, (Outcome.DUPLICATE,))

    def _claimed(self, entry: InFlight, progress: RunProgress, jlog: JobLog) -> Ending:
        job = entry.job
        assert entry.claim is not None
        try:
            renew = self._dedupe.renew
            if not self._keeper.fresh(entry.claim, renew, "claim on its message", jlog):
                entry.claim = None  # another daemon has it now, runs the job and records it
                return Ending(LEAVE)
        except KillRequested as request:
            entry.killed(request.mark)
        except AWS_ERRORS as exc:
            jlog.error("not started: its claim could not be renewed (%s)", describe(exc))
            return Ending(PAUSE, run=RunOutcome.FAILED_TO_START, error=describe(exc))
        if entry.kill is not None:
            jlog.warning("not started: %s", escape(entry.kill.describe()))
            return killed(entry.kill)
        expired = self._expired(entry, jlog)
        if expired is not None:
            return expired
        waited_from = time.monotonic()
        for hold in self._holds.of(job):
            refused = self._holds.acquire(
                entry,
                hold,
                progress,
                jlog,
                expired=lambda: self._expired(entry, jlog),
                note=lambda: self._note(progress, jlog),
            )
            if refused is not None:
                return refused
        progress.lock_wait = time.monotonic() - waited_from
        if progress.waiting is not None:
            progress.waiting = None
            self._note(progress, jlog)  # no longer shown as waiting
        return self._run(entry, progress, jlog)

    def _run(self, entry: InFlight, progress: RunProgress, jlog: JobLog) -> Ending:
        job = entry.job
        if entry.kill is not None:
            jlog.warning("not started: %s", escape(entry.kill.describe()))
            return killed(entry.kill)
        if self._stopping.is_set():
            jlog.info("not started: stopping")
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="the daemon was stopping")
        # An HTTP job's own http.timeout first: what the runner keeps, and what its end says.
        timeout = time_limit(job, self._settings.job_timeout)
        what = shorten_command(job.what)
        # At DEBUG: the line at its end (_ended) names the command too, one INFO line a job.
        jlog.debug("started: %s", what)
        self._listener.notice(progress.start(self._clock()))
        try:
            progress.result = self._runner.run(
                job, timeout=timeout, stop=entry.stop, context=progress.context()
            )
        except HostFault as exc:
            # Not the job's fault: it runs later, here or elsewhere, and receiving pauses.
            jlog.error(
                "not started: %s; its claim and lock are released and its message is left "
                "to run later",
                exc,
            )
            return Ending(PAUSE, run=RunOutcome.FAILED_TO_START, error=str(exc))
        ended = self._ended(progress.result, timeout, entry.kill, jlog, what)
        return self._retry_if_due(ended, progress, jlog)

    def _retry_if_due(self, ending: Ending, progress: RunProgress, jlog: JobLog) -> Ending:
        """An errored or timed-out run, or an HTTP call that could not connect, with retries left
        runs again after its delay: the message is hidden until then, and its claim remembers the
        runs so far."""
        job = progress.job
        # An HTTP service that refused the call may be restarting; a command that cannot start
        # (no sh, arguments too long) fails the same way every time.
        retried = ending.run in RETRIED or (
            ending.run is RunOutcome.FAILED_TO_START and job.http is not None
        )
        if not retried or progress.attempt > job.retries:
            return ending
        delay = retry_delay(job.retry_delay.seconds, progress.attempt)
        retry = Retry(attempts=progress.attempt, at=self._clock() + delay)
        limit = self._settings.max_receive_count
        if limit is not None and progress.message.receive_count >= limit:
            # Still hidden until the retry is due, and kept for it by its claim: should the
            # message be redriven from the dead-letter queue, that retry runs then.
            jlog.error(
                "failed for good: its retry cannot run here: the message has been received %d "
                "time(s), the queue's maxReceiveCount, so SQS moves it to the dead-letter queue "
                "instead; give the queue a maxReceiveCount above retries + 1 (%d)",
                progress.message.receive_count,
                job.retries + 1,
            )
            last = True
        else:
            jlog.warning(
                "will run again in %.0fs (retry %d of %d)", delay, progress.attempt, job.retries
            )
            last = False
        settle = Settle(visible_in=_hide_for(delay))
        return replace(ending, settle=settle, retry=retry, last=last)

    @staticmethod
    def _ended(
        result: RunResult, timeout: float | None, kill: KillMark | None, jlog: JobLog, what: str
    ) -> Ending:
        """How the run ended, logged in one line that names its command."""
        if result.start_error is not None:
            jlog.error("failed: it cannot be started (%s): %s", result.start_error, what)
            return Ending(DELETE, (Outcome.FAILED,), RunOutcome.FAILED_TO_START, result.start_error)
        if result.stopped is StopReason.CANCELLED:
            jlog.warning(
                "stopped after %.1fs by the shutdown; its message is given back to run again: %s",
                result.seconds,
                what,
            )
            return Ending(GIVE_BACK, run=RunOutcome.STOPPED, error="stopped by the shutdown")
        if result.stopped is StopReason.KILLED:
            why = kill.describe() if kill is not None else "killed"
            jlog.warning("stopped after %.1fs: %s: %s", result.seconds, escape(why), what)
            return killed(kill)
        if result.stopped is StopReason.TIMED_OUT:
            limit = f"{result.seconds:.1f}s" if timeout is None else f"{timeout:g}s"
            jlog.warning("timed out after %.1fs (timeout %s): %s", result.seconds, limit, what)
            counts = (Outcome.ERRORED, Outcome.TIMED_OUT)
            return Ending(DELETE, counts, RunOutcome.TIMED_OUT, f"timed out after {limit}")
        if result.ok:
            jlog.info("succeeded in %.1fs: %s", result.seconds, what)
            return Ending(DELETE, (Outcome.SUCCEEDED,), RunOutcome.SUCCEEDED)
        jlog.warning(
            "errored with exit code %d after %.1fs: %s", result.exit_code, result.seconds, what
        )
        return Ending(DELETE, (Outcome.ERRORED,), RunOutcome.ERRORED)

    def _expired(self, entry: InFlight, jlog: JobLog) -> Ending | None:
        """The job's end if it has outlived its life_time (the trigger is run); None if not."""
        job = entry.job
        now = self._clock()
        if not is_expired(job, now):
            return None
        why = f"sent {now - job.sent_at:.1f}s ago, life_time is {job.life_time}"
        jlog.warning("cancelled: %s", why)
        trigger = self._settings.life_time_trigger
        if trigger and not job.disable_life_time_trigger:
            result = self._trigger(trigger, job, entry.stop)
            if not result.ok:
                jlog.error("life_time_trigger exited with %d", result.exit_code)
        return Ending(
            DELETE, (Outcome.FAILED,), RunOutcome.CANCELLED, f"older than its life_time: {why}"
        )

    def _ahead(self, entry: InFlight) -> Claim | None:
        """entry's claim taken on receipt; None if none was, or it was lost while the job
        waited (the heartbeat's renewal found another daemon's): claimed now then."""
        ahead = entry.ahead
        if ahead is None or entry.claim is not ahead.lease:
            return None
        return ahead

    def _note_late(
        self, progress: RunProgress, jlog: JobLog, notes: LateNotes
    ) -> AbstractContextManager[object]:
        """Note the run as in progress once it has gone on for a while (ahead.LateNote, which
        the run is to be within): a claim taken ahead did not note it, and a short run's end
        says all."""
        try:
            return notes.note(functools.partial(self._write_note, progress.note(), jlog))
        except RuntimeError:  # no longer taken: only once the daemon has drained
            self._note(progress, jlog)
            return nullcontext()

    def _note(self, progress: RunProgress, jlog: JobLog) -> None:
        """Show the run as in progress (or waiting) in its event's summary, when its claim could
        not, or what it waits for changes."""
        self._write_note(progress.note(), jlog)

    def _write_note(self, start: RunStart, jlog: JobLog) -> None:
        try:
            self._history.started(start)
        except AWS_ERRORS as exc:
            # The run goes on: only its "running now" in `sqsjkr status` is missing.
            jlog.warning("could not mark its event running (%s)", describe(exc))


def _finish_within(context: ExitStack, closing: ClosingRun, linger: bool) -> Ending:
    """closing.finish(linger), leaving context (the lock's count of jobs wanting it) once it is
    done."""
    with context:
        return closing.finish(linger)


def _another_holds(job: Job, claim_id: str, claim: Claim) -> bool:
    """Whether another message of the job's firing (or pipeline step's run: a claim shared by
    several messages, claim_id) holds its claim, so that this one is its duplicate. Not while the claim waits for its retry: the holder's message may be gone by
    then (dead-lettered, or past its retention), so this copy is kept, hidden until the retry is
    due, and may take it over then."""
    holder = claim.holder
    if claim_id == job.message_id or holder is None or holder == job.message_id:
        return False
    return claim.state is not ClaimState.WAITING


def _hide_for(seconds: float) -> int:
    """A visibility timeout of about seconds, within what SQS allows a message just received."""
    return int(min(LONGEST_HIDE_SECONDS, max(1, seconds)))


def retry_delay(first: float, attempt: int) -> float:
    """The wait before the run after attempt: first, doubled at each run, capped at a day, and
    up to a tenth shorter at random, so that a fleet's retries do not come in step."""
    delay = min(MAX_RETRY_DELAY, first * 2 ** min(attempt - 1, 32))
    return delay * random.uniform(0.9, 1.0)
