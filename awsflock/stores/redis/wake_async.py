"""``wake`` for ``awsflock.aio``: an asyncio waiter on Redis woken by the message the step script
publishes on the lock's channel (``layout.wake_channel``), on ``redis.asyncio``'s pub/sub.

One ``AsyncWake`` serves one waiting acquire (``AsyncRedisStore.waker``), but unlike the
synchronous ``Wake`` it has no connection of its own: all the waiters of one event loop share
one (``wake_hub``), which subscribes each channel once while anybody waits on it and hands each
message to the waiters of its channel. On its first pause a waiter joins it; once its channel's
subscription is confirmed, the pause then going on (or the next one) ends at once, so that an
end which came just before the subscription is not missed. Each later pause ends when a
message comes, or when the pause asked for is over, never later, and checks ``cancel`` every
``WAKE_CHECK``. A message is only a hint: the engine then polls through the script, which
checks everything. A connection that cannot be made, or breaks, costs only the wake: all its
waiters sleep their pauses out, and a new one is made ``RETRY_AFTER`` later. Nothing blocks the
event loop.

``close`` (the wait is over, or the table is closed) is synchronous, as every waker's: the
waiter leaves the shared connection, which unsubscribes its channel if nobody else waits on it,
and is closed (in a task that the store's ``close_async`` waits for) once nobody waits at all.
A waiter cancelled in its pause closes its waker on the way out, so nothing is left behind it.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Callable

from awsflock.clock import SystemClock
from awsflock.clock_async import AsyncClock
from awsflock.protocol import WAKE_CHECK
from awsflock.protocol_async import AsyncSleeper
from awsflock.stores.redis.wake import RETRY_AFTER, SUBSCRIBE_TIMEOUT
from awsflock.stores.redis.wake_hub import Hub, Shared

__all__ = ["RETRY_AFTER", "SUBSCRIBE_TIMEOUT", "AsyncWake"]


class AsyncWake:
    """A waiter on one lock's channel. ``hub()`` is the running loop's shared connection."""

    def __init__(self, hub: Callable[[], Hub], channel: str, where: str) -> None:
        self._hub = hub
        self.channel = channel
        self.where = where
        self.closed = False
        #: The loop the waiter waits in (the first pause's).
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The shared connection it waits on (None: not joined, or it broke or closed).
        self._conn: Shared | None = None
        #: A message came, or the subscription was confirmed, since a pause last ended early.
        self._woken = False
        #: Done when something happens while a pause waits.
        self._signal: asyncio.Future[None] | None = None

    async def pause(
        self, clock: AsyncClock, seconds: float, cancel: threading.Event | None
    ) -> bool:
        end = clock.monotonic() + max(0.0, seconds)
        if self._conn is None and not self.closed:
            hub = self._hub()
            self.loop = hub.loop
            self._conn = hub.join(self, clock)
        while True:
            if self._woken:
                self._woken = False
                return True
            left = end - clock.monotonic()
            if self._conn is None or left <= 0 or _set(cancel):
                break
            await self._signalled(clock, left if cancel is None else min(WAKE_CHECK, left))
        left = end - clock.monotonic()
        if left > 0 and not _set(cancel):
            await AsyncSleeper().pause(clock, left, cancel)
        return False

    def close(self) -> None:
        """Leave the shared connection. Idempotent; from any thread."""
        if self.closed:
            return
        self.closed = True
        self._woken = False
        if self._conn is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.loop:
            self._leave()
            return
        try:  # called from another thread: the connection lives in its own loop
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self._leave)
        except RuntimeError:  # that loop is closed: its connections went with it
            pass

    def _leave(self) -> None:
        conn, self._conn = self._conn, None
        self._woken = False
        if conn is not None:
            conn.leave(self)

    # What the shared connection tells its waiters (in the loop).

    def confirmed(self) -> None:
        """The subscription is confirmed: poll once more (an earlier end was not heard)."""
        self.woken()

    def woken(self) -> None:
        self._woken = True
        self._poke()

    def lost(self, conn: Shared) -> None:
        """The connection broke or was closed: the waiter sleeps its pauses out."""
        if self._conn is conn:
            self._conn = None
            self._poke()

    def _poke(self) -> None:
        if self._signal is not None and not self._signal.done():
            self._signal.set_result(None)

    async def _signalled(self, clock: AsyncClock, seconds: float) -> None:
        """Until something happens (``_poke``) or ``seconds`` pass on ``clock``."""
        loop = asyncio.get_running_loop()
        signal = self._signal = loop.create_future()
        try:
            if isinstance(clock, SystemClock):
                await asyncio.wait((signal,), timeout=seconds)
                return
            # A clock of its own (a test's): its time, not the loop's.
            sleeping = loop.create_task(clock.sleep_async(seconds))
            try:
                await asyncio.wait((signal, sleeping), return_when=asyncio.FIRST_COMPLETED)
            finally:
                sleeping.cancel()
                await asyncio.wait((sleeping,))
        finally:
            self._signal = None


def _set(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()
