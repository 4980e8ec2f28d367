"""An asyncio event loop in virtual time, for a simulated process that runs ``awsflock.aio``.

``SimLoop`` is asyncio's own selector loop with three things replaced:

- its time (``loop.time()``) is the process's monotonic clock, so every timer (``asyncio.sleep``,
  ``wait_for``'s timeout, the renewer's waits) runs in virtual time;
- where it would block (``selector.select(timeout)``) it gives the baton back to the world's
  scheduler until its next timer is due, another simulated thread wakes it
  (``call_soon_threadsafe``: a step run in a thread is done), or a ``threading.Event`` one of its
  tasks waits on (``SimClock.wait_async``) is set; nothing sleeps for real, and the order is the
  seed's;
- it has no self-pipe: a wake-up from another thread sets a flag the scheduler looks at.

Anything else that blocks the loop's thread (a sleep or a request made in it, not awaited) is a
yield point outside ``select``: the world records it as the event loop blocked (``World.block``).

``awaited(store, proc)`` is the process's store as ``awsflock.aio`` sees it: production's
``AsyncThreadedStore`` (the sync store's steps in worker threads, awaited), its threads started
through the process's clock (``SimExecutor``), so each request stays a yield point of its own
and the checker's ``Tap`` sees each try. ``run(proc, main)`` runs a coroutine in a fresh loop;
a killed process's coroutines are closed where they stand, with no effect.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import math
import selectors
import threading
import warnings
from collections.abc import Coroutine
from typing import Any, Callable

from tests.simulation.world import Proc, SimThread


class _Selector(selectors.BaseSelector):
    """No file descriptors: ``select`` is the loop's yield point in the world."""

    def __init__(self, loop: SimLoop) -> None:
        self.loop = loop

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        raise NotImplementedError("a simulated event loop has no file descriptors")

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        raise KeyError(fileobj)

    def get_map(self) -> dict[Any, selectors.SelectorKey]:
        return {}

    def close(self) -> None:
        pass

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        loop = self.loop
        if not loop.fire() and not loop.woken and timeout != 0:
            world = loop.proc.world
            wake = None
            if timeout is not None:
                # Never "now" again: a timer due a rounding error away must still come due.
                wake = max(world.now + timeout, math.nextafter(world.now, math.inf))
            thread = threading.current_thread()
            assert isinstance(thread, SimThread)
            thread.in_select = True
            try:
                world.block(wake_at=wake, until=loop.wanted)
            finally:
                thread.in_select = False
            loop.fire()
        loop.woken = False
        return []


class SimLoop(asyncio.SelectorEventLoop):
    """The event loop of one simulated process (see the module docstring)."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc
        self.woken = False
        #: (event, future): a task waits for ``event`` (``wait_async``).
        self.watching: list[tuple[threading.Event, asyncio.Future[None]]] = []
        super().__init__(_Selector(self))
        self._clock_resolution = 1e-6
        # What asyncio reports from a finalizer ("Task exception was never retrieved": a task
        # of a killed process, collected whenever the collector runs) is not said: saying it
        # formats a traceback at a moment no seed decides.
        self.set_exception_handler(lambda _loop, _context: None)

    def time(self) -> float:
        return self.proc.clock.monotonic()

    def _make_self_pipe(self) -> None:
        self._ssock = self._csock = None

    def _close_self_pipe(self) -> None:
        pass

    def _write_to_self(self) -> None:
        self.woken = True

    def wanted(self) -> bool:
        """Whether the loop has something to do (woken, or an event it watches is set)."""
        return self.woken or any(event.is_set() for event, _ in self.watching)

    def fire(self) -> bool:
        """Wake the tasks whose event is set; whether any was."""
        fired = False
        for event, future in self.watching:
            if event.is_set() and not future.done():
                future.set_result(None)
                fired = True
        return fired


async def wait_event(event: threading.Event, seconds: float) -> bool:
    """``SimClock.wait_async``: until ``event`` is set (by any simulated thread) or ``seconds``
    of virtual time pass; True if it is set."""
    if event.is_set():
        return True
    loop = asyncio.get_running_loop()
    assert isinstance(loop, SimLoop), "a simulated clock awaited outside a simulated loop"
    future: asyncio.Future[None] = loop.create_future()
    entry = (event, future)
    loop.watching.append(entry)
    timer = loop.call_later(max(0.0, seconds), _settle, future)
    try:
        await future
    finally:
        timer.cancel()
        loop.watching.remove(entry)
    return event.is_set()


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class SimExecutor(concurrent.futures.Executor):
    """Each call in a simulated thread of ``proc`` of its own, started through its clock."""

    def __init__(self, proc: Proc) -> None:
        self.proc = proc

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def call() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:  # the step's error is its awaiter's (Killed goes on)
                future.set_exception(exc)
            else:
                future.set_result(result)

        self.proc.clock.start_thread(call, (), "step")
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        pass


def awaited(store: Any, proc: Proc) -> Any:
    """``store`` (a process's ``Tap``) awaited as production awaits a synchronous store."""
    from awsflock.stores.threaded_async import AsyncThreadedStore

    threaded = AsyncThreadedStore(store)
    threaded._pool = SimExecutor(proc)  # type: ignore[assignment]
    return threaded


def run(proc: Proc, main: Coroutine[Any, Any, None]) -> None:
    """Run ``main`` in a fresh ``SimLoop`` of ``proc`` (in its thread), then what it left
    running, cancelled. Killed: every coroutine is closed where it stands, nothing sent."""
    loop = SimLoop(proc)
    thread = threading.current_thread()
    assert isinstance(thread, SimThread)
    thread.runs_loop = True
    try:
        loop.run_until_complete(main)
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in left:
            task.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
    except BaseException:  # killed, or a violation found in one of its tasks
        _bury(loop)
        raise
    finally:
        thread.runs_loop = False
        if not loop.is_running():
            loop.close()


def _bury(loop: SimLoop) -> None:
    """Close a killed process's coroutines where they stand: with no loop running, nothing
    they would await runs (a killed process sends nothing more)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for task in asyncio.all_tasks(loop):
            task._log_destroy_pending = False  # type: ignore[attr-defined]
            coro: Any = task.get_coro()
            for _ in range(20):  # a handler that awaits again is closed again, where it awaits
                with contextlib.suppress(BaseException):
                    coro.close()
                if inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED:
                    break
