"""On a real redis-server through the fault proxy: a fair join that lands late
(``late:0.6``) while its task is cancelled twice must not leave a place in the line (the
threaded store waits for the step on the wire whatever the cancellations). ~5 s; the server
runs under ``nice``. On ``redis.asyncio`` (stores/redis/aio.py) it failed until a step
cancelled on the wire was let land before the clean-up: closing the connection at once sent
the leave on a new one, ahead of the late join."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import awsflock
from awsflock import aio
from tests.redisproxy import RedisFaultProxy
from tests.servers import RedisServer

pytestmark = pytest.mark.integration


class NiceRedis(RedisServer):
    def command(self) -> list[str]:
        return ["nice", "-n", "19", *super().command()]


def test_a_late_fair_join_cancelled_twice_leaves_no_place_on_redis() -> None:
    server = NiceRedis().start()
    try:
        sync = awsflock.connect(server.url, owner="holder")
        sync.create()
        holder = sync.acquire("job", lease=600, wait=0)

        def plan(target: str, n: int) -> str:
            return "late:0.6" if target == "join" else "pass"

        with RedisFaultProxy(("127.0.0.1", server.port), plan) as proxy:
            table = aio.connect(proxy.url_for(server.url), owner="waiter")

            async def main() -> None:
                task = asyncio.create_task(table.acquire("job", wait=None, fair=True))
                await asyncio.sleep(0.15)  # the join is on its way (held by the proxy)
                task.cancel()
                await asyncio.sleep(0.05)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await asyncio.sleep(1.0)  # the late join has landed by now
                await table.aclose()

            asyncio.run(main())
        outcome = sync.store.read("job")
        holder.release()
        assert outcome.line.waiters == (), f"ghost place left: {outcome.line.waiters}"
    finally:
        server.stop()
