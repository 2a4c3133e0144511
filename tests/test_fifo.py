"""FIFO queues: the daemon's group order (unit), and FIFO queues as a daemon's source, their
dead-letter queue and `sqsjkr send`'s FIFO options against moto over HTTP."""

from __future__ import annotations

from dataclasses import dataclass

from sqsjkr.backends.sqs import Message
from sqsjkr.daemon.fifo import GroupOrder, behind_held


@dataclass(frozen=True)
class Entry:
    message: Message


def entry(message_id: str, group_id: str | None) -> Entry:
    return Entry(Message(message_id, f"rh-{message_id}", "{}", 0.0, group_id=group_id))


def ids(entries: list[Entry]) -> list[str]:
    return [e.message.message_id for e in entries]


# -- GroupOrder -----------------------------------------------------------------------------------


def test_one_message_of_a_group_starts_and_the_rest_wait_in_order() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, b1, a2, a3 = entry("a1", "A"), entry("b1", "B"), entry("a2", "A"), entry("a3", "A")
    assert order.admit([a1, b1, a2, a3]) == [a1, b1]
    assert order.waiting() == 2
    assert order.finished(a1) is a2
    assert order.finished(a2) is a3
    assert order.finished(a3) is None
    assert order.waiting() == 0


def test_messages_without_a_group_always_start() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    batch = [entry("m1", None), entry("m2", None)]
    assert order.admit(batch) == batch
    assert order.finished(batch[0]) is None
    assert order.given_back(batch[1]) == []


def test_a_later_receive_waits_behind_the_message_the_daemon_holds() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    assert order.admit([a1]) == [a1]
    assert order.admit([a2]) == []
    assert order.finished(a1) is a2


def test_a_group_is_free_again_once_its_last_message_ends() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    order.admit([a1])
    assert order.finished(a1) is None
    assert order.admit([a2]) == [a2]


def test_a_message_given_back_takes_the_messages_behind_it_back_too() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, a3, b1 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A"), entry("b1", "B")
    order.admit([a1, a2, a3, b1])
    assert ids(order.given_back(a1)) == ["a2", "a3"]
    assert order.waiting() == 0
    # They never start here: the group is forgotten, and what comes back later starts afresh.
    assert order.finished(a1) is None
    assert order.admit([entry("a1", "A")]) != []


def test_a_message_given_back_after_the_first_of_its_group_ended() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, a3 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A")
    order.admit([a1, a2, a3])
    assert order.finished(a1) is a2
    assert order.given_back(a2) == [a3]


def test_only_the_holder_of_a_group_releases_it() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2 = entry("a1", "A"), entry("a2", "A")
    order.admit([a1, a2])
    # a2 has not started: its end (it cannot have one) moves nothing.
    assert order.finished(a2) is None
    assert order.given_back(a2) == []
    assert order.finished(a1) is a2


def test_drain_hands_every_waiting_message_back() -> None:
    order: GroupOrder[Entry] = GroupOrder()
    a1, a2, b1, b2 = entry("a1", "A"), entry("a2", "A"), entry("b1", "B"), entry("b2", "B")
    order.admit([a1, a2, b1, b2])
    assert sorted(ids(order.drain())) == ["a2", "b2"]
    assert order.waiting() == 0
    assert order.finished(a1) is None


def test_messages_behind_a_held_one_of_their_group_are_given_back() -> None:
    a1, a2, a3 = entry("a1", "A"), entry("a2", "A"), entry("a3", "A")
    b1, c1 = entry("b1", "B"), entry("c1", None)
    keep, give_back = behind_held([a1, a2, b1, a3, c1], held={"a2", "c1"})
    # a1 came before the held a2 and may run; a3 must not run before a2.
    assert (ids(keep), ids(give_back)) == (["a1", "b1"], ["a3"])
