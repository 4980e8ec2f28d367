"""The store contract of the asynchronous lock logic (``awsflock.lock.*_async``, ``awsflock.aio``):
``AsyncLockStore`` is ``awsflock.protocol.LockStore`` with each lock step a coroutine, stated
once there. ``scripts/unasync`` turns these names into the synchronous ones (``AsyncLockStore``
into ``LockStore``, module ``protocol_async`` into ``protocol``) when it makes the synchronous
twin of the lock logic, so what the two promise cannot drift apart.

A step awaited is one request: cancelled while it is on the wire, it may still land (and be
applied) after the cancellation; the lock logic counts it as sent (an attempt's lease id stays
unsettled until released) exactly as it counts a request whose answer was lost.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import Protocol

from awsflock.clock_async import AsyncClock
from awsflock.protocol import Attempt, Drops, Outcome
from awsflock.records import Waiter
from awsflock.state import LockState, StateWrite


class AsyncWaker(Protocol):
    """``awsflock.protocol.Waker``, its pause awaited."""

    async def pause(
        self, clock: AsyncClock, seconds: float, cancel: threading.Event | None
    ) -> bool: ...

    def close(self) -> None: ...


class AsyncSleeper:
    """``awsflock.protocol.Sleeper``, awaited: the pause is slept out, never blocking the loop."""

    async def pause(
        self, clock: AsyncClock, seconds: float, cancel: threading.Event | None
    ) -> bool:
        if cancel is not None:
            await clock.wait_async(cancel, seconds)
        else:
            await clock.sleep_async(seconds)
        return False

    def close(self) -> None:
        pass


class AsyncLockStore(Protocol):
    """``awsflock.protocol.LockStore`` (see there for what each step does), its steps awaited.
    Only what the lock logic calls; the operators' steps stay synchronous."""

    kind: str
    table_name: str
    request_timeout: float
    clock: AsyncClock

    @property
    def skew_free(self) -> bool: ...

    def where(self) -> str: ...

    def budget(self, end: float) -> AbstractContextManager[None]:
        """As ``LockStore.budget``; it holds for the calls of the task (or thread) inside it."""
        ...

    async def take(self, lock_id: str, attempt: Attempt) -> Outcome: ...

    async def join(self, lock_id: str, waiter: Waiter) -> Outcome: ...

    async def beat(
        self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()
    ) -> Outcome: ...

    async def leave(self, lock_id: str, ticket: str) -> Outcome: ...

    async def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
        state: StateWrite | None = None,
    ) -> Outcome: ...

    async def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome: ...

    async def read(self, lock_id: str, lease_id: str | None = None) -> Outcome: ...

    async def read_state(self, lock_id: str) -> LockState: ...

    def waker(self, lock_id: str) -> AsyncWaker: ...


__all__ = ["AsyncLockStore", "AsyncSleeper", "AsyncWaker"]
