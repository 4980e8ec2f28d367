"""What a hold (``awsflock.lock.heartbeat.Hold``, and its asynchronous source) shows its
caller and its renewer, and how it declares its lease lost: all of it synchronous, so written
once for both. The renewals themselves, which await the store, are ``heartbeat_async``'s."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Protocol

from awsflock import errors, metrics
from awsflock.clock import Clock
from awsflock.records import Previous
from awsflock.text import format_seconds

log = logging.getLogger("awsflock.heartbeat")


class Held(Protocol):
    """What the state reads of the lease held (a ``Lease``, either API's)."""

    lease_id: str
    owner: str
    slot: int | None

    @property
    def fencing_token(self) -> int | None: ...

    @property
    def expires_mono(self) -> float: ...

    @property
    def capped(self) -> bool: ...


class HoldState:
    """The state of a hold that its caller reads and its renewer schedules by; the loss."""

    table: Any
    lock_id: str
    lease_s: float
    interval: float
    margin: float
    on_lost: Callable[[Any, errors.LeaseLost], None] | None
    lost: threading.Event
    renewals: int
    _state: threading.Lock
    _lease: Held | None
    _next_renew: float
    _failures: int
    _lost_error: errors.LeaseLost | None
    _stop: threading.Event

    # -- the caller's view ---------------------------------------------------------------------

    @property
    def lease(self) -> Held:
        if self._lease is None:
            raise errors.UsageError("the hold has not been started", hint="call start() first")
        return self._lease

    @property
    def fencing_token(self) -> int | None:
        return self.lease.fencing_token

    @property
    def fencing_tokens(self) -> dict[str, int | None]:
        """Each lock's fencing token, by name (one name for a single lock)."""
        tokens: dict[str, int | None] | None = getattr(self.lease, "fencing_tokens", None)
        return tokens if tokens is not None else {self.lock_id: self.lease.fencing_token}

    @property
    def previous(self) -> dict[str, Previous | None]:
        """How the lease before each lock's ended, by name (None where the store does not say)."""
        found: Any = getattr(self.lease, "previous", None)
        return found if isinstance(found, dict) else {self.lock_id: found}

    @property
    def lease_id(self) -> str:
        return self.lease.lease_id

    @property
    def slot(self) -> int | None:
        """The pool slot held (None for a plain lock)."""
        return self.lease.slot

    @property
    def clock(self) -> Clock:
        clock: Clock = self.table.clock
        return clock

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
            self._lose_at_deadline()
        if self.lost.is_set():
            assert self._lost_error is not None
            raise self._lost_error

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

    def overdue(self, tell: bool = True) -> bool:
        """The deadline passed while a step still runs (a renewal still on its way): the
        lease counts as lost now, whatever that renewal's answer. True if declared by this
        call; with ``tell=False`` the caller calls ``_tell_lost()`` then (elsewhere: the
        renewer's scheduler must not run the callback itself)."""
        if not self.lost.is_set() and self.clock.monotonic() >= self.mono_deadline():
            return self._lose_at_deadline(tell)
        return False

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

    def _lose_at_deadline(self, tell: bool = True) -> bool:
        """The deadline passed: the hold reached its cap (its lease ends there, and no renewal
        extends it), or no renewal got through in time."""
        lease = self._lease
        if lease is not None and lease.capped:
            return self._lose("the hold reached its max-hold", metrics.CAPPED, tell=tell)
        why = "no successful renewal before the safety deadline"
        return self._lose(why, metrics.EXPIRED, tell=tell)

    def _lose(self, why: str, reason: str, advice: str = "", tell: bool = True) -> bool:
        """Declare the lease lost (True: by this call). ``advice``: what to do about it, where
        the reason calls for more than checking the work and trying again (a force-release:
        ended on purpose). ``tell=False``: ``_tell_lost()`` is left to the caller."""
        with self._state:
            if self.lost.is_set():
                return False
            lease = self._lease
            if reason == metrics.CAPPED:
                metrics.record("awsflock.holds.capped", 1, self.lock_id, self.table.store)
                self._lost_error = errors.HoldCapped(
                    f"the hold of {self.lock_id!r} ended: {why}",
                    hint="stop the work there; take the lock again to go on, or give a longer "
                    "--max-hold (max_hold=)",
                )
            else:
                metrics.record(
                    "awsflock.leases.lost", 1, self.lock_id, self.table.store, reason=reason
                )
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
        if tell:
            self._tell_lost()
        return True

    def _tell_lost(self) -> None:
        """What follows a declared loss: the body's cancellation (aio), then ``on_lost``."""
        self._lost_now()
        assert self._lost_error is not None
        if self.on_lost is not None:
            try:
                self.on_lost(self, self._lost_error)
            except Exception:  # a broken callback must not kill the heartbeat silently
                log.exception("on_lost callback for %r failed", self.lock_id)
