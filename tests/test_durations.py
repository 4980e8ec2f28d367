"""Durations: everything awsflock 0.2.0 accepted parses the same; bad ones are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from awsflock import durations
from awsflock.errors import UsageError

# awsflock 0.2.0's units and their factors, as its parser defined them.
UNITS_020 = {
    **dict.fromkeys(["s", "sec", "second", "seconds"], 1),
    **dict.fromkeys(["m", "min", "minute", "minutes"], 60),
    **dict.fromkeys(["h", "hr", "hrs", "hour", "hours"], 3600),
    **dict.fromkeys(["d", "day", "days"], 86400),
}


@given(
    number=st.integers(min_value=0, max_value=10_000),
    unit=st.sampled_from(["", *UNITS_020]),
    space=st.sampled_from(["", " "]),
    pad=st.sampled_from(["", " ", "  "]),
)
def test_every_020_duration_means_the_same_seconds(number, unit, space, pad):
    text = f"{pad}{number}{space if unit else ''}{unit}{pad}"
    assert durations.parse_seconds(text) == number * UNITS_020.get(unit, 1)


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("15m", 900),
        ("3 minutes", 180),
        ("100hrs", 360000),
        ("1 day", 86400),
        ("1s", 1),
        ("300", 300),
        ("300s", 300),
        ("2h30m", 9000),
        ("1.5s", 1.5),
        ("1:30", 90),
    ],
)
def test_readme_examples(text, seconds):
    assert durations.parse_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", " ", "soon", "5 parsecs", "-", "1e3", "nan", "inf", "s5"])
def test_unreadable_durations_are_usage_errors(text):
    with pytest.raises(UsageError) as caught:
        durations.parse_seconds(text)
    assert "'15m'" in caught.value.one_line()


@pytest.mark.parametrize("text", ["0", "0s", "-5s", "0.5s", "367 days"])
def test_lease_must_be_positive_and_bounded(text):
    with pytest.raises(UsageError):
        durations.lease_seconds(text)


def test_wait_zero_means_forever_and_negative_is_refused():
    assert durations.wait_seconds("0") is None
    assert durations.wait_seconds("90s") == 90
    with pytest.raises(UsageError):
        durations.wait_seconds("-1s")
    with pytest.raises(UsageError):
        durations.wait_seconds("8 days")


@given(st.text(max_size=30))
def test_any_text_either_parses_or_is_a_usage_error(text):
    try:
        value = durations.parse_seconds(text)
    except UsageError:
        return
    assert value == value  # a real, finite number


@pytest.mark.parametrize(
    "seconds,text",
    [(0, "0s"), (0.4, "0.4s"), (59, "59s"), (252, "4m12s"), (7200, "2h"), (90061, "1d1h")],
)
def test_format_seconds(seconds, text):
    assert durations.format_seconds(seconds) == text
