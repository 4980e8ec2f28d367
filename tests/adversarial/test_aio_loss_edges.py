"""Edges of ``awsflock.aio``'s loss handling (promise 4: an outside
cancellation stays a CancelledError, the task is not left "cancelling"; the body's own error
comes first; a loss declared anywhere cancels the body). In-memory store, fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from awsflock import aio, errors
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


def _force(memory: MemoryStore, clock: FakeClock, lease_id: str) -> None:
    memory.force_release(
        "job", lease_id, force_id="f", now_ms=round(clock.time() * 1000),
        skew_ms=0, actor="ops", reason="stuck",
    )  # fmt: skip


def test_outside_timeout_stays_a_timeout_when_the_release_finds_the_lock_gone() -> None:
    """The lock is force-released behind the hold's back (the renewer has not looked yet);
    then an ``asyncio.timeout`` around the block fires. The user asked for a timeout."""
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    seen: dict[str, Any] = {}

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        try:
            async with asyncio.timeout(0.05):
                async with table.lock("job", lease=60) as held:
                    _force(memory, clock, held.lease_id)
                    await asyncio.Event().wait()
        except BaseException as exc:
            seen["exc"] = exc
        seen["cancelling"] = asyncio.current_task().cancelling()  # type: ignore[union-attr]

    asyncio.run(main())
    assert isinstance(seen["exc"], TimeoutError), repr(seen["exc"])
    assert seen["cancelling"] == 0


def test_outside_cancel_stays_a_cancellation_when_the_release_finds_the_lock_gone() -> None:
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))

        async def hold() -> None:
            async with table.lock("job", lease=60) as held:
                _force(memory, clock, held.lease_id)
                await asyncio.Event().wait()

        task = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.wait([task])
        exc = task.exception() if not task.cancelled() else asyncio.CancelledError()
        assert task.cancelled(), f"task ended with {exc!r}, not cancelled"

    asyncio.run(main())


def test_outside_cancel_at_the_moment_of_loss_stays_a_cancellation() -> None:
    """The renewal is refused (force-release) and, in the same instant, the task is cancelled
    from elsewhere (here: by the on_lost callback, i.e. anything running then)."""
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    state: dict[str, Any] = {}

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))

        async def hold() -> None:
            def on_lost(h: Any, err: Any) -> None:
                state["task"].cancel()  # an outside cancellation, at the same moment

            async with table.lock("job", lease=60, on_lost=on_lost) as held:
                _force(memory, clock, held.lease_id)
                await asyncio.Event().wait()

        state["task"] = task = asyncio.create_task(hold())
        await asyncio.sleep(0.01)
        for _ in range(400):
            if task.done():
                break
            clock.advance(1)
            await asyncio.sleep(0.002)
        assert task.done()
        if not task.cancelled():
            raise AssertionError(
                f"outside cancellation turned into {task.exception()!r}; "
                f"task.cancelling()={task.cancelling()}"
            )

    asyncio.run(main())


def test_the_bodys_own_error_comes_first_when_the_release_finds_the_lock_gone() -> None:
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        with pytest.raises(ValueError, match="inside"):
            async with table.lock("job", lease=60) as held:
                _force(memory, clock, held.lease_id)
                raise ValueError("inside")

    asyncio.run(main())


def test_check_from_a_worker_thread_past_the_deadline_cancels_the_body() -> None:
    """Blocking work run with ``asyncio.to_thread`` calls ``held.check()`` (the documented way
    to ask whether it still holds). Past the deadline it must raise LeaseLost there, and the
    body must be cancelled (the lease is lost)."""
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    seen: dict[str, Any] = {}

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))

        def work(held: aio.Hold) -> None:
            clock.advance(55)  # past the deadline (60 less the margin), before the renewer looks
            try:
                held.check()
            except BaseException as exc:
                seen["check"] = exc

        async def hold() -> None:
            async with table.lock("job", lease=60, renew_every=40) as held:
                await asyncio.to_thread(work, held)
                seen["after"] = "body went on"
                await asyncio.sleep(0.05)
                seen["after"] = "body went on past an await"

        try:
            await asyncio.wait_for(hold(), 2)
        except BaseException as exc:
            seen["out"] = exc

    asyncio.run(main())
    assert isinstance(seen.get("check"), errors.LeaseLost), repr(seen.get("check"))
    assert seen.get("after") != "body went on past an await", seen
    assert isinstance(seen.get("out"), errors.LeaseLost), repr(seen.get("out"))
