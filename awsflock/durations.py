"""Durations as people write them: '15m', '3 minutes', '100hrs', '1 day', '300', '300s'.

Everything awsflock 0.2.0 accepted still parses to the same number of seconds (a test checks
this); on top of that pytimeparse's richer forms ('2h30m', '1:30', '1.5s') are accepted.
"""

from __future__ import annotations

import math
import re

from awsflock.errors import UsageError
from awsflock.text import format_seconds as format_seconds  # for callers of durations

_PLAIN_NUMBER = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*")

#: Longest lease we accept: a lease is a promise to come back; a year is already generous.
MAX_LEASE = 366 * 24 * 3600.0
#: Longest finite wait. Longer waits are almost always a unit mistake; 0 means forever.
MAX_WAIT = 7 * 24 * 3600.0
#: Largest clock-skew window: beyond this NTP is not working and leases mean little.
MAX_SKEW = 300.0


def parse_seconds(text: str | float | int) -> float:
    """Parse a duration into seconds (may be zero or negative); raise UsageError if unreadable."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        raw = str(text)
        match = _PLAIN_NUMBER.fullmatch(raw)
        if match:
            value = float(match.group(1))
        else:
            from pytimeparse.timeparse import timeparse as parse  # only needed on this path

            parsed = parse(raw.strip()) if raw.strip() else None
            if parsed is None:
                raise UsageError(
                    f"{raw!r} is not a duration",
                    hint="write it like '90', '90s', '15m', '2 hours' or '1 day'",
                )
            value = float(parsed)
    if not math.isfinite(value):
        raise UsageError(f"{text!r} is not a finite duration", hint="write it like '15m'")
    return value


def lease_seconds(text: str | float | int, what: str = "lease duration") -> float:
    """A lease length: strictly positive and at most MAX_LEASE."""
    value = parse_seconds(text)
    if value <= 0:
        raise UsageError(
            f"{what} must be positive, got {text!r}", hint="give e.g. '15m' or '2 hours'"
        )
    if value > MAX_LEASE:
        raise UsageError(
            f"{what} {text!r} is longer than {format_seconds(MAX_LEASE)}",
            hint="use a shorter lease and renew it",
        )
    if value < 1:
        raise UsageError(f"{what} {text!r} is under one second", hint="give at least '1s'")
    return value


#: The longest lock-delay: a day (a zombie holder's writes that linger longer need fencing).
MAX_LOCK_DELAY = 86_400.0


def in_range(text: str | float | int, what: str, low: float, high: float, hint: str) -> float:
    """``text`` as seconds, refused with one line unless ``low <= seconds <= high``."""
    value = parse_seconds(text)
    if not low <= value <= high:
        raise UsageError(f"{what} {text!r} is out of range", hint=hint)
    return value


def delay_seconds(text: str | float | int) -> float:
    """A lock-delay (``--lock-delay``, ``lock_delay=``): 0 (none) up to MAX_LOCK_DELAY."""
    hint = f"give 0 (none) to {format_seconds(MAX_LOCK_DELAY)}, e.g. '15s'"
    return in_range(text, "lock-delay", 0, MAX_LOCK_DELAY, hint)


def hold_seconds(text: str | float | int) -> float:
    """A max-hold (``--max-hold``, ``max_hold=``): 1 s up to MAX_LEASE, as a lease."""
    hint = f"give 1s to {format_seconds(MAX_LEASE)}, e.g. '2h'"
    return in_range(text, "max-hold", 1, MAX_LEASE, hint)


def wait_seconds(text: str | float | int) -> float | None:
    """The command line's --wait-time: 0 means forever (returned as None, as in 0.2.0), unlike
    the library's ``wait=0`` (``wait_limit``); negative is refused."""
    value = parse_seconds(text)
    if value < 0:
        raise UsageError(
            f"wait time must not be negative, got {text!r}",
            hint="give seconds or a duration, '0' to wait forever, or --no-wait",
        )
    if value > MAX_WAIT:
        raise UsageError(
            f"wait time {text!r} is longer than {format_seconds(MAX_WAIT)}",
            hint="use '0' to wait forever",
        )
    return None if value == 0 else value


def wait_limit(text: str | float | int) -> float:
    """The library's wait: seconds, 0 (or '0') meaning "do not wait"; None is for "forever"."""
    hint = f"give 0 to {format_seconds(MAX_WAIT)}, or None to wait forever"
    return in_range(text, "wait", 0, MAX_WAIT, hint)


#: Longest request timeout: a request unanswered for minutes is not coming back.
MAX_REQUEST_TIMEOUT = 120.0


def request_timeout_seconds(text: str | float | int) -> float:
    """How long one request may take, retries included: 0.1 s to MAX_REQUEST_TIMEOUT."""
    hint = f"give between 0.1 and {int(MAX_REQUEST_TIMEOUT)} seconds (default 5s)"
    return in_range(text, "request timeout", 0.1, MAX_REQUEST_TIMEOUT, hint)


def skew_seconds(text: str | float | int) -> float:
    """The clock-skew window: 0 to MAX_SKEW seconds."""
    hint = f"give between 0 and {int(MAX_SKEW)} seconds (default 5s)"
    return in_range(text, "clock skew", 0, MAX_SKEW, hint)
