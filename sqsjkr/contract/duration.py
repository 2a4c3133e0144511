"""Go's time.Duration: parsing, formatting and the duration fields of jobs and config.

Jobs written for the Go daemon carry Go duration strings, so both directions match Go byte for byte.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction

from sqsjkr.contract.limits import MAX_SHOWN
from sqsjkr.errors import DurationError, quote

_NANOSECOND = 1
_MICROSECOND = 1_000
_MILLISECOND = 1_000_000
_SECOND = 1_000_000_000
_MINUTE = 60 * _SECOND
_HOUR = 60 * _MINUTE

# Go's Duration is an int64 of nanoseconds.
_MIN_NS = -(1 << 63)
_MAX_NS = (1 << 63) - 1

_UNITS = {
    "ns": _NANOSECOND,
    "us": _MICROSECOND,
    "\u00b5s": _MICROSECOND,  # micro sign, the one Go prints
    "\u03bcs": _MICROSECOND,  # Greek small letter mu, which looks the same
    "ms": _MILLISECOND,
    "s": _SECOND,
    "m": _MINUTE,
    "h": _HOUR,
}
_UNIT_HINT = "(use ns, us, ms, s, m or h)"
#: sqsjkr's own fields (retention, ages) also take days, which Go's syntax lacks.
_UNITS_WITH_DAYS = {**_UNITS, "d": 24 * _HOUR}
_UNIT_HINT_WITH_DAYS = "(use ns, us, ms, s, m, h or d)"
_RANGE_HINT = "out of range (the largest is 2562047h47m16.854775807s)"
_WRONG_TYPE = 'must be an int number of seconds or a duration string like "90s" or "1h30m"'

# Go reads ASCII digits only, and a unit is everything up to the next digit or ".".
_NUMBER = re.compile(r"([0-9]*)(?:\.([0-9]*))?")
_UNIT = re.compile(r"[^0-9.]*")


@dataclass(frozen=True, order=True)
class Duration:
    """A span of time in whole nanoseconds, within Go's int64 range."""

    ns: int

    def __post_init__(self) -> None:
        if isinstance(self.ns, bool) or not isinstance(self.ns, int):
            raise TypeError(f"Duration.ns must be an int, got {type(self.ns).__name__}")
        if not _MIN_NS <= self.ns <= _MAX_NS:
            raise DurationError(_RANGE_HINT)

    @property
    def seconds(self) -> float:
        return self.ns / _SECOND

    @classmethod
    def of_seconds(cls, seconds: int | float) -> Duration:
        if isinstance(seconds, int):
            return cls(seconds * _SECOND)
        if not math.isfinite(seconds):
            raise DurationError(f"must be a finite number of seconds, got {seconds!r}")
        # Round rather than truncate: 0.3 is a hair below 3/10 as a float, and truncating it
        # would give 299999999ns.
        return cls(round(Fraction(seconds) * _SECOND))

    def __str__(self) -> str:
        magnitude = abs(self.ns)
        sign = "-" if self.ns < 0 else ""
        if magnitude == 0:
            return "0s"
        if magnitude < _SECOND:
            return sign + _sub_second(magnitude)
        text = _decimal(magnitude % _MINUTE, _SECOND) + "s"
        minutes = magnitude // _MINUTE
        if minutes:
            text = f"{minutes % 60}m{text}"
            hours = minutes // 60
            # Go stops at hours because days can have different lengths.
            if hours:
                text = f"{hours}h{text}"
        return sign + text


def parse_duration(text: str, *, days: bool = False) -> Duration:
    """Parse Go duration syntax exactly as Go's time.ParseDuration does; with days, "d" is
    also a unit of 24 hours (for sqsjkr's own fields, never for a job's)."""
    units, hint = (_UNITS_WITH_DAYS, _UNIT_HINT_WITH_DAYS) if days else (_UNITS, _UNIT_HINT)
    rest = text
    negative = False
    if rest[:1] in ("-", "+"):
        negative = rest[0] == "-"
        rest = rest[1:]
    if rest == "0":
        return Duration(0)
    if rest == "":
        raise _invalid(text, "no number" if text else "empty string")
    total = 0
    pos = 0
    while pos < len(rest):
        number = _NUMBER.match(rest, pos)
        assert number is not None  # the pattern also matches the empty string
        whole, fraction = number.group(1), number.group(2) or ""
        if not whole and not fraction:
            raise _invalid(text, f"expected a number at {quote(rest[pos:], MAX_SHOWN)}")
        unit_match = _UNIT.match(rest, number.end())
        assert unit_match is not None
        unit = unit_match.group()
        if not unit:
            raise _invalid(text, f"missing unit after {quote(number.group(), MAX_SHOWN)} {hint}")
        if unit not in units:
            raise _invalid(text, f"unknown unit {quote(unit, MAX_SHOWN)} {hint}")
        total += _part_ns(text, whole, fraction, units[unit])
        if total > 1 << 63:
            raise _invalid(text, _RANGE_HINT)
        pos = unit_match.end()
    if negative:
        return Duration(-total)
    if total > _MAX_NS:
        raise _invalid(text, _RANGE_HINT)
    return Duration(total)


def duration_value(value: object, *, days: bool = False) -> Duration:
    """The value of a duration field in JSON or TOML: int seconds or a Go duration string
    (with days: "d" allowed too)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DurationError(_WRONG_TYPE)
    if isinstance(value, int):
        if value < 0:
            raise DurationError("must not be negative")
        if value > _MAX_NS // _SECOND:
            raise DurationError(f"must be at most {_MAX_NS // _SECOND} seconds")
        return Duration.of_seconds(value)
    duration = parse_duration(value, days=days)
    if duration.ns < 0:
        raise DurationError("must not be negative")
    return duration


def _part_ns(text: str, whole: str, fraction: str, unit: int) -> int:
    """Nanoseconds of one number-unit pair, computed as Go computes them."""
    whole = whole.lstrip("0")
    # Checking the length first keeps int() away from pathologically long digit strings.
    if len(whole) > 19 or int(whole or "0") * unit > 1 << 63:
        raise _invalid(text, _RANGE_HINT)
    ns = int(whole or "0") * unit
    numerator, scale = _leading_fraction(fraction)
    if numerator:
        # Go scales the fraction in float64 and truncates; Python floats are the same IEEE
        # doubles, so this matches Go bit for bit ("0.3333333333333333333h" is 20m in Go too).
        ns += int(float(numerator) * (float(unit) / scale))
    return ns


def _leading_fraction(digits: str) -> tuple[int, float]:
    """The digits after the point as an integer and its float scale, keeping the digits Go keeps.

    Go stops accumulating once another digit would overflow an int64 and ignores the rest.
    """
    numerator = 0
    scale = 1.0
    for digit in digits:
        if numerator > _MAX_NS // 10:
            break
        candidate = numerator * 10 + int(digit)
        if candidate > 1 << 63:
            break
        numerator = candidate
        scale *= 10
    return numerator, scale


def _sub_second(magnitude: int) -> str:
    """Go's format below one second: the largest of ms, µs and ns that fits."""
    if magnitude >= _MILLISECOND:
        return _decimal(magnitude, _MILLISECOND) + "ms"
    if magnitude >= _MICROSECOND:
        return _decimal(magnitude, _MICROSECOND) + "\u00b5s"
    return f"{magnitude}ns"


def _decimal(value: int, unit: int) -> str:
    """value / unit as a decimal without trailing zeros, unit being a power of ten."""
    whole, fraction = divmod(value, unit)
    if not fraction:
        return str(whole)
    places = len(str(unit)) - 1
    return f"{whole}.{fraction:0{places}d}".rstrip("0")


def _invalid(text: str, why: str) -> DurationError:
    return DurationError(f"invalid duration {quote(text, MAX_SHOWN)}: {why}")
