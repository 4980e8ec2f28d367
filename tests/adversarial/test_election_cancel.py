"""An election cancelled from outside (shutdown: ``task.cancel()``) while its
term's lock was taken from it behind its back keeps campaigning instead of ending: the
release finds the lock gone, ``LeaseLost`` replaces the cancellation, and ``_serve`` takes
that for a lost term. In-memory store, fake clock."""

from __future__ import annotations

import asyncio
from typing import Any

from awsflock import aio
from awsflock.clock import FakeClock
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore


def test_an_election_cancelled_from_outside_ends_even_if_its_term_was_lost() -> None:
    clock = FakeClock()
    memory = MemoryStore("t", clock=clock)
    terms: list[Any] = []

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(memory))
        election = table.election("leader", lease=60)

        async def lead(term: Any) -> None:
            terms.append(term.fencing_token)
            if len(terms) == 1:
                memory.force_release(
                    "leader", term.lease_id, force_id="f", now_ms=round(clock.time() * 1000),
                    skew_ms=0, actor="ops", reason="stuck",
                )  # fmt: skip
            await asyncio.Event().wait()

        task = asyncio.create_task(election.run(lead))
        await asyncio.sleep(0.05)
        task.cancel()  # shutting down
        await asyncio.sleep(0.2)
        still_running = not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not still_running, f"the cancelled election went on campaigning: terms {terms}"

    asyncio.run(main())
