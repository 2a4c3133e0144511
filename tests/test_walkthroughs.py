"""Each concept page's walk-through, run as written against local mode: the commands a reader
pastes, in order, must print what the page shows (tests/walkthrough.py reads and runs them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .walkthrough import (
    Session,
    Step,
    Walk,
    WalkError,
    first_difference,
    read_walk,
    run_steps,
    walk_through,
)

#: The concept pages, each opening with a walk-through; the one that waits on a one-time schedule
#: (beside the demo) takes half a minute.
PAGES = (
    pytest.param("schedules.md", marks=pytest.mark.slow),
    "pipelines.md",
    "semantics.md",
    "api.md",
    "python-api.md",
    "operating.md",
)


@pytest.mark.parametrize("page", PAGES)
def test_the_walk_through_of_the_page_runs_as_written(page: str, tmp_path: Path) -> None:
    walk_through(read_walk(page), tmp_path)


def test_the_matcher_takes_what_varies_and_names_the_first_drifted_line() -> None:
    shown = ("ENDED  OUTCOME  HOST  MESSAGE ID", "… succeeded  …", "...", "done")
    printed = ["ENDED OUTCOME    HOST MESSAGE ID", "2030-01-01T00:00Z succeeded vm 1234"]
    assert first_difference(shown, [*printed, "done"]) is None
    assert first_difference(shown, [*printed, "a", "b", "done"]) is None
    drifted = first_difference(shown, ["ENDED OUTCOME HOST MESSAGE ID", "… errored vm", "done"])
    assert drifted == (
        "line 2: the page shows '… succeeded  …', the command printed '… errored vm'"
    )
    assert first_difference(shown, printed) == (
        "line 3: the page shows 'done', the command printed '(the end of the output)'"
    )
    assert first_difference(("hello",), ["hello", "extra"]) is not None


def test_a_walk_through_names_its_page_and_command_when_its_output_drifts(
    tmp_path: Path,
) -> None:
    # The steps as walk_through runs them once local mode is up (each page's test starts one),
    # after the banner's export lines.
    drifted = Walk(
        "api.md", (), (Step('echo "$GREETING from the shell"', ("hello from the docs",)),)
    )
    session = Session(tmp_path, {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    try:
        with pytest.raises(WalkError) as failed:
            run_steps(drifted, session, ["export GREETING=hello"], lambda: "local mode's last line")
    finally:
        session.close()
    assert str(failed.value).startswith(
        'docs/api.md\'s walk-through drifted at\n$ echo "$GREETING from the shell"\nline 1: the page '
        "shows 'hello from the docs', the command printed 'hello from the shell'\n"
    )
    assert str(failed.value).endswith("--- local mode's log ---\nlocal mode's last line")
