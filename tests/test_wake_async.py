"""The Redis waker of ``awsflock.aio`` (``stores.redis.wake_async``) on a fake ``redis.asyncio``
subscription (tests/fake_pubsub.py) and a fake clock: a pause ends when a message comes, lasts
its length otherwise, falls back to sleeping when the subscription breaks or cannot be made; a
waiter cancelled in its pause, and a table closed, leave no subscription and no task behind.
Many waiters sharing one connection, and the races of its channels: tests/test_wake_hub.py. On
a real server: tests/integration/test_redis_wake_aio.py."""

from __future__ import annotations

import asyncio
import threading

import pytest

from awsflock import aio, errors
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore
from awsflock.stores.redis import RedisStore, wake_async
from awsflock.stores.redis.aio import AsyncRedisStore
from awsflock.stores.redis.wake_hub import Hub
from tests.fake_pubsub import Background, FakeServer, ManualClock, settle

CHANNEL = "p:{job}:wake"


def _wake(
    server: FakeServer, background: Background, hub: Hub | None = None
) -> wake_async.AsyncWake:
    """A waiter on ``CHANNEL``, on ``hub`` (a new one: a loop's)."""
    made = hub or Hub(server, "Redis at test", background)
    return wake_async.AsyncWake(lambda: made, CHANNEL, "Redis at test")


def test_the_aio_redis_waker_subscribes_then_ends_a_pause_when_a_message_comes():
    async def main() -> None:
        clock, server, background = ManualClock(), FakeServer(), Background()
        waker = _wake(server, background)
        assert await waker.pause(clock, 1.0, None)  # subscribed: poll once more at once
        assert clock.monotonic() == 1000.0
        pausing = asyncio.ensure_future(waker.pause(clock, 0.7, None))
        await settle()
        clock.advance(0.7)
        assert not await pausing  # nothing came: the whole pause
        pausing = asyncio.ensure_future(waker.pause(clock, 5.0, None))
        await settle()
        assert not pausing.done()
        assert server.publish(CHANNEL) == 1
        await settle()
        assert pausing.done() and pausing.result()  # woken at once
        assert clock.monotonic() == 1000.7
        waker.close()
        await background.done()
        assert len(server.made) == 1 and server.made[0].closed

    asyncio.run(main())


def test_the_aio_redis_waker_ends_its_pause_once_the_cancel_is_set():
    async def main() -> None:
        clock, server, background = FakeClock(), FakeServer(), Background()
        waker = _wake(server, background)
        assert await waker.pause(clock, 1.0, None)
        cancel = threading.Event()
        cancel.set()
        start = clock.monotonic()
        assert not await waker.pause(clock, 5.0, cancel)
        assert clock.monotonic() == start
        waker.close()
        await background.done()

    asyncio.run(main())


def test_a_broken_aio_subscription_sleeps_the_pause_out_and_is_made_again_later():
    async def main() -> None:
        clock, server, background = ManualClock(), FakeServer(), Background()
        waker = _wake(server, background)
        assert await waker.pause(clock, 1.0, None)
        pausing = asyncio.ensure_future(waker.pause(clock, 0.7, None))
        await settle()
        server.made[0].kill()
        await settle()
        assert not pausing.done()  # no wake now: the pause is slept out
        clock.advance(0.7)
        assert not await pausing
        await settle()
        assert server.made[0].closed
        pausing = asyncio.ensure_future(waker.pause(clock, 0.7, None))
        await settle()
        clock.advance(0.7)
        assert not await pausing  # not again yet: the pause is slept
        assert len(server.made) == 1
        clock.advance(wake_async.RETRY_AFTER)
        assert await waker.pause(clock, 1.0, None)  # RETRY_AFTER later: subscribed again
        assert len(server.made) == 2 and server.made[1].channels == {CHANNEL}
        waker.close()
        await background.done()

    asyncio.run(main())


def test_an_aio_subscription_that_cannot_be_made_sleeps_the_pause_out():
    async def main() -> None:
        clock, server, background = FakeClock(), FakeServer(), Background()
        server.refuse = True
        waker = _wake(server, background)
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)
        assert clock.monotonic() - start == pytest.approx(0.7)
        waker.close()
        await background.done()
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())


class WakingStore(AsyncMemoryStore):
    """The in-memory store whose waiters pause in an ``AsyncWake`` on a fake subscription."""

    def __init__(self, memory: MemoryStore) -> None:
        super().__init__(memory)
        self.server = FakeServer()
        self.background = Background()
        self.hub: Hub | None = None

    def waker(self, lock_id: str) -> AsyncWaker:
        if self.hub is None:
            self.hub = Hub(self.server, "test", self.background)
        hub = self.hub
        return wake_async.AsyncWake(lambda: hub, f"p:{{{lock_id}}}:wake", "test")


@pytest.mark.parametrize("hold", [True, False], ids=["subscribing", "listening"])
def test_a_waiter_cancelled_in_its_pause_leaves_no_subscription_and_no_task(hold):
    async def main() -> None:
        clock = FakeClock()
        memory = MemoryStore(clock=clock)
        LockTable(store=memory).acquire("job", lease=60, wait=0)
        store = WakingStore(memory)
        store.server.hold = hold  # the confirmation never comes: cancelled while subscribing
        table = aio.LockTable(store=store, owner="waiter")
        waiting = asyncio.ensure_future(table.acquire("job", lease=60, wait=30))
        for _ in range(1000):  # bounded: until it waits on the subscription
            if store.server.made and store.server.made[0].reading:
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("the waiter never paused in its waker")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.background.done()
        assert [pubsub.closed for pubsub in store.server.made] == [True]
        assert not store.server.made[0].closed_under_a_read
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert memory.read("job").lock is not None and memory.read("job").lock.owner != "waiter"

    asyncio.run(main())


def _redis_store(clock: FakeClock, server: FakeServer) -> AsyncRedisStore:
    store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", clock=clock))
    store._subscriber = server  # type: ignore[method-assign]
    return store


def test_closing_the_aio_redis_table_closes_its_shared_subscription_and_reader():
    async def main() -> None:
        clock, server = FakeClock(), FakeServer()
        store = _redis_store(clock, server)
        waker, other = store.waker("job"), store.waker("other")
        assert isinstance(waker, wake_async.AsyncWake)
        assert waker.channel == "awsflock:{job}:wake"
        assert await waker.pause(clock, 1.0, None)
        assert await other.pause(clock, 1.0, None)
        assert len(server.made) == 1 and server.made[0].reading
        await store.close_async()  # nothing else was connected
        assert server.made[0].closed and not server.made[0].closed_under_a_read
        assert asyncio.all_tasks() == {asyncio.current_task()}  # no reader left
        start = clock.monotonic()
        assert not await waker.pause(clock, 0.7, None)  # closed: it only sleeps now
        assert clock.monotonic() - start == pytest.approx(0.7) and len(server.made) == 1

    asyncio.run(main())


def test_an_aio_redis_store_in_the_callers_time_sleeps_its_pauses():
    store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", server_time=False))
    assert isinstance(store.waker("job"), AsyncSleeper)


def test_a_wait_that_ends_busy_closes_its_subscription():
    async def main() -> None:
        clock = FakeClock()
        memory = MemoryStore(clock=clock)
        LockTable(store=memory).acquire("job", lease=60, wait=0)
        store = WakingStore(memory)
        table = aio.LockTable(store=store, owner="waiter")
        with pytest.raises(errors.LockBusy):
            await table.acquire("job", lease=60, wait=3)
        await store.background.done()
        assert [pubsub.closed for pubsub in store.server.made] == [True]
        assert asyncio.all_tasks() == {asyncio.current_task()}

    asyncio.run(main())
