"""The pub/sub connection an event loop's Redis waiters share (``stores.redis.wake_hub``), on a
fake subscription (tests/fake_pubsub.py) and a clock the test moves: one connection and one
SUBSCRIBE per channel for many waiters, a message wakes the waiters of its channel only, and
the races of a channel's commands: a message before the confirmation, a waiter that leaves
while its SUBSCRIBE is on the wire, a channel subscribed again while its UNSUBSCRIBE is, a
connection killed under many waiters, a second event loop."""

from __future__ import annotations

import asyncio
import gc
import threading

from awsflock.clock import FakeClock
from awsflock.stores.redis import RedisStore
from awsflock.stores.redis.aio import AsyncRedisStore
from awsflock.stores.redis.wake_async import RETRY_AFTER, SUBSCRIBE_TIMEOUT, AsyncWake
from awsflock.stores.redis.wake_hub import KEEPALIVE, READ_SLICE, Hub
from tests.fake_pubsub import Background, FakeServer, ManualClock, settle


class Loop:
    """A loop's hub on a fake server, and its waiters."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.server = FakeServer(self.clock)
        self.background = Background()
        self.hub = Hub(self.server, "Redis at test", self.background)

    def waiter(self, lock: str) -> AsyncWake:
        return AsyncWake(lambda: self.hub, f"p:{{{lock}}}:wake", "Redis at test")

    def pausing(self, waker: AsyncWake, seconds: float = 5.0) -> asyncio.Future[bool]:
        return asyncio.ensure_future(waker.pause(self.clock, seconds, None))

    async def joined(self, waker: AsyncWake) -> None:
        """``waker``'s first pause: it ends at once, the subscription confirmed."""
        assert await waker.pause(self.clock, 1.0, None)

    async def done(self) -> None:
        await self.background.done()
        assert asyncio.all_tasks() == {asyncio.current_task()}


def test_many_waiters_share_one_connection_and_a_message_wakes_its_channels_only():
    async def main() -> None:
        at = Loop()
        waiters = {lock: [at.waiter(lock) for _ in range(10)] for lock in "abcde"}
        for group in waiters.values():
            for waker in group:
                await at.joined(waker)
        (pubsub,) = at.server.made
        assert sorted(command[1:] for command in pubsub.sent) == [
            (f"p:{{{lock}}}:wake",) for lock in "abcde"
        ]
        pauses = {lock: [at.pausing(waker) for waker in group] for lock, group in waiters.items()}
        await settle()
        assert at.server.publish("p:{c}:wake") == 1
        await settle()
        assert all(pause.done() and pause.result() for pause in pauses["c"])
        assert not any(pause.done() for lock in "abde" for pause in pauses[lock])
        for lock in "abde":  # the rest of the pauses is over: each says nothing came
            for waker in waiters[lock][:-1]:
                waker.close()
        await settle()
        assert not any(pause.done() for lock in "abde" for pause in pauses[lock][-1:])
        assert ("UNSUBSCRIBE",) not in pubsub.sent and not pubsub.closed
        for group in waiters.values():
            for waker in group:
                waker.close()
        at.clock.advance(5.0)
        await asyncio.gather(*(pause for group in pauses.values() for pause in group))
        await at.done()
        assert pubsub.closed and not pubsub.closed_under_a_read  # the last one left
        assert len(at.server.made) == 1

    asyncio.run(main())


def test_an_end_just_before_the_confirmation_is_not_missed():
    async def main() -> None:
        at = Loop()
        at.server.hold = True
        waker = at.waiter("job")
        pausing = at.pausing(waker)
        await settle()
        (pubsub,) = at.server.made
        assert pubsub.sent == [("SUBSCRIBE", "p:{job}:wake")]
        assert at.server.publish("p:{job}:wake") == 0  # the lock's end, not heard
        await settle()
        assert not pausing.done()  # not subscribed yet: nothing to rely on
        pubsub.flow()
        await settle()
        assert pausing.done() and pausing.result()  # confirmed: poll now, at once
        assert at.clock.monotonic() == 1000.0
        late = at.waiter("job")  # a later waiter of a confirmed channel polls once too
        assert await late.pause(at.clock, 5.0, None) and len(pubsub.sent) == 1
        waker.close()
        late.close()
        await at.done()

    asyncio.run(main())


def test_a_waiter_that_leaves_while_its_subscribe_is_on_the_wire_leaves_it_unsubscribed():
    async def main() -> None:
        at = Loop()
        staying = at.waiter("other")
        await at.joined(staying)
        (pubsub,) = at.server.made
        pubsub.hold = True
        leaving = at.waiter("job")
        pausing = at.pausing(leaving, 1.0)
        await settle()
        leaving.close()
        await settle()
        assert pubsub.wire == [("SUBSCRIBE", "p:{job}:wake"), ("UNSUBSCRIBE", "p:{job}:wake")]
        pubsub.flow()
        at.clock.advance(1.0)
        assert not await pausing
        assert pubsub.channels == {"p:{other}:wake"}
        still = at.pausing(staying)
        await settle()
        assert at.server.publish("p:{other}:wake") == 1
        assert await still  # the other waiter keeps its wake
        staying.close()
        await at.done()

    asyncio.run(main())


def test_a_channel_subscribed_again_while_its_unsubscribe_is_on_the_wire():
    # The last waiter leaves (UNSUBSCRIBE sent), a new one comes at once (SUBSCRIBE sent): the
    # server answers in order, so the new waiter relies on the channel only once the second
    # confirmation comes; a message that the old subscription still brings meanwhile is only
    # a hint (a poll), and the channel stays subscribed.
    async def main() -> None:
        at = Loop()
        keeping = at.waiter("other")
        await at.joined(keeping)
        first = at.waiter("job")
        await at.joined(first)
        (pubsub,) = at.server.made
        pubsub.hold = True
        first.close()
        second = at.waiter("job")
        pausing = at.pausing(second)
        await settle()
        assert pubsub.wire == [("UNSUBSCRIBE", "p:{job}:wake"), ("SUBSCRIBE", "p:{job}:wake")]
        assert not pausing.done()  # not confirmed by the old subscription's confirmation
        assert at.server.publish("p:{job}:wake") == 1  # still subscribed at the server
        assert await pausing  # a hint: poll
        pausing = at.pausing(second)
        await settle()
        assert not pausing.done()  # still not confirmed
        pubsub.flow()
        await settle()
        assert pausing.done() and pausing.result()  # confirmed: poll once more
        assert pubsub.channels == {"p:{other}:wake", "p:{job}:wake"}
        pausing = at.pausing(second)
        await settle()
        assert at.server.publish("p:{job}:wake") == 1
        assert await pausing
        assert at.clock.monotonic() == 1000.0
        second.close()
        keeping.close()
        await at.done()

    asyncio.run(main())


def test_a_waiter_relies_on_the_confirmation_of_its_own_subscribe_not_an_earlier_one():
    # SUBSCRIBE, UNSUBSCRIBE, SUBSCRIBE of one channel on the wire: the first confirmation
    # comes before the channel is unsubscribed again; only the last one is the new waiter's.
    async def main() -> None:
        at = Loop()
        keeping = at.waiter("other")
        await at.joined(keeping)
        (pubsub,) = at.server.made
        pubsub.hold = True
        first = at.waiter("job")
        gone = at.pausing(first, 1.0)
        await settle()
        first.close()
        second = at.waiter("job")
        pausing = at.pausing(second)
        await settle()
        assert [verb for verb, _ in pubsub.wire] == ["SUBSCRIBE", "UNSUBSCRIBE", "SUBSCRIBE"]
        pubsub.flow(1)
        await settle()
        assert not pausing.done()  # the first waiter's confirmation: it is gone
        pubsub.flow(1)
        await settle()
        assert not pausing.done() and "p:{job}:wake" not in pubsub.channels
        pubsub.flow(1)
        await settle()
        assert pausing.done() and pausing.result() and "p:{job}:wake" in pubsub.channels
        at.clock.advance(1.0)
        assert not await gone
        second.close()
        keeping.close()
        await at.done()

    asyncio.run(main())


def test_a_killed_connection_costs_every_waiter_its_wake_until_one_is_made_again():
    async def main() -> None:
        at = Loop()
        waiters = [at.waiter(lock) for lock in "aabbc"]
        for waker in waiters:
            await at.joined(waker)
        pauses = [at.pausing(waker, 0.5) for waker in waiters]
        await settle()
        at.server.made[0].kill()
        await settle()
        assert not any(pause.done() for pause in pauses)  # each sleeps its pause out
        at.clock.advance(0.5)
        assert not any(await asyncio.gather(*pauses))
        assert at.server.made[0].closed and len(at.server.made) == 1
        at.clock.advance(RETRY_AFTER)
        for waker in waiters:
            await at.joined(waker)  # one new connection, each channel subscribed once
        assert len(at.server.made) == 2 and len(at.server.made[1].sent) == 3
        for waker in waiters:
            waker.close()
        await at.done()

    asyncio.run(main())


def test_the_connection_is_closed_even_when_redis_py_loses_the_cancellation_of_a_send():
    async def main() -> None:
        at = Loop()
        leaving, last = at.waiter("job"), at.waiter("other")
        await at.joined(leaving)
        await at.joined(last)
        (pubsub,) = at.server.made
        pubsub.gate = asyncio.Event()
        leaving.close()  # its UNSUBSCRIBE is being sent
        await settle()
        assert pubsub.sent[-1] == ("UNSUBSCRIBE", "p:{job}:wake")
        last.close()  # the connection is closed under that send
        for _ in range(1000):
            await asyncio.sleep(0)
            if pubsub.closed:
                break
        assert pubsub.closed and not pubsub.closed_under_a_read
        await at.done()

    asyncio.run(main())


def test_a_connection_that_stops_answering_is_given_up_and_made_again_later():
    # A host or network gone without a reset: nothing comes, not even an error. After
    # KEEPALIVE of silence the connection is PINGed; no answer in SUBSCRIBE_TIMEOUT and it is
    # given up: its waiters poll, and RETRY_AFTER later a new one is made.
    async def main() -> None:
        at = Loop()
        waker = at.waiter("job")
        await at.joined(waker)
        (pubsub,) = at.server.made
        pubsub.mute = True
        pubsub.go_silent(at.clock.monotonic() + 10 * KEEPALIVE)
        for _ in range(10_000):  # bounded: the fake's silent reads move its clock
            await asyncio.sleep(0)
            if pubsub.closed:
                break
        assert pubsub.sent[-1] == ("PING",) and pubsub.closed
        assert at.clock.monotonic() - 1000.0 <= KEEPALIVE + SUBSCRIBE_TIMEOUT + 2 * READ_SLICE
        pausing = at.pausing(waker, 0.5)
        await settle()
        at.clock.advance(0.5)
        assert not await pausing  # no wake: the pause is slept out
        at.clock.advance(RETRY_AFTER)
        await at.joined(waker)
        assert len(at.server.made) == 2
        waker.close()
        await at.done()

    asyncio.run(main())


def test_a_connection_that_answers_its_pings_is_kept():
    async def main() -> None:
        at = Loop()
        waker = at.waiter("job")
        await at.joined(waker)
        (pubsub,) = at.server.made
        pubsub.go_silent(at.clock.monotonic() + 3 * KEEPALIVE + 1)
        for _ in range(10_000):  # bounded: until the silent reads end
            await asyncio.sleep(0)
            if at.clock.monotonic() >= 1000.0 + 3 * KEEPALIVE + 1:
                break
        await settle()
        assert pubsub.sent.count(("PING",)) >= 2 and not pubsub.closed
        pausing = at.pausing(waker)
        await settle()
        assert at.server.publish("p:{job}:wake") == 1
        assert await pausing
        waker.close()
        await at.done()

    asyncio.run(main())


def test_an_event_loop_in_another_thread_gets_a_connection_of_its_own():
    store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", clock=FakeClock()))
    server = FakeServer()
    store._subscriber = server  # type: ignore[method-assign]
    both = threading.Barrier(2, timeout=30)

    def loop() -> None:
        async def main() -> None:
            waker = store.waker("job")
            assert await waker.pause(store.clock, 1.0, None)
            await asyncio.to_thread(both.wait)  # both loops wait at once
            waker.close()
            await store.close_async()

        asyncio.run(main())

    other = threading.Thread(target=loop)
    other.start()
    loop()
    other.join(30)
    assert len(server.made) == 2 and all(pubsub.closed for pubsub in server.made)


def test_an_event_loop_that_ended_leaves_no_connection_state_behind():
    store = AsyncRedisStore(RedisStore("redis://127.0.0.1:1/0", clock=FakeClock()))
    store._subscriber = FakeServer()  # type: ignore[method-assign]

    async def main() -> None:
        waker = store.waker("job")
        assert await waker.pause(store.clock, 1.0, None)
        waker.close()
        await store.close_async()

    asyncio.run(main())
    store._subscriber.made.clear()  # type: ignore[attr-defined]  # what the fake keeps
    gc.collect()
    assert len(store._hubs) == 0
