"""How a waiter spends the pause between two polls of one lock (``LockStore.waker``): the
protocol's ``Waker``, and ``Sleeper``, the waker of a store with no way to wake a waiter early.
"""

from __future__ import annotations

import threading
from typing import Protocol

from awsflock.clock import Clock

#: A waker checks a waiter's cancel at least this often (seconds): a signal ends a wait by it.
WAKE_CHECK = 0.1


class Waker(Protocol):
    """How a waiter spends the pause between two polls of one lock (``LockStore.waker``)."""

    def pause(self, clock: Clock, seconds: float, cancel: threading.Event | None) -> bool:
        """Block for ``seconds`` of ``clock``'s time, never longer; less once ``cancel`` is set
        (checked at least every ``WAKE_CHECK``), or the store hints that the lock may have
        changed (True: poll now). Never raises: a waker that fails sleeps the pause out."""
        ...

    def close(self) -> None:
        """The wait is over: free what the waker holds (a subscription). Idempotent."""
        ...


class Sleeper:
    """The waker of a store with no way to wake a waiter early: the pause is slept out, on
    ``cancel`` when there is one (a virtual clock's ``wait`` and ``sleep`` move its time)."""

    def pause(self, clock: Clock, seconds: float, cancel: threading.Event | None) -> bool:
        if cancel is not None:
            clock.wait(cancel, seconds)
        else:
            clock.sleep(seconds)
        return False

    def close(self) -> None:
        pass
