"""Clean-up that a cancellation does not cut short (asyncio only).

``asyncio.shield`` keeps a clean-up (a release, a grant given back) running when the task
awaiting it is cancelled again, but the task goes on at once: its ``async with`` ends with the
clean-up still on its way, and ``asyncio.run``'s shutdown may then cancel the clean-up itself,
leaving a lock held for a lease by nobody. ``finish`` awaits the clean-up to its end however
many cancellations come, and only then lets the cancellation go on. Each clean-up is bounded
by its own request budget, so the wait is too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Callable, TypeVar

_T = TypeVar("_T")


#: How many times a clean-up that something else cancelled is started again.
RESTARTS = 2


async def finish(
    start: Callable[[], Awaitable[_T]], dropped: Callable[[BaseException], None] | None = None
) -> _T:
    """The result of the clean-up ``start()`` begins, awaited to its end through any
    cancellation of the caller; a cancellation that came meanwhile is raised then, over the
    clean-up's own error (which is handed to ``dropped``, if given).

    The clean-up runs in a task of its own, which nothing here cancels: one that ends cancelled
    all the same was cut short by a sweep of every task of the loop (``asyncio.run``'s shutdown
    cancels each task still running once, this one too if it has started, and its release may
    never have been sent); it is started again, in a task that sweep does not know of. (A
    clean-up is a release, a give-back or a leave: sent again, it finds its work done.)"""
    cancelled: asyncio.CancelledError | None = None
    for _ in range(1 + RESTARTS):
        task = asyncio.ensure_future(start())
        while not task.done():
            try:
                await asyncio.wait({task})
            except asyncio.CancelledError as again:
                cancelled = again
        if not _cut_short(task):
            break
    if cancelled is None:
        return task.result()
    failed = None if task.cancelled() else task.exception()
    if failed is not None and dropped is not None:
        dropped(failed)
    raise cancelled


def _cut_short(task: asyncio.Future[Any]) -> bool:
    """Whether ``task`` ended on a cancellation (its own, or one of a task it awaited)."""
    return task.cancelled() or isinstance(task.exception(), asyncio.CancelledError)
