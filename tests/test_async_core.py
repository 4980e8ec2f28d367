"""The asynchronous source of the lock logic (``awsflock/lock/*_async.py``, whose synchronous
twins every other test runs): waiting, fairness and pools through awaited steps, on the
in-memory store and a fake clock; and a task cancelled at each await point of a wait holds
nothing afterwards (no lease, no place in line), whether the step was sent or not."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import FakeClock
from awsflock.lock import line_async, waiting_async
from awsflock.lock.acquisition_async import Acquisition
from awsflock.lock.lease import LockTable
from awsflock.protocol_async import AsyncSleeper
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore

LOCK = "job"


def _run(store: Any, *, lease: float = 60, size: int | None = None) -> Acquisition:
    return Acquisition(
        store,
        LOCK,
        lease,
        Identity(owner="async", host="h", pid=1),
        size,
        clock=store.clock,
        rng=random.Random(7),
        skew=5.0,
    )


async def _wait(run: Acquisition, *, wait: float | None, fair: bool = False) -> Any:
    policy = line_async.Fair(run) if fair and wait != 0 else waiting_async.PLAIN
    return await waiting_async.wait(
        run, policy, wait_s=wait, clock=run.clock, rng=run.rng, skew=run.skew
    )


@pytest.fixture
def memory() -> MemoryStore:
    return MemoryStore("t", clock=FakeClock())


def test_a_free_lock_is_granted_in_one_step(memory):
    store = AsyncMemoryStore(memory)
    run = _run(store)
    grant = asyncio.run(_wait(run, wait=0))
    assert run.attempts == 1 and grant.record.fencing_token is not None
    assert memory.read(LOCK).lock.lease_id == grant.lease_id


@pytest.mark.parametrize("fair", [False, True])
def test_a_wait_ends_busy_naming_the_holder_and_leaves_no_place(memory, fair):
    other = LockTable(store=memory, owner="other").acquire(LOCK, lease=600, wait=0)
    run = _run(AsyncMemoryStore(memory))
    with pytest.raises(errors.LockBusy) as busy:
        asyncio.run(_wait(run, wait=3, fair=fair))
    assert busy.value.holder.lease_id == other.lease_id
    assert memory.read(LOCK).line.waiters == ()


@pytest.mark.parametrize("fair", [False, True])
def test_a_waiter_takes_the_lock_once_the_holders_lease_runs_out(memory, fair):
    held = LockTable(store=memory, owner="other").acquire(LOCK, lease=10, wait=0)
    run = _run(AsyncMemoryStore(memory))
    grant = asyncio.run(_wait(run, wait=60, fair=fair))
    assert grant.record.fencing_token > held.fencing_token
    assert memory.clock.monotonic() - run.start >= 10 + 5  # the lease, then the skew window
    assert memory.read(LOCK).line.waiters == ()


def test_a_pool_grants_its_slots_then_is_busy(memory):
    store = AsyncMemoryStore(memory)
    slots = {asyncio.run(_wait(_run(store, size=3), wait=0)).slot for _ in range(3)}
    assert slots == {0, 1, 2}
    with pytest.raises(errors.LockBusy):
        asyncio.run(_wait(_run(store, size=3), wait=0))


class Cutting(AsyncMemoryStore):
    """The in-memory store with an await before each step is sent and after it is applied
    (its answer on the way back), and one in each pause: the task is cancelled at the
    ``cut_at``-th of them (counting from 1; None: never). ``points``: how many were met."""

    def __init__(self, store: MemoryStore, cut_at: int | None = None, lost: bool = False) -> None:
        super().__init__(store)
        self.cut_at = cut_at
        self.points = 0
        self.where_cut = ""
        #: The first take fails as if its answer was lost (it was not applied): its attempt
        #: stays unsettled, and the grant that follows waits for its release.
        self.lose_first = lost

    async def _point(self, where: str) -> None:
        self.points += 1
        if self.points == self.cut_at:
            self.where_cut = where
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        await asyncio.sleep(0)

    async def _step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        await self._point(f"before {name}")
        answer = getattr(self.sync, name)(*args, **kwargs)
        await self._point(f"after {name}")
        return answer

    async def take(self, *args: Any, **kwargs: Any) -> Any:
        if self.lose_first:
            self.lose_first = False
            await self._point("before a take whose answer is lost")
            lost = errors.EndpointUnreachable("no answer")
            lost.maybe_applied = True
            raise lost
        return await self._step("take", *args, **kwargs)

    async def join(self, *args: Any, **kwargs: Any) -> Any:
        return await self._step("join", *args, **kwargs)

    async def beat(self, *args: Any, **kwargs: Any) -> Any:
        return await self._step("beat", *args, **kwargs)

    async def leave(self, *args: Any, **kwargs: Any) -> Any:
        return await self._step("leave", *args, **kwargs)

    async def release(self, *args: Any, **kwargs: Any) -> Any:
        return await self._step("release", *args, **kwargs)

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        return await self._step("read", *args, **kwargs)

    def waker(self, lock_id: str) -> Any:
        store = self

        class Pausing(AsyncSleeper):
            async def pause(self, clock: Any, seconds: float, cancel: Any) -> bool:
                await store._point("in a pause")
                return await super().pause(clock, seconds, cancel)

        return Pausing()


SCENARIOS = {
    # (the other holder's lease, or None: the lock is free; fair; pool size; the first take's
    # answer lost)
    "free": (None, False, None, False),
    "held, then free": (8.0, False, None, False),
    "held, fair": (8.0, True, None, False),
    "pool, full, then free": (8.0, False, 2, False),
    "a lost answer, then a grant": (None, False, None, True),
    "fair, a lost answer": (8.0, True, None, True),
}


def _scenario(memory: MemoryStore, name: str, cut_at: int | None) -> tuple[Cutting, Any, Any]:
    """Run one wait of the scenario, cancelled at the ``cut_at``-th await point: (the store,
    the run, what the wait ended with)."""
    lease, fair, size, lost = SCENARIOS[name]
    if lease is not None:
        other = LockTable(store=memory, owner="other")
        for _ in range(size or 1):
            other.acquire(LOCK, lease=lease, wait=0, slots=size)
    store = Cutting(memory, cut_at, lost)
    run = _run(store, size=size)

    async def main() -> Any:
        try:
            return await _wait(run, wait=60, fair=fair)
        except BaseException as exc:  # what the wait ended with is the result
            return exc

    return store, run, asyncio.run(main())


def _holds_nothing(memory: MemoryStore, run: Acquisition) -> None:
    outcome = memory.read(LOCK)
    records = [outcome.lock] if outcome.pool is None else list(outcome.pool.slots.values())
    ours = [r for r in records if r is not None and r.lease_id in run.sent and not r.released]
    assert ours == []
    assert run.own_ticket is None or outcome.line.find(run.own_ticket) is None


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_wait_cancelled_at_any_await_point_holds_nothing(name):
    store, run, granted = _scenario(MemoryStore("t", clock=FakeClock()), name, None)
    assert not isinstance(granted, BaseException) and store.points >= 2
    total = store.points
    for cut_at in range(1, total + 1):
        memory = MemoryStore("t", clock=FakeClock())
        store, run, ended = _scenario(memory, name, cut_at)
        assert isinstance(ended, asyncio.CancelledError), (cut_at, store.where_cut, ended)
        _holds_nothing(memory, run)
        # And the lock is free for the next (after the other holder's lease, if any).
        memory.clock.advance(60)
        LockTable(store=memory, owner="next").acquire(LOCK, wait=0, slots=run.size)


def test_the_async_table_acquires_renews_and_releases(memory):
    from awsflock.lock.table_async import LockTable as AsyncLockTable

    async def main() -> None:
        table = AsyncLockTable(store=AsyncMemoryStore(memory), owner="svc")
        async with await table.acquire("x", lease=30, wait=0) as lease:
            assert lease.remaining() == pytest.approx(30)
            memory.clock.advance(10)
            await lease.renew()
            assert lease.remaining() == pytest.approx(30)
            with pytest.raises(errors.LockBusy):
                await table.acquire("x", wait=0)
            state = await table.state("x")
            assert state is not None and state.lease_id == lease.lease_id
        assert lease.released
        again = await table.acquire("x", wait=0)
        assert again.fencing_token > lease.fencing_token
        await again.release()
        with pytest.raises(errors.NotHeld):
            await table.renew(again)

    asyncio.run(main())


def test_a_sync_table_and_an_async_one_share_a_memory_store(memory):
    from awsflock.lock.table_async import LockTable as AsyncLockTable

    held = LockTable(store=memory, owner="sync").acquire("x", wait=0)

    async def main() -> None:
        table = AsyncLockTable(store=AsyncMemoryStore(memory), owner="async")
        with pytest.raises(errors.LockBusy) as busy:
            await table.acquire("x", wait=0)
        assert busy.value.holder.owner == "sync"

    asyncio.run(main())
    held.release()
