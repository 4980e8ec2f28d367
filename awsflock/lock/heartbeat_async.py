"""Keep a lease alive in the background: ``LockTable.lock()`` (``hold()``).

A hold renews every lease/3, retries failed renewals with backoff, and declares the lease lost
*before* it expires: at ``expires_at - margin`` if no renewal succeeded by then, or at once if
a renewal is refused. Its steps are run by its table's renewer (``awsflock.lock.renewer``: one
for all the table's holds), which holds it weakly, so a dropped hold stops being renewed; on
release, a step of it still running is waited for, with a timeout.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Protocol

from awsflock import errors
from awsflock.clock_async import AsyncClock
from awsflock.durations import lease_seconds
from awsflock.lock import owners, renewal
from awsflock.lock.holding import HoldState
from awsflock.lock.renewer import AsyncRenewer
from awsflock.lock.terms import terms
from awsflock.protocol_async import AsyncLockStore
from awsflock.text import format_seconds

if TYPE_CHECKING:
    from awsflock.records import Identity

log = logging.getLogger("awsflock.heartbeat")

LostCallback = Callable[["Hold", errors.LeaseLost], None]


class HeldLease(Protocol):
    """What a hold needs of its lease (``awsflock.lock.lease.Lease``, or a ``LeaseSet``)."""

    lease_id: str
    owner: str
    slot: int | None
    released: bool

    @property
    def fencing_token(self) -> int | None: ...

    @property
    def expires_at(self) -> float: ...

    @property
    def expires_mono(self) -> float: ...

    @property
    def capped(self) -> bool: ...

    @property
    def acquired_at(self) -> float: ...

    async def renew(self, lease: float | str | None = None) -> Any: ...

    async def release(self) -> None: ...


class StateSource(Protocol):
    """Where a hold's renewals find the lock's state to write (``run --state-file``'s file)."""

    def changed(self) -> bytes | None:
        """The state to write with the next renewal; None: nothing new since ``saved``."""
        ...

    def saved(self, data: bytes) -> None:
        """``data`` was written as the lock's state."""
        ...


class Leases(Protocol):
    """What a hold needs of its table (``awsflock.lock.lease.LockTable``, which makes holds: typed
    here so that this module does not import that one)."""

    clock: AsyncClock
    store: AsyncLockStore

    def renewer(self) -> AsyncRenewer: ...

    async def acquire(
        self,
        lock_id: str | Sequence[str],
        *,
        lease: float | str = ...,
        wait: float | str | None = ...,
        identity: Identity | None = ...,
        slots: int | None = ...,
        cancel: threading.Event | None = ...,
        fair: bool = ...,
        shared: bool = ...,
        state: bool = ...,
    ) -> HeldLease: ...

    async def save_state(self, held: Any, data: bytes) -> Any: ...


class Hold(HoldState):
    """A lock held while the caller works, renewed in the background.

    Use as a context manager (``with table.hold("x") as held:``) or call ``start()`` and
    ``stop()``. ``fencing_token``, ``lost`` (an Event) and ``check()`` tell the caller whether
    it still holds the lock.
    """

    def __init__(
        self,
        table: Leases,
        lock_id: str | Sequence[str],
        *,
        lease: float | str = 60.0,
        wait: float | str | None = 60.0,
        renew_every: float | None = None,
        margin: float | None = None,
        on_lost: LostCallback | None = None,
        identity: Identity | None = None,
        join_timeout: float = 10.0,
        slots: int | None = None,
        cancel: threading.Event | None = None,
        fair: bool = False,
        shared: bool = False,
        lock_delay: float | str = 0,
        max_hold: float | str | None = None,
        state: bool = False,
    ) -> None:
        self.table = table
        self.with_state = state
        #: Where renewals find the state to write with them (None: renewals write none).
        self.state_source: StateSource | None = None
        self.fair = fair
        self.shared = shared
        self.lock_delay, self.max_hold = lock_delay, max_hold
        #: The locks held (several: taken together, ``awsflock.sets``), and their names as
        #: messages say them.
        self.lock_ids = (lock_id,) if isinstance(lock_id, str) else tuple(lock_id)
        self.lock_id = lock_id if isinstance(lock_id, str) else ", ".join(self.lock_ids)
        self._asked = lock_id if isinstance(lock_id, str) else self.lock_ids
        self.lease_s = lease_seconds(lease)
        self.wait_s = wait
        policy = renewal.POLICY
        self.interval = renew_every if renew_every is not None else policy.interval(self.lease_s)
        # The margin of a grant as long as it runs: its lease, or its max-hold if shorter.
        span = terms(lock_delay, max_hold).granted(self.lease_s)
        self.margin = policy.margin(span) if margin is None else margin
        policy.check(self.lease_s, self.margin, self.interval)
        self.on_lost = on_lost
        self.identity = identity
        self.slots = slots
        self.cancel = cancel
        self.join_timeout = join_timeout
        self.lost = threading.Event()
        self.renewals = 0
        self._state = threading.Lock()  # guards _lease, _next_renew, _failures, _lost_error
        self._lease: HeldLease | None = None
        self._next_renew = 0.0  # on the clock's monotonic time
        self._failures = 0
        self._lost_error: errors.LeaseLost | None = None
        self._stop = threading.Event()
        self._renewing = False
        #: Set while no step of this hold runs (its renewer waits on it), and the thread
        #: that ran the last one.
        self.idle = threading.Event()
        self.idle.set()
        self.step_thread: threading.Thread | None = None

    @property
    def lease(self) -> HeldLease:
        """The lease held (``UsageError`` before the hold is started)."""
        if self._lease is None:
            raise errors.UsageError("the hold has not been started", hint="call start() first")
        return self._lease

    @property
    def state(self) -> bytes | None:
        """The lock's state, read at the grant (``state=True``) and written since."""
        found: bytes | None = getattr(self.lease, "state", None)
        return found

    async def save_state(self, data: bytes) -> None:
        """Write ``data`` as the lock's state, with a renewal of the lease (``awsflock.state``)."""
        await self.table.save_state(self.lease, data)

    # -- start and stop ------------------------------------------------------------------------

    async def start(self) -> Hold:
        """Acquire the lock (waiting as asked) and start renewing it."""
        await self.acquire()
        self.start_renewing()
        return self

    async def acquire(self) -> HeldLease:
        """The first half of ``start()``: take the lock, without the renewal thread yet."""
        if self._lease is not None:
            raise errors.UsageError("the hold was already started")
        self._lease = await self.table.acquire(
            self._asked,
            lease=self.lease_s,
            wait=self.wait_s,
            identity=self.identity,
            slots=self.slots,
            cancel=self.cancel,
            fair=self.fair,
            shared=self.shared,
            lock_delay=self.lock_delay,
            max_hold=self.max_hold,
            **({"state": True} if self.with_state else {}),
        )
        if (self.slots or 1) == 1:
            for name in self.lock_ids:
                owners.enter(self.table.store, name, self)
        self._next_renew = self._first_renewal(self._lease)
        return self._lease

    def adopt(self, lease: HeldLease) -> None:
        """Instead of ``acquire()``: keep a lease already held (``acquire --keep-alive``'s
        renewer, which is handed the lease by the process that took it)."""
        if self._lease is not None:
            raise errors.UsageError("the hold was already started")
        self._lease = lease
        self._next_renew = self._first_renewal(lease)

    def _first_renewal(self, lease: HeldLease) -> float:
        """An interval after the lease began (its end less its length), on monotonic time: a
        grant that arrives with part of its lease gone is renewed that much sooner."""
        return lease.expires_mono - self.lease_s + self.interval

    def start_renewing(self) -> None:
        """The second half of ``start()``: renewals, by the table's renewer."""
        if self._renewing:
            return
        self._renewing = True
        self.table.renewer().add(self)

    async def stop(self, release: bool = True, join_timeout: float | None = None) -> None:
        """Stop renewing and (by default) release. Raises LeaseLost if the lease was lost."""
        self._stop.set()
        for name in self.lock_ids:
            owners.leave(self.table.store, name, self)
        if self._renewing:
            renewer = self.table.renewer()
            renewer.remove(self)
            # A renewal in flight may be inside its retries; it ends by its budget, so it need
            # not be waited for long.
            timeout = self.join_timeout if join_timeout is None else join_timeout
            await renewer.wait_idle(self, timeout)
        if not release or self._lease is None or self._lease.released:
            return
        if self.lost.is_set():
            # The lease may still be ours (lost only by our own deadline), or a renewal still on
            # its way may land and keep it: give it back. Once released, no renewal revives it.
            try:
                await self._lease.release()
            except errors.NotHeld as exc:
                log.debug("release after loss of %r: %s", self.lock_id, exc.one_line())
            except errors.AwsflockError as exc:
                self._name_unreleased(exc)
            self.check()
        else:
            held = self.clock.time() - self._lease.acquired_at
            try:
                await self._lease.release()
            except errors.NotHeld as exc:
                # Ended behind our back (force-released, or expired and taken): the work done
                # under it may be unprotected, which is a loss, not a failed release.
                self._lose(exc.message, exc.reason, exc.hint)
                self.check()
            log.debug("held %r for %s", self.lock_id, format_seconds(held))

    async def __aenter__(self) -> Hold:
        return await self.start()

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        # Never swallow the caller's exception: release problems are only logged then.
        if exc_type is None:
            await self.stop()
            return
        try:
            await self.stop()
        except errors.AwsflockError as err:
            log.warning("release of %r failed: %s", self.lock_id, err.one_line())

    # -- the steps, run by the table's renewer ------------------------------------------------

    async def _tick(self) -> None:
        """One step: count the lease lost past its deadline; renew it when due."""
        self.idle.clear()
        self.step_thread = threading.current_thread()
        try:
            if self.lost.is_set() or self._stop.is_set():
                return
            now = self.clock.monotonic()
            if now >= self.mono_deadline():
                self._lose_at_deadline()
                return
            with self._state:
                due = now >= self._next_renew
            if due:
                await self._renew_once(now)
        finally:
            self.idle.set()

    async def _renew_with_state(self, lease: Any, data: bytes, source: StateSource) -> None:
        """A renewal that carries the state ``source`` changed. Refused for a later write of
        the lease (``StateRefused``), or by a store set up for no state (a PostgreSQL step
        function older than it: found by review 10, the lease counted lost), it is said, and
        the lease renewed without it."""
        try:
            await self.table.save_state(lease, data)
        except (errors.StateRefused, errors.ConfigurationError) as exc:
            log.error("%s", exc.one_line(), extra={"event": "state_refused"})
            await lease.renew(self.lease_s)
            return
        source.saved(data)

    async def _renew_once(self, now: float) -> None:
        lease = self.lease
        store = self.table.store
        # No try of this renewal may be sent after the moment the lease counts as lost.
        end = now + min(store.request_timeout, self.mono_deadline() - now)
        source = self.state_source
        data = source.changed() if source is not None else None
        try:
            with store.budget(end):
                if source is None or data is None:
                    await lease.renew(self.lease_s)
                else:
                    await self._renew_with_state(lease, data, source)
        except errors.NotHeld as exc:
            self._lose(f"renewal refused: {exc.message}", exc.reason, exc.hint)
            return
        except errors.AwsflockError as exc:
            self._renewal_failed(exc, now)
            return
        with self._state:
            self._failures = 0
            self._next_renew = now + self.interval
            self.renewals += 1
