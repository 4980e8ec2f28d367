"""The in-memory store for the asynchronous lock logic (``awsflock.aio``): a ``MemoryStore``
whose steps are awaited. Each step is answered at once, as the synchronous one is (it never
waits on anything), so a synchronous table and an asynchronous one may share one store: a
service's tests can hold a lock from one and see it busy from the other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Any

from awsflock.clock_async import AsyncClock
from awsflock.protocol import Attempt, Drops, Outcome
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.records import LockRecord, Pool, Waiter
from awsflock.state import LockState
from awsflock.stores.memory import MemoryStore


class AsyncMemoryStore:
    """``store`` (a ``MemoryStore``), its lock steps awaited. Its clock must be one whose
    pauses can be awaited (``SystemClock``, ``FakeClock``)."""

    def __init__(self, store: MemoryStore) -> None:
        self.sync = store
        self.kind = store.kind
        self.table_name = store.table_name
        self.request_timeout = store.request_timeout
        clock: Any = store.clock
        self.clock: AsyncClock = clock

    @property
    def skew_free(self) -> bool:
        return bool(self.sync.skew_free)

    @property
    def transactions(self) -> bool:
        """As the store it awaits (``kinds.transactions``: a kind whose stores run them always
        does not say so)."""
        return bool(getattr(self.sync, "transactions", True))

    def where(self) -> str:
        return self.sync.where()

    def budget(self, end: float) -> AbstractContextManager[None]:
        return self.sync.budget(end)

    async def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        return self.sync.take(lock_id, attempt)

    async def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        return self.sync.join(lock_id, waiter)

    async def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        return self.sync.beat(lock_id, ticket, now_ms=now_ms, drop=drop)

    async def leave(self, lock_id: str, ticket: str) -> Outcome:
        return self.sync.leave(lock_id, ticket)

    async def renew(self, lock_id: str, lease_id: str, **step: Any) -> Outcome:
        return self.sync.renew(lock_id, lease_id, **step)

    async def release(self, lock_id: str, lease_id: str, **step: Any) -> Outcome:
        return self.sync.release(lock_id, lease_id, **step)

    async def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        return self.sync.read(lock_id, lease_id)

    async def read_state(self, lock_id: str) -> LockState:
        return self.sync.read_state(lock_id)

    async def take_all(self, takes: Any) -> tuple[Outcome, ...]:
        return self.sync.take_all(takes)

    async def renew_all(self, leases: Any, **step: Any) -> tuple[Outcome, ...]:
        return self.sync.renew_all(leases, **step)

    async def release_all(self, leases: Any, **step: Any) -> tuple[Outcome, ...]:
        return self.sync.release_all(leases, **step)

    async def claim(self, lock_id: str, **step: Any) -> Outcome:
        return self.sync.claim(lock_id, **step)

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        return self.sync.locks(prefix)

    def waker(self, lock_id: str) -> AsyncWaker:
        return AsyncSleeper()

    def close(self) -> None:
        """Nothing to close: the store is in this process's memory."""
