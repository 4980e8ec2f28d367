"""awsflock for asyncio: the names of the synchronous API, awaited.

::

    from awsflock import aio

    table = aio.connect("postgresql://app@db/ops?table=locks")
    async with table.lock("tenant-42:billing", lease=30, wait=10) as held:
        await close_period(fence=held.fencing_token)

The lock logic is the synchronous API's own (``awsflock/lock/*_async.py`` is the source of
both). What only this module adds is what a task can do and a thread cannot: a lease that is
lost (refused, or not confirmed by its end less a margin) **cancels the body** of its
``async with``, waits for it to stop, releases, and raises ``LeaseLost`` from the block; the
release is never sent while the body runs. A task cancelled while it waits for a lock, at the
moment of the grant, or while a step is on the wire holds nothing afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Sequence
from typing import Any, Callable

from awsflock import errors
from awsflock.clock import Clock
from awsflock.lock import heartbeat_async, table_async
from awsflock.lock.election_async import Election, Term
from awsflock.lock.finishing import finish
from awsflock.lock.table_async import DEFAULT_WAIT, WAIT_FOREVER
from awsflock.records import Identity

__all__ = ["WAIT_FOREVER", "Election", "Hold", "LockTable", "Term", "connect"]

#: ``on_lost(hold, error)``: called once, as the loss is declared (the body's cancellation
#: is asked for just before; it takes effect at the body's next await).
LostCallback = Callable[["Hold", errors.LeaseLost], None]


class Hold(heartbeat_async.Hold):
    """A lock held while the body of ``async with table.lock(...)`` runs, renewed by the
    table's renewer. On loss the body is cancelled; the block then releases and raises
    ``LeaseLost`` (a cancellation of the task from elsewhere stays a cancellation)."""

    _body: asyncio.Task[Any] | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _cancelled_body = False
    _exiting = False

    async def __aenter__(self) -> Hold:
        self._body = asyncio.current_task()
        self._loop = asyncio.get_running_loop()
        await self.start()
        return self

    def _lost_now(self) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._cancel_body()
            return
        # Declared in another thread (``check()`` from work run with ``asyncio.to_thread``):
        # the body is cancelled in its own loop.
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs in it
            loop.call_soon_threadsafe(self._cancel_body)

    def _cancel_body(self) -> None:
        body = self._body
        if body is None or self._exiting or body.done():
            return
        if asyncio.current_task() is body:
            return  # declared by the body's own check(): it raises LeaseLost there and then
        self._cancelled_body = True
        body.cancel()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self._exiting = True
        still_cancelled = False
        if self._cancelled_body and self._body is not None:
            # Our own cancellation is taken back; one from elsewhere stays.
            uncancel = getattr(self._body, "uncancel", None)  # Python 3.11+
            still_cancelled = uncancel is not None and uncancel() > 0
        try:
            await finish(self.stop, _release_dropped(self.lock_id))
        except errors.LeaseLost as lost:
            if still_cancelled and exc_type is None:
                raise asyncio.CancelledError from lost  # the body swallowed one from elsewhere
            if still_cancelled or (exc_type is not None and not _ours(exc, self)):
                return  # the body's own error, or a cancellation from elsewhere, comes first
            raise lost from exc
        except errors.AwsflockError as err:
            if exc_type is None:
                raise
            heartbeat_async.log.warning("release of %r failed: %s", self.lock_id, err.one_line())


def _release_dropped(lock_id: str) -> Callable[[BaseException], None]:
    """What logs a release that failed under a cancellation (a lost lease says so itself)."""

    def dropped(failed: BaseException) -> None:
        if isinstance(failed, errors.AwsflockError) and not isinstance(failed, errors.LeaseLost):
            heartbeat_async.log.warning("release of %r failed: %s", lock_id, failed.one_line())

    return dropped


def _ours(exc: BaseException, hold: Hold) -> bool:
    """Whether the body ended on the loss itself: our cancellation, or ``check()``'s error."""
    if isinstance(exc, asyncio.CancelledError):
        return hold._cancelled_body
    return isinstance(exc, errors.LeaseLost)


class LockTable(table_async.LockTable):
    """Locks in one store, awaited (``awsflock.lock.lease.LockTable``'s API; ``connect()``
    makes one). ``lock()`` holds a lock while an ``async with`` block runs."""

    def lock(
        self,
        lock_id: str | Sequence[str],
        *,
        lease: float | str = 60.0,
        wait: float | str | None = DEFAULT_WAIT,
        renew_every: float | None = None,
        margin: float | None = None,
        on_lost: LostCallback | None = None,
        identity: Identity | None = None,
        slots: int | None = None,
        fair: bool = False,
        cancel: threading.Event | None = None,
        shared: bool = False,
        lock_delay: float | str = 0,
        max_hold: float | str | None = None,
        state: bool = False,
    ) -> Hold:
        """``async with table.lock("x", lease=30, wait=10) as held:``. Acquires on entry
        (waiting up to ``wait``), renews in the background, and on exit, once the body has
        stopped, releases. A lease that cannot be confirmed by its end less ``margin`` (or
        whose renewal is refused) cancels the body; the block then raises ``LeaseLost``. So
        does reaching ``max_hold``: ``HoldCapped``, a ``LeaseLost``. ``state=True``: read the
        lock's state at the grant (``held.state``; ``await held.save_state(data)`` writes it)."""
        return Hold(
            self,
            lock_id,
            lease=lease,
            wait=wait,
            renew_every=renew_every,
            margin=margin,
            on_lost=on_lost,  # type: ignore[arg-type]
            identity=identity,
            slots=slots,
            fair=fair,
            cancel=cancel,
            shared=shared,
            lock_delay=lock_delay,
            max_hold=max_hold,
            state=state,
        )

    async def aclose(self) -> None:
        """Close the store's connections: this event loop's (PostgreSQL, Redis), and the
        worker threads and connections of a store run in threads (DynamoDB). A service calls
        it at shutdown, in the loop that used the table (or uses ``async with``)."""
        close_async = getattr(self.store, "close_async", None)
        if close_async is not None:
            await close_async()
        self.close()

    def close(self) -> None:
        """What can be closed outside an event loop: worker threads and their connections,
        and the store beneath. A connection an event loop made is closed by ``aclose``."""
        close = getattr(self.store, "close", None)
        if close is not None:
            close()

    async def __aenter__(self) -> LockTable:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def connect(
    url: str | None = None,
    *,
    table: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    endpoint_url: str | None = None,
    request_timeout: float | str | None = None,
    skew: float | str | None = None,
    owner: str | None = None,
    clock: Clock | None = None,
) -> LockTable:
    """An asynchronous lock table on the store ``url`` names: the arguments and the rules of
    ``awsflock.connect`` (``AWSFLOCK_STORE``, else DynamoDB from the usual AWS settings;
    ``memory://`` for tests, shared with synchronous tables of the same ``memory://NAME``).
    Nothing connects until the first request."""
    from awsflock.lock.connect import open_store
    from awsflock.stores import kinds

    store, skew_s = open_store(
        url,
        table=table,
        region=region,
        profile=profile,
        endpoint_url=endpoint_url,
        request_timeout=request_timeout,
        skew=skew,
        clock=clock,
    )
    return LockTable(store=kinds.awaited(store), skew=skew_s, owner=owner)
