"""The request layer of ``awsflock.aio`` for a store that reaches its server through an
asynchronous link (``AsyncLink``): what ``requests`` and ``connected`` do for threads, for
tasks. Each event loop has up to ``connected.CONNECTIONS`` connections of its own, made as its
tasks send at once; one try at a time uses each.

- A call's budget (``budget``) is the task's (a context variable); each try is bounded by what
  is left of it, retries back off with jitter, and a retry goes only if ``MIN_TRY`` of the
  budget is left when it is about to be sent (after a pause of the process too).
- The gate: a try is sent only if its time is not over once it holds the connection (made if
  need be); one refused there was never sent. A try past the gate that fails may have been
  applied (``maybe_applied``); so may one that times out, or whose task is cancelled while it
  is on the wire: its connection is closed (it is mid-reply) and never used again, and the
  cancellation goes on. The lock logic counts such a step as sent: its attempt stays
  unsettled until released.
- A later try answered does not make an earlier one's late landing forgotten: the call is *in
  doubt* (``_in_doubt``) and its answer says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import random
import weakref
from collections.abc import Awaitable, Iterator
from typing import Any, Callable, Generic, Protocol, TypeVar

from awsflock import errors, metrics
from awsflock.clock_async import AsyncClock
from awsflock.protocol import MIN_TRY
from awsflock.protocol_async import AsyncSleeper, AsyncWaker
from awsflock.stores.remote import loop_end
from awsflock.stores.remote.connected import CONNECTIONS
from awsflock.stores.remote.link import C, Translated
from awsflock.stores.remote.requests import backoff, retry_fits, still_fits

_T = TypeVar("_T")
#: Real time a try is given beyond its timeout before it counts as unanswered.
TRY_GRACE = 0.5

_END: contextvars.ContextVar[float | None] = contextvars.ContextVar("awsflock_end", default=None)
_DOUBT: contextvars.ContextVar[bool] = contextvars.ContextVar("awsflock_doubt", default=False)
_TIMEOUT: contextvars.ContextVar[float] = contextvars.ContextVar("awsflock_try", default=0.0)
_SEND_BY: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "awsflock_send_by", default=None
)


class AsyncLink(Protocol[C]):
    """``awsflock.stores.remote.link.Link``, its connect and close awaited."""

    def where(self) -> str: ...

    async def connect(self, timeout: float) -> C: ...

    async def close(self, conn: C) -> None: ...

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated: ...


class _Line:
    """One connection of an event loop, and the lock its tries take turns on."""

    def __init__(self) -> None:
        self.conn: Any = None
        self.lock = asyncio.Lock()


class _Lines:
    """One event loop's connections."""

    def __init__(self) -> None:
        self.lines = [_Line() for _ in range(CONNECTIONS)]
        self.turn = 0
        #: Closes them as the loop ends (``loop_end``), unless replaced by then.
        self.keeper: Any = None

    def pick(self) -> _Line:
        """The line a try takes: a free one with a connection, else a free one without, else
        the next in turn (to wait for)."""
        free = [line for line in self.lines if _free(line.lock)]
        for line in free:
            if line.conn is not None:
                return line
        if free:
            return free[0]
        self.turn = (self.turn + 1) % len(self.lines)
        return self.lines[self.turn]


class AsyncConnected(Generic[C]):
    """A store whose calls go through ``link``; a subclass sets ``link``, ``clock`` and
    ``request_timeout``, and calls ``_connected_init``."""

    link: AsyncLink[C]
    clock: AsyncClock
    request_timeout: float
    #: Where backoff pauses draw their jitter.
    _retry_rng: random.Random = random.Random()

    def _connected_init(self) -> None:
        self._lines: weakref.WeakKeyDictionary[Any, _Lines] = weakref.WeakKeyDictionary()
        #: Closes of forgotten lines still waiting for a try on them (``close_async``), of
        #: every loop (copied before it is read: a loop in another thread may change it).
        self._closing: set[asyncio.Task[None]] = set()

    def where(self) -> str:
        return self.link.where()

    def actor(self) -> str | None:
        return None

    def waker(self, lock_id: str) -> AsyncWaker:
        return AsyncSleeper()

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        """Calls of this task made inside end by ``end`` (an outer, earlier end wins)."""
        outer = _END.get()
        token = _END.set(end if outer is None else min(outer, end))
        try:
            yield
        finally:
            _END.reset(token)

    def _try_timeout(self) -> float:
        """The current try's time, for a link's own waits."""
        return _TIMEOUT.get()

    def may_send(self) -> bool:
        """Whether the current try's gate is still open (a link that sends again within one
        try asks first: Redis's step, after the server lost its script)."""
        send_by = _SEND_BY.get()
        return send_by is None or asyncio.get_running_loop().time() < send_by

    def _in_doubt(self) -> bool:
        """Whether the task's last call had a try that may have reached the store."""
        return _DOUBT.get()

    async def close_async(self) -> None:
        """Close this loop's connections (a try using one now finishes first; a try after this
        makes a new one). Cut short (a timeout around it), the closes still go on once those
        tries are done; called again, it waits for them."""
        loop = asyncio.get_running_loop()
        lines = self._lines.pop(loop, None)
        # Every line, whatever it seems to be doing now: one with no connection, given back
        # to a waiter that has not run yet (or to a try whose wait has not begun), is about to
        # get one. Its close waits behind those tries.
        for line in lines.lines if lines is not None else ():
            closing = loop.create_task(self._close_line(line))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)
        pending = [task for task in tuple(self._closing) if task.get_loop() is loop]
        if pending:
            await asyncio.shield(asyncio.wait(pending))

    async def _close_line(self, line: _Line) -> None:
        async with line.lock:
            await self._drop(line)

    async def _drop(self, line: _Line) -> None:
        conn, line.conn = line.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await self.link.close(conn)

    async def _send(self, operation: str, call: Callable[[C], Awaitable[_T]]) -> _T:
        """Make one call, retrying throttling and transient failures while the budget lasts;
        a final failure carries ``maybe_applied`` if any try may have reached the store."""
        start = self.clock.monotonic()
        try:
            answer = await self._tries(operation, call, start)
        except errors.AwsflockError as err:
            self._measured(operation, start, type(err).__name__)
            raise
        self._measured(operation, start, "ok")
        return answer

    def _measured(self, operation: str, start: float, outcome: str) -> None:
        took = self.clock.monotonic() - start
        metrics.record(
            "awsflock.store.request.duration", took, None, self, step=operation, outcome=outcome
        )

    async def _tries(self, operation: str, call: Callable[[C], Awaitable[_T]], start: float) -> _T:
        end = _END.get()
        if end is None:
            end = start + self.request_timeout
        _DOUBT.set(False)
        tries = 0
        while True:
            tries += 1
            timeout = max(MIN_TRY, min(self.request_timeout, end - self.clock.monotonic()))
            try:
                return await self._attempt(operation, call, timeout)
            except (errors.Throttled, errors.EndpointUnreachable) as err:
                if err.maybe_applied:
                    _DOUBT.set(True)
                pause = backoff(tries, self._retry_rng)
                if retry_fits(self.clock.monotonic() + pause, end):
                    await self.clock.sleep_async(pause)
                    if still_fits(self.clock.monotonic(), end):
                        continue
                err.maybe_applied = _DOUBT.get()
                took = self.clock.monotonic() - start
                err.message += f" ({tries} {'try' if tries == 1 else 'tries'} in {took:.1f}s)"
                raise
            except errors.AwsflockError as err:
                err.maybe_applied = err.maybe_applied or _DOUBT.get()
                raise
            except asyncio.CancelledError:
                _DOUBT.set(True)
                raise

    def _line(self) -> _Line:
        loop = asyncio.get_running_loop()
        lines = self._lines.get(loop)
        if lines is None:
            lines = self._lines[loop] = _Lines()
            lines.keeper = loop_end.keeper(
                loop_end.weak_method(self.close_async), _still(self, loop, lines)
            )
        return lines.pick()

    async def _attempt(
        self, operation: str, call: Callable[[C], Awaitable[_T]], timeout: float
    ) -> _T:
        """One try: the connection (waited for, made if need be) within its time, the gate,
        then the call on the wire, bounded by its time plus a grace."""
        loop = asyncio.get_running_loop()
        send_by = loop.time() + timeout
        line = self._line()

        async def give_back(_: bool) -> None:
            line.lock.release()

        try:
            if _free(line.lock):
                # Taken at once, before another task picks it too (a free lock with no waiter
                # is taken without a pause).
                await line.lock.acquire()
            else:
                # Held, or given back to a waiter that has not run yet (asyncio.Lock queues a
                # try behind it, unbounded): waited for within the try's time.
                await _within(line.lock.acquire(), timeout, give_back)
        except asyncio.TimeoutError:
            raise errors.EndpointUnreachable(
                f"{self.where()} did not answer in time (other tries held every connection)",
                hint="check that the server is up and reachable, and retry",
            ) from None
        try:
            return await self._on_wire(operation, call, timeout, send_by, line)
        finally:
            line.lock.release()

    async def _on_wire(
        self,
        operation: str,
        call: Callable[[C], Awaitable[_T]],
        timeout: float,
        send_by: float,
        line: _Line,
    ) -> _T:
        loop = asyncio.get_running_loop()
        sent = False
        try:
            if line.conn is None:
                left = max(0.0, send_by - loop.time())
                line.conn = await _within(self.link.connect(timeout), left, self.link.close)
            if loop.time() >= send_by:
                raise errors.EndpointUnreachable(
                    f"{self.where()}: the try was given up before it was sent", hint="retry"
                )
            sent = True
            _TIMEOUT.set(timeout)
            _SEND_BY.set(send_by)
            return await self._answer(asyncio.ensure_future(call(line.conn)), send_by, line)
        except errors.AwsflockError as err:
            if err.maybe_applied:
                await self._drop(line)
            raise
        except asyncio.TimeoutError:
            await self._drop(line)
            late = errors.EndpointUnreachable(
                f"{self.where()} did not answer in time" + ("" if sent else " (connecting)"),
                hint="check that the server is up and reachable, and retry",
            )
            late.maybe_applied = sent
            raise late from None
        except asyncio.CancelledError:
            if not sent:
                await asyncio.shield(self._drop(line))  # a connect cut short
            raise
        except Exception as exc:
            mapped = self.link.translate(exc, operation=operation, sent=sent)
            if mapped.broken:
                await self._drop(line)
            raise mapped.error from exc

    async def _answer(self, step: asyncio.Future[_T], send_by: float, line: _Line) -> _T:
        """The sent step's answer, by its time plus a grace (``TimeoutError`` after). Cancelled
        meanwhile, however many times, the step is let land (or fail) within that time before
        the cancellation goes on: the clean-up that follows (an attempt's release, a place's
        leave) is sent after it, never before. One still on the wire then is cut off, and its
        connection closed (it is mid-reply)."""
        loop = asyncio.get_running_loop()
        deadline = send_by + TRY_GRACE
        cancelled = False
        while not step.done():
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait((step,), timeout=left)
            except asyncio.CancelledError:
                cancelled = True
        if not step.done():
            # Closed first: cut off, the driver has nothing left to cancel on the server
            # (psycopg would try, fail on the closed connection, and log a warning).
            step.add_done_callback(_retrieved)
            await asyncio.shield(self._drop(line))
            step.cancel()
            if cancelled:
                raise asyncio.CancelledError
            raise asyncio.TimeoutError
        if step.cancelled():
            # Cancelled from outside (a sweep of every task of the loop, as asyncio.run's end
            # makes): it may have stopped mid-reply, so its connection is never used again.
            await asyncio.shield(self._drop(line))
            raise asyncio.CancelledError
        if cancelled:
            # Its failure is never read (the cancellation goes on): whatever it was, its
            # connection is not used again (it may have replies left unread).
            if step.exception() is not None:
                await asyncio.shield(self._drop(line))
            raise asyncio.CancelledError
        return step.result()


def _still(store: AsyncConnected[Any], loop: Any, lines: _Lines) -> Callable[[], bool]:
    """Whether ``lines`` are still ``store``'s for ``loop`` (all held weakly: the loop's state
    must not keep the loop, or the store, alive)."""
    store_ref, loop_ref, lines_ref = weakref.ref(store), weakref.ref(loop), weakref.ref(lines)

    def still() -> bool:
        made, at, mine = store_ref(), loop_ref(), lines_ref()
        if made is None or at is None or mine is None:
            return False
        return made._lines.get(at) is mine

    return still


async def _within(
    started: Awaitable[_T], timeout: float, undo: Callable[[_T], Awaitable[None]]
) -> _T:
    """``started``'s result by ``timeout`` (``TimeoutError`` after), as ``asyncio.wait_for``
    but never swallowing a cancellation: before Python 3.12, ``wait_for`` returns the result
    of an awaitable that completes as its task is cancelled, and the cancellation is lost
    (a task cancelled while it waits for the connection would go on and send its step). Cut
    short, ``started`` is cancelled and waited for, and what it made anyway is undone."""
    task = asyncio.ensure_future(started)
    try:
        await asyncio.wait((task,), timeout=timeout)
    except asyncio.CancelledError:
        await asyncio.shield(_ended(task, undo))
        raise
    if not task.done():
        await asyncio.shield(_ended(task, undo))
        raise asyncio.TimeoutError
    return task.result()


async def _ended(task: asyncio.Future[_T], undo: Callable[[_T], Awaitable[None]]) -> None:
    """``task`` cancelled and ended; its result, if it made one all the same, undone."""
    task.cancel()
    await asyncio.wait((task,))
    if not task.cancelled() and task.exception() is None:
        await undo(task.result())


def _free(lock: asyncio.Lock) -> bool:
    """Whether ``lock`` is taken at once: not held, and no waiter woken for it but not yet run
    (``asyncio.Lock`` gives it to that waiter first)."""
    waiters = getattr(lock, "_waiters", None) or ()
    return not lock.locked() and all(waiter.cancelled() for waiter in waiters)


def _retrieved(step: asyncio.Future[Any]) -> None:
    """A step cut off: its end (an error from its closed connection) is not news."""
    if not step.cancelled():
        step.exception()
