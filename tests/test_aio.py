"""``awsflock.aio``: a lost lease cancels the body, which stops before the release is sent;
``LeaseLost`` comes out of the block; a cancellation from elsewhere stays one; a task
cancelled while it waits holds nothing. On the in-memory store, with a fake clock."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import pytest

import awsflock
from awsflock import aio, errors
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


class Unreachable(MemoryStore):
    """Renewals fail as if the store could not be reached, once ``cut`` is set."""

    cut = False

    def renew(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        if self.cut:
            raise errors.EndpointUnreachable("no route to the store")
        return super().renew(lock_id, lease_id, **step)


async def _advance_until(clock: FakeClock, done: Any, step: float = 0.5, limit: int = 400) -> None:
    """Move the fake clock on, letting the loop run between steps, until ``done()``."""
    for _ in range(limit):
        if done():
            return
        clock.advance(step)
        await asyncio.sleep(0.002)
    raise AssertionError("not reached")


def test_lock_holds_while_the_block_runs_and_releases_after_it():
    async def main() -> None:
        clock = FakeClock()
        table = aio.connect("memory://aio-basic", clock=clock, owner="svc")
        view = awsflock.connect("memory://aio-basic")
        async with table.lock("reindex", lease="60s", wait="5m") as held:
            held.check()
            with pytest.raises(errors.LockBusy) as busy:
                view.acquire("reindex", wait=0)
            assert busy.value.holder.owner == "svc"
            await _advance_until(clock, lambda: held.renewals >= 2)
        assert held.lease.released
        assert view.acquire("reindex", wait=0).fencing_token > held.fencing_token

    asyncio.run(main())


def test_a_lost_lease_cancels_the_body_which_stops_before_the_release():
    clock = FakeClock()
    store = Unreachable("t", clock=clock)
    seen: list[str] = []

    async def body(held: aio.Hold) -> None:
        try:
            await asyncio.Event().wait()  # work that never ends by itself
        except asyncio.CancelledError:
            # The lease is lost, but not yet given back: the body still runs.
            record = store.read("job").lock
            seen.append("cancelled, " + ("released" if record.released else "not released"))
            await asyncio.sleep(0)  # its own clean-up, awaited
            seen.append("body stopped")
            raise

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(store))
        task = asyncio.create_task(_hold(table, body))
        await asyncio.sleep(0.01)
        store.cut = True
        await _advance_until(clock, task.done)
        with pytest.raises(errors.LeaseLost, match="lost: no successful renewal"):
            await task
        assert not task.cancelled()

    async def _hold(table: aio.LockTable, work: Any) -> None:
        try:
            async with table.lock("job", lease=60) as held:
                await work(held)
        except errors.LeaseLost:
            # The block's own cancellation was taken back: the task is not being cancelled
            # (Python 3.11+ counts it; a TaskGroup or timeout around would misread one left).
            cancelling = getattr(asyncio.current_task(), "cancelling", lambda: 0)
            assert cancelling() == 0
            raise

    asyncio.run(main())
    assert seen == ["cancelled, not released", "body stopped"]
    assert store.read("job").lock.released  # given back once the body had stopped


def test_a_refused_renewal_cancels_the_body_at_once():
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))

        async def hold() -> None:
            async with table.lock("job", lease=60) as held:
                memory.force_release(
                    "job", held.lease_id, force_id="f", now_ms=round(clock.time() * 1000),
                    skew_ms=0, actor="ops", reason="stuck",
                )  # fmt: skip
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        await _advance_until(clock, task.done)
        with pytest.raises(errors.LeaseLost, match="force-released"):
            await task

    asyncio.run(main())


def test_check_in_the_body_raises_lease_lost_out_of_the_block():
    clock = FakeClock()
    store = Unreachable("t", clock=clock)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(store))
        with pytest.raises(errors.LeaseLost):
            async with table.lock("job", lease=60, margin=10) as held:
                store.cut = True
                clock.advance(50.5)  # past the deadline, before the renewer looked
                held.check()
        # The task is not left cancelled: it goes on.
        await asyncio.sleep(0)

    asyncio.run(main())


def test_a_cancellation_from_elsewhere_stays_a_cancellation_and_releases():
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))

        async def hold() -> None:
            async with table.lock("job", lease=60):
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert memory.read("job").lock.released


def test_the_bodys_own_error_comes_out_and_the_lock_is_released():
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        with pytest.raises(ValueError, match="inside"):
            async with table.lock("job", lease=60):
                raise ValueError("inside")

    asyncio.run(main())
    assert memory.read("job").lock.released


def test_a_task_cancelled_while_it_waits_holds_nothing_and_wait_for_leaks_nothing():
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    holder = awsflock.LockTable(store=memory, owner="holder").acquire("job", lease=10**6, wait=0)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        # The pattern that leaked a held lock with a thread (issue 40): a timeout around it.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(table.acquire("job", wait=None, fair=True), 0.05)
        timeout = asyncio.timeout(0.05) if hasattr(asyncio, "timeout") else _Never()
        with pytest.raises(asyncio.TimeoutError):
            async with timeout, table.lock("job", wait=None):
                pass

    asyncio.run(main())
    outcome = memory.read("job")
    assert outcome.lock.lease_id == holder.lease_id and outcome.line.waiters == ()
    holder.release()


class _Never:
    async def __aenter__(self) -> None:
        raise asyncio.TimeoutError

    async def __aexit__(self, *exc: object) -> None:
        return None


def test_waiting_again_for_a_lock_this_task_holds_is_refused_at_once():
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        async with table.lock("job", lease=60):
            with pytest.raises(errors.UsageError, match="already held by this task"):
                async with table.lock("job", wait=None):
                    pass

            async def other_task() -> None:
                with pytest.raises(errors.LockBusy):
                    await table.acquire("job", wait=0)

            await asyncio.create_task(other_task())

    asyncio.run(main())


def test_the_services_guide_s_asyncio_example_runs():
    from tests.docs import recipe

    example = recipe("guides/python-services.md", "aio-lost")
    exec(compile(example, "python-services.md", "exec"), {})


class LoopNoting(AsyncMemoryStore):
    """Notes the event loop each renewal of a lock ran in."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.loops: dict[str, set[int]] = {}

    async def renew(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        self.loops.setdefault(lock_id, set()).add(id(asyncio.get_running_loop()))
        return await super().renew(lock_id, lease_id, **step)


def test_one_table_in_two_event_loops_renews_each_loop_s_holds_in_that_loop():
    import threading
    import time

    clock = FakeClock()
    store = LoopNoting(MemoryStore("t", clock=clock))
    table = aio.LockTable(store=store)
    own: dict[str, int] = {}
    done: list[str] = []

    def in_a_thread(name: str) -> None:
        async def main() -> None:
            own[name] = id(asyncio.get_running_loop())
            async with table.lock(name, lease=60) as held:
                while held.renewals < 3:
                    await asyncio.sleep(0.005)
            done.append(name)

        asyncio.run(main())

    threads = [threading.Thread(target=in_a_thread, args=(n,)) for n in ("a", "b")]
    for thread in threads:
        thread.start()
    end = time.monotonic() + 20
    while len(done) < 2 and time.monotonic() < end:
        clock.advance(1)
        time.sleep(0.005)
    for thread in threads:
        thread.join(10)
    assert sorted(done) == ["a", "b"]
    assert store.loops == {"a": {own["a"]}, "b": {own["b"]}}  # each in its own loop


def test_a_table_opened_with_async_with_is_closed_at_its_end():
    closed: list[bool] = []

    async def main() -> None:
        async with aio.connect("memory://", clock=FakeClock()) as table:
            table.store.close = lambda: closed.append(True)  # type: ignore[method-assign]
            async with table.lock("x", wait=0) as held:
                assert held.fencing_token is not None
        assert closed == [True]

    asyncio.run(main())


class SlowRelease(AsyncMemoryStore):
    """Releases wait for ``landed`` (a release on the wire), counted in ``releasing``."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.landed = asyncio.Event()
        self.releasing = 0

    async def release(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        self.releasing += 1
        await self.landed.wait()
        return await super().release(lock_id, lease_id, **step)


async def _cancelled_again_during(
    task: asyncio.Task[None], cleaning: Callable[[], bool], landed: asyncio.Event
) -> None:
    """Cancel ``task``, and again once its clean-up is on its way (``cleaning()``): the task
    does not end until the clean-up lands (``landed``), then ends cancelled."""
    task.cancel()
    while not cleaning():
        await asyncio.sleep(0)
    task.cancel()  # again, while the clean-up is on its way
    for _ in range(5):
        await asyncio.sleep(0)
    assert not task.done()
    landed.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_a_block_cancelled_again_while_it_releases_ends_only_once_the_release_landed():
    # Found by the simulator: a body cancelled (on loss, or by a timeout), then its task
    # cancelled again while the block released, ended at once with the release still on the
    # wire, so the lock was held after the block had ended.
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        store = SlowRelease(memory)
        table = aio.LockTable(store=store)

        async def hold() -> None:
            async with table.lock("job", lease=60):
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        for _ in range(5):
            await asyncio.sleep(0)
        await _cancelled_again_during(task, lambda: store.releasing > 0, store.landed)
        assert memory.read("job").lock.released

    asyncio.run(main())


class SlowLeave(AsyncMemoryStore):
    """Leaving a fair line waits for ``landed``, counted in ``leaving``."""

    def __init__(self, store: MemoryStore) -> None:
        super().__init__(store)
        self.landed = asyncio.Event()
        self.leaving = 0

    async def leave(self, lock_id: str, ticket: str) -> Any:
        self.leaving += 1
        await self.landed.wait()
        return await super().leave(lock_id, ticket)


def test_a_lease_block_cancelled_again_while_it_releases_ends_only_once_it_landed():
    # As a lock() block (above), found in `async with lease:` by reading: its release was only
    # shielded, so a second cancellation ended the block with the release on its way.
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        store = SlowRelease(memory)
        table = aio.LockTable(store=store)

        async def hold() -> None:
            async with await table.acquire("job", lease=60, wait=0):
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        for _ in range(5):
            await asyncio.sleep(0)
        await _cancelled_again_during(task, lambda: store.releasing > 0, store.landed)
        assert memory.read("job").lock.released

    asyncio.run(main())


def test_a_fair_wait_cancelled_again_while_it_leaves_the_line_ends_once_it_left():
    # A waiter cancelled in line leaves it; cancelled again meanwhile, it returned at once with
    # its place still in line (the next waiters then waited for it to lapse).
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        store = SlowLeave(memory)
        table = aio.LockTable(store=store)
        holder = await table.acquire("job", lease=60, wait=0)

        async def wait() -> None:
            await table.acquire("job", lease=60, wait=600, fair=True)

        task = asyncio.create_task(wait())
        while not memory.read("job").line.waiters:
            await asyncio.sleep(0)
        await _cancelled_again_during(task, lambda: store.leaving > 0, store.landed)
        assert memory.read("job").line.waiters == ()
        await holder.release()

    asyncio.run(main())
