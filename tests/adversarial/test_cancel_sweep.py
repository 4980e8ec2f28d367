"""Cancel an ``await table.acquire()`` / ``async with table.lock()`` at every
event-loop step of its life (before a request is sent, after it landed but before its answer
is read, in the settle, in the line's clean-up), with the lock freed by its holder at several
moments: a cancelled task must hold nothing afterwards, neither a lease nor a place in the
line (promise 3). In-memory store whose steps yield before and after they land; fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import awsflock
from awsflock import aio
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


class Yielding(AsyncMemoryStore):
    """Each step yields to the loop before it is sent and after it landed (its answer on the
    way back): a cancellation can fall on either side."""

    async def _around(self, name: str, *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0)
        out = await getattr(super(), name)(*args, **kwargs)
        await asyncio.sleep(0)
        return out

    async def take(self, *a: Any, **k: Any) -> Any:
        return await self._around("take", *a, **k)

    async def join(self, *a: Any, **k: Any) -> Any:
        return await self._around("join", *a, **k)

    async def beat(self, *a: Any, **k: Any) -> Any:
        return await self._around("beat", *a, **k)

    async def leave(self, *a: Any, **k: Any) -> Any:
        return await self._around("leave", *a, **k)

    async def release(self, *a: Any, **k: Any) -> Any:
        return await self._around("release", *a, **k)


def _run_once(
    cancel_at: int, free_at: int, fair: bool, use_lock: bool, again: int | None = None
) -> str:
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    holder = awsflock.LockTable(store=memory, owner="holder").acquire("job", lease=600, wait=0)
    got: dict[str, Any] = {}

    async def main() -> None:
        table = aio.LockTable(store=Yielding(memory), owner="waiter")

        async def want() -> None:
            if use_lock:
                async with table.lock("job", lease=600, wait=None, fair=fair) as held:
                    got["lease"] = held.lease_id
                    await asyncio.Event().wait()
            else:
                lease = await table.acquire("job", lease=600, wait=None, fair=fair)
                got["lease"] = lease.lease_id
                await asyncio.Event().wait()

        task = asyncio.create_task(want())
        second = None if again is None else cancel_at + again
        for tick in range(max(cancel_at, free_at, second or 0) + 1):
            if tick == free_at:
                holder.release()
            if tick in (cancel_at, second):
                task.cancel()
            await asyncio.sleep(0)
        for _ in range(2000):  # let it finish its clean-up
            if task.done():
                break
            clock.advance(0.05)
            await asyncio.sleep(0)
        assert task.done(), "the cancelled task did not end"
        for _ in range(20):  # a clean-up shielded from a second cancellation ends too
            await asyncio.sleep(0)

    asyncio.run(main())
    outcome = memory.read("job")
    lock = outcome.lock
    left = []
    returned = not use_lock and "lease" in got  # acquire() returned: the caller's to release
    if lock is not None and not lock.released and lock.owner == "waiter" and not returned:
        left.append(f"lease {lock.lease_id} held")
    if outcome.line.waiters:
        left.append(f"places {outcome.line.waiters}")
    return "; ".join(left)


@pytest.mark.parametrize("use_lock", [False, True], ids=["acquire", "lock"])
@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_a_task_cancelled_at_any_step_holds_nothing(fair: bool, use_lock: bool) -> None:
    bad = []
    for free_at in (0, 3, 7, 12, 25):
        for cancel_at in range(0, 40):
            left = _run_once(cancel_at, free_at, fair, use_lock)
            if left:
                bad.append(f"cancel@{cancel_at} free@{free_at}: {left}")
    assert not bad, "\n".join(bad[:10])


@pytest.mark.parametrize("fair", [False, True], ids=["plain", "fair"])
def test_a_task_cancelled_twice_at_any_step_holds_nothing_once_its_clean_up_ran(
    fair: bool,
) -> None:
    bad = []
    for free_at in (0, 3, 7):
        for cancel_at in range(0, 30):
            for again in (1, 2, 4):
                left = _run_once(cancel_at, free_at, fair, True, again)
                if left:
                    bad.append(f"cancel@{cancel_at}+{again} free@{free_at}: {left}")
    assert not bad, "\n".join(bad[:10])
