"""Time as awsflock sees it: wall time for leases, monotonic time for waiting.

Leases are judged by wall-clock time written into DynamoDB, so every host's clock must be
NTP-synchronised to well within the skew window (see README, "Clocks"). Waiting and timeouts use
the monotonic clock so a clock step never shortens or stretches a wait.
"""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """What the lease logic needs of time. Pass a fake one in tests."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""


class SystemClock:
    """The real clocks of this host."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly.

    Shipped in the package so downstream users can test their own code built on awsflock.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lock = threading.Lock()
        self.sleeps: list[float] = []

    def time(self) -> float:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.advance(max(0.0, seconds))

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``."""
        with self._lock:
            self._now += seconds
            self._mono += seconds
