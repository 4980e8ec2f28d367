"""``AsyncThreadedStore`` (aio on DynamoDB/PostgreSQL/Redis) promises that a
step cancelled on the wire is let land before the clean-up that follows. A second cancellation
(TaskGroup + timeout, ``task.cancel()`` twice, shutdown) cuts that wait short: the clean-up
release is sent while the take is still on the wire, the take lands after it, and the lock is
left held by nobody for a whole lease (promise 3)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from awsflock import aio
from awsflock.clock import SystemClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.threaded_async import AsyncThreadedStore


class SlowTake(MemoryStore):
    """A take that sits on the wire until ``gate`` opens (a slow network)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.on_wire = threading.Event()
        self.landed = threading.Event()

    def take(self, lock_id: str, attempt: Any) -> Any:
        self.on_wire.set()
        self.gate.wait(5)
        try:
            return super().take(lock_id, attempt)
        finally:
            self.landed.set()


def test_a_second_cancellation_while_a_take_is_on_the_wire_leaks_nothing() -> None:
    memory = SlowTake("t", clock=SystemClock())
    store = AsyncThreadedStore(memory)

    async def main() -> None:
        table = aio.LockTable(store=store)
        task = asyncio.create_task(table.acquire("job", lease=600, wait=0))
        while not memory.on_wire.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.02)
        task.cancel()  # a second one: a timeout around, a TaskGroup, a shutdown
        threading.Timer(0.3, memory.gate.set).start()  # the take lands a little later
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)

    asyncio.run(main())
    assert memory.landed.wait(5)
    store.close()
    record = memory.read("job").lock
    assert record is None or record.released, f"left held by a cancelled task: {record}"


class SlowJoin(MemoryStore):
    """A join (a place in a fair line) that sits on the wire until ``gate`` opens."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()
        self.on_wire = threading.Event()
        self.landed = threading.Event()

    def join(self, lock_id: str, waiter: Any) -> Any:
        self.on_wire.set()
        self.gate.wait(5)
        try:
            return super().join(lock_id, waiter)
        finally:
            self.landed.set()


def test_a_second_cancellation_while_a_fair_join_is_on_the_wire_leaves_no_place() -> None:
    import awsflock

    memory = SlowJoin("t", clock=SystemClock())
    holder = awsflock.LockTable(store=memory, owner="holder").acquire("job", lease=600, wait=0)
    store = AsyncThreadedStore(memory)

    async def main() -> None:
        table = aio.LockTable(store=store)
        task = asyncio.create_task(table.acquire("job", lease=600, wait=None, fair=True))
        while not memory.on_wire.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.02)
        task.cancel()
        threading.Timer(0.3, memory.gate.set).start()  # the join lands a little later
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.2)

    asyncio.run(main())
    assert memory.landed.wait(5)
    store.close()
    line = memory.read("job").line
    holder.release()
    # What a user sees: a plain acquire of the now free lock is refused (for LINE_LAPSE_MS).
    other = awsflock.LockTable(store=memory, owner="other")
    try:
        other.acquire("job", lease=60, wait=0).release()
        took = True
    except awsflock.errors.LockBusy:
        took = False
    assert line.waiters == (), f"a cancelled task keeps a place in line: {line.waiters}"
    assert took, "the free lock is refused to a plain acquire: a ghost place blocks it"
