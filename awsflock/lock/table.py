# Made from table_async.py by scripts/unasync: edit that file, then run scripts/unasync.
"""The lock table's steps, on any store: acquire (the wait of ``waiting``), renew, release,
read. ``awsflock.lock.lease.LockTable`` (the synchronous API, which also builds its store from
DynamoDB's settings) and ``awsflock.aio.LockTable`` build on it; the leases it hands out are
``awsflock.lock.held``'s."""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
from collections.abc import Sequence
from typing import Any, overload

from awsflock import errors, metrics, shares
from awsflock.clock import Clock
from awsflock.durations import lease_seconds, skew_seconds, wait_limit
from awsflock.lock import kept_state, owners, telling, verdict, waiting
from awsflock.lock.acquisition import Acquisition
from awsflock.lock.election import Elections
from awsflock.lock.grants import Grant, event_fields
from awsflock.lock.held import Lease
from awsflock.lock.line import Fair, new_ticket
from awsflock.lock.renewer import Renewer
from awsflock.lock.set_table import LeaseSet, SetTable, check_set_options
from awsflock.lock.share_acquisition import (
    ShareAcquisition,
    check_shared,
    share_renewed,
)
from awsflock.lock.terms import NO_TERMS, Terms, terms
from awsflock.names import check_lease_id, check_lock_id, check_slots, slot_of
from awsflock.protocol import LockStore
from awsflock.records import Identity, LockRecord, Pool
from awsflock.state import StateWrite
from awsflock.text import format_seconds

log = logging.getLogger("awsflock.lease")
_MAKING = threading.Lock()

DEFAULT_SKEW = 5.0
DEFAULT_LEASE = 2 * 3600.0  # awsflock 0.2.0's default for acquire and renew
DEFAULT_WAIT = 60.0
#: ``acquire(wait=WAIT_FOREVER)`` waits until the lock is free; ``wait=0`` does not wait.
WAIT_FOREVER = None


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class LockTable(SetTable, Elections):
    """Locks in one store (``store``). The clock (the store's unless given), the random source
    and the identity written into records are injectable, so tests of waiting and expiry need
    no sleeping."""

    def __init__(
        self,
        *,
        store: LockStore,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        skew: float | str = DEFAULT_SKEW,
        owner: str | None = None,
        identity: Identity | None = None,
    ) -> None:
        if clock is not None and store.skew_free and clock is not store.clock:
            # Its answers are put on the store's clock: a table on another would misread them.
            raise errors.UsageError(
                "the table's clock differs from its store's, whose clock times its answers",
                hint="give the clock to the store only (the table then uses it)",
            )
        self.store: LockStore = store
        self.clock: Clock = clock or store.clock
        self.table_name = store.table_name
        self.rng = rng or random.Random()
        # A store whose leases are timed by one clock of its own (PostgreSQL's server) needs
        # no window for the skew between holders' clocks.
        self.skew = 0.0 if store.skew_free else skew_seconds(skew)
        self.identity = identity or Identity.of_this_process(owner)
        self._renewer: Renewer | None = None
        #: The monotonic time an acquire's bound counts from, if before its call (the CLI's
        #: process start: ``--no-wait`` returns within one request timeout of it).
        self.started: float | None = None

    def renewer(self) -> Renewer:
        """What renews this table's holds: one for all of them, made on first use."""
        with _MAKING:
            if self._renewer is None:
                self._renewer = Renewer(self.clock, f"awsflock-renewer:{self.table_name}")
            return self._renewer

    def now_ms(self) -> int:
        """Now, by this table's clock, in epoch milliseconds."""
        return _ms(self.clock.time())

    @overload
    def acquire(
        self,
        lock_id: str,
        *,
        lease: float | str = ...,
        wait: float | str | None = ...,
        identity: Identity | None = ...,
        slots: int | None = ...,
        cancel: threading.Event | None = ...,
        fair: bool = ...,
        shared: bool = ...,
        lock_delay: float | str = ...,
        max_hold: float | str | None = ...,
        state: bool = ...,
    ) -> Lease: ...

    @overload
    def acquire(
        self,
        lock_id: Sequence[str],
        *,
        lease: float | str = ...,
        wait: float | str | None = ...,
        identity: Identity | None = ...,
        slots: int | None = ...,
        cancel: threading.Event | None = ...,
        fair: bool = ...,
        shared: bool = ...,
        lock_delay: float | str = ...,
        max_hold: float | str | None = ...,
        state: bool = ...,
    ) -> Lease | LeaseSet: ...

    def acquire(
        self,
        lock_id: str | Sequence[str],
        *,
        lease: float | str = DEFAULT_LEASE,
        wait: float | str | None = DEFAULT_WAIT,
        identity: Identity | None = None,
        slots: int | None = None,
        cancel: threading.Event | None = None,
        fair: bool = False,
        shared: bool = False,
        lock_delay: float | str = 0,
        max_hold: float | str | None = None,
        state: bool = False,
    ) -> Lease | LeaseSet:
        """Take the lock, waiting up to ``wait`` seconds (0: don't wait; ``WAIT_FOREVER``).

        With ``slots=N`` (N > 1) the lock is a pool of N slots: up to N holders at once, each
        told its slot (``Lease.slot``). With ``fair=True`` a waiting acquire takes a place in
        the lock's line and is served in order of arrival (``awsflock.lock.line``); without it, it
        never goes ahead of a live waiter in line. With ``shared=True`` it is held beside any
        other shared holder and never beside an exclusive one (``awsflock.shares``: a waiting
        exclusive acquire keeps new shares out). With ``lock_delay`` ('15s'; not ``shared``), a
        lease that ends unreleased (runs out, or is forced) keeps the lock that long after its
        end. With ``max_hold`` ('2h'; not ``shared``), no renewal extends the lease past the
        grant plus it. With ``state=True`` (a plain lock), the lock's state is read at the
        grant (``Lease.state``, ``awsflock.state``). Raises LockBusy (with ``.holder``) when it
        stayed held, and Cancelled (holding nothing) once ``cancel`` is set.

        With a list of names, every one of them is taken together in one step, or none is
        (``awsflock.sets``): a ``LeaseSet``, one LEASE_ID with a fencing token per lock. Plain
        locks only (no ``slots``, no ``fair``).
        """
        given = terms(lock_delay, max_hold, state)
        if not isinstance(lock_id, str):
            given.check_plain("a set of locks")
            check_set_options(slots, fair, shared)
            return self.acquire_set(
                lock_id,
                lease=lease,
                wait=wait,
                identity=identity,
                cancel=cancel,
                terms=given,
            )
        if shared:
            check_shared(self.store, slots, fair, given)
        if slots is not None and slots > 1:
            given.check_plain("a pool")
        return self._acquire_one(
            lock_id, lease, wait, identity, slots, cancel, fair, shared=shared, terms=given
        )

    def _acquire_one(
        self,
        lock_id: str,
        lease: float | str,
        wait: float | str | None,
        identity: Identity | None,
        slots: int | None,
        cancel: threading.Event | None,
        fair: bool,
        *,
        shared: bool = False,
        terms: Terms = NO_TERMS,
    ) -> Lease:
        """``acquire`` of one lock."""
        check_lock_id(lock_id)
        size = check_slots(lock_id, slots)
        lease_s = lease_seconds(lease)
        wait_s = None if wait is None else wait_limit(wait)
        if size is None and wait_s != 0:
            owners.refuse_reentry(self.store, lock_id)
        opts: dict[str, Any] = {"clock": self.clock, "rng": self.rng, "skew": self.skew}
        kind = ShareAcquisition if shared else Acquisition
        run = kind(
            self.store, lock_id, lease_s, identity or self.identity, size, terms=terms, **opts
        )
        run.origin = self.started
        # A fair acquire that does not wait takes no place: it is one plain try.
        policy = Fair(run, new_ticket(self.rng)) if fair and wait_s != 0 else waiting.PLAIN
        try:
            grant = waiting.wait(run, policy, wait_s=wait_s, cancel=cancel, **opts)
        except BaseException as exc:
            failed = telling.outcome(exc, wait_s)
            metrics.record("awsflock.acquisitions", 1, lock_id, self.store, outcome=failed)
            raise
        metrics.record("awsflock.acquisitions", 1, lock_id, self.store, outcome=metrics.GRANTED)
        metrics.record("awsflock.acquire.wait", grant.waited, lock_id, self.store)
        held = self._granted(lock_id, grant)
        if grant.state is not None:
            held.kept_state(grant.state.data)
        return held

    def _granted(self, lock_id: str, grant: Grant) -> Lease:
        record = grant.record
        reclaimed = telling.granted_after(lock_id, record, self.store)  # ran out, taken over
        lease = Lease.of_record(
            self,
            record,
            lock_id,
            grant.lease_id,
            grant.to_mono,
            waited=grant.waited,
            reclaimed=reclaimed,
            slot=grant.slot,
        )
        level = telling.NOTICE if grant.contended else logging.INFO
        if not log.isEnabledFor(level):  # the fields below are built for a handler only
            return lease
        log.log(
            level,
            "acquired %r (fencing token %s) after %s and %d request(s)",
            lock_id,
            lease.fencing_token,
            format_seconds(grant.waited),
            grant.attempts,
            extra={
                **event_fields("acquired", lock_id, record),
                "waited_s": round(grant.waited, 3),
                "attempts": grant.attempts,
                "slot": grant.slot,
                "expires_in_s": round(record.expires_at - self.clock.time(), 3),
                "handoff_s": None if grant.handoff is None else round(grant.handoff, 3),
                "outcome": metrics.GRANTED,
            },
        )
        return lease

    def renew(self, held: Lease, *, lease: float | str | None = None) -> Lease:
        """Extend ``held`` from now (by its own duration unless ``lease`` is given), in place."""
        left = held.expires_mono - self.clock.monotonic()
        fresh = self.renew_lease(
            held.lock_id, held.lease_id, lease=held.lease_duration if lease is None else lease
        )
        metrics.record("awsflock.renew.margin", max(0.0, left), held.lock_id, self.store)
        held.renewed_by(fresh, wall_clock_ends=not self.store.skew_free)
        return held

    def save_state(self, held: Lease, data: bytes) -> Lease:
        """Write ``data`` as ``held``'s lock's state with a renewal (``Lease.save_state``)."""
        written: Lease = kept_state.write(self, held, data)
        return written

    def release(self, held: Lease) -> None:
        """End ``held``."""
        self.release_lease(held.lock_id, held.lease_id, _held=held)
        held.released = True

    def renew_lease(
        self,
        lock_id: str,
        lease_id: str,
        *,
        lease: float | str = DEFAULT_LEASE,
        keeper: str | None = None,
        state: StateWrite | None = None,
    ) -> Lease:
        """Extend the lease ``lease_id`` on ``lock_id`` from now. Raises NotHeld if it is not
        ours any more: released, force-released, expired, or taken by another. ``keeper``:
        record who keeps it alive from now on (shown by ``status``); ``state``: write it."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        shares.check_plain(lease_id)
        lease_s = lease_seconds(lease)
        slot = slot_of(lease_id)
        mono, now_ms = self.clock.monotonic(), self.now_ms()  # read together: see Lease.of_record
        step: dict[str, Any] = {} if keeper is None else {"keeper": keeper}
        if state is not None:
            step["state"] = state
        try:
            outcome = self.store.renew(
                lock_id,
                lease_id,
                now_ms=now_ms,
                lease_ms=_ms(lease_s),
                skew_ms=_ms(self.skew),
                slot=slot,
                **step,
            )
        except errors.AwsflockError:
            metrics.record("awsflock.renewals", 1, lock_id, self.store, outcome=metrics.TRANSIENT)
            raise
        outcome = share_renewed(self.store, outcome, lock_id, lease_id)
        record = outcome.record
        longer = state is None and verdict.held_longer(record, lease_id, now_ms, _ms(lease_s))
        if not outcome.applied and longer:
            # Refused because a renew made later (another host's, or ours before a clock step
            # back) already holds the lease past what this one asks: it is renewed.
            outcome = dataclasses.replace(outcome, applied=True)
        if not outcome.applied or record is None:
            metrics.record("awsflock.renewals", 1, lock_id, self.store, outcome=metrics.LOST)
            refused = verdict.of(outcome, lock_id, lease_id, "renew", self.clock.time())
            raise refused or errors.NotHeld(f"lease {lease_id} on {lock_id!r} was not renewed")
        metrics.record("awsflock.renewals", 1, lock_id, self.store, outcome=metrics.OK)
        log.info(
            "renewed %r for %s",
            lock_id,
            format_seconds(lease_s),
            extra={
                **event_fields("renewed", lock_id, record),
                "outcome": metrics.OK,
                "expires_in_s": round(record.expires_at - self.clock.time(), 3),
            },
        )
        to_mono = outcome.to_mono if outcome.to_mono is not None else mono - now_ms / 1000
        return Lease.of_record(self, record, lock_id, lease_id, to_mono, slot=slot)

    def release_lease(self, lock_id: str, lease_id: str, *, _held: Lease | None = None) -> None:
        """End the lease ``lease_id`` on ``lock_id``. Raises NotHeld if it is not ours; a release
        whose first try went through (or a second release) succeeds."""
        check_lock_id(lock_id)
        lease_id = check_lease_id(lease_id)
        shares.check_plain(lease_id)
        try:
            outcome = self.store.release(
                lock_id,
                lease_id,
                now_ms=self.now_ms(),
                skew_ms=_ms(self.skew),
                slot=slot_of(lease_id),
            )
        except errors.AwsflockError as exc:
            failed = metrics.IN_DOUBT if exc.maybe_applied else metrics.FAILED
            metrics.record("awsflock.releases", 1, lock_id, self.store, outcome=failed)
            raise
        outcome = shares.about(outcome, lease_id)
        record = outcome.record
        if not outcome.applied:
            refusal = verdict.of_release(outcome, lock_id, lease_id, self.clock.time())
            if refusal is not None:
                unknown = outcome.lock is None and outcome.in_doubt
                said = metrics.IN_DOUBT if unknown else metrics.NOT_HELD
                metrics.record("awsflock.releases", 1, lock_id, self.store, outcome=said)
                raise refusal
        metrics.record("awsflock.releases", 1, lock_id, self.store, outcome=metrics.RELEASED)
        if not (log.isEnabledFor(logging.INFO) or metrics.enabled()):
            return  # what follows is for a log handler and the hold-duration metric only
        event = event_fields("released", lock_id, record)
        event["outcome"] = metrics.RELEASED
        acquired_at = record.acquired_at if record is not None else None
        if record is None and _held is not None:
            # A release that answers nothing (DynamoDB's transaction with the done item): what
            # the lease it ended was, as its holder knows it.
            event.update(owner=_held.owner, fencing_token=_held.fencing_token, lease_id=lease_id)
            acquired_at = _held.acquired_at
        if acquired_at is not None and outcome.applied:
            event["held_s"] = round(self.clock.time() - acquired_at, 3)
            metrics.record("awsflock.hold.duration", event["held_s"], lock_id, self.store)
        log.info("released %r", lock_id, extra=event)

    def state(self, lock_id: str) -> LockRecord | Pool | None:
        """What the store says of ``lock_id`` now: its record, its pool, or None (never taken,
        or ended and removed since). One consistent read."""
        check_lock_id(lock_id)
        outcome = self.store.read(lock_id)
        return outcome.pool if outcome.pool is not None else outcome.lock
