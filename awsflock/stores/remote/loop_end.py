"""Closing an event loop's connections as the loop ends, for a program that never calls
``aclose()``: ``asyncio.run`` (and pytest-asyncio, and any runner that calls
``loop.shutdown_asyncgens()``) closes every asynchronous generator still suspended in the loop
once its tasks are done. A store's per-loop state keeps one such generator, suspended for the
loop's life (``keeper``); closed at the loop's end, it runs the store's ``close_async`` in that
loop, so no connection is left to the garbage collector (with a ``ResourceWarning``, and its
socket open until then: one per ``asyncio.run`` of a script that runs it again and again).

A keeper whose state was replaced meanwhile (``close_async`` ran, and a later step made new
state) does nothing: it is dropped with its state and finalized while the loop runs, and must
not close the connections that came after it. A loop closed without ``shutdown_asyncgens``
finalizes nothing (asyncio does not, once closed); nor did it before.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Callable


def keeper(close: Callable[[], Awaitable[None] | None], current: Callable[[], bool]) -> Any:
    """An asynchronous generator of the running loop, suspended at once, that awaits
    ``close()`` when the loop shuts its generators down, if ``current()`` still says its state
    is the store's. Keep it with that state (the loop holds it weakly)."""
    made = _until_the_loop_ends(close, current)
    step: Any = made.__anext__()  # the loop's first-iteration hook registers it now
    with contextlib.suppress(StopIteration):
        step.send(None)  # runs to its yield: nothing is awaited before it
    return made


async def _until_the_loop_ends(
    close: Callable[[], Awaitable[None] | None], current: Callable[[], bool]
) -> AsyncIterator[None]:
    try:
        yield
    finally:
        if current():
            with contextlib.suppress(Exception):
                closing = close()
                if closing is not None:
                    await closing


def weak_method(method: Any) -> Callable[[], Awaitable[None] | None]:
    """``method`` (bound), called through a weak reference to its object: a keeper must not
    keep its store alive (None once the store is gone)."""
    ref = weakref.WeakMethod(method)

    def call() -> Awaitable[None] | None:
        bound = ref()
        return None if bound is None else bound()

    return call
