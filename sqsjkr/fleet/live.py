"""Live output: how often a follower polls a running run's output, which part of a tail is new, and
whether a run's record is among its event's newest.
"""

from __future__ import annotations

from sqsjkr.contract.config import Config
from sqsjkr.contract.run import EventSummary

#: The longest wait between two polls; a shorter [history] live_output_interval polls at that.
MAX_POLL_SECONDS = 2.0


def new_part(tail: str, printed: int, seen: int) -> tuple[int, bytes]:
    """Of a tail that ends at byte printed of a run's output, the bytes past seen; and how many
    bytes between seen and the tail's start the reader missed (the tail is only a window)."""
    data = tail.encode()
    new = printed - seen
    if new <= 0:
        return 0, b""
    if new <= len(data):
        return 0, data[len(data) - new :]
    return new - len(data), data


def ended_last(summary: EventSummary | None, target: str) -> bool:
    """Whether the summary's last run is target's: its record is among the newest."""
    last = summary.last_run if summary is not None else None
    return last is not None and last.message_id == target


def poll_seconds(config: Config) -> float:
    """The wait between two polls of a run's live output: [history] live_output_interval, at most
    MAX_POLL_SECONDS."""
    return min(config.history.live_output_interval.seconds, MAX_POLL_SECONDS)
