"""The asyncio waiters of one event loop share one pub/sub connection on a real redis-server
(``stores.redis.wake_hub``): 50 tasks waiting on 5 locks open one, each channel subscribed
once, and each task is still granted within moments of its turn's release (polls are 30 s
apart: only the message can do that); once the waits end no pub/sub client and no channel is
left. A killed connection lets every waiter take its lock by polling; a waiter cancelled in its
pause leaves nothing behind while the others keep their wake."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from awsflock import aio
from awsflock.lock import telling
from awsflock.stores.redis import layout
from awsflock.stores.redis.aio import AsyncRedisStore
from tests.integration.test_redis_wake import _keep_killing_subscriptions
from tests.integration.test_redis_wake_aio import _pubsub_clients, _subscribed
from tests.servers import RedisServer

pytestmark = pytest.mark.integration

#: A release to the next waiter's grant, many waiters on a busy machine: far below the 30 s
#: between polls (the wake did it), not a measure of speed.
PROMPTLY = 5.0


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telling, "POLL_INTERVAL", 30.0)


def _locks(count: int) -> list[str]:
    return ["shared-" + uuid.uuid4().hex[:8] for _ in range(count)]


def _channels(srv: RedisServer) -> list[bytes]:
    client = srv.client()
    try:
        return list(client.pubsub_channels(layout.wake_channel("awsflock", "shared-*")))
    finally:
        client.close()


async def _until_waiting(
    srv: RedisServer, table: aio.LockTable, count: int, locks: list[str]
) -> None:
    """Until ``count`` waiters of this loop pause, and each of ``locks`` is subscribed
    (bounded)."""
    store = table.store
    assert isinstance(store, AsyncRedisStore)
    deadline = time.monotonic() + 30
    while True:
        waiting = sum(not wake.closed for wake in list(store._wakes))
        if waiting == count and all(await asyncio.to_thread(_all_subscribed, srv, locks)):
            return
        assert time.monotonic() < deadline, f"not {count} waiters"
        await asyncio.sleep(0.01)


def _all_subscribed(srv: RedisServer, locks: list[str]) -> list[bool]:
    return [_subscribed(srv, name) > 0 for name in locks]


async def _until_no_pubsub(srv: RedisServer) -> None:
    deadline = time.monotonic() + 10
    while await asyncio.to_thread(_pubsub_clients, srv):
        assert time.monotonic() < deadline, "a pub/sub client was left"
        await asyncio.sleep(0.01)


class Turns:
    """Tasks waiting on locks, each holding briefly once granted: each grant's delay after
    the release before it (``handoffs``), the most pub/sub clients seen (``most``)."""

    def __init__(self, srv: RedisServer, table: aio.LockTable, held: dict[str, Any]) -> None:
        self.srv, self.table, self.held = srv, table, held
        self.released: dict[str, float] = {}
        self.handoffs: list[float] = []
        self.most = 0

    async def release_all(self) -> None:
        for name, lease in self.held.items():
            self.released[name] = time.monotonic()
            await lease.release()

    async def wait(self, name: str) -> None:
        lease = await self.table.acquire(name, lease=60, wait=60)
        self.handoffs.append(time.monotonic() - self.released[name])
        self.most = max(self.most, await asyncio.to_thread(_pubsub_clients, self.srv))
        self.released[name] = time.monotonic()
        await lease.release()


def test_fifty_aio_waiters_on_five_locks_share_one_subscription_and_are_woken(
    redis_server, slow_polls
):
    async def main() -> None:
        holder = aio.connect(redis_server.url, owner="holder")
        table = aio.connect(redis_server.url, owner="waiters")
        locks = _locks(5)
        turns = Turns(redis_server, table, {n: await holder.acquire(n, wait=0) for n in locks})
        tasks = [asyncio.ensure_future(turns.wait(locks[i % 5])) for i in range(50)]
        try:
            await _until_waiting(redis_server, table, 50, locks)
            assert _pubsub_clients(redis_server) == 1
            assert [_subscribed(redis_server, name) for name in locks] == [1] * 5
            await turns.release_all()
            await asyncio.wait_for(asyncio.gather(*tasks), 120)
        finally:
            for task in tasks:
                task.cancel()
            await table.aclose()
            await holder.aclose()
        assert len(turns.handoffs) == 50 and max(turns.handoffs) < PROMPTLY, turns.handoffs
        assert turns.most <= 1
        assert _pubsub_clients(redis_server) == 0 and _channels(redis_server) == []

    asyncio.run(main())


def test_the_last_waiter_leaving_closes_the_shared_subscription(redis_server, slow_polls):
    async def main() -> None:
        holder = aio.connect(redis_server.url, owner="holder")
        table = aio.connect(redis_server.url, owner="waiters")
        try:
            locks = _locks(2)
            turns = Turns(redis_server, table, {n: await holder.acquire(n, wait=0) for n in locks})
            tasks = [asyncio.ensure_future(turns.wait(locks[i % 2])) for i in range(4)]
            await _until_waiting(redis_server, table, 4, locks)
            assert _pubsub_clients(redis_server) == 1
            await turns.release_all()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            # The table stays open: the connection went with its last waiter.
            await _until_no_pubsub(redis_server)
            assert _channels(redis_server) == []
        finally:
            await table.aclose()
            await holder.aclose()

    asyncio.run(main())


def test_a_killed_shared_subscription_still_lets_every_waiter_take_its_lock_by_polling(
    redis_server,
):
    async def main() -> None:
        holder = aio.connect(redis_server.url, owner="holder")
        table = aio.connect(redis_server.url, owner="waiters")
        locks = _locks(2)
        turns = Turns(redis_server, table, {n: await holder.acquire(n, wait=0) for n in locks})
        tasks = [asyncio.ensure_future(turns.wait(locks[i % 2])) for i in range(10)]
        stop = threading.Event()
        killer = threading.Thread(target=_keep_killing_subscriptions, args=(redis_server, stop))
        try:
            await _until_waiting(redis_server, table, 10, locks)
            assert _pubsub_clients(redis_server) == 1
            # redis-py's pub/sub connects and subscribes again by itself: the killer keeps the
            # subscription down until every waiter is granted.
            killer.start()
            deadline = time.monotonic() + 10
            while any(_subscribed(redis_server, name) for name in locks):
                assert time.monotonic() < deadline, "the subscription stayed up"
                await asyncio.sleep(0.001)
            await turns.release_all()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
        finally:
            stop.set()
            if killer.is_alive():
                await asyncio.to_thread(killer.join, 10)
            for task in tasks:
                task.cancel()
            await table.aclose()
            await holder.aclose()
        # The messages went nowhere: the usual poll, about a second, found each lock free.
        assert len(turns.handoffs) == 10 and max(turns.handoffs) < 1.25 + 1.0, turns.handoffs
        await _until_no_pubsub(redis_server)

    asyncio.run(main())


def test_a_waiter_cancelled_in_its_pause_leaves_nothing_while_the_others_keep_their_wake(
    redis_server, slow_polls
):
    async def main() -> None:
        holder = aio.connect(redis_server.url, owner="holder")
        table = aio.connect(redis_server.url, owner="waiters")
        alone, shared = _locks(2)
        held = {name: await holder.acquire(name, wait=0) for name in (alone, shared)}
        turns = Turns(redis_server, table, {shared: held[shared]})
        cancelled = asyncio.ensure_future(turns.wait(alone))
        tasks = [asyncio.ensure_future(turns.wait(shared)) for _ in range(5)]
        try:
            await _until_waiting(redis_server, table, 6, [alone, shared])
            assert _pubsub_clients(redis_server) == 1
            cancelled.cancel()
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            deadline = time.monotonic() + 10
            while _subscribed(redis_server, alone):  # its UNSUBSCRIBE, in a moment
                assert time.monotonic() < deadline, "the cancelled waiter's channel stayed"
                await asyncio.sleep(0.01)
            assert _pubsub_clients(redis_server) == 1 and _subscribed(redis_server, shared) == 1
            await turns.release_all()
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            assert len(turns.handoffs) == 5 and max(turns.handoffs) < PROMPTLY, turns.handoffs
            await _until_no_pubsub(redis_server)
            assert _channels(redis_server) == []
            assert (await table.state(alone)).lease_id == held[alone].lease_id
            assert asyncio.all_tasks() == {asyncio.current_task()}
        finally:
            for task in tasks:
                task.cancel()
            await held[alone].release()
            await table.aclose()
            await holder.aclose()

    asyncio.run(main())


def test_a_waiter_giving_up_as_its_loop_ends_leaves_no_subscription(redis_server):
    # asyncio.run(main) over and over, main's wait ending busy: the shared connection's close
    # runs in a task that asyncio.run cancels with the others as main returns. Found by an
    # adversarial review: the connection stayed open and subscribed until a garbage collection
    # (kept off here). In a process of its own: each loop's step connection, never closed
    # (no aclose), goes with the process.
    import awsflock

    name = "shared-" + uuid.uuid4().hex[:8]
    held = awsflock.connect(redis_server.url, owner="holder").acquire(name, lease=60, wait=0)
    code = f"""
import asyncio, gc
import awsflock, redis
from awsflock import aio
gc.disable()
table = aio.connect({redis_server.url!r}, owner="waiter")
admin = redis.Redis.from_url({redis_server.url!r})
async def try_once():
    try:
        async with table.lock({name!r}, lease=10, wait=0.3):
            return "granted"
    except awsflock.LockBusy:
        return "busy"
for _ in range(3):
    print(asyncio.run(try_once()), len(admin.client_list(_type="pubsub")))
"""
    try:
        ran = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        held.release()
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["busy", "0"] * 3, "a subscription outlived its loop"
