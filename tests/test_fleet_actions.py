"""The fleet layer's actions called as a program calls them, without a face: each writes its own
audit item first, refuses with errors.py's errors, and waits raise WaitTimedOut. No AWS needed."""

from __future__ import annotations

import pytest

from sqsjkr.backends.audit import AuditEntry, MemoryAudit
from sqsjkr.backends.pause import MemoryPauses
from sqsjkr.errors import AuditRefused, RequestError, SqsjkrError, WaitTimedOut
from sqsjkr.fleet.audit import Actor, Auditor
from sqsjkr.fleet.pause import parse_until, pause_events, resume_events
from sqsjkr.fleet.waiting import Deadline

NOW = 1_750_000_000.0
ACTOR = Actor("app@host", "arn:aws:iam::123456789012:user/app")


class RefusingAudit(MemoryAudit):
    """A trail that keeps nothing, as a table without dynamodb:PutItem."""

    def write(self, entry: AuditEntry) -> None:
        raise PermissionError("AccessDenied")


def test_pause_and_resume_write_their_audit_items_themselves() -> None:
    trail, store = MemoryAudit(), MemoryPauses(clock=lambda: NOW)
    audit = Auditor(trail, ACTOR)
    made = list(pause_events(store, audit, "app@host", ["nightly"], NOW, None, "db move"))
    assert [p.event_id for p in made] == ["nightly"] == [p.event_id for p in store.pauses()]
    assert [p.event_id for p in resume_events(store, audit, ["nightly"], "moved")] == ["nightly"]
    kept = sorted(trail.entries(0), key=lambda e: e.at)
    assert [(e.action, e.target, e.reason, e.user) for e in kept] == [
        ("pause", "nightly", "db move", "app@host"),
        ("resume", "nightly", "moved", "app@host"),
    ]
    assert kept[0].detail == "until resumed"


def test_a_pause_whose_audit_item_is_not_kept_is_not_made() -> None:
    store = MemoryPauses(clock=lambda: NOW)
    audit = Auditor(RefusingAudit(), ACTOR)
    with pytest.raises(AuditRefused, match='pause "nightly" not done'):
        list(pause_events(store, audit, "app@host", ["nightly"], NOW, None, ""))
    assert store.pauses() == []


def test_the_layer_refuses_and_gives_up_with_its_own_errors() -> None:
    with pytest.raises(RequestError, match="is in the past"):
        parse_until("2000-01-01T00:00:00Z", NOW)
    clock = iter([0.0, 5.0])
    deadline = Deadline(2.0, clock=lambda: next(clock), sleep=lambda _: None)
    with pytest.raises(WaitTimedOut, match="gave up waiting for the run after 2s") as raised:
        deadline.pause(1.0, "the run", "it goes on")
    # An error of the tree, not a click exception: a program catches SqsjkrError.
    assert isinstance(raised.value, SqsjkrError)
    assert type(raised.value).__module__ == "sqsjkr.errors"
