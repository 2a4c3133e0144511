"""ahead.LateNotes: a run claimed ahead is noted in progress only once it has gone on past the
delay, by the notes' thread handing the write on; a run ended first is never noted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from sqsjkr.daemon.ahead import LateNotes

from .conftest import wait_until

#: Short, so that the tests wait little; long enough that a run ended at once ends before it.
DELAY = 0.05


def recorder(written: list[str], name: str) -> Callable[[], None]:
    return lambda: written.append(f"{name} on {threading.current_thread().name}")


def test_a_run_that_goes_on_is_noted_once_on_the_pool_and_one_ended_first_never() -> None:
    written: list[str] = []
    # The notes' own clock, moved by hand: a loaded host's pause cannot make the short run long.
    now = [0.0]
    closers = ThreadPoolExecutor(1, thread_name_prefix="closer")
    with closers, LateNotes(closers.submit, delay=DELAY, clock=lambda: now[0]) as notes:
        with notes.note(recorder(written, "short")):
            pass  # ends before its note falls due
        long = notes.note(recorder(written, "long"))
        with long:
            now[0] = 1.0  # both notes due: the thread finds it at its next look, DELAY on
            wait_until(lambda: written, what="the long run noted")
            long.write()  # a second write (as a retried hand-over would make) is none
    # Notes fall due in the order they were taken: the short run's had its turn first.
    assert written == ["long on closer_0"]


def test_the_end_of_a_run_waits_for_its_note_under_way_and_no_note_follows_it() -> None:
    events: list[str] = []
    writing, release = threading.Event(), threading.Event()

    def write() -> None:
        events.append("note begins")
        writing.set()
        release.wait(10)
        events.append("note landed")

    with LateNotes(lambda task: threading.Thread(target=task).start(), delay=DELAY) as notes:
        note = notes.note(write)
        note.__enter__()
        assert writing.wait(10)

        def end_run() -> None:
            note.__exit__(None, None, None)
            events.append("run ended")

        ending = threading.Thread(target=end_run)
        ending.start()
        ending.join(0.2)
        assert ending.is_alive(), "the run's end did not wait for the note under way"
        release.set()
        ending.join(10)
        note.write()
    assert events == ["note begins", "note landed", "run ended"]


def test_leaving_waits_for_a_note_not_ended_and_then_takes_no_more() -> None:
    written: list[str] = []
    notes = LateNotes(lambda task: task(), delay=DELAY)
    with notes:
        notes.note(recorder(written, "noted"))
    assert written == ["noted on sqsjkr-late-notes"]
    with pytest.raises(RuntimeError):
        notes.note(lambda: None)


def test_a_note_whose_pool_is_shut_down_is_written_by_the_notes_thread() -> None:
    written: list[str] = []
    closers = ThreadPoolExecutor(1)
    closers.shutdown()
    with LateNotes(closers.submit, delay=DELAY) as notes, notes.note(recorder(written, "note")):
        wait_until(lambda: written, what="the note written")
    assert written == ["note on sqsjkr-late-notes"]
