"""The Redis waker of ``awsflock.aio`` (``stores.redis.wake_async``) on a fake ``redis.asyncio``
subscription and a fake clock: a pause ends when a message comes, lasts its length otherwise,
falls back to sleeping when the subscription breaks or cannot be made; a waiter cancelled in
its pause, and a table closed, leave no subscription and no task behind. On a real server:
tests/integration/test_redis_wake_aio.py."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from awsflock import aio, errors
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore
from awsflock.stores.redis import RedisStore, wake_async
from awsflock.stores.redis.aio import AsyncRedisStore


class FakePubSub:
    """What ``AsyncWake`` uses of ``redis.asyncio``'s PubSub. A ``get_message`` with nothing
    queued moves the fake clock by its timeout; ``hang`` makes ``subscribe`` or
    ``get_message`` wait until cancelled."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.messages: list[dict[str, Any]] = []
        self.broken = False
        self.hang: str | None = None
        self.listening = asyncio.Event()
        #: Set by the test: a read waits for it (a read under way when the test closes).
        self.gate: asyncio.Event | None = None
        self.reading = False
        self.closed = False
        self.closed_under_a_read = False
        self.connection_pool = self

    async def _hang(self, where: str) -> None:
        if self.hang == where:
            self.listening.set()
            await asyncio.Event().wait()

    async def subscribe(self, channel: str) -> None:
        await self._hang("subscribe")
        self.messages.insert(0, {"type": "subscribe", "channel": channel})

    async def get_message(self, ignore_subscribe_messages: bool = False, timeout: float = 0) -> Any:
        await self._hang("listen")
        if self.gate is not None:
            self.reading = True
            self.listening.set()
            try:
                await self.gate.wait()
            finally:
                self.reading = False
        if self.broken:
            raise ConnectionError("Connection closed by server.")
        while self.messages:
            message = self.messages.pop(0)
            if not (ignore_subscribe_messages and message["type"] == "subscribe"):
                return message
        self.clock.advance(timeout)
        await asyncio.sleep(0)
        return None

    def publish(self) -> None:
        self.messages.append({"type": "message", "data": b"end"})

    async def aclose(self) -> None:
        self.closed = True
        self.closed_under_a_read = self.closed_under_a_read or self.reading

    async def disconnect(self) -> None:
        pass


class Background:
    """The store's side of ``closing``: the closes a waker starts, to be awaited."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self, closing: Any) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(closing))

    async def done(self) -> None:
        await asyncio.gather(*self.tasks)


def _wake(
    clock: FakeClock, refuse: bool = False
) -> tuple[wake_async.AsyncWake, list[FakePubSub], Background]:
    made: list[FakePubSub] = []

    def subscriber(timeout: float) -> FakePubSub:
        if refuse:
            raise ConnectionError("Connection refused")
        made.append(FakePubSub(clock))
        return made[-1]

    background = Background()
    return (
        wake_async.AsyncWake(subscriber, "p:{job}:wake", "Redis at test", background),
        made,
        background,
    )


def test_the_aio_redis_waker_subscribes_then_ends_a_pause_when_a_message_comes():
    async def main() -> None:
        clock = FakeClock()
        waker, made, background = _wake(clock)
        assert await waker.pause(clock, 1.0, None)  # subscribed: poll once more at once
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)  # nothing came: the whole pause
        assert clock.monotonic() - start == pytest.approx(0.7)
        made[0].publish()
        start = clock.monotonic()
        assert await waker.pause(clock, 5.0, None)
        assert clock.monotonic() == start  # woken at once
        waker.close()
        await background.done()
        assert len(made) == 1 and made[0].closed

    asyncio.run(main())


def test_the_aio_redis_waker_ends_its_pause_once_the_cancel_is_set():
    async def main() -> None:
        clock = FakeClock()
        waker, _made, _background = _wake(clock)
        assert await waker.pause(clock, 1.0, None)
        cancel = threading.Event()
        cancel.set()
        start = clock.monotonic()
        assert not await waker.pause(clock, 5.0, cancel)
        assert clock.monotonic() == start

    asyncio.run(main())


def test_a_broken_aio_subscription_sleeps_the_pause_out_and_is_made_again_later():
    async def main() -> None:
        clock = FakeClock()
        waker, made, background = _wake(clock)
        assert await waker.pause(clock, 1.0, None)
        made[0].broken = True
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)
        assert clock.monotonic() - start == pytest.approx(0.7)
        await background.done()
        assert made[0].closed
        assert not await waker.pause(clock, 0.7, None)  # not again yet: the pause is slept
        assert len(made) == 1
        clock.advance(wake_async.RETRY_AFTER)
        assert await waker.pause(clock, 1.0, None)  # RETRY_AFTER later: subscribed again
        assert len(made) == 2

    asyncio.run(main())


def test_an_aio_subscription_that_cannot_be_made_sleeps_the_pause_out():
    async def main() -> None:
        clock = FakeClock()
        waker, _made, _background = _wake(clock, refuse=True)
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)
        assert clock.monotonic() - start == pytest.approx(0.7)
        waker.close()

    asyncio.run(main())


class WakingStore(AsyncMemoryStore):
    """The in-memory store whose waiters pause in an ``AsyncWake`` on a fake subscription."""

    def __init__(self, memory: MemoryStore, clock: FakeClock) -> None:
        super().__init__(memory)
        self.made: list[FakePubSub] = []
        self.background = Background()
        self.hang = "listen"
        self.fake_clock = clock

    def waker(self, lock_id: str) -> AsyncWaker:
        def subscriber(timeout: float) -> FakePubSub:
            self.made.append(FakePubSub(self.fake_clock))
            self.made[-1].hang = self.hang
            return self.made[-1]

        return wake_async.AsyncWake(subscriber, "p:{job}:wake", "test", self.background)


@pytest.mark.parametrize("hang", ["subscribe", "listen"])
def test_a_waiter_cancelled_in_its_pause_leaves_no_subscription_and_no_task(hang):
    async def main() -> None:
        clock = FakeClock()
        memory = MemoryStore(clock=clock)
        LockTable(store=memory).acquire("job", lease=60, wait=0)
        store = WakingStore(memory, clock)
        store.hang = hang
        table = aio.LockTable(store=store, owner="waiter")
        waiting = asyncio.ensure_future(table.acquire("job", lease=60, wait=30))
        for _ in range(1000):  # bounded: until it waits in the subscription
            if store.made and store.made[0].listening.is_set():
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("the waiter never paused in its waker")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.background.done()
        assert [pubsub.closed for pubsub in store.made] == [True]
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert memory.read("job").lock is not None and memory.read("job").lock.owner != "waiter"

    asyncio.run(main())


def test_closing_the_aio_redis_table_closes_its_waiters_subscriptions():
    async def main() -> None:
        clock = FakeClock()
        store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", clock=clock))
        made: list[FakePubSub] = []

        def subscriber(timeout: float) -> FakePubSub:
            made.append(FakePubSub(clock))
            return made[-1]

        store._subscriber = subscriber  # type: ignore[method-assign]
        waker = store.waker("job")
        assert isinstance(waker, wake_async.AsyncWake)
        assert waker.channel == "awsflock:{job}:wake"
        assert await waker.pause(clock, 1.0, None)
        await store.close_async()  # nothing else was connected
        assert made[0].closed
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)  # closed: it only sleeps now
        assert clock.monotonic() - start == pytest.approx(0.7) and len(made) == 1

    asyncio.run(main())


def test_a_table_closed_under_a_waiters_read_closes_its_subscription_once_the_read_ends():
    # Closed under a read, redis-py's pub/sub would connect and subscribe again on its own,
    # and that connection would be left open: the close waits for the read (at most
    # WAKE_CHECK), which then sees the waker closed and reads no more.
    async def main() -> None:
        clock = FakeClock()
        store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", clock=clock))
        made: list[FakePubSub] = []

        def subscriber(timeout: float) -> FakePubSub:
            made.append(FakePubSub(clock))
            return made[-1]

        store._subscriber = subscriber  # type: ignore[method-assign]
        waker = store.waker("job")
        assert await waker.pause(clock, 1.0, None)
        made[0].gate = asyncio.Event()
        start = clock.monotonic()
        pausing = asyncio.ensure_future(waker.pause(clock, 5.0, None))
        await made[0].listening.wait()
        closing = asyncio.ensure_future(store.close_async())
        for _ in range(10):
            await asyncio.sleep(0)
        assert not made[0].closed and not closing.done()  # the read is under way
        made[0].gate.set()
        await closing
        assert made[0].closed and not made[0].closed_under_a_read
        assert not await pausing  # closed: the rest of the pause is slept out
        assert clock.monotonic() - start == pytest.approx(5.0) and len(made) == 1

    asyncio.run(main())


def test_an_aio_redis_store_in_the_callers_time_sleeps_its_pauses():
    store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", server_time=False))
    assert isinstance(store.waker("job"), AsyncSleeper)


def test_a_wait_that_ends_busy_closes_its_subscription():
    async def main() -> None:
        clock = FakeClock()
        memory = MemoryStore(clock=clock)
        LockTable(store=memory).acquire("job", lease=60, wait=0)
        store = WakingStore(memory, clock)
        store.hang = ""
        table = aio.LockTable(store=store, owner="waiter")
        with pytest.raises(errors.LockBusy):
            await table.acquire("job", lease=60, wait=3)
        await store.background.done()
        assert [pubsub.closed for pubsub in store.made] == [True]

    asyncio.run(main())
