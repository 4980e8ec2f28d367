"""A synchronous store awaited: each step runs in a bounded pool of worker threads, so the
event loop is never blocked by it (``awsflock.aio`` on DynamoDB: botocore has no asynchronous
client).

A step's budget (``budget``) is the awaiting task's, carried into the thread that runs it. A
step whose task is cancelled while it runs is not abandoned on the wire: the cancellation waits
for the thread's step to end (within its budget), then goes on. So the clean-up that follows
(the release of an attempt that may have been granted) is always sent after the step it
cleans up has landed or failed, never before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from awsflock.clock_async import AsyncClock
from awsflock.protocol import Attempt, Drops, LockStore, Outcome
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.records import Waiter
from awsflock.sets import SetSteps

#: Steps of one store running at once, at most (each a thread while it runs).
MAX_THREADS = 16

_T = TypeVar("_T")
_BUDGET: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "awsflock_step_budget", default=None
)


class AsyncThreadedStore:
    """``store``'s steps awaited, each run in one of at most ``MAX_THREADS`` threads."""

    def __init__(self, store: LockStore) -> None:
        self.sync = store
        self.kind = store.kind
        self.table_name = store.table_name
        self.request_timeout = store.request_timeout
        self.try_grace: float = getattr(store, "try_grace", 0.0)
        clock: Any = store.clock
        self.clock: AsyncClock = clock
        self._pool: ThreadPoolExecutor | None = None
        self._making = threading.Lock()

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

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        """The steps this task awaits inside end by ``end`` (an outer, earlier end wins)."""
        outer = _BUDGET.get()
        token = _BUDGET.set(end if outer is None else min(outer, end))
        try:
            yield
        finally:
            _BUDGET.reset(token)

    async def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        return await self._run(self.sync.take, lock_id, attempt)

    async def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        return await self._run(self.sync.join, lock_id, waiter)

    async def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        return await self._run(self.sync.beat, lock_id, ticket, now_ms=now_ms, drop=drop)

    async def leave(self, lock_id: str, ticket: str) -> Outcome:
        return await self._run(self.sync.leave, lock_id, ticket)

    async def renew(self, lock_id: str, lease_id: str, **step: Any) -> Outcome:
        return await self._run(self.sync.renew, lock_id, lease_id, **step)

    async def release(self, lock_id: str, lease_id: str, **step: Any) -> Outcome:
        return await self._run(self.sync.release, lock_id, lease_id, **step)

    async def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        return await self._run(self.sync.read, lock_id, lease_id)

    async def read_state(self, lock_id: str) -> Any:
        return await self._run(self.sync.read_state, lock_id)

    async def take_all(self, takes: Any) -> tuple[Outcome, ...]:
        return await self._run(self._sets().take_all, takes)

    async def renew_all(self, leases: Any, **step: Any) -> tuple[Outcome, ...]:
        return await self._run(self._sets().renew_all, leases, **step)

    async def release_all(self, leases: Any, **step: Any) -> tuple[Outcome, ...]:
        return await self._run(self._sets().release_all, leases, **step)

    async def claim(self, lock_id: str, **step: Any) -> Outcome:
        steps: Any = self.sync
        return await self._run(steps.claim, lock_id, **step)

    def _sets(self) -> SetSteps:
        """The store's set steps (a kind without them refuses a set before this is reached)."""
        steps: Any = self.sync
        return steps  # type: ignore[no-any-return]

    def waker(self, lock_id: str) -> AsyncWaker:
        return AsyncSleeper()

    def close(self) -> None:
        """Let the worker threads end (a step running finishes) and close the store."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        close = getattr(self.sync, "close", None)
        if close is not None:
            close()

    def _threads(self) -> ThreadPoolExecutor:
        with self._making:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_THREADS, "awsflock-step")
            return self._pool

    async def _run(self, step: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        end = _BUDGET.get()
        call = functools.partial(_bounded, self.sync, end, step, args, kwargs)
        future = asyncio.get_running_loop().run_in_executor(self._threads(), call)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # The step may be on the wire: let it land (or fail) before anything follows it,
            # however many more cancellations come meanwhile (a timeout and a TaskGroup).
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await _landed(future)
            raise


async def _landed(future: asyncio.Future[Any]) -> None:
    """Wait for ``future`` to end, whatever its outcome (its error is its caller's)."""
    with contextlib.suppress(Exception):
        await asyncio.shield(future)


def _bounded(
    store: LockStore,
    end: float | None,
    step: Callable[..., _T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> _T:
    if end is None:
        return step(*args, **kwargs)
    with store.budget(end):
        return step(*args, **kwargs)
