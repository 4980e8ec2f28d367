"""What a simulated process that runs ``awsflock.aio`` does (``--aio``: a seeded share of the
workers), in an event loop in virtual time (``aioloop``), over the same faulty store of its own
as every other process, awaited as production awaits it (``aioloop.awaited``).

Two tasks: the work, one operation after another, and (in most processes) an election.

- ``async with table.lock(...)``: a body that works with fenced writes (``held.check()`` just
  before each), waiting or not, in line (``fair=True``) or not, on plain locks and the pool;
  told to stop (cancelled on loss, or ``LeaseLost`` from ``check()``), it now and then takes
  seconds to clean up before it stops: the release must wait for it.
- ``acquire`` / ``renew`` / ``release`` awaited, as ``clients.Client.lease_work``.
- an acquire, or a ``lock()`` block, under a task timeout (``asyncio.wait_for``) drawn so that
  it cancels at any await: while waiting, a try on the wire, the grant's clean-up, the body.
  A cancelled acquire must hold nothing afterwards (``Checker.no_phantom``, at once).
- ``table.election(...).run(lead)``: ``lead``'s body does fenced writes as a lock's does.
- with ``--sets`` and ``--shares``, the same on several names together (``aiosets``) and on
  shares of the plain locks (``shared=True``), cancellation included.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from awsflock import aio, errors
from awsflock.records import Identity
from tests.simulation import aioloop
from tests.simulation.aiosets import AioSetWork
from tests.simulation.clients import CONVERTS, FAIR, PLAIN, POOL, SKEW, Client, plain_name

#: The lock the aio processes elect their leader on.
ELECTION = "E"
#: How long a body told to stop may take to clean up (seconds, uniform), when it takes any.
CLEAN_UP = (0.05, 8.0)


class AioClient(AioSetWork, Client):
    """A worker that runs ``awsflock.aio`` in its event loop."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.aio_table = aio.LockTable(
            store=aioloop.awaited(self.store, self.proc),
            clock=self.proc.clock,
            rng=self.world.rng,
            skew=SKEW,
            identity=Identity(owner=self.proc.name, host=self.proc.name, pid=1),
        )
        #: Set once the budget is spent: the election stops campaigning.
        self.spent = threading.Event()

    def count(self) -> bool:
        if super().count():
            return True
        self.spent.set()
        return False

    def worker(self) -> None:
        aioloop.run(self.proc, self.main())
        for name in (*PLAIN, POOL, *CONVERTS, ELECTION):
            self.checker.no_phantom(self.proc, name)

    async def main(self) -> None:
        election = None
        if self.rng.random() < 0.7:
            election = asyncio.get_running_loop().create_task(self.elect())
        await self.aio_work()
        if election is not None:
            election.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await election

    async def sleep(self, low: float, high: float) -> None:
        await self.proc.clock.sleep_async(self.rng.uniform(low, high))

    def pick(self) -> tuple[str, int | None]:
        """A lock and its slots, as the synchronous workers pick them."""
        choice = self.rng.random()
        if choice < 0.55:
            return plain_name(self.rng), None
        if choice < 0.9:
            return POOL, self.shared.pool_size
        return POOL, self.rng.choice((1, self.shared.pool_size + 1))

    async def aio_work(self) -> None:
        while self.ops > 0:
            choice = self.rng.random()
            try:
                if self.shared.sets and self.rng.random() < self.shared.sets:
                    await self.set_op(choice)
                elif self.shared.shares and self.rng.random() < self.shared.shares:
                    await self.op(choice, plain_name(self.rng), None, shared=True)
                else:
                    await self.op(choice, *self.pick())
            except errors.AwsflockError:
                pass
            await self.sleep(0.0, 3.0)

    async def op(self, choice: float, name: str, slots: int | None, shared: bool = False) -> None:
        if choice < 0.4:
            await self.locked(name, slots, shared=shared)
        elif choice < 0.65:
            await self.leased(name, slots, shared)
        else:
            await self.cancelled(name, slots, shared)

    # -- a lock's block ------------------------------------------------------------------------

    async def locked(
        self, name: str, slots: int | None, wait: float | None = None, shared: bool = False
    ) -> None:
        if not self.count():
            return
        lease_s = self.rng.choice((5.0, 10.0, 20.0))
        if wait is None:
            wait = self.rng.choice((0.0, 0.0, 5.0, 30.0))
        fair = not shared and self.rng.random() < FAIR
        hold = self.aio_table.lock(
            name, lease=lease_s, wait=wait, slots=slots, fair=fair, shared=shared
        )
        try:
            async with hold as held:
                await self.body(held, [((name, held.slot), held.lease)], lease_s, shared)
        except errors.LeaseLost:
            pass
        except errors.AwsflockError:
            if hold._lease is None:
                self.checker.no_phantom(self.proc, name)
            raise
        finally:
            lease = hold._lease
            if (
                not self.proc.killed
                and lease is not None
                and lease.lease_id in self.store.releasing
            ):
                self.checker.fail(
                    f"{self.proc.name}'s lock() block on {name!r} ended with the release of "
                    f"{lease.lease_id[:8]} still on its way"
                )

    async def body(
        self, held: Any, members: list[tuple[Any, Any]], lease_s: float, shared: bool = False
    ) -> None:
        """The work under a hold of ``members`` (each lock's key and lease: one, or a set's):
        fenced writes, each just after ``check()``; told to stop, a clean-up of up to seconds
        now and then."""
        checker = self.checker
        for key, lease in members:
            checker.told_acquired(self.proc, key, lease, lease_s)
            checker.bodies.start(self.proc, key, lease.lease_id, held, shared)

        def believe() -> None:
            deadline = held.deadline()
            for key, lease in members:
                token = lease.fencing_token
                checker.hold(self.proc, key, lease.lease_id, token, deadline, shared=shared)

        believe()
        try:
            for _ in range(self.rng.randrange(1, 8)):
                await self.sleep(0.0, lease_s)
                if not self.count():
                    break
                held.check()
                believe()
                for _, lease in members:
                    belief = checker.beliefs.get(lease.lease_id)
                    if belief is not None:
                        checker.write(self.proc, belief)
        except (asyncio.CancelledError, errors.LeaseLost):
            for _, lease in members:
                checker.bodies.tell(lease.lease_id)
                checker.drop(lease.lease_id)  # from now on it does no fenced write
            if self.rng.random() < 0.5:
                await self.sleep(*CLEAN_UP)
            raise
        finally:
            for _, lease in members:
                checker.drop(lease.lease_id)
                checker.bodies.stop(lease.lease_id)

    # -- a lease, awaited ----------------------------------------------------------------------

    async def leased(self, name: str, slots: int | None, shared: bool = False) -> None:
        if not self.count():
            return
        wait = self.rng.choice((0.0, 0.0, 5.0, 20.0, 60.0))
        lease_s = self.rng.choice((5.0, 10.0, 20.0, 40.0))
        fair = not shared and self.rng.random() < FAIR
        try:
            lease = await self.aio_table.acquire(
                name, lease=lease_s, wait=wait, slots=slots, fair=fair, shared=shared
            )
        except errors.AwsflockError:
            self.checker.no_phantom(self.proc, name)
            raise
        await self.use(lease, (name, lease.slot), lease_s, shared)

    async def use(self, lease: Any, key: Any, lease_s: float, shared: bool = False) -> None:
        checker = self.checker
        checker.told_acquired(self.proc, key, lease, lease_s)
        token = lease.fencing_token
        checker.hold(self.proc, key, lease.lease_id, token, lease.expires_at, shared=shared)
        self.fenced_write(lease)
        for _ in range(self.rng.randrange(1, 6)):
            await self.sleep(0.0, lease_s / 2)
            if not self.count():
                break
            if lease.remaining() < lease_s / 2 and not await self.renewed(lease, key, shared):
                return
            self.fenced_write(lease)
        checker.drop(lease.lease_id)
        if self.rng.random() < 0.9 and self.count():
            try:
                await lease.release()
            except errors.NotHeld:
                checker.told_not_held(self.proc, key, lease.lease_id, renewing=False)
                return
            except errors.AwsflockError:
                return
            checker.told_released(self.proc, key, lease.lease_id)

    async def renewed(self, lease: Any, key: Any, shared: bool = False) -> bool:
        try:
            await lease.renew()
        except errors.NotHeld:
            self.checker.told_not_held(self.proc, key, lease.lease_id, renewing=True)
            self.checker.drop(lease.lease_id)
            return False
        except errors.AwsflockError:
            return True
        over = lease.expires_mono <= self.proc.clock.monotonic()
        self.checker.told_held(
            self.proc, key, lease.lease_id, lease.fencing_token, "renewed", over=over
        )
        token = lease.fencing_token
        self.checker.hold(self.proc, key, lease.lease_id, token, lease.expires_at, shared=shared)
        return True

    # -- cancelled by a task's timeout --------------------------------------------------------

    async def cancelled(self, name: str, slots: int | None, shared: bool = False) -> None:
        """An acquire (or a ``lock()`` block) under a timeout that may cancel it anywhere."""
        wait = self.rng.choice((0.0, 5.0, 20.0, 60.0))
        timeout = self.timeout(wait)
        if self.rng.random() < 0.5:
            work = self.locked(name, slots, wait, shared)
        else:
            work = self.leased_within(name, slots, wait, shared)
        try:
            await asyncio.wait_for(work, timeout)
        except asyncio.TimeoutError:
            # Whatever it was doing, it holds nothing of the lock it did not hear of.
            self.checker.cancelled += 1
            self.checker.no_phantom(self.proc, name)

    def timeout(self, wait: float) -> float:
        """A task's timeout drawn to cancel anywhere: at once, within a try, within the wait."""
        return float(
            self.rng.choice(
                (self.rng.uniform(0, 0.1), self.rng.uniform(0, 6), self.rng.uniform(0, wait + 1))
            )
        )

    async def leased_within(
        self, name: str, slots: int | None, wait: float, shared: bool = False
    ) -> None:
        if not self.count():
            return
        lease_s = self.rng.choice((5.0, 10.0, 20.0))
        fair = not shared and self.rng.random() < FAIR
        lease = await self.aio_table.acquire(
            name, lease=lease_s, wait=wait, slots=slots, fair=fair, shared=shared
        )
        try:
            await self.use(lease, (name, lease.slot), lease_s, shared)
        except asyncio.CancelledError:
            self.checker.drop(lease.lease_id)  # walks away: the lease runs out
            raise

    # -- an election ---------------------------------------------------------------------------

    async def elect(self) -> None:
        lease_s = self.rng.choice((6.0, 15.0))
        election = self.aio_table.election(ELECTION, lease=lease_s)

        async def lead(term: Any) -> None:
            await self.body(term.hold, [((ELECTION, None), term.hold.lease)], lease_s)

        while not self.spent.is_set():
            try:
                await election.run(lead, stop=self.spent)
            except errors.AwsflockError:
                await self.sleep(0.5, 3.0)
