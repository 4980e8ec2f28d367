"""``wake`` for ``awsflock.aio``: an asyncio waiter on Redis woken by the message the step script
publishes on the lock's channel (``layout.wake_channel``), on ``redis.asyncio``'s pub/sub.

As the synchronous ``Wake``, one ``AsyncWake`` serves one waiting acquire, on a connection of
its own (``AsyncRedisStore.waker``). On its first pause it starts subscribing in a task of its
own, so that the pause still ends by its time and checks ``cancel`` every ``WAKE_CHECK``; once
subscribed it ends that pause at once (an end just before the subscription is not missed). Each
later pause ends when a message comes, or when the pause asked for is over, never later. A
message is only a hint: the engine then polls through the script, which checks everything. A
subscription that cannot be made, or breaks, falls back to sleeping the pause out, and is made
again ``RETRY_AFTER`` later. Nothing blocks the event loop.

``close`` (the wait is over, or the table is closed) is synchronous, as every waker's: it ends
the subscribing task and closes the connection in a task that the store's ``close_async``
waits for (``closing``). A waiter cancelled in its pause closes its waker on the way out, so
nothing is left behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, Callable

from awsflock.clock_async import AsyncClock
from awsflock.protocol import WAKE_CHECK
from awsflock.protocol_async import AsyncSleeper
from awsflock.stores.redis.wake import RETRY_AFTER, SUBSCRIBE_TIMEOUT, log

#: Runs a coroutine in a task of the running loop that the store's ``close_async`` waits for.
Closing = Callable[[Coroutine[Any, Any, None]], None]


class AsyncWake:
    """A waiter's subscription to one lock's channel. ``subscriber(timeout)`` makes the
    ``redis.asyncio`` pub/sub client (unconnected); ``where`` names the server in messages."""

    def __init__(
        self, subscriber: Callable[[float], Any], channel: str, where: str, closing: Closing
    ) -> None:
        self._subscriber = subscriber
        self.channel = channel
        self.where = where
        self._closing = closing
        self.closed = False
        #: The loop the waker's connection lives in (the first pause's).
        self.loop: asyncio.AbstractEventLoop | None = None
        #: The subscription once made (None: not yet, or it broke).
        self._pubsub: Any = None
        #: The task making the subscription, while it runs (or until a pause sees it end).
        self._making: asyncio.Task[Any] | None = None
        #: When (the clock's monotonic time) a failed subscription may be tried again.
        self._retry_at: float | None = None
        #: Done once the pause reading from the subscription stops (None: none reads).
        self._reading: asyncio.Future[None] | None = None

    async def pause(
        self, clock: AsyncClock, seconds: float, cancel: threading.Event | None
    ) -> bool:
        end = clock.monotonic() + max(0.0, seconds)
        try:
            if self._pubsub is not None:
                if await self._listen(self._pubsub, clock, end, cancel):
                    return True
            elif self._may_subscribe(clock) and await self._subscribing(clock, end, cancel):
                return True  # poll once more: an end before the subscription is missed
        except Exception as exc:  # a broken subscription only costs the wake
            self._broken(clock, exc)
        left = end - clock.monotonic()
        if left > 0 and not _set(cancel):
            await AsyncSleeper().pause(clock, left, cancel)
        return False

    def close(self) -> None:
        """Stop subscribing and close the connection (in a task: ``closing``). Idempotent."""
        if self.closed:
            return
        self.closed = True
        making, self._making = self._making, None
        pubsub, self._pubsub = self._pubsub, None
        if making is None and pubsub is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        shut = self._shut(making, pubsub)
        if running is not None and running is self.loop:
            self._closing(shut)
            return
        try:  # called from another thread: the connection is closed in its own loop
            assert self.loop is not None
            self.loop.call_soon_threadsafe(self._closing, shut)
        except RuntimeError:  # that loop is closed: its connections went with it
            shut.close()

    def _may_subscribe(self, clock: AsyncClock) -> bool:
        if self.closed:
            return False
        return self._retry_at is None or clock.monotonic() >= self._retry_at

    async def _subscribing(
        self, clock: AsyncClock, end: float, cancel: threading.Event | None
    ) -> bool:
        """Make the subscription (in a task), waiting for it within the pause; True once it
        is made. One still being made when the pause ends is waited for by the next pause."""
        if self._making is None:
            self.loop = asyncio.get_running_loop()
            self._making = self.loop.create_task(self._subscribe())
        making = self._making
        while not making.done():
            left = end - clock.monotonic()
            if left <= 0 or _set(cancel):
                return False
            await asyncio.wait((making,), timeout=min(WAKE_CHECK, left))
        self._making = None
        if making.cancelled():  # closed meanwhile (``close``, the table's ``close_async``)
            return False
        pubsub = making.result()  # raises what the subscribing raised
        if self.closed:
            self._closing(_aclose(pubsub))
            return False
        self._pubsub = pubsub
        return True

    async def _subscribe(self) -> Any:
        """Connect, log in, subscribe and see it confirmed; closed again if that fails or is
        cut short (``close``)."""
        pubsub = None
        try:
            pubsub = self._subscriber(SUBSCRIBE_TIMEOUT)
            await pubsub.subscribe(self.channel)
            # Confirmed: from here on every message published on the channel reaches us.
            message = await pubsub.get_message(timeout=SUBSCRIBE_TIMEOUT)
            if message is None or message.get("type") != "subscribe":
                raise TimeoutError(f"no confirmation of SUBSCRIBE {self.channel}: {message!r}")
        except BaseException:
            await asyncio.shield(_aclose(pubsub))
            raise
        return pubsub

    async def _listen(
        self, pubsub: Any, clock: AsyncClock, end: float, cancel: threading.Event | None
    ) -> bool:
        """Wait for a message until ``end``; True if one came."""
        while not (_set(cancel) or self.closed):
            left = end - clock.monotonic()
            if left <= 0:
                break
            self._reading = asyncio.get_running_loop().create_future()
            try:
                message = await pubsub.get_message(
                    ignore_subscribe_messages=True, timeout=min(WAKE_CHECK, left)
                )
            finally:
                reading, self._reading = self._reading, None
                reading.set_result(None)
            if message is not None:
                return True
        return False

    async def _shut(self, making: asyncio.Task[Any] | None, pubsub: Any) -> None:
        """End the subscribing task (what it made is closed) and close ``pubsub``, once a
        pause reading from it has stopped (within ``WAKE_CHECK``: it sees ``closed``). Closed
        under a read, redis-py would connect again and subscribe again, on its own."""
        if making is not None:
            making.cancel()
            await asyncio.wait((making,))
            if not making.cancelled() and making.exception() is None:
                pubsub = pubsub or making.result()
        while self._reading is not None:
            await asyncio.wait((self._reading,))
        await _aclose(pubsub)

    def _broken(self, clock: AsyncClock, exc: BaseException) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            self._closing(_aclose(pubsub))
        if self.closed:
            return  # closed while it listened: not a break
        self._retry_at = clock.monotonic() + RETRY_AFTER
        log.debug(
            "%s: no wake-up on release for now (%s); polling",
            self.where,
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__,
        )


def _set(cancel: threading.Event | None) -> bool:
    return cancel is not None and cancel.is_set()


async def _aclose(pubsub: Any) -> None:
    """Close a pub/sub client and its connection; a failure to is not news."""
    if pubsub is None:
        return
    with contextlib.suppress(Exception):
        aclose = getattr(pubsub, "aclose", None)  # redis-py 5.0.1 on; reset() before
        await (aclose() if aclose is not None else pubsub.reset())
    with contextlib.suppress(Exception):
        await pubsub.connection_pool.disconnect()
