"""On a real redis-server through the fault proxy: a try that waits for a busy connection of
the event loop is bounded by its own budget, also when the line it picks was just given back
to a waiter that has not run yet (asyncio.Lock then queues the try behind that waiter, whose
try may take far longer). ~5 s. Found by the h20 review: a try with 0.3 s left waited 3 s,
the whole wire time of the woken waiter's try."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import awsflock
from awsflock import aio
from tests.redisproxy import RedisFaultProxy
from tests.servers import RedisServer

pytestmark = pytest.mark.integration


def test_a_try_behind_a_woken_waiter_gives_up_by_its_own_budget() -> None:
    server = RedisServer().start()
    try:
        awsflock.connect(server.url, owner="setup").create()

        def plan(target: str, n: int) -> str:
            # The eight first reads hold every line 1 s; every later one lands after 3 s.
            if target != "read":
                return "pass"
            return "late:1.0" if n <= 8 else "late:3.0"

        with RedisFaultProxy(("127.0.0.1", server.port), plan) as proxy:
            table = aio.connect(proxy.url_for(server.url), owner="t")
            store = table.store
            took: list[float] = []

            async def holder() -> None:
                loop = asyncio.get_running_loop()
                await store.read("job")
                start = loop.time()
                # Sent at once after its line is given back, with 0.3 s left.
                failed = contextlib.suppress(awsflock.errors.AwsflockError)
                with store.budget(start + 0.3), failed:
                    await store.read("job")
                took.append(loop.time() - start)

            async def waiter() -> None:
                # Waits for a line while all eight are busy: woken when its line is released.
                await asyncio.sleep(0.3)
                loop = asyncio.get_running_loop()
                with store.budget(loop.time() + 10):
                    await store.read("job")

            async def main() -> None:
                await asyncio.gather(*(holder() for _ in range(8)), waiter())
                await table.aclose()

            asyncio.run(main())
        # 0.3 s of budget, 0.5 s of grace on the wire, some slack for a loaded machine.
        assert max(took) < 1.8, f"tries with 0.3 s left took {sorted(round(t, 2) for t in took)}"
    finally:
        server.stop()
