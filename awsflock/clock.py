"""Time as awsflock sees it: wall time for leases, monotonic time for waiting.

On a store timed by its callers (DynamoDB), leases are judged by the wall-clock times they write,
so every host's clock must be NTP-synchronised to well within the skew window (see
docs/how-it-works/clocks.md); a store timed by its own clock (PostgreSQL's server) needs no
such agreement, and its answers come back in the caller's clock. Waiting and timeouts use the
monotonic clock so a clock step never shortens or stretches a wait.

A clock also decides how awsflock's own threads (the heartbeat) are started, so a simulation in
virtual time can run them one step at a time (``start_thread``).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Protocol


class Clock(Protocol):
    """What the lease logic needs of time. Pass a fake one in tests."""

    def time(self) -> float:
        """Wall-clock seconds since the epoch."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Block until ``event`` is set or ``seconds`` pass; True if the event is set."""


def start_thread(
    clock: Clock, target: Callable[..., None], args: tuple[Any, ...], name: str
) -> threading.Thread:
    """Start ``target(*args)`` in a daemon thread named ``name``: the clock's own way if it has
    one (a ``start_thread`` method: a simulation's clock runs the thread in virtual time)."""
    own = getattr(clock, "start_thread", None)
    if own is not None:
        thread: threading.Thread = own(target, args, name)
        return thread
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    thread.start()
    return thread


#: How often an asynchronous wait on a ``threading.Event`` looks at it.
EVENT_POLL = 0.05


class SystemClock:
    """The real clocks of this host."""

    def time(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, seconds: float) -> bool:
        return event.wait(max(0.0, seconds))

    async def sleep_async(self, seconds: float) -> None:
        import asyncio  # here: the command line never pays for its import

        await asyncio.sleep(max(0.0, seconds))

    async def wait_async(self, event: threading.Event, seconds: float) -> bool:
        """A threading event (set from any thread) looked at every ``EVENT_POLL``."""
        import asyncio

        end = time.monotonic() + max(0.0, seconds)
        while not event.is_set():
            left = end - time.monotonic()
            if left <= 0:
                break
            await asyncio.sleep(min(EVENT_POLL, left))
        return event.is_set()


class FakeClock:
    """A clock that only moves when told to; ``sleep`` advances it instantly.

    Shipped in the package so downstream users can test their own code built on awsflock.
    """

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self._now = start
        self._mono = 1000.0
        self._lock = threading.Condition()
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

    async def sleep_async(self, seconds: float) -> None:
        """As ``sleep``, letting the event loop's other tasks run once."""
        import asyncio

        self.sleep(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        """Move both clocks forward by ``seconds``, waking threads whose wait ran out."""
        with self._lock:
            self._now += seconds
            self._mono += seconds
            self._lock.notify_all()

    def step_wall(self, seconds: float) -> None:
        """Step the wall clock alone, by ``seconds`` (negative: back), as an NTP step or a
        restored VM does; monotonic time does not move."""
        with self._lock:
            self._now += seconds

    def wait(self, event: threading.Event, seconds: float) -> bool:
        """Wait in fake time: returns once ``event`` is set or another thread advanced the clock
        by ``seconds``. (Real time passes only in short polls for the event.)"""
        with self._lock:
            until = self._mono + max(0.0, seconds)
            while not event.is_set() and self._mono < until:
                self._lock.wait(0.01)
        return event.is_set()

    async def wait_async(self, event: threading.Event, seconds: float) -> bool:
        """As ``wait``; the fake time is moved by another task or thread (real time passes
        only in short polls for the event, the event loop free meanwhile)."""
        import asyncio

        until = self.monotonic() + max(0.0, seconds)
        while not event.is_set() and self.monotonic() < until:
            await asyncio.sleep(0.01)
        return event.is_set()
