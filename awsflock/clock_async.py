"""What the asynchronous lock logic needs of time (``awsflock.lock.*_async``): the clock's
readings as ``awsflock.clock.Clock`` gives them, and its pauses as coroutines. ``SystemClock``
and ``FakeClock`` are both; their ``sleep_async`` and ``wait_async`` are what
``scripts/unasync`` turns into ``sleep`` and ``wait`` in the synchronous twin."""

from __future__ import annotations

import threading
from typing import Protocol

from awsflock.clock import Clock


class AsyncClock(Clock, Protocol):
    """A ``Clock`` whose pauses can be awaited: they never block the event loop."""

    async def sleep_async(self, seconds: float) -> None:
        """Pause this task for ``seconds``."""

    async def wait_async(self, event: threading.Event, seconds: float) -> bool:
        """Pause this task until ``event`` is set or ``seconds`` pass; True if it is set."""
