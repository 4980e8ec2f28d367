"""On a real redis-server through the fault proxy: ``aclose()`` leaves no connection open that
a later ``aclose()`` cannot reach. A line whose try just failed (its connection closed, the
line given back) but whose waiter has not run yet looked unused, so ``close_async`` skipped
it; the waiter then made a connection on a line no longer in the loop's set, open for good.
~2 s. Found by the h20 review."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

import awsflock
from awsflock import aio
from tests.redisproxy import RedisFaultProxy
from tests.servers import RedisServer

pytestmark = pytest.mark.integration


def test_aclose_as_a_waiter_is_about_to_use_a_line_leaves_nothing_open() -> None:
    server = RedisServer().start()
    try:
        awsflock.connect(server.url, owner="setup").create()

        def plan(target: str, n: int) -> str:
            # The eight first reads are never answered (each try is cut off at its deadline).
            return "blackhole" if target == "read" and n <= 8 else "pass"

        with RedisFaultProxy(("127.0.0.1", server.port), plan) as proxy:
            table = aio.connect(proxy.url_for(server.url), owner="t")
            store = table.store
            lines: list[object] = []

            async def holder(closer: bool) -> None:
                loop = asyncio.get_running_loop()
                with (
                    store.budget(loop.time() + 0.3),
                    contextlib.suppress(awsflock.errors.AwsflockError),
                ):
                    await store.read("job")
                if closer:  # its line's waiter has been woken, and not run yet
                    await table.aclose()

            async def waiter() -> None:
                await asyncio.sleep(0.2)  # every line is busy: it waits for the second one
                loop = asyncio.get_running_loop()
                with store.budget(loop.time() + 5):
                    await store.read("job")

            async def main() -> None:
                tasks = [asyncio.create_task(holder(i == 1)) for i in range(8)]
                await asyncio.sleep(0)
                lines.extend(store._lines[asyncio.get_running_loop()].lines)
                await asyncio.gather(*tasks, waiter())
                await table.aclose()  # again, once every try has ended
                still = [line for line in lines if line.conn is not None]  # type: ignore[attr-defined]
                for line in still:  # closed here, so that the run leaves nothing behind
                    await store._drop(line)  # type: ignore[arg-type]
                assert not still, f"{len(still)} connection(s) open after aclose()"

            asyncio.run(main())
    finally:
        server.stop()
