"""Leader election (``table.election``): one leader at a time, a term's fencing token above
every earlier one, a lost lease ends the term (asyncio: ``lead`` is cancelled) and another
process leads, ``leader()`` and the callbacks say who leads. On the in-memory store."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from awsflock import aio, errors
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_async import AsyncMemoryStore
from tests.helpers import DrivenClock


class Partitioned(AsyncMemoryStore):
    """One process's view of a shared in-memory store; ``cut``: its requests fail."""

    cut = False

    async def _check(self) -> None:
        if self.cut:
            raise errors.EndpointUnreachable("no route to the store")

    async def take(self, *args: Any, **kwargs: Any) -> Any:
        await self._check()
        return await super().take(*args, **kwargs)

    async def renew(self, *args: Any, **kwargs: Any) -> Any:
        await self._check()
        return await super().renew(*args, **kwargs)

    async def release(self, *args: Any, **kwargs: Any) -> Any:
        await self._check()
        return await super().release(*args, **kwargs)


async def _advance_until(clock: DrivenClock, done: Any) -> None:
    await clock.drive(done)


def test_one_leader_at_a_time_and_a_lost_term_hands_over_with_a_higher_token():
    clock = DrivenClock()
    memory = MemoryStore("t", clock=clock)
    events: list[tuple[str, str, int | None]] = []
    seen: dict[str, list[str | None]] = {"a": [], "b": []}
    ended: dict[str, list[type[BaseException] | None]] = {"a": [], "b": []}

    stores = {"a": Partitioned(memory), "b": Partitioned(memory)}

    def election(name: str) -> aio.Election:
        table = aio.LockTable(store=stores[name], owner=name)
        return table.election(
            "scheduler",
            lease=15,
            on_new_leader=lambda r: seen[name].append(r.owner if r else None),
            on_stopped=lambda term, err: ended[name].append(type(err) if err else None),
        )

    terms: dict[str, aio.Term] = {}

    async def lead(name: str, term: aio.Term) -> None:
        terms[name] = term
        events.append(("start", name, term.fencing_token))
        try:
            await asyncio.Event().wait()
        finally:
            events.append(("stop", name, term.fencing_token))

    async def main() -> None:
        a, b = election("a"), election("b")
        run_a = asyncio.create_task(a.run(lambda term: lead("a", term)))
        await _advance_until(clock, lambda: len(events) == 1)
        run_b = asyncio.create_task(b.run(lambda term: lead("b", term)))
        await _advance_until(clock, lambda: seen["b"] == ["a"])
        assert (await b.leader()).owner == "a"
        first = events[0]
        stores["a"].cut = True  # the leader can no longer reach the store
        await _advance_until(clock, lambda: len(events) == 3)
        assert events[1] == ("stop", first[1], first[2])  # stopped before the next started
        assert events[2][:2] == ("start", "b") and events[2][2] > first[2]
        assert ended["a"] == [errors.LeaseLost]
        stores["a"].cut = False  # the partition heals: "a" is a standby, and sees "b" lead
        await _advance_until(clock, lambda: seen["a"][-1:] == ["b"])
        assert (await a.leader()).owner == "b"
        for task in (run_a, run_b):
            task.cancel()
        for task in (run_a, run_b):
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert memory.read("scheduler").lock.released  # the last leader gave it back
    starts = [e for e in events if e[0] == "start"]
    assert [e[2] for e in starts] == sorted(e[2] for e in starts)


class PartitionedSync:
    """One process's view of a shared (synchronous) in-memory store; ``cut``: its steps
    fail as if the store could not be reached."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name in ("take", "renew", "release", "join", "beat", "leave") and self.cut:

            def unreachable(*args: Any, **kwargs: Any) -> Any:
                raise errors.EndpointUnreachable("no route to the store")

            return unreachable
        return attr


def _eventually(condition: Any, clock: FakeClock | None = None, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        if clock is not None:
            clock.advance(0.5)
        time.sleep(0.005)


def test_sync_a_lead_that_watches_term_lost_ends_its_term_and_the_election_goes_on():
    clock = FakeClock()
    view = PartitionedSync(MemoryStore("t", clock=clock))
    table = LockTable(store=view, owner="svc")  # type: ignore[arg-type]
    election = table.election("scheduler", lease=15)
    stop = threading.Event()
    tokens: list[int | None] = []
    stopped: list[type[BaseException] | None] = []
    election.on_stopped = lambda term, err: stopped.append(type(err) if err else None)

    def lead(term: Any) -> None:
        tokens.append(term.fencing_token)
        while not term.lost.wait(0.01) and not stop.is_set():
            pass  # one round of work, then look again

    runner = threading.Thread(target=election.run, args=(lead,), kwargs={"stop": stop})
    runner.start()
    _eventually(lambda: len(tokens) == 1)
    assert election.leader().owner == "svc"
    view.cut = True
    _eventually(lambda: stopped == [errors.LeaseLost], clock)
    view.cut = False
    _eventually(lambda: len(tokens) == 2, clock)
    assert tokens[1] > tokens[0]
    stop.set()
    runner.join(10)
    assert not runner.is_alive() and stopped == [errors.LeaseLost, None]
    assert election.leader() is None  # the last term released


def test_an_error_of_lead_ends_the_election_with_it_and_releases():
    memory = MemoryStore("t", clock=FakeClock())

    async def main() -> None:
        election = aio.LockTable(store=AsyncMemoryStore(memory)).election("scheduler")
        assert await election.leader() is None

        async def lead(term: aio.Term) -> None:
            raise ValueError("a bug in the leader's work")

        with pytest.raises(ValueError, match="a bug"):
            await election.run(lead)
        assert await election.leader() is None

    asyncio.run(main())
    assert memory.read("scheduler").lock.released
