"""Deadlines for tries on the wire: one watchdog thread per process interrupts a try that is
still on the wire when its deadline passes (``Link.interrupt``: its socket shut down), so a
hung server, or an answer that trickles in byte by byte, cannot hold a caller past its budget.

A try costs a lock and a dict entry here. The watchdog sleeps until the earliest deadline of
the tries it watches and is woken only by a try whose deadline is earlier still: a stream of
tries with the same budget never wakes it, and it never ticks (a watchdog that looked every
50 ms took the GIL from a busy caller twenty times a second, for nothing).
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import threading
import time
from typing import Callable

#: The longest the watchdog sleeps at once (far below ``threading.TIMEOUT_MAX``).
LONGEST_SLEEP = 3600.0


class Watch:
    """One try's deadline; ``fired``: the watchdog interrupted it."""

    __slots__ = ("deadline", "fired", "interrupt")

    def __init__(self, deadline: float, interrupt: Callable[[], None]) -> None:
        self.deadline = deadline
        self.interrupt = interrupt
        self.fired = False


class _Watchdog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.woken = threading.Condition(self.lock)
        self.watches: dict[int, Watch] = {}
        self.ids = itertools.count()
        self.thread: threading.Thread | None = None
        #: When the watchdog looks next (``time.monotonic()``; inf: when woken).
        self.wake_at = math.inf

    def watch(self, deadline: float, interrupt: Callable[[], None]) -> tuple[int, Watch]:
        entry = Watch(deadline, interrupt)
        with self.lock:
            key = next(self.ids)
            self.watches[key] = entry
            if self.thread is None:
                self.thread = threading.Thread(
                    target=self._run, name="awsflock-deadline", daemon=True
                )
                self.thread.start()
            elif deadline < self.wake_at:
                self.woken.notify()
        return key, entry

    def unwatch(self, key: int) -> None:
        # The watchdog is not woken: it finds the entry gone when it looks.
        with self.lock:
            self.watches.pop(key, None)

    def _run(self) -> None:
        with self.lock:
            while True:
                now = time.monotonic()
                for entry in self.watches.values():
                    if entry.fired or entry.deadline > now:
                        continue
                    # Under the lock: the try cannot end (and its connection be closed, and its
                    # socket's number reused) while it is interrupted.
                    entry.fired = True
                    # One that fails leaves the try to the driver's own timeouts.
                    with contextlib.suppress(Exception):
                        entry.interrupt()
                pending = [e.deadline for e in self.watches.values() if not e.fired]
                self.wake_at = min(pending, default=math.inf)
                # A deadline past what a thread may wait for (a library caller's request
                # timeout of 1e10 s) would raise here and end the watchdog: it looks again.
                self.woken.wait(
                    None if self.wake_at == math.inf else min(self.wake_at - now, LONGEST_SLEEP)
                )


_DOG = _Watchdog()


def _after_fork() -> None:
    """A child has no watchdog thread: it starts its own on its first try."""
    global _DOG
    _DOG = _Watchdog()


os.register_at_fork(after_in_child=_after_fork)


class watched:
    """Inside: the try is interrupted (``interrupt()``, from the watchdog's thread) if it has
    not left by ``deadline`` (``time.monotonic()``). ``fired`` afterwards: it was."""

    def __init__(self, deadline: float, interrupt: Callable[[], None]) -> None:
        self._deadline = deadline
        self._interrupt = interrupt
        self._key = -1
        self._watch: Watch | None = None

    @property
    def fired(self) -> bool:
        return self._watch is not None and self._watch.fired

    def __enter__(self) -> watched:
        self._key, self._watch = _DOG.watch(self._deadline, self._interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        _DOG.unwatch(self._key)
