"""Tests of sqsjkr.duration against Go's time.Duration.

Expected values come from Go's own time package tests and documentation.
"""

from __future__ import annotations

import pytest

from sqsjkr.contract.duration import Duration, duration_value, parse_duration
from sqsjkr.errors import DurationError

NS = 1
US = 1_000
MS = 1_000_000
S = 1_000_000_000
M = 60 * S
H = 60 * M
MAX = (1 << 63) - 1
MIN = -(1 << 63)


# Go's parseDurationTests, plus a few of our own.
@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("-0", 0),
        ("+0", 0),
        ("0s", 0),
        ("-0s", 0),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", 500 * MS),
        ("1.0s", 1 * S),
        ("1.00s", 1 * S),
        ("1.004s", 1 * S + 4 * MS),
        ("1.0040s", 1 * S + 4 * MS),
        ("100.00100s", 100 * S + 1 * MS),
        ("0.1s", 100_000_000),
        ("0.3s", 300_000_000),
        ("1.5h", 90 * M),
        ("1.5m", 90 * S),
        ("10ns", 10 * NS),
        ("11us", 11 * US),
        ("12\u00b5s", 12 * US),
        ("12\u03bcs", 12 * US),
        ("13ms", 13 * MS),
        ("14s", 14 * S),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("1.5ns", 1),
        ("1.5us", 1500),
        ("3h30m", 3 * H + 30 * M),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        ("1h2m3s4ms5us6ns", 1 * H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("1h1.5m300ms", H + 90 * S + 300 * MS),
        ("1s1s", 2 * S),
        ("52763797000ns", 52763797000),
        ("0.3333333333333333333h", 20 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", MAX),
        ("9223372036854775.807us", MAX),
        ("9223372036s854ms775us807ns", MAX),
        ("2562047h47m16.854775807s", MAX),
        ("-9223372036854775808ns", MIN),
        ("-9223372036854775.808us", MIN),
        ("-9223372036s854ms775us808ns", MIN),
        ("-2562047h47m16.854775808s", MIN),
        ("0.100000000000000000000h", 6 * M),
        ("0.830103483285477580700h", 49 * M + 48 * S + 372539827),
        ("000001s", S),
    ],
)
def test_parse_matches_go(text: str, ns: int) -> None:
    assert parse_duration(text) == Duration(ns)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "empty string"),
        ("-", "no number"),
        ("+", "no number"),
        ("3", 'missing unit after "3" (use ns, us, ms, s, m or h)'),
        ("00", 'missing unit after "00"'),
        ("1.", 'missing unit after "1."'),
        ("1h30", 'missing unit after "30"'),
        ("s", 'expected a number at "s"'),
        (".", 'expected a number at "."'),
        ("-.", 'expected a number at "."'),
        (".s", 'expected a number at ".s"'),
        ("+.s", 'expected a number at ".s"'),
        ("--1s", 'expected a number at "-1s"'),
        ("1d", 'unknown unit "d" (use ns, us, ms, s, m or h)'),
        ("1S", 'unknown unit "S"'),
        ("1 s", 'unknown unit " s"'),
        ("1h-1m", 'unknown unit "h-"'),
        ("\uff11s", 'expected a number at "\uff11s"'),
        ("\ufffd", 'expected a number at "\ufffd"'),
        ("9223372036854775810ns", "out of range"),
        ("9223372036854775808ns", "out of range"),
        ("-9223372036854775809ns", "out of range"),
        ("9223372036854776us", "out of range"),
        ("3000000h", "out of range"),
        ("9223372036854775.808us", "out of range"),
        ("9223372036854ms775us808ns", "out of range"),
        ("1" * 5000 + "s", "out of range"),
    ],
)
def test_parse_errors_quote_input_and_say_why(text: str, why: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    message = str(caught.value)
    # A long input is quoted cut to its first 100 characters: a message may carry 256 KiB.
    shown = (
        f'"{text}"'
        if len(text) <= 100
        else f'"{text[:100]}"... ({len(text) - 100} more characters)'
    )
    assert message.startswith(f"invalid duration {shown}: ")
    assert why in message


def test_parse_error_exact_message() -> None:
    with pytest.raises(
        DurationError,
        match=r'^invalid duration "1d": unknown unit "d" \(use ns, us, ms, s, m or h\)$',
    ):
        parse_duration("1d")


def test_parse_error_escapes_unpaired_surrogate() -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration("1\udc85")
    assert "\\udc85" in str(caught.value)
    str(caught.value).encode("utf-8")


# Go's durationTests and time package documentation.
@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (1, "1ns"),
        (2, "2ns"),
        (100, "100ns"),
        (1100, "1.1\u00b5s"),
        (1500, "1.5\u00b5s"),
        (1000, "1\u00b5s"),
        (2200 * US, "2.2ms"),
        (300 * MS, "300ms"),
        (999_999_999, "999.999999ms"),
        (3300 * MS, "3.3s"),
        (1500 * MS, "1.5s"),
        (S, "1s"),
        (S + 1, "1.000000001s"),
        (4 * M + 5 * S, "4m5s"),
        (4 * M + 5001 * MS, "4m5.001s"),
        (5 * H + 6 * M + 7001 * MS, "5h6m7.001s"),
        (8 * M + 1, "8m0.000000001s"),
        (M, "1m0s"),
        (90 * S, "1m30s"),
        (61500 * MS, "1m1.5s"),
        (H, "1h0m0s"),
        (90 * M, "1h30m0s"),
        (2 * H + 45 * M, "2h45m0s"),
        (H + 15 * M + 30 * S + 918273645, "1h15m30.918273645s"),
        (-M, "-1m0s"),
        (-1500, "-1.5\u00b5s"),
        (-1, "-1ns"),
        (MAX, "2562047h47m16.854775807s"),
        (MIN, "-2562047h47m16.854775808s"),
    ],
)
def test_str_matches_go(ns: int, text: str) -> None:
    assert str(Duration(ns)) == text


@pytest.mark.parametrize(
    "ns",
    [0, 1, 999, 1000, 1001, 123_456_789, S, S + 1, M, H, 49 * H + 1, MAX, MIN, -1, -H - 1],
)
def test_str_round_trips_through_parse(ns: int) -> None:
    assert parse_duration(str(Duration(ns))) == Duration(ns)


def test_seconds_and_of_seconds() -> None:
    assert Duration(1500 * MS).seconds == 1.5
    assert Duration.of_seconds(90) == Duration(90 * S)
    assert Duration.of_seconds(0.3) == Duration(300 * MS)
    assert Duration.of_seconds(1.5) == Duration(1500 * MS)
    assert Duration.of_seconds(-2) == Duration(-2 * S)


def test_of_seconds_rejects_non_finite_and_out_of_range() -> None:
    with pytest.raises(DurationError, match="finite"):
        Duration.of_seconds(float("inf"))
    with pytest.raises(DurationError, match="finite"):
        Duration.of_seconds(float("nan"))
    with pytest.raises(DurationError, match="out of range"):
        Duration.of_seconds(10**10)


def test_duration_rejects_non_int_ns() -> None:
    with pytest.raises(TypeError):
        Duration(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Duration(True)


def test_durations_order_and_compare() -> None:
    assert Duration(1) < Duration(2)
    assert parse_duration("1m") == parse_duration("60s")
    assert max(Duration(S), Duration(M)) == Duration(M)
    assert len({Duration(S), parse_duration("1s")}) == 1


@pytest.mark.parametrize(
    ("value", "ns"),
    [
        (0, 0),
        (90, 90 * S),
        (9223372036, 9223372036 * S),
        ("90s", 90 * S),
        ("1h30m", 90 * M),
        ("1.5h", 90 * M),
        ("300ms", 300 * MS),
        ("0", 0),
        ("-0s", 0),
    ],
)
def test_duration_value_accepts_int_seconds_and_go_strings(value: object, ns: int) -> None:
    assert duration_value(value) == Duration(ns)


@pytest.mark.parametrize("value", [1.5, 90.0, True, False, None, [90], {"s": 1}, b"90s"])
def test_duration_value_rejects_other_types(value: object) -> None:
    with pytest.raises(DurationError) as caught:
        duration_value(value)
    assert str(caught.value) == (
        'must be an int number of seconds or a duration string like "90s" or "1h30m"'
    )


@pytest.mark.parametrize("value", [-1, "-1s", "-1h30m"])
def test_duration_value_rejects_negative(value: object) -> None:
    with pytest.raises(DurationError) as caught:
        duration_value(value)
    assert str(caught.value) == "must not be negative"


def test_duration_value_rejects_out_of_range_seconds() -> None:
    with pytest.raises(DurationError, match="at most 9223372036 seconds"):
        duration_value(9223372037)


def test_duration_value_passes_parse_errors_through() -> None:
    with pytest.raises(DurationError, match=r'^invalid duration "1d": unknown unit "d"'):
        duration_value("1d")
