# Made from acquisition_async.py by scripts/unasync: edit that file, then run scripts/unasync.
"""One acquisition of a lock, attempt by attempt; the wait loop around it is
``awsflock.lock.waiting``.

Every attempt sends a fresh LEASE_ID, so a grant of an earlier attempt whose answer was lost is
never renewed by a later one under the same id (which an awsflock 0.2.0 client could then race
with). The acquisition remembers every id it sent:

- an item found holding one of them is our own grant: it is kept if at least ``MIN_LEFT`` of the
  lease is left, and otherwise given up (released) before the attempts go on, so an acquire
  never reports a lease that is expired or about to be;
- ids whose outcome is unknown (the request failed in transit) stay *unsettled* until released:
  on success (all but the granted one) and on every failure path alike, so no attempt leaves a
  phantom lock or a phantom pool slot behind.
"""

from __future__ import annotations

import logging
import random
from typing import Any, cast

from awsflock import errors, shares
from awsflock.clock import Clock
from awsflock.lock import verdict
from awsflock.lock.grants import Grant, new_lease_id
from awsflock.lock.terms import NO_TERMS, Terms
from awsflock.protocol import MIN_TRY, Attempt, Drops, LockStore, Outcome
from awsflock.records import NO_LINE, Identity, Line, LockRecord
from awsflock.text import format_seconds, iso_utc

log = logging.getLogger("awsflock.lease")

#: An acquire returns a lease only with at least this fraction of its duration left.
MIN_LEFT = 0.5


class Acquisition:
    """The attempts of one ``acquire``: ``step()`` sends one, ``abandon()`` cleans up."""

    def __init__(
        self,
        store: LockStore,
        lock_id: str,
        lease_s: float,
        identity: Identity,
        size: int | None,
        *,
        clock: Clock,
        rng: random.Random,
        skew: float,
        terms: Terms = NO_TERMS,
    ) -> None:
        self.store, self.clock, self.rng, self.skew = store, clock, rng, skew
        #: The store's grace for a try beyond its time (``RetryingStore.try_grace``).
        self.grace: float = getattr(store, "try_grace", 0.0)
        self.lock_id = lock_id
        self.lease_s = lease_s
        self.terms = terms  # its lock-delay and max-hold, recorded with the lease
        self.identity = identity
        self.size = size
        self.sent: set[str] = set()
        #: Per attempt, the monotonic clock less its ``now_ms``: turns a store's times monotonic.
        self.to_mono: dict[str, float] = {}
        #: Sent, maybe granted, not known to be released: LEASE_ID -> slot.
        self.unsettled: dict[str, int | None] = {}
        self.attempts = 0
        self.start = clock.monotonic()
        self.origin: float | None = None  # where the acquire's bound counts from, if earlier
        #: Monotonic time by which everything, clean-up included, is over (None: no limit).
        self.hard_end: float | None = None
        #: The caller has been told the lock is contended / an attempt failed.
        self.told = self.warned = False
        #: The last step gave back a grant that arrived with too little of its lease left.
        self.late_grant = False
        self.holder: LockRecord | None = None
        self.error: errors.AwsflockError | None = None
        self.slot = rng.randrange(size) if size else None
        #: How many slots of the pool the last answer showed free.
        self.free_slots = size or 0
        #: The size a shrink in steps of the pool was going to in the last answer.
        self.resizing: int | None = None
        #: Pool probes in a row without sleeping (another free slot is tried at once).
        self.quick = 0
        #: The lock's line of fair waiters, as the last answer showed it.
        self.line: Line = NO_LINE
        #: A fair head's take: its ticket, its place's number, the lapsed places it drops.
        self.ticket: str | None = None  # None: the take needs the line clear
        self.number: int | None = None
        self.drop: Drops = ()
        #: A fair acquire's ticket, whether or not it is in line now (None: not fair).
        self.own_ticket: str | None = None

    # -- one attempt ---------------------------------------------------------------------------

    def step(self) -> Grant | None:
        """Send one attempt. The grant if we hold the lock now; else None (``holder`` and
        ``error`` say why)."""
        slot = self.slot
        lease_id = self._new_attempt(slot)
        store = self.store
        try:
            with store.budget(self.attempt_end()):
                mono, now_ms = self.clock.monotonic(), self._now_ms()
                self.to_mono[lease_id] = mono - now_ms / 1000
                attempt = Attempt(
                    lease_id=lease_id,
                    identity=self.identity,
                    now_ms=now_ms,
                    lease_ms=round(self.lease_s * 1000),
                    skew_ms=round(self.skew * 1000),
                    slot=slot,
                    slots=self.size,
                    ticket=self.ticket,
                    drop=self.drop,
                    seen=self.holder if slot is None else None,
                    number=self.number,
                    delay_ms=self.terms.delay_ms,
                    max_hold_ms=self.terms.max_hold_ms,
                )
                outcome = store.take(self.lock_id, attempt)
        except (errors.Throttled, errors.EndpointUnreachable) as err:
            # Transient: the caller keeps trying within its wait. Unless no try of it can have
            # reached the store, its outcome is unknown.
            self.error = err
            if not err.maybe_applied:
                self.unsettled.pop(lease_id, None)
            return None
        except errors.AwsflockError as err:
            # Refused outright (no table, no credentials, access denied, not the store):
            # nothing was written, unless an earlier try of the step may have landed.
            if not err.maybe_applied:
                self.unsettled.pop(lease_id, None)
            raise
        self.error = None
        self.late_grant = False
        if not outcome.applied and not outcome.in_doubt:
            # Whatever the item shows, this id holds nothing now (a try of it that landed
            # earlier is found below by its id). Only a try that failed in transit could still
            # land later; then the id stays unsettled.
            self.unsettled.pop(lease_id, None)
        return self.look(outcome)

    def _new_attempt(self, slot: int | None) -> str:
        """A new attempt's lease id (on ``slot``), said at debug level and counted as sent and
        unsettled before it is: it may land whatever its answer."""
        self.attempts += 1
        lease_id = self.fresh_id(slot)
        log.debug(
            "acquire attempt %d on %r%s",
            self.attempts,
            self.lock_id,
            "" if slot is None else f" slot {slot}",
            extra={
                "event": "acquire_attempt",
                "lock_id": self.lock_id,
                "attempts": self.attempts,
                "slot": slot,
            },
        )
        self.sent.add(lease_id)
        self.unsettled[lease_id] = slot
        return lease_id

    def fresh_id(self, slot: int | None) -> str:
        """A new attempt's LEASE_ID (on ``slot``)."""
        return new_lease_id() + ("" if slot is None else f".{slot}")

    def release_command(self, lease_id: str) -> str:
        """The command that frees what an attempt under ``lease_id`` may hold."""
        return f"awsflock release {self.lock_id} {lease_id}"

    def attempted(self) -> tuple[str, str]:
        """What an attempt of this acquire asked for, and what its grant holds, for messages."""
        return repr(self.lock_id), "the lock is"

    def what(self) -> str:
        """What this acquire waits for, for messages ("lock 'x'")."""
        if self.size:
            return f"all {self.size} slots of pool {self.lock_id!r} are held; the next to free up"
        return f"lock {self.lock_id!r}"

    def attempt_end(self) -> float:
        """When an attempt's requests must be over: one request timeout from now, and early
        enough before the hard end to release an attempt that may have landed unanswered."""
        end = self.clock.monotonic() + self.store.request_timeout
        if self.hard_end is not None:
            end = min(end, self.hard_end - min(1.0, self.store.request_timeout / 4) - self.grace)
        return end

    def _now_ms(self) -> int:
        return round(self.clock.time() * 1000)

    def look(self, outcome: Outcome) -> Grant | None:
        """Learn from an answer (a take's, or a waiter's poll): our own grant if it shows one,
        else None, with ``holder``, ``line`` and the pool slot to try next updated."""
        self.line = outcome.line
        if self.size is None:
            return self._look_plain(outcome)
        return self._look_pool(outcome)

    def free(self) -> bool:
        """Whether the last answer showed the lock (or a slot of the pool) free to take now."""
        now = self.clock.time()
        if self.size is None:
            return self.holder is None or self.holder.is_free(now, self.skew)
        return self.free_slots > 0

    def _look_plain(self, outcome: Outcome) -> Grant | None:
        if outcome.pool is not None:
            raise errors.ConfigurationError(
                f"{self.lock_id!r} is a pool of {outcome.pool.size} slots, but this holder asked "
                "for a plain lock",
                hint=f"use --slots {outcome.pool.size} (slots=), as every holder of it must",
            )
        record = outcome.lock
        if record is not None and record.lease_id in self.sent and not record.released:
            return self._keep_or_give_up(record, record.lease_id, None, outcome.to_mono)
        self.holder = record
        return None

    def _look_pool(self, outcome: Outcome) -> Grant | None:
        assert self.size is not None
        problem = verdict.pool_disagrees(outcome, self.lock_id, self.size, self.clock.time())
        if problem is not None:
            raise problem
        pool = outcome.pool
        self.free_slots = self.size if pool is None else 0
        self.resizing = None if pool is None else pool.resizing_to
        if pool is None:
            self.holder = None
            return None
        for number, record in sorted(pool.slots.items()):
            if record.lease_id in self.sent and not record.released:
                lease = self._keep_or_give_up(record, record.lease_id, number, outcome.to_mono)
                if lease is not None:
                    return lease
        if self.resizing is not None:  # no slot is taken until the shrink ends
            self.holder = None
            return None
        held = [r for r in pool.slots.values() if not r.released]
        self.holder = min(held, key=lambda r: r.expires_at) if held else None
        free = pool.free_slots(self.size, self.clock.time(), self.skew)
        self.free_slots = len(free)
        if free and self.quick < self.size:
            self.quick += 1
            self.slot = self.rng.choice(free)
        else:
            self.quick = 0
            self.slot = self.rng.randrange(self.size)
        return None

    def claim(self) -> None:
        """A wait going on after a refusal by shared holders keeps new shares out (writer
        preference, ``awsflock.shares``) until its next poll or its end. A failure is ignored."""
        holder, mono = self.holder, self.clock.monotonic()
        left = None if self.hard_end is None else self.hard_end - self.store.request_timeout - mono
        claim_ms = shares.claim_ms(holder, self.clock.time(), self.skew, left)
        if self.size is not None or holder is None or claim_ms <= 0:
            return
        try:
            with self.store.budget(self.attempt_end()):  # within the wait's bound, as a poll
                now_ms, steps = self._now_ms(), cast(Any, self.store)
                steps.claim(holder.lock_id, now_ms=now_ms, until_ms=now_ms + claim_ms)
        except errors.AwsflockError as err:
            log.debug("claim of %r failed: %s", holder.lock_id, err.one_line())

    def wants_retry_now(self) -> bool:
        """A pool probe found another free slot: try it without sleeping."""
        return self.size is not None and self.quick > 0 and self.error is None

    def _keep_or_give_up(
        self, record: LockRecord, lease_id: str, slot: int | None, to_mono: float | None
    ) -> Grant | None:
        """Our own grant: keep it if enough of the lease is left, else give it up.
        ``to_mono``: the answer's (``Outcome.to_mono``), if its store gives one."""
        self.unsettled[lease_id] = slot
        if to_mono is None:
            to_mono = self.to_mono.get(lease_id)
        left = self._left(record, to_mono)
        if left >= self.terms.granted(self.lease_s) * MIN_LEFT:
            self.unsettled.pop(lease_id, None)
            waited = self.clock.monotonic() - self.start
            return Grant(lease_id, record, slot, self.attempts, waited, to_mono)
        self._give_up(lease_id, slot, left, "from an earlier attempt")
        return None

    def still_fresh(self, grant: Grant) -> Grant | None:
        """``grant`` if at least ``MIN_LEFT`` of its lease is still left once the clean-up of
        the other attempts is over (which may take a request timeout); else it is given up."""
        left = self._left(grant.record, grant.to_mono)
        if left >= self.terms.granted(self.lease_s) * MIN_LEFT:
            return grant
        self.unsettled[grant.lease_id] = grant.slot
        self._give_up(grant.lease_id, grant.slot, left, "kept while other attempts were settled")
        return None

    def _left(self, record: LockRecord, to_mono: float | None) -> float:
        """How much of a lease is left: by the wall clock (what the promise of half a lease
        is stated in), and no more than by the monotonic clock where its times can be put on
        it (so a step of the wall clock back cannot make a grant look fresher than it is)."""
        left = record.expires_at - self.clock.time()
        if to_mono is None:
            return left
        return min(left, record.expires_at + to_mono - self.clock.monotonic())

    def _give_up(self, lease_id: str, slot: int | None, left: float, how: str) -> None:
        log.info(
            "a grant of %r %s has only %s of its lease left; giving it up",
            self.lock_id,
            how,
            format_seconds(max(left, 0.0)),
            extra={"event": "grant_given_up", "lock_id": self.lock_id, "slot": slot},
        )
        end = self._cleanup_end()
        given_back = False
        if end is not None:
            with self.store.budget(end):
                given_back = self._release(lease_id, slot)
        # If the wait ends now, say what happened: not "busy" (it was our own grant).
        self.holder = None
        self.late_grant = True
        self.error = errors.EndpointUnreachable(
            f"{self.store.where()} answered too late: the lease it granted "
            f"had only {format_seconds(max(left, 0.0))} left, and "
            + ("was given back" if given_back else "could not be given back in time (see above)"),
            hint="retry; if it keeps happening, check the network or raise --request-timeout",
        )

    def _cleanup_end(self) -> float | None:
        """When a clean-up release must be over: within the acquire's bound, if it has one;
        None when that bound leaves no time for a try (the attempt is then named instead)."""
        now = self.clock.monotonic()
        end = now + self.store.request_timeout
        if self.hard_end is not None:
            end = min(end, self.hard_end)
        return end if end - now >= MIN_TRY + self.grace else None

    # -- clean-up ------------------------------------------------------------------------------

    def give_back(self, grant: Grant) -> None:
        """Release a grant this acquisition returned but its caller cannot use (cancelled)."""
        self.unsettled[grant.lease_id] = grant.slot
        self.abandon()

    def abandon(self, keep: str | None = None) -> None:
        """Release every unsettled attempt but ``keep``. One that cannot be confirmed is named
        on stderr with the command that frees it."""
        store = self.store
        for lease_id, slot in list(self.unsettled.items()):
            if lease_id == keep:
                continue
            # Each release within what is left of the acquire's bound: none once it is spent.
            end = self._cleanup_end()
            if end is not None:
                with store.budget(end):
                    if self._release(lease_id, slot):
                        continue
            log.warning(
                "an attempt to acquire %s may have been granted without an answer; if so, %s "
                "held until about %s (later if the request landed late) under LEASE_ID "
                "%s: free it with `%s`",
                *self.attempted(),
                iso_utc(self.clock.time() + self.lease_s),
                lease_id,
                self.release_command(lease_id),
                extra={
                    "event": "abandon_failed",
                    "lock_id": self.lock_id,
                    "slot": slot,
                    "lease_id": lease_id,
                },
            )
        self.unsettled.clear()

    def _release(self, lease_id: str, slot: int | None) -> bool:
        """Release one of our attempts; True once it is certainly not held."""
        try:
            outcome = self.store.release(
                self.lock_id,
                lease_id,
                now_ms=self._now_ms(),
                skew_ms=round(self.skew * 1000),
                slot=slot,
            )
        except errors.AwsflockError as err:
            log.debug("clean-up release of %r failed: %s", self.lock_id, err.one_line())
            return False
        if outcome.applied or outcome.knows(lease_id) or outcome.barred:
            # Released; or the store barred the id, so a try of it still on its way is refused.
            self.unsettled.pop(lease_id, None)
            return True
        # The item does not show this attempt at all: it never landed, or it is still on its
        # way (a late request): it cannot be confirmed either way.
        return False
