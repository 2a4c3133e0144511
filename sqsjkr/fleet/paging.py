"""Pages of the fleet's lists, each keyed by a position in the data (a time and an id, a run's
range key, an event's id), so that items added or removed between two pages shift no other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from sqsjkr.errors import PageError

T = TypeVar("T")
#: Where a page ends: the sort key of its last item (plain values, for a cursor's JSON).
Position = tuple[str | float | int, ...]


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of a list and the position after which the next starts (None: the last page)."""

    items: list[T]
    after: Position | None


def page_after(
    items: Iterable[T], key: Callable[[T], Position], after: Position | None, limit: int
) -> Paged[T]:
    """The first limit items of those sorted by key past the position after (None: from the
    start). A list read whole, but paged by its items' keys, not by their offsets: an item
    added before the position shifts none after it."""
    ordered = sorted(items, key=key)
    if after is not None:
        ordered = [item for item in ordered if _past(key(item), after)]
    shown = ordered[:limit]
    return Paged(shown, key(shown[-1]) if len(ordered) > limit else None)


def position(value: object, shape: Sequence[type]) -> Position:
    """A position given back by a caller (a cursor's), checked against its list's key: as
    many values, of these types; PageError otherwise."""
    if not isinstance(value, list | tuple) or len(value) != len(shape):
        raise PageError(f"a position of {len(shape)} values, not {value!r}")
    checked: list[str | float | int] = []
    for part, kind in zip(value, shape, strict=True):
        if kind is float and isinstance(part, int) and not isinstance(part, bool):
            part = float(part)  # JSON writes 2.0 as 2.0, but a caller may write 2
        if type(part) is not kind or not isinstance(part, str | float | int):
            raise PageError(f"a position's value {part!r} is not a {kind.__name__}")
        checked.append(part)
    return tuple(checked)


def _past(key: Position, after: Position) -> bool:
    try:
        return key > after
    except TypeError as exc:  # a position of another list's shape
        raise PageError(f"the position {after!r} is not one of this list") from exc
