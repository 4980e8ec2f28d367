"""Hand-off to an ``awsflock.aio`` waiter on a real redis-server: woken by the step script's
message on the lock's channel, it takes the lock within moments of a release by a synchronous
or an asyncio holder (and an asyncio release wakes a synchronous waiter). The scheduled poll is
stretched to 30 s, so a grant within the bound can only come from a wake. A killed subscription
falls back to the usual poll; a waiter cancelled in its pause, or a table closed under a
waiter, leaves no subscription and no task behind."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import awsflock
from awsflock import aio
from awsflock.lock import telling
from awsflock.lock.lease import LockTable
from awsflock.stores.redis import layout
from tests.integration.test_redis_wake import WITHIN, _keep_killing_subscriptions
from tests.servers import RedisServer

pytestmark = pytest.mark.integration


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls 30 s apart: a grant within ``WITHIN`` of a release came from a wake."""
    monkeypatch.setattr(telling, "POLL_INTERVAL", 30.0)


@pytest.fixture
def sync_table(redis_server: RedisServer) -> Iterator[LockTable]:
    table = awsflock.connect(redis_server.url)
    yield table
    table.store.close()


def _name() -> str:
    return "wake-aio-" + uuid.uuid4().hex[:8]


def _subscribed(srv: RedisServer, name: str) -> int:
    channel = layout.wake_channel("awsflock", name).encode()
    client = srv.client()
    try:
        return int(dict(client.pubsub_numsub(channel)).get(channel, 0))
    finally:
        client.close()


def _pubsub_clients(srv: RedisServer) -> int:
    client = srv.client()
    try:
        return len(client.client_list(_type="pubsub"))
    finally:
        client.close()


async def _until_subscribed(srv: RedisServer, name: str, count: int = 1) -> None:
    """Until ``count`` clients listen on the lock's channel (bounded)."""
    deadline = time.monotonic() + 20
    while await asyncio.to_thread(_subscribed, srv, name) != count:
        assert time.monotonic() < deadline, f"not {count} subscribed"
        await asyncio.sleep(0.01)


class Waiting:
    """An aio acquire waiting in a task; ``granted``: when it returned (monotonic)."""

    def __init__(self, table: aio.LockTable, name: str, **options: Any) -> None:
        self.granted = 0.0
        self.task = asyncio.ensure_future(self._run(table, name, options))

    async def _run(self, table: aio.LockTable, name: str, options: dict[str, Any]) -> Any:
        lease = await table.acquire(name, lease=60, wait=30, **options)
        self.granted = time.monotonic()
        return lease


@pytest.mark.parametrize("holder", ["sync", "aio"])
@pytest.mark.parametrize("fair", [False, True])
def test_an_aio_waiter_takes_the_lock_within_moments_of_the_release(
    redis_server, sync_table, slow_polls, holder, fair
):
    async def main() -> None:
        waiter = aio.connect(redis_server.url, owner="waiter")
        holding = aio.connect(redis_server.url, owner="holder")
        try:
            for _ in range(3):
                name = _name()
                if holder == "sync":
                    held: Any = await asyncio.to_thread(sync_table.acquire, name, wait=0)
                else:
                    held = await holding.acquire(name, lease=60, wait=0)
                waiting = Waiting(waiter, name, fair=fair)
                await _until_subscribed(redis_server, name)
                if holder == "sync":
                    await asyncio.to_thread(held.release)
                else:
                    await held.release()
                released = time.monotonic()
                lease = await asyncio.wait_for(waiting.task, 40)
                assert waiting.granted - released < WITHIN
                assert lease.fencing_token > held.fencing_token
                await lease.release()
        finally:
            await waiter.aclose()
            await holding.aclose()

    asyncio.run(main())


def test_an_aio_release_wakes_a_synchronous_waiter(redis_server, sync_table, slow_polls):
    name = _name()
    got: list[Any] = []

    def wait() -> None:
        got.append(sync_table.acquire(name, lease=60, wait=30))
        got.append(time.monotonic())

    async def main() -> float:
        holding = aio.connect(redis_server.url, owner="holder")
        try:
            held = await holding.acquire(name, lease=60, wait=0)
            waiter = threading.Thread(target=wait)
            waiter.start()
            await _until_subscribed(redis_server, name)
            await held.release()
            released = time.monotonic()
            await asyncio.to_thread(waiter.join, 40)
            return released
        finally:
            await holding.aclose()

    released = asyncio.run(main())
    lease, granted = got
    assert granted - released < WITHIN
    lease.release()


def test_a_killed_aio_subscription_still_lets_the_waiter_take_the_lock_by_polling(
    redis_server, sync_table
):
    async def main() -> None:
        name = _name()
        waiter = aio.connect(redis_server.url, owner="waiter")
        try:
            held = await asyncio.to_thread(sync_table.acquire, name, wait=0)
            waiting = Waiting(waiter, name)
            await _until_subscribed(redis_server, name)
            # redis-py's pub/sub connects again by itself and subscribes again: the killer
            # keeps the subscription down until the waiter is granted.
            stop = threading.Event()
            killer = threading.Thread(target=_keep_killing_subscriptions, args=(redis_server, stop))
            killer.start()
            try:
                await _until_subscribed(redis_server, name, 0)
                await asyncio.to_thread(held.release)
                released = time.monotonic()
                lease = await asyncio.wait_for(waiting.task, 40)
            finally:
                stop.set()
                await asyncio.to_thread(killer.join, 10)
            # The message went nowhere: the usual poll, about a second, found the lock free.
            assert waiting.granted - released < 1.25 + 0.5
            assert lease.fencing_token > held.fencing_token
            await lease.release()
        finally:
            await waiter.aclose()

    asyncio.run(main())


def test_an_aio_waiter_cancelled_in_its_pause_leaves_no_subscription_and_no_task(
    redis_server, sync_table
):
    async def main() -> None:
        name = _name()
        waiter = aio.connect(redis_server.url, owner="waiter")
        held = await asyncio.to_thread(sync_table.acquire, name, wait=0)
        waiting = Waiting(waiter, name)
        await _until_subscribed(redis_server, name)
        waiting.task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting.task
        # The close runs in a task of its own, at once: bounded, it ends by itself.
        for _ in range(500):
            if asyncio.all_tasks() == {asyncio.current_task()}:
                break
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        assert _subscribed(redis_server, name) == 0 and _pubsub_clients(redis_server) == 0
        assert (await waiter.state(name)).lease_id == held.lease_id
        await waiter.aclose()
        await asyncio.to_thread(held.release)

    asyncio.run(main())


def test_closing_the_aio_table_closes_a_waiters_subscription_and_the_wait_goes_on(
    redis_server, sync_table
):
    async def main() -> None:
        name = _name()
        waiter = aio.connect(redis_server.url, owner="waiter")
        try:
            held = await asyncio.to_thread(sync_table.acquire, name, wait=0)
            waiting = Waiting(waiter, name)
            await _until_subscribed(redis_server, name)
            await waiter.aclose()
            assert _subscribed(redis_server, name) == 0 and _pubsub_clients(redis_server) == 0
            await asyncio.to_thread(held.release)
            lease = await asyncio.wait_for(waiting.task, 40)  # by polling
            assert lease.fencing_token > held.fencing_token
            await lease.release()
        finally:
            await waiter.aclose()

    asyncio.run(main())
