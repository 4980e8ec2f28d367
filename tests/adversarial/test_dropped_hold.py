"""A hold dropped without stop stops being renewed (promise 6). The existing
test drops a hold before its first renewal; here it is dropped after one, so it has been in the
scheduler's ``ready`` list, which is still bound while the scheduler waits and while it calls
``due()`` again. Fake clock; bounded real-time polls."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import awsflock
from awsflock import aio
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


class Counting(MemoryStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.renews = 0

    def renew(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        self.renews += 1
        return super().renew(lock_id, lease_id, **step)


def _until(condition: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not condition() and time.monotonic() < end:
        time.sleep(0.005)


def test_a_sync_hold_dropped_after_a_renewal_is_no_longer_renewed() -> None:
    clock = FakeClock()
    store = Counting("t", clock=clock)
    table = awsflock.LockTable(store=store)
    held = table.hold("drop", lease=60)
    held.start()
    clock.advance(20)
    _until(lambda h=held: h.renewals >= 1)
    assert held.renewals == 1
    del held
    gc.collect()
    time.sleep(0.05)
    before = store.renews
    for _ in range(6):  # six more intervals: a kept hold would be renewed six times
        clock.advance(20)
        time.sleep(0.05)
    gc.collect()
    assert store.renews - before <= 1, f"dropped hold renewed {store.renews - before} more times"
    assert store.read("drop").lock.expires_at <= clock.time() + 60
    # This table's renewer lets its threads go (other tests' renewers may still run theirs).
    _until(lambda: table.renewer().threads == 0)
    assert table.renewer().threads == 0


def test_an_aio_hold_dropped_after_a_renewal_is_no_longer_renewed() -> None:
    clock = FakeClock()
    store = Counting("t", clock=clock)
    seen: dict[str, int] = {}

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(store))
        held = table.lock("drop", lease=60)
        await held.start()  # no ``async with``: started, then dropped
        clock.advance(20)
        for _ in range(500):
            if held.renewals >= 1:
                break
            await asyncio.sleep(0.005)
        assert held.renewals == 1
        del held
        gc.collect()
        await asyncio.sleep(0.05)
        before = store.renews
        for _ in range(6):
            clock.advance(20)
            await asyncio.sleep(0.05)
        seen["more"] = store.renews - before

    asyncio.run(main())
    assert seen["more"] <= 1, f"dropped hold renewed {seen['more']} more times"
