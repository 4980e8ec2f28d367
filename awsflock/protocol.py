"""The store interface: every step of the lock protocol as one atomic, conditional operation.

The lock logic (``awsflock.lock``) speaks only to a ``LockStore``, and a store speaks only the
library's types: ``Attempt`` in, ``Outcome`` (``LockRecord``, ``Pool``) out. A store decides
nothing: each method checks its condition and writes, atomically, or changes nothing; what a
refusal means is decided by the caller from the state it returns.

Whose clock times the leases is its kind's to declare (``LockStore.skew_free``). On a store
timed by its callers (DynamoDB, the in-memory store) times are the caller's wall clock in epoch
milliseconds (``now_ms``), and ``skew_ms`` is the window the clocks of all holders are assumed
to agree within (the NTP assumption, see docs/how-it-works/clocks.md): a lease is *live* until its
``expires_ms``, and may be taken over only once it ran out more than ``skew_ms`` ago by the
taker's clock. A store timed by a clock of its own (PostgreSQL's server) ignores both, judges
every step by that clock, and answers in the caller's clock (its times shifted by the
difference), so callers read every store's answers the same way.

Fencing tokens only go up per lock (and per pool slot), whatever the delay between a caller
reading its clock and its step landing: a plain take carries a token above the highest the lock
has granted (its counter outlives the record: the DynamoDB store's fence record, or the record
kept for good where the endpoint has no transactions; the PostgreSQL row is never deleted), and
a pool slot counts on in its record, which is never removed.

Fair waiting keeps a line in the lock's record: a waiter ``join``s (given the next number),
polls with ``beat``, and ``leave``s when it gives up. Only the head of the line (no live place
with a lower number) takes the lock, removing its place in the same step, and only while the
place has the number it saw (not dropped as lapsed and made again by a late join since); an
attempt without a ticket takes it only while the line is clear (empty, or unpolled for
``LINE_LAPSE_MS`` plus the skew window). The line only ever adds conditions to a take, so it
cannot weaken mutual exclusion or fencing; waiters judge a place lapsed by watching it not
change (``drop``).

A request that failed in transit may still be applied later: stores raise ``StoreError``
subclasses with ``maybe_applied`` set then, and an answered call whose earlier try failed so
says ``Outcome.in_doubt``; a step made of several calls keeps the doubt of each
(``RetryingStore.step``).

Between two polls a waiter pauses through the store's ``Waker`` (``LockStore.waker``): the
default (``Sleeper``) sleeps the pause out; a store that can tell a waiter a lock may have
changed (Redis publishes when a lease ends) ends it early: a hint to poll, granting nothing.

This module is the store's half of the protocol: each ``LockStore`` method's docstring states
its condition and its writes. The client's half, which the stores rely on as much:

- every attempt of an acquire sends a fresh LEASE_ID, and every id it sent whose outcome is
  unknown stays unsettled until released or named on stderr with its ``release`` command, on
  every exit (``lock.acquisition``, ``lock.waiting.wait``);
- a grant is kept only with at least half its lease left, judged after the clean-up of the
  other attempts (``Acquisition.still_fresh``), by the monotonic clock as well as the wall
  clock;
- no retry is sent once its budget is spent, and every call's doubt reaches the caller
  (``stores.remote.requests``);
- a holder counts its lease as lost a safety margin before its end unless a renewal got
  through (``lock.renewal``, ``lock.heartbeat``), and ``run`` stops its command before then;
- a refused renew or release is told apart by what the record shows (``lock.verdict``).

Adding a backend: a network store is a link and a step program on the shared layer
(``awsflock.stores.remote``), registered as a kind (``awsflock.stores.kinds``), passing the
conformance suite (``tests/conformance/``); see docs/contributing/writing-a-store.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol

from awsflock.clock import Clock
from awsflock.records import (
    ENDED_RELEASED,
    NO_LINE,
    RESERVED_PREFIX,
    Identity,
    Line,
    LockRecord,
    Pool,
    Waiter,
)
from awsflock.records import LINE_LAPSE_MS as LINE_LAPSE_MS  # part of the protocol's terms
from awsflock.state import LockState, StateWrite
from awsflock.wakers import WAKE_CHECK as WAKE_CHECK  # part of the protocol's terms
from awsflock.wakers import Sleeper as Sleeper
from awsflock.wakers import Waker as Waker

#: The expiry time (epoch seconds, DynamoDB's TTL attribute) of a lock record kept for good:
#: on an endpoint without transactions, where no fence record can be kept, a plain lock's record
#: must outlive TTL and awsflock 0.2.0 clients (9999-12-31T23:59:59Z).
KEPT_UNTIL = 253402300799

#: How long a store remembers each lease it handed on (its id, how it ended), apart from the
#: lock's record, whose history is short: a release retried after any number of hand-offs
#: learns how its lease ended, and a late take under its id is refused. Kept from its end on.
DONE_MS = 3600 * 1000
#: How long a store keeps a bar: a LEASE_ID that a release found never granted (an acquire's
#: attempt perhaps still on its way), whose take is refused if it lands: far longer than one lags.
BAR_KEEP_MS = 24 * 3600 * 1000
#: How a store that keeps its bars among the leases it ended marks one (no lease's end).
ENDED_BARRED = "barred"

#: Keys of audit records start with this.
AUDIT_PREFIX = RESERVED_PREFIX + "audit#"
#: The ``status`` of an audit record of an action that took effect (every record written now).
AUDIT_APPLIED = "applied"
#: The ``status`` of a record of an action that did not take effect: no longer written (a
#: development build wrote its record before the action), and left out of every view.
AUDIT_VOID = "not_applied"


def audit_key(lease_id: str) -> str:
    """The key of the audit record of the force-release of ``lease_id`` (a lease is ended by
    force at most once). Never the lock name: a name may use up DynamoDB's whole 2,048-byte
    key; the record names its lock in ``target``."""
    return f"{AUDIT_PREFIX}force#{lease_id}"


#: The default time one call may take, retries included, unless the caller's wait is longer.
DEFAULT_REQUEST_TIMEOUT = 5.0
#: No try of a call is started with less time than this left.
MIN_TRY = 0.25
#: At most this many lapsed places are removed by one step (expressions are limited to 4 KB).
MAX_DROPS = 20

#: Places to remove from a line, each only if its last poll is still the one seen: (ticket, ms).
Drops = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Attempt:
    """One acquire attempt: a new lease for ``lease_id``, from ``now_ms`` for ``lease_ms``.

    ``slot``/``slots``: slot ``slot`` of a pool of ``slots`` (both None for a plain lock).
    ``ticket``: the attempt of a fair waiter at the head of the line, whose place it holds, and
    ``number`` that place's number as it saw it (None: the take needs the line clear);
    ``drop``: lapsed places in line, removed with the take. ``seen``: the lock's record as the
    acquisition's last answer showed it (None: not seen yet; DynamoDB's take is pinned to it).
    ``delay_ms``, ``max_hold_ms``: the holder's lock-delay and max-hold (0: none), recorded with
    its lease; no take or renewal sets its end past the cap (the take's time plus the max-hold).
    """

    lease_id: str
    identity: Identity
    now_ms: int
    lease_ms: int
    skew_ms: int
    slot: int | None = None
    slots: int | None = None
    ticket: str | None = None
    drop: Drops = ()
    seen: LockRecord | None = None
    number: int | None = None
    delay_ms: int = 0
    max_hold_ms: int = 0


#: How far apart two readings must be for a renew to count as sent after the one that set a
#: lease's end, and so shorten it: a store timed by its own clock uses this (the others, theirs).
RENEW_ORDER_MS = 5000


@dataclass(frozen=True)
class Outcome:
    """What one conditional step did, and the lock's state: after it if ``applied``, else as
    it was when the condition failed.

    ``lock`` is the record read as a plain lock (None: no record at all); ``pool`` the record
    read as a pool (None: it is not one); ``slot`` the slot the step was about. ``in_doubt``: a
    try of this call failed in transit before the answered one, and may still be applied.
    ``line``: the lock's line of fair waiters. ``to_mono``: for a store that gives record
    times in the caller's wall clock as it read when the answered try was sent (PostgreSQL,
    whose own clock times leases), what turns them into the caller's monotonic time (add it);
    None: the times are in the caller's ``now_ms``, and the caller pairs that with its
    monotonic clock itself. ``barred``: an end step found nothing ever granted under its lease
    id and recorded the id, so a take of it that lands later is refused (a store that cannot
    leaves it False, and an acquire that gave up names such an id's release command).
    """

    applied: bool
    lock: LockRecord | None
    pool: Pool | None = None
    slot: int | None = None
    in_doubt: bool = False
    line: Line = NO_LINE
    to_mono: float | None = None
    barred: bool = False

    @property
    def record(self) -> LockRecord | None:
        """The lease the step was about: the plain lock's, or the slot's."""
        if self.slot is None:
            return None if self.pool is not None else self.lock
        return self.pool.slots.get(self.slot) if self.pool is not None else None

    def knows(self, lease_id: str) -> bool:
        """Whether the record this outcome is about (a plain lease on a pool: the plain lock's
        last state) has ``lease_id`` as its lease, a share, or in its history."""
        record = self.lock if self.slot is None else self.record
        if record is None:
            return False
        held = (record.lease_id, *(s.lease_id for s in record.shares), *dict(record.history))
        return lease_id in held

    def remembering(self, lease_id: str, ended: str, lock_id: str = "") -> Outcome:
        """This outcome with ``lease_id`` in the history of the record it is about, ended as
        ``ended``: for a store that keeps the leases it handed on apart from the record (whose
        own history is short), so a refused renew or release still learns how its lease ended.
        A plain lease on a lock since made a pool: the plain lock's last state (the top). A
        plain lock whose record is gone (DynamoDB's TTL): a free record of ``lock_id`` with no
        lease of its own."""
        plain = self.slot is None
        record = self.lock if plain else self.record
        if record is None and plain:
            record = LockRecord(lock_id=lock_id, ended=ENDED_RELEASED)
        if record is None or record.lease_id == lease_id:
            return self
        kept = replace(record, history=(*record.history, (lease_id, ended)))
        if plain or self.pool is None or self.slot is None:
            return replace(self, lock=kept)
        return replace(self, pool=replace(self.pool, slots={**self.pool.slots, self.slot: kept}))


def barred_resize(resize_id: str) -> str:
    """A pool's ``resized_by`` once a store barred resize ``resize_id``'s request that may
    still land (DynamoDB's ``resizes``): still that resize's, and nobody else's."""
    return f"{resize_id}.barred"


class LockStore(Protocol):
    """Where the lock records live. Each lock method is one atomic conditional step."""

    #: The name of its kind in the store registry (``awsflock.stores.kinds``), where what the
    #: kind can do is declared (``kinds.of(store)``); the ``store`` attribute of its metrics.
    kind: str
    #: What the store is called in messages (a table name).
    table_name: str
    #: How long one call may take, its own retries included, unless a ``budget`` says otherwise.
    request_timeout: float
    #: The clock budgets are measured by (``monotonic``) and retries wait on (``sleep``).
    clock: Clock

    @property
    def skew_free(self) -> bool:
        """Whose clock times the leases: False, the callers' (each step carries the caller's
        ``now_ms``, and an expired lease is taken only a skew window after its end); True,
        one clock of the store's own (a database server's), so no skew window applies, the
        steps ignore ``skew_ms``, and answers come back in the caller's clock. Its kind's
        (``kinds.Kind.skew_free``), unless the store was made to take its times from its
        callers (``server_time=False``, for simulations in virtual time)."""
        ...

    def where(self) -> str:
        """Where the store is, for messages ("DynamoDB at http://...")."""
        ...

    def budget(self, end: float) -> AbstractContextManager[None]:
        """Calls made inside end, retries included, by ``end`` (monotonic); an outer one wins."""
        ...

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        """Take-if-free: write ``attempt``'s lease if the lock (or its slot) is free, that is,
        never taken, ended (released or force-released), or its lease ran out more than
        ``skew_ms`` before ``now_ms``; and ``attempt.lease_id`` was never granted on it before
        (neither current nor among the last three leases); and the record's kind agrees: a
        plain attempt needs a record that is not a pool, a pool attempt one of the same size,
        or a free plain lock (which becomes the pool). The new lease's fencing token is the
        last one plus one. The ended or expired lease goes to the top of the history.

        The line: without ``attempt.ticket``, it must be clear (no place, or no poll of any for
        ``LINE_LAPSE_MS`` + ``skew_ms`` before ``now_ms``); with one, that place must exist
        (with ``attempt.number``, if given) and every ``drop`` place still show its
        ``seen_ms``; the take removes them all."""
        ...

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        """Take a place at the end of the lock's line: add ``waiter`` under the line's next
        number (``waiter.number`` is ignored), if the lock's record exists and the ticket has
        no place yet. The next number becomes one more; the line's latest poll becomes
        ``waiter.seen_ms`` if that is later (a join that lands late never lowers it)."""
        ...

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        """A poll of a waiter: set its place's ``seen_ms`` to ``now_ms`` if the place exists
        with an earlier ``seen_ms`` (so a beat that lands late changes nothing) and every
        ``drop`` place still shows its ``seen_ms``; those are removed (at most ``MAX_DROPS``).
        The line's latest poll becomes ``now_ms`` if that is later: it never goes back."""
        ...

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        """Remove the ticket's place from the line, if it is there (``applied``: it was)."""
        ...

    def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
        state: StateWrite | None = None,
    ) -> Outcome:
        """Extend the lease to ``now_ms + lease_ms`` if it is ``lease_id``, not ended and not
        run out at ``now_ms`` (a renew never revives a lease), and the slot is still in the
        pool (a plain lease: the record is not a pool). ``keeper``: who keeps the lease alive
        from now on (``acquire --keep-alive``'s renewer), recorded with it until the next
        grant. ``state``: also write the lock's state, in the same step (``awsflock.state``)."""
        ...

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        """End the lease (marked released at ``now_ms``) if it is ``lease_id`` and not ended
        (a plain lease: the record is not a pool). The record and its counter stay."""
        ...

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        force_id: str,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
        audit: dict[str, Any] | None = None,
    ) -> Outcome:
        """As ``release``, for an operator: marked forced by ``force_id``, with who and why.
        Applied, it also writes ``audit`` (status ``AUDIT_APPLIED``) as audit record
        ``audit_key(lease_id)`` in the same atomic write (without transactions: right after),
        so the record exists exactly when the force took effect."""
        ...

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        """The lock's state, read consistently (``applied`` is False). With ``lease_id``: also
        how that lease ended, in its record's history, where the store keeps the leases it
        handed on apart from the record (whose own history is short)."""
        ...

    def read_state(self, lock_id: str) -> LockState:
        """The lock's state (``awsflock.state``), read consistently."""
        ...

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        """Every plain lock and pool whose name starts with ``prefix``, in the store's order."""
        ...

    def resize_pool(
        self,
        lock_id: str,
        old: int | None,
        new: int,
        *,
        now_ms: int,
        skew_ms: int,
        seen: Pool | None = None,
        resize_id: str = "",
    ) -> bool:
        """Set the pool's size to ``new`` if it is still ``old`` (None: no size recorded) and
        every slot that goes away is free. True if done. ``seen``: the pool as the caller read
        it; where a request can land late, after a later one (DynamoDB), the resize is refused
        if another resize changed the pool since that read (``Pool.resized_by``, which this
        resize sets to ``resize_id``); PostgreSQL and Redis resize in one step and keep no
        mark."""
        ...

    def put_audit(self, key: str, entry: dict[str, Any]) -> None:
        """Write audit record ``key`` (under ``AUDIT_PREFIX``; empty fields left out; ``entry``
        names its lock in ``target``) unless the record there settles it: one whose action
        took effect (``status`` AUDIT_APPLIED) stays, and a void one is replaced only by one
        that took effect. So a put landing late never hides the record the force-release that
        ended the lease wrote."""
        ...

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        """Every audit record's fields, in the store's order."""
        ...

    def create(self, *, progress: Callable[[str], None] = ...) -> bool:
        """Make the store ready for locks (create its table); True if it was created now,
        False if it was there already. Says what it does through ``progress``."""
        ...

    def actor(self) -> str | None:
        """Who this store's caller is, as the store knows it (an IAM ARN), or None."""
        ...

    def waker(self, lock_id: str) -> Waker:
        """How a waiter for ``lock_id`` pauses between polls: ``Sleeper()``, or a waker that
        ends a pause early when a step may have freed the lock (a lease ended, a pool slot
        freed, a place left the line). Called once a wait first pauses; closed when it ends."""
        ...
