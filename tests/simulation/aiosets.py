"""What a simulated ``awsflock.aio`` process does with sets (``--sets``): several names taken
together, awaited: ``async with table.lock([...])`` with a body (``AioClient.body``) that
writes to each name's fenced counter just after ``check()``, ``await table.acquire([...])``
renewed and released as one, and either under a task timeout that may cancel it anywhere (a
cancelled acquire holds none of the names afterwards). Mixed into ``aioclients.AioClient``;
the set helpers that need no awaiting are ``clients_sets.SetWork``'s.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from awsflock import errors
from tests.simulation.clients_sets import SETS

if TYPE_CHECKING:
    from tests.simulation.checker import Checker
    from tests.simulation.world import Proc


class AioSetWork:
    """An aio worker's set operations (``AioClient`` supplies what is declared here)."""

    proc: Proc
    checker: Checker
    rng: Any
    aio_table: Any
    store: Any

    if TYPE_CHECKING:

        def count(self) -> bool: ...

        async def sleep(self, low: float, high: float) -> None: ...

        def timeout(self, wait: float) -> float: ...

        async def body(self, held: Any, members: list[tuple[Any, Any]], lease_s: float) -> None: ...

        def _told_acquired(self, leases: Any, lease_s: float) -> None: ...

        def _believe(self, held: Any) -> None: ...

        def _write_all(self, held: Any) -> None: ...

        def _set_renewed(self, held: Any) -> bool: ...

        def _set_not_renewed(self, exc: errors.NotHeld, held: Any) -> bool: ...

        def _told_set_not_held(self, exc: errors.NotHeld, held: Any, renewing: bool) -> None: ...

    async def set_op(self, choice: float) -> None:
        if choice < 0.4:
            await self.locked_set()
        elif choice < 0.65:
            await self.leased_set()
        else:
            await self.cancelled_set()

    def _no_phantoms(self, names: list[str]) -> None:
        for name in names:
            self.checker.no_phantom(self.proc, name)

    # -- a set's block -------------------------------------------------------------------------

    async def locked_set(self, wait: float | None = None) -> None:
        if not self.count():
            return
        names = list(self.rng.choice(SETS))
        lease_s = self.rng.choice((5.0, 10.0, 20.0))
        if wait is None:
            wait = self.rng.choice((0.0, 0.0, 5.0, 30.0))
        hold = self.aio_table.lock(names, lease=lease_s, wait=wait)
        try:
            async with hold as held:
                members = [((lease.lock_id, None), lease) for lease in held.lease.leases]
                await self.body(held, members, lease_s)
        except errors.LeaseLost:
            pass
        except errors.AwsflockError:
            if hold._lease is None:
                self._no_phantoms(names)
            raise
        finally:
            leases = [] if hold._lease is None else hold._lease.leases
            on_way = [x.lease_id for x in leases if x.lease_id in self.store.releasing]
            if not self.proc.killed and on_way:
                self.checker.fail(
                    f"{self.proc.name}'s lock() block on {names} ended with the release of "
                    f"{', '.join(i[:8] for i in on_way)} still on its way"
                )

    # -- a set's lease, awaited ----------------------------------------------------------------

    async def leased_set(self, wait: float | None = None) -> None:
        if not self.count():
            return
        names = list(self.rng.choice(SETS))
        if wait is None:
            wait = self.rng.choice((0.0, 0.0, 5.0, 20.0, 60.0))
        lease_s = self.rng.choice((5.0, 10.0, 20.0, 40.0))
        try:
            held = await self.aio_table.acquire(names, lease=lease_s, wait=wait)
        except errors.AwsflockError:
            self._no_phantoms(names)
            raise
        try:
            await self.use_set(held, lease_s)
        except asyncio.CancelledError:
            for lease in held.leases:
                self.checker.drop(lease.lease_id)  # walks away: the leases run out
            raise

    async def use_set(self, held: Any, lease_s: float) -> None:
        self._told_acquired(held.leases, lease_s)
        self._believe(held)
        self._write_all(held)
        for _ in range(self.rng.randrange(1, 6)):
            await self.sleep(0.0, lease_s / 2)
            if not self.count():
                break
            if held.remaining() < lease_s / 2 and not await self._renew_set(held):
                return
            self._write_all(held)
        for lease in held.leases:  # from the moment it asks, it no longer relies on them
            self.checker.drop(lease.lease_id)
        if self.rng.random() < 0.9 and self.count():
            await self._release_set(held)

    async def _renew_set(self, held: Any) -> bool:
        try:
            await held.renew()
        except errors.NotHeld as exc:
            return self._set_not_renewed(exc, held)
        except errors.AwsflockError:
            return True  # unanswered: the set may still be ours, by its old ends
        return self._set_renewed(held)

    async def _release_set(self, held: Any) -> None:
        try:
            await held.release()
        except errors.NotHeld as exc:
            self._told_set_not_held(exc, held, renewing=False)
            return
        except errors.AwsflockError:
            return
        for lease in held.leases:
            self.checker.told_released(self.proc, (lease.lock_id, None), lease.lease_id)

    # -- cancelled by a task's timeout ---------------------------------------------------------

    async def cancelled_set(self) -> None:
        """A set's acquire (or ``lock()`` block) under a timeout that may cancel it anywhere:
        afterwards it holds none of the names it did not hear of."""
        wait = self.rng.choice((0.0, 5.0, 20.0, 60.0))
        timeout = self.timeout(wait)
        work = self.locked_set(wait) if self.rng.random() < 0.5 else self.leased_set(wait)
        try:
            await asyncio.wait_for(work, timeout)
        except asyncio.TimeoutError:
            self.checker.cancelled += 1
            self._no_phantoms(sorted({name for names in SETS for name in names}))
