"""A long-lived ``aio.LockTable`` used from one ``asyncio.run`` after another
(a sync program calling into async code) keeps every closed event loop alive: the renewer's
per-loop entry (a WeakKeyDictionary value) holds its scheduling task, which holds the loop,
its key. In-memory store, fake clock."""

from __future__ import annotations

import asyncio
import gc

from awsflock import aio
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


def test_event_loops_that_held_locks_are_not_kept_alive_by_the_table() -> None:
    table = aio.LockTable(store=AsyncMemoryStore(MemoryStore("t", clock=FakeClock())))

    async def once() -> None:
        async with table.lock("x", lease=60):
            await asyncio.sleep(0)

    for _ in range(20):
        asyncio.run(once())
    gc.collect()
    loops = [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop)]
    assert len(loops) <= 1, f"{len(loops)} closed event loops kept alive by the table"
