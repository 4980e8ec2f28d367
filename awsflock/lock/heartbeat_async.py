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
from typing import TYPE_CHECKING, Any, Callable, Protocol

from awsflock import errors, metrics
from awsflock.clock_async import AsyncClock
from awsflock.durations import lease_seconds
from awsflock.lock import owners, renewal
from awsflock.lock.renewer import AsyncRenewer
from awsflock.protocol_async import AsyncLockStore
from awsflock.text import format_seconds

if TYPE_CHECKING:
    from awsflock.records import Identity

log = logging.getLogger("awsflock.heartbeat")

LostCallback = Callable[["Hold", errors.LeaseLost], None]


class HeldLease(Protocol):
    """What a hold needs of its lease (``awsflock.lock.lease.Lease``)."""

    lease_id: str
    owner: str
    fencing_token: int | None
    slot: int | None
    expires_at: float
    expires_mono: float
    acquired_at: float
    released: bool

    async def renew(self, lease: float | str | None = None) -> Any: ...

    async def release(self) -> None: ...


class Leases(Protocol):
    """What a hold needs of its table (``awsflock.lock.lease.LockTable``, which makes holds: typed
    here so that this module does not import that one)."""

    clock: AsyncClock
    store: AsyncLockStore

    def renewer(self) -> AsyncRenewer: ...

    async def acquire(
        self,
        lock_id: str,
        *,
        lease: float | str = ...,
        wait: float | str | None = ...,
        identity: Identity | None = ...,
        slots: int | None = ...,
        cancel: threading.Event | None = ...,
        fair: bool = ...,
    ) -> HeldLease: ...


class Hold:
    """A lock held while the caller works, renewed in the background.

    Use as a context manager (``with table.hold("x") as held:``) or call ``start()`` and
    ``stop()``. ``fencing_token``, ``lost`` (an Event) and ``check()`` tell the caller whether
    it still holds the lock.
    """

    def __init__(
        self,
        table: Leases,
        lock_id: str,
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
    ) -> None:
        self.table = table
        self.fair = fair
        self.lock_id = lock_id
        self.lease_s = lease_seconds(lease)
        self.wait_s = wait
        policy = renewal.POLICY
        self.interval = renew_every if renew_every is not None else policy.interval(self.lease_s)
        self.margin = policy.margin(self.lease_s) if margin is None else margin
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

    # -- the caller's view ---------------------------------------------------------------------

    @property
    def lease(self) -> HeldLease:
        if self._lease is None:
            raise errors.UsageError("the hold has not been started", hint="call start() first")
        return self._lease

    @property
    def fencing_token(self) -> int | None:
        return self.lease.fencing_token

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def slot(self) -> int | None:
        """The pool slot held (None for a plain lock)."""
        return self.lease.slot

    @property
    def clock(self) -> AsyncClock:
        return self.table.clock

    def deadline(self) -> float:
        """Wall-clock time after which the lease counts as lost without a renewal (as the
        wall clock reads now: the hold itself goes by ``mono_deadline``)."""
        return self.clock.time() + (self.mono_deadline() - self.clock.monotonic())

    def mono_deadline(self) -> float:
        """The clock's monotonic time after which the lease counts as lost without a renewal:
        its end as the store answered, less the margin. Monotonic, so that a step of the wall
        clock can neither stretch the lease nor stop its renewals."""
        with self._state:
            return self.lease.expires_mono - self.margin

    def check(self) -> None:
        """Raise LeaseLost if the lease was lost, or may be about to be (past the deadline)."""
        if not self.lost.is_set() and self.clock.monotonic() >= self.mono_deadline():
            self._lose("no successful renewal before the safety deadline", metrics.EXPIRED)
        if self.lost.is_set():
            assert self._lost_error is not None
            raise self._lost_error

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
            self.lock_id,
            lease=self.lease_s,
            wait=self.wait_s,
            identity=self.identity,
            slots=self.slots,
            cancel=self.cancel,
            fair=self.fair,
        )
        if (self.slots or 1) == 1:
            owners.enter(self.table.store, self.lock_id, self)
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
        owners.leave(self.table.store, self.lock_id, self)
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

    def _name_unreleased(self, exc: errors.AwsflockError) -> None:
        """Say, with what frees it, that a lease declared lost could not be released: a renewal
        sent before the loss may still land and keep the lock held for up to a lease."""
        lease = self.lease
        log.warning(
            "could not release %r after losing it (%s): a renewal still on its way may keep it "
            "held for up to %s after it lands, under LEASE_ID %s: free it with "
            "`awsflock release %s %s`",
            self.lock_id,
            exc.one_line(),
            format_seconds(self.lease_s),
            lease.lease_id,
            self.lock_id,
            lease.lease_id,
            extra={
                "event": "release_failed",
                "lock_id": self.lock_id,
                "lease_id": lease.lease_id,
                "slot": lease.slot,
                "error": type(exc).__name__,
            },
        )

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

    def wake_at(self) -> float | None:
        """When this hold next needs a step (monotonic): its next renewal, or its deadline if
        that comes first. None once it needs none (lost, or stopped)."""
        if self.lost.is_set() or self._stop.is_set() or self._lease is None:
            return None
        with self._state:
            return min(self._next_renew, self.lease.expires_mono - self.margin)

    def deadline_at(self) -> float | None:
        """When the lease counts as lost without a renewal (None: lost, or stopped)."""
        if self.lost.is_set() or self._stop.is_set() or self._lease is None:
            return None
        return self.mono_deadline()

    def overdue(self) -> None:
        """The deadline passed while a step still runs (a renewal still on its way): the
        lease counts as lost now, whatever that renewal's answer."""
        if not self.lost.is_set() and self.clock.monotonic() >= self.mono_deadline():
            self._lose("no successful renewal before the safety deadline", metrics.EXPIRED)

    async def _tick(self) -> None:
        """One step: count the lease lost past its deadline; renew it when due."""
        self.idle.clear()
        self.step_thread = threading.current_thread()
        try:
            if self.lost.is_set() or self._stop.is_set():
                return
            now = self.clock.monotonic()
            if now >= self.mono_deadline():
                self._lose("no successful renewal before the safety deadline", metrics.EXPIRED)
                return
            with self._state:
                due = now >= self._next_renew
            if due:
                await self._renew_once(now)
        finally:
            self.idle.set()

    async def _renew_once(self, now: float) -> None:
        lease = self.lease
        store = self.table.store
        # No try of this renewal may be sent after the moment the lease counts as lost.
        end = now + min(store.request_timeout, self.mono_deadline() - now)
        try:
            with store.budget(end):
                await lease.renew(self.lease_s)
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

    def _renewal_failed(self, exc: errors.AwsflockError, now: float) -> None:
        """A renewal failed and will be retried. Said under the state lock, as the loss is: the
        lines come out in the order of the events (a renewal cut off at the safety deadline
        fails as the caller's own check declares the loss, in another thread)."""
        with self._state:
            self._failures += 1
            backoff = min(self.interval, 0.5 * 2 ** (self._failures - 1))
            self._next_renew = now + backoff
            left = self.lease.expires_mono - self.clock.monotonic()
            if self.lost.is_set():
                # Nothing will be retried: the loss, said already, is the news.
                log.debug("renewal of %r failed after its loss: %s", self.lock_id, exc.message)
                return
            log.warning(
                "renewal of %r failed (%s); %s of the lease left, retrying in %s",
                self.lock_id,
                exc.one_line(),
                format_seconds(max(left, 0.0)),
                format_seconds(backoff),
                extra={
                    "event": "renew_failed",
                    "outcome": metrics.TRANSIENT,
                    "lock_id": self.lock_id,
                    "error": exc.message,
                    "expires_in_s": round(left, 3),
                },
            )

    def _lost_now(self) -> None:
        """Called once, as the loss is declared, before ``on_lost``: the asynchronous hold
        cancels its body here (``awsflock.aio``)."""

    def _lose(self, why: str, reason: str, advice: str = "") -> None:
        """Declare the lease lost. ``advice``: what to do about it, where the reason calls for
        more than checking the work and trying again (a force-release: ended on purpose)."""
        with self._state:
            if self.lost.is_set():
                return
            metrics.record("awsflock.leases.lost", 1, self.lock_id, self.table.store, reason=reason)
            lease = self._lease
            if reason != metrics.FORCE_RELEASED or not advice:
                advice = "check it and retry"
            self._lost_error = errors.LeaseLost(
                f"lease on {self.lock_id!r} was lost: {why}",
                hint=f"the work done under it may be unprotected; {advice}",
            )
            # Said before ``lost`` is set: a caller that sees it set (``run``, which then stops
            # its command and says so) writes its lines after this one.
            log.error(
                "lost the lock %r: %s",
                self.lock_id,
                why,
                extra={
                    "event": "lost",
                    "lock_id": self.lock_id,
                    "fencing_token": lease.fencing_token if lease else None,
                    "outcome": reason,
                },
            )
            self.lost.set()
        self._lost_now()
        if self.on_lost is not None:
            try:
                self.on_lost(self, self._lost_error)
            except Exception:  # a broken callback must not kill the heartbeat silently
                log.exception("on_lost callback for %r failed", self.lock_id)
