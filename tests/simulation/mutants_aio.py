"""Known bugs of the asynchronous API (``awsflock.aio``), put back on purpose: each breaks one
of the rules the aio processes are checked by (``bodies``, ``aioclients``), and the simulator
must find it within its CI budget with a share of the workers on aio (``AIO_SHARE``)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from awsflock import aio
from awsflock.lock import finishing, waiting_async
from awsflock.stores import threaded_async
from tests.simulation.patching import patched

#: The share of workers that run awsflock.aio when these are looked for.
AIO_SHARE = 0.5


def release_before_the_body_stopped() -> contextlib.AbstractContextManager[None]:
    """R. On loss the hold cancels the body and sends the release at once, as client-go
    does, not once the body has stopped: a body still cleaning up works unprotected."""
    cancel = aio.Hold._cancel_body

    def hasty(self: aio.Hold) -> None:
        cancel(self)
        lease = self._lease
        if self._cancelled_body and lease is not None and not lease.released:
            asyncio.get_running_loop().create_task(_quietly(lease.release()))

    return patched((aio.Hold, "_cancel_body", hasty))


async def _quietly(release: Any) -> None:
    with contextlib.suppress(Exception):
        await release


def body_not_cancelled() -> contextlib.AbstractContextManager[None]:
    """S. A lost lease is declared (``lost`` set, ``check()`` raises) but the body is not
    cancelled: a body that does not call ``check()`` runs on beside the next holder."""
    return patched((aio.Hold, "_cancel_body", lambda self: None))


def grant_kept_when_cancelled() -> contextlib.AbstractContextManager[None]:
    """T. A wait cancelled (a task's timeout) does not give back what it may hold: a grant
    whose answer came while the task was being cancelled, or an attempt on the wire, is left
    held by a process that does not know it (the thread-and-timeout leak of issue 40)."""
    real = finishing.finish

    async def finish(start: Any, dropped: Any = None) -> Any:
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", lambda: 0)() if task is not None else 0
        step = start()
        if cancelling and getattr(step, "__name__", "") in ("_give_up_all", "give_back"):
            step.close()
            return None
        return await real(lambda: step, dropped)

    return patched((waiting_async, "finish", finish))


def release_cut_short() -> contextlib.AbstractContextManager[None]:
    """U. A block cancelled again while it releases ends at once, its release still on the
    wire (``asyncio.shield`` alone, as before the simulator found it)."""

    async def shielded(start: Any, dropped: Any = None) -> Any:
        return await asyncio.shield(start())

    return patched((aio, "finish", shielded))


def step_in_the_loop() -> contextlib.AbstractContextManager[None]:
    """V. The thread-pool store runs a step in the event loop's own thread, blocking every
    other task of the loop (its renewals included) while the request is on its way."""

    async def inline(self: Any, step: Any, *args: Any, **kwargs: Any) -> Any:
        return step(*args, **kwargs)

    return patched((threaded_async.AsyncThreadedStore, "_run", inline))


MUTANTS_AIO = {
    "R release before the body stopped": release_before_the_body_stopped,
    "S body not cancelled on loss": body_not_cancelled,
    "T cancelled wait keeps its grant": grant_kept_when_cancelled,
    "U release cut short by a second cancellation": release_cut_short,
    "V a step run in the event loop's thread": step_in_the_loop,
}
