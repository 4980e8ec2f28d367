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
from typing import Callable, TypeVar

_T = TypeVar("_T")


async def finish(work: Awaitable[_T], dropped: Callable[[BaseException], None] | None = None) -> _T:
    """``work``'s result, awaited to its end through any cancellation of the caller; a
    cancellation that came meanwhile is raised then, over ``work``'s own error (which is
    handed to ``dropped``, if given)."""
    task = asyncio.ensure_future(work)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as again:
            cancelled = again
    if cancelled is None:
        return task.result()
    failed = None if task.cancelled() else task.exception()
    if failed is not None and dropped is not None:
        dropped(failed)
    raise cancelled
