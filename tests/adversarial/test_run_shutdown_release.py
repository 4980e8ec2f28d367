"""On a real redis-server: a task that leaves its ``async with table.lock(...)`` as the program
ends (``asyncio.run``'s main returns) must not leave the lock held for its whole lease.
``asyncio.run`` cancels every task still running then, once: the clean-up that
``finishing.finish`` runs in a task of its own is among them when it has just started, and its
release was never sent. Found by the h20 review (the lock stayed held, lease 600 s)."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

import awsflock
from awsflock import aio
from tests.servers import RedisServer

pytestmark = pytest.mark.integration


def _program(url: str, turns: int) -> None:
    """A program whose main ends ``turns`` turns after a worker task left its lock block."""
    table = aio.connect(url, owner="worker")

    async def main() -> None:
        entered, done = asyncio.Event(), asyncio.Event()

        async def worker() -> None:
            async with table.lock("job", lease=600, wait=0):
                entered.set()
                await done.wait()

        asyncio.get_running_loop().create_task(worker())
        await entered.wait()
        done.set()  # the worker leaves its block now
        for _ in range(turns):
            await asyncio.sleep(0)

    asyncio.run(main())


@pytest.mark.parametrize("turns", [0, 1, 2])
def test_a_lock_block_ending_as_asyncio_run_ends_still_releases(turns: int) -> None:
    server = RedisServer().start()
    try:
        sync = awsflock.connect(server.url, owner="observer")
        sync.create()
        # The program never calls aclose() (it ends with a task in its block): its loop's
        # connections are left to the collector, its own doing, not what is tested here.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            _program(server.url, turns)
            gc.collect()
        left = sync.store.read("job").record
        assert left is None or left.ended, f"still held after asyncio.run: {left}"
    finally:
        server.stop()
