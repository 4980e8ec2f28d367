"""What the simulated processes do: the real library's API, as users call it.

- ``worker``: acquires (plain locks and a pool, waiting or not, in line or not: ``fair=True``),
  works with fenced writes while its lease is valid by its own clock, renews, and releases or
  walks away; or uses ``hold()`` with its heartbeat and ``check()``.
- ``operator``: force-releases whatever holds a lock (``awsflock.lock.admin.force_release``) and
  resizes the pool.
- ``legacy``: awsflock 0.2.0 on the same table: read, then put conditioned on what it read; renew
  with a new lease id; release by a conditional delete. It believes it holds a lock until the
  whole-second expiry time it wrote.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from typing import TYPE_CHECKING, Any

from awsflock import errors
from awsflock.lock import admin
from awsflock.lock.lease import Lease, LockTable
from awsflock.records import Identity, LockRecord, Pool
from tests.simulation.checker import Belief, Checker
from tests.simulation.clients_sets import SetWork
from tests.simulation.clients_shares import ShareWork

if TYPE_CHECKING:
    from tests.simulation.network import Tap
    from tests.simulation.world import Proc, World

PLAIN = ("L0", "L1")
POOL = "P"
#: Plain locks (their holders, awsflock 0.2.0's too, and TTL at work on them) that a pool
#: acquire now and then turns into a pool: the pool must go on above every token the lock was
#: granted, also where its record was deleted meanwhile.
CONVERTS = ("C",)


def plain_name(rng: Any) -> str:
    """A plain lock's name: mostly the plain ones, now and then one that may become a pool."""
    return rng.choice(CONVERTS) if rng.random() < 0.3 else rng.choice(PLAIN)


SKEW = 5.0
#: How many acquires wait in line (``fair=True``); the others poll as they always did.
FAIR = 0.5


class Shared:
    """What every process of one simulation may consult: the pool's size, as configured."""

    def __init__(
        self,
        sets: float = 0.0,
        shares: float = 0.0,
        delays: float = 0.0,
        caps: float = 0.0,
        states: float = 0.0,
    ) -> None:
        self.pool_size = 3
        #: The share of a worker's operations that take sets (``clients_sets``); 0: none, and
        #: nothing drawn for them (a seed's run is as before sets).
        self.sets = sets
        #: The share that take shares of a lock (``clients_shares``), as ``sets``.
        self.shares = shares
        #: The share of plain and pool takes with a lock-delay, as ``sets``.
        self.delays = delays
        #: The share of plain and pool takes with a max-hold, as ``sets``.
        self.caps = caps
        #: The share of plain takes that read the lock's state, and then write it with half
        #: their renewals (``awsflock.state``), as ``sets``.
        self.states = states


class Client(SetWork, ShareWork):
    def __init__(
        self, world: World, proc: Proc, store: Tap, checker: Checker, shared: Shared, ops: int
    ) -> None:
        self.world = world
        self.proc = proc
        self.store = store
        self.checker = checker
        self.shared = shared
        self.ops = ops
        self.rng = world.rng
        self.table = LockTable(
            store=store,
            clock=proc.clock,
            rng=world.rng,
            skew=SKEW,
            identity=Identity(owner=proc.name, host=proc.name, pid=1),
        )

    def count(self) -> bool:
        """One more operation; False once the client's budget is spent."""
        self.checker.operations += 1
        self.ops -= 1
        return self.ops >= 0

    def pause(self, low: float, high: float) -> None:
        self.proc.clock.sleep(self.rng.uniform(low, high))

    # -- workers ---------------------------------------------------------------------------------

    def worker(self) -> None:
        self.work()
        for name in (*PLAIN, POOL, *CONVERTS):
            self.checker.no_phantom(self.proc, name)

    def work(self) -> None:
        while self.ops > 0:
            choice = self.rng.random()
            try:
                if self.shared.sets and self.rng.random() < self.shared.sets:
                    (self.set_work if choice < 0.7 else self.set_hold_work)()
                elif self.shared.shares and self.rng.random() < self.shared.shares:
                    name = plain_name(self.rng)
                    self.share_work(name) if choice < 0.7 else self.hold_work(name, shared=True)
                elif choice < 0.5:
                    self.lease_work(plain_name(self.rng), None)
                elif choice < 0.51:
                    self.lease_work(self.rng.choice(CONVERTS), self.shared.pool_size)
                elif choice < 0.75:
                    self.lease_work(POOL, self.shared.pool_size)
                elif choice < 0.8:
                    # A holder that disagrees on the pool: --slots 1 (a plain lock of its name),
                    # or one more slot than the pool has.
                    self.lease_work(POOL, self.rng.choice((1, self.shared.pool_size + 1)))
                else:
                    self.hold_work()
            except errors.AwsflockError:
                pass
            self.pause(0.0, 3.0)

    def lease_work(self, name: str, slots: int | None) -> None:
        if not self.count():
            return
        wait = self.rng.choice((0.0, 0.0, 5.0, 20.0, 60.0))
        lease_s = self.rng.choice((5.0, 10.0, 20.0, 40.0))
        fair = self.rng.random() < FAIR
        delay = 0.0
        if self.shared.delays and self.rng.random() < self.shared.delays:
            delay = self.rng.choice((2.0, 10.0, 30.0))
        cap = None
        if self.shared.caps and self.rng.random() < self.shared.caps:
            cap = self.rng.choice((3.0, 15.0, 60.0))
        state = slots is None and self.shared.states and self.rng.random() < self.shared.states
        try:
            lease = self.table.acquire(
                name,
                lease=lease_s,
                wait=wait,
                slots=slots,
                fair=fair,
                lock_delay=delay,
                max_hold=cap,
                **({"state": True} if state else {}),
            )
        except errors.AwsflockError:
            self.checker.no_phantom(self.proc, name)
            raise
        key = (name, lease.slot)
        if state:
            self.checker.state.read(self.proc, name, lease)
        self.checker.told_acquired(self.proc, key, lease, min(lease_s, cap or lease_s))
        self.checker.hold(self.proc, key, lease.lease_id, lease.fencing_token, lease.expires_at)
        self.fenced_write(lease)  # the claim: the first thing a new holder does
        for _ in range(self.rng.randrange(1, 6)):
            self.pause(0.0, lease_s / 2)
            if not self.count():
                break
            # A holder of the state checkpoints now and then: a renewal that writes it.
            due = lease.remaining() < lease_s / 2 or (state and self.rng.random() < 0.5)
            if due and not self.renew(lease, key):
                return
            self.fenced_write(lease)
        if self.rng.random() < 0.9 and self.count():
            self.release(lease, key)
        else:
            self.checker.drop(lease.lease_id)  # walks away; the lease runs out

    def renew(self, lease: Lease, key: Any, shared: bool = False) -> bool:
        try:
            if getattr(lease, "state_read", False) and self.rng.random() < 0.5:
                # A checkpoint, written with the renewal (``awsflock.state``).
                lease.save_state(f"{self.proc.name}:{self.checker.operations}".encode())
            else:
                lease.renew()
        except errors.StateRefused as exc:  # only a later write of this lease may refuse it
            self.checker.fail(f"{self.proc.name}'s state write was refused: {exc.message}")
        except errors.NotHeld:
            self.checker.told_not_held(self.proc, key, lease.lease_id, renewing=True)
            self.checker.drop(lease.lease_id)
            return False
        except errors.AwsflockError:
            return True  # unanswered: the lease may still be ours, by its old expiry
        over = lease.expires_mono <= self.proc.clock.monotonic()
        self.checker.told_held(
            self.proc, key, lease.lease_id, lease.fencing_token, "renewed", over=over
        )
        token, expires = lease.fencing_token, lease.expires_at
        self.checker.hold(self.proc, key, lease.lease_id, token, expires, shared=shared)
        return True

    def release(self, lease: Lease, key: Any) -> None:
        self.checker.drop(lease.lease_id)  # from the moment it asks, it no longer relies on it
        for attempt in range(3):
            try:
                lease.release()
            except errors.NotHeld:
                self.checker.told_not_held(self.proc, key, lease.lease_id, renewing=False)
                return
            except errors.AwsflockError as exc:
                if not exc.maybe_applied or attempt == 2:
                    return
                # As a script does: run `awsflock release` again a little later.
                self.pause(0.5, 15.0)
                continue
            self.checker.told_released(self.proc, key, lease.lease_id)
            return

    def fenced_write(self, lease: Lease) -> None:
        belief = self.checker.beliefs.get(lease.lease_id)
        if belief is not None and lease.remaining() > 0:
            self.checker.write(self.proc, belief)

    def hold_work(self, name: str | None = None, shared: bool = False) -> None:
        """``table.lock()``: held with its heartbeat, a fenced write after each ``check()``
        (``shared``: a share of ``name``)."""
        if not self.count():
            return
        name = name or self.rng.choice(PLAIN)
        lease_s = self.rng.choice((6.0, 15.0, 30.0))
        wait = self.rng.choice((0.0, 30.0))
        fair = not shared and self.rng.random() < FAIR
        held = self.table.hold(name, lease=lease_s, wait=wait, fair=fair, shared=shared)
        try:
            held.start()
        except errors.AwsflockError:
            if shared:
                self.checker.no_phantom(self.proc, name)
            return
        key = (name, held.slot)
        lease_id = held.lease_id
        self.checker.told_acquired(self.proc, key, held.lease, lease_s)
        deadline = held.deadline  # the hold's own view: lost past it without a renewal

        def believe() -> None:
            token = held.fencing_token
            self.checker.hold(self.proc, key, lease_id, token, deadline(), shared=shared)

        believe()
        try:
            for _ in range(self.rng.randrange(1, 8)):
                self.pause(0.0, lease_s)
                if not self.count():
                    break
                held.check()
                believe()
                belief = self.checker.beliefs.get(lease_id)
                if belief is not None:
                    self.checker.write(self.proc, belief)
        except errors.LeaseLost:
            pass
        finally:
            self.checker.drop(lease_id)
            with contextlib.suppress(errors.AwsflockError):
                held.stop()

    # -- operators -------------------------------------------------------------------------------

    def operator(self) -> None:
        while self.ops > 0:
            # With lock-delays, more often: a force is where a delay counts from a landing.
            self.pause(*((1.0, 10.0) if self.shared.delays else (5.0, 40.0)))
            if not self.count():
                return
            try:
                if self.rng.random() < 0.7:
                    self.force_one()
                else:
                    self.resize()
            except errors.AwsflockError:
                pass

    def force_one(self) -> None:
        # With sets, the names they take: a member of a set is ended alone.
        name = self.rng.choice((*PLAIN, POOL, *(CONVERTS if self.shared.sets else ())))
        state = self.table.state(name)
        if state is None:
            return
        record: LockRecord
        if isinstance(state, Pool):
            held = [(s, r) for s, r in state.slots.items() if not r.released]
            if not held:
                return
            slot, record = self.rng.choice(held)
        else:
            slot, record = None, state
        if record.shares and not record.released and self.rng.random() < 0.7:
            record = self.rng.choice(record.shares)  # one share; else the group, every share
        if record.released or record.legacy:
            return
        admin.force_release(
            self.table,
            name,
            reason="simulated",
            lease_id=record.lease_id,
            actor=self.proc.name,
            slot=slot,
        )

    def resize(self) -> None:
        new = self.rng.choice((2, 3, 4))
        self.shared.pool_size = admin.resize_pool(self.table, POOL, new)[1]

    # -- awsflock 0.2.0 ------------------------------------------------------------------------

    def legacy(self) -> None:
        clock = self.proc.clock
        while self.ops > 0:
            self.pause(0.0, 5.0)
            if not self.count():
                return
            name = plain_name(self.rng)
            lease_s = self.rng.choice((5, 10, 20))
            try:
                lease_id = self.legacy_acquire(name, lease_s)
                if lease_id is None:
                    continue
                expires = int(clock.time() + lease_s)
                self.checker.beliefs[lease_id] = Belief(
                    self.proc, (name, None), lease_id, None, expires
                )
                self.pause(0.0, lease_s * 0.8)
                if self.rng.random() < 0.3:
                    renewed = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
                    expires = int(clock.time() + lease_s)
                    # 0.2.0 renews by a put conditioned on its lease id, without looking at the
                    # expiry: it believes its lease from then on, whatever the store did.
                    if self.store.legacy(
                        "put", name, renewed, self.proc.name, expires, expect=lease_id
                    ):
                        self.checker.drop(lease_id)
                        lease_id = renewed
                        self.checker.beliefs[lease_id] = Belief(
                            self.proc, (name, None), lease_id, None, expires
                        )
                    self.pause(0.0, lease_s * 0.8)
                self.checker.drop(lease_id)
                self.store.legacy("delete", name, lease_id)
            except errors.AwsflockError:
                pass

    def legacy_acquire(self, name: str, lease_s: int) -> str | None:
        clock = self.proc.clock
        lease_id = str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        record = self.store.legacy("read", name)
        expires = int(clock.time() + lease_s)
        if record is None:  # no record (or a pool, which 0.2.0 cannot read: its put fails)
            ok = self.store.legacy("put", name, lease_id, self.proc.name, expires, expect=None)
            return lease_id if ok else None
        if clock.time() - int(record.expires_at) > 5:
            ok = self.store.legacy(
                "put", name, lease_id, self.proc.name, expires, expect=record.lease_id
            )
            return lease_id if ok else None
        return None


class Reported(logging.Handler):
    """Collects the LEASE_IDs the library named as possibly held without an answer."""

    def __init__(self, checker: Checker) -> None:
        super().__init__(logging.WARNING)
        self.checker = checker

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "event", None) == "abandon_failed":
            self.checker.reported.add(str(getattr(record, "lease_id")))  # noqa: B009
