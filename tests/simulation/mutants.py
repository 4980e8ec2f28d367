"""Known bugs, put back on purpose: the simulator must find each within its CI budget.

Findings 1-10 are those of the adversarial review (the issue "Safety holes found by an
adversarial review"), each reverted the way the code was before its fix; the others are bugs
of our own making (E-H break the order of fair waiters, never safety). Each is a context
manager that patches the library (or the in-memory store) and undoes it on exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
import weakref
from typing import Any, Callable

from awsflock.lock import acquisition, admin, line, renewal, verdict
from awsflock.stores import memory_records
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_records import _Lease, _Record
from awsflock.stores.remote import connected
from awsflock.stores.remote import requests as retrying
from tests.simulation.mutants_aio import AIO_SHARE, MUTANTS_AIO
from tests.simulation.mutants_delay import (
    CAPS_SHARE,
    DELAYS_SHARE,
    MUTANTS_CAPS,
    MUTANTS_DELAY,
    MUTANTS_STATES,
    STATES_SHARE,
)
from tests.simulation.mutants_previous import MUTANTS_PREVIOUS, SHARES_PREVIOUS
from tests.simulation.mutants_sets import MUTANTS_SETS, SETS_SHARE
from tests.simulation.mutants_shares import MUTANTS_SHARES, SHARES_SHARE
from tests.simulation.patching import patched as _patched

__all__ = [
    "AIO_SHARE",
    "CAPS_SHARE",
    "DELAYS_SHARE",
    "MUTANTS",
    "SETS_SHARE",
    "SHARES_SHARE",
    "STATES_SHARE",
]

Patch = Callable[[], contextlib.AbstractContextManager[None]]


# -- findings of the review ---------------------------------------------------------------------


def late_renew() -> contextlib.AbstractContextManager[None]:
    """1. A renew revives an expired lease and keeps what awsflock 0.2.0 compares, so 0.2.0's
    reclaim (read, then put on the value it read) succeeds across it."""
    original = MemoryStore.renew

    def renew(self: MemoryStore, lock_id: str, lease_id: str, **kw: Any) -> Any:
        record = self._records.get(lock_id)
        top = record.top if record is not None and kw.get("slot") is None else None
        if top is not None and top.owned_by(lease_id) and not top.ended:
            with self._mutex:
                top.expires_ms = kw["now_ms"] + kw["lease_ms"]  # no live check, same version
                top.expires_s = memory_records._seconds(top.expires_ms + kw["skew_ms"])
                return self._outcome(True, lock_id, record, None)
        return original(self, lock_id, lease_id, **kw)

    return _patched((MemoryStore, "renew", renew))


def one_lease_id_per_acquire() -> contextlib.AbstractContextManager[None]:
    """2. Every attempt of one acquire sends the same LEASE_ID, which is also what 0.2.0
    compares, and a store grants a lease again to the id it holds: an attempt that landed
    unanswered is granted again past its lease while 0.2.0 reclaims the lock."""
    ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
    step = acquisition.Acquisition.step
    new_lease_id = acquisition.new_lease_id  # type: ignore[attr-defined]
    current: list[Any] = [None]

    def same_id() -> str:
        return ids.setdefault(current[0], new_lease_id())

    def tracking_step(self: Any) -> Any:
        current[0] = self
        return step(self)

    granted = _Lease.granted
    take = MemoryStore.take

    def take_again(self: MemoryStore, lock_id: str, attempt: Any) -> Any:
        outcome = take(self, lock_id, attempt)
        record = self._records.get(lock_id)
        if record is None or attempt.slot is not None:
            return outcome
        top = record.top
        if not outcome.applied:
            if top.lease != attempt.lease_id or top.ended or record.slots is not None:
                return outcome
            with self._mutex:  # granted again to the id it holds, whatever its age
                top.expires_ms = attempt.now_ms + attempt.lease_ms
                top.expires_s = memory_records._seconds(top.expires_ms + attempt.skew_ms)
        top.version = attempt.lease_id  # what 0.2.0 compares: the LEASE_ID itself
        return self._outcome(True, lock_id, record, None)

    return _patched(
        (acquisition, "new_lease_id", same_id),
        (acquisition.Acquisition, "step", tracking_step),
        (_Lease, "granted", lambda self, lease_id: granted(self, lease_id) and False),
        (MemoryStore, "take", take_again),
    )


def expired_own_grant() -> contextlib.AbstractContextManager[None]:
    """3. A grant of an earlier, unanswered attempt is accepted however little of it is left."""
    return _patched((acquisition, "MIN_LEFT", -1e9))


def ttl_at_lease_end() -> contextlib.AbstractContextManager[None]:
    """4. The expiry time (TTL) is the lease's end, not its end plus the skew window: the record
    may be deleted while a holder whose clock lags still relies on it."""
    return _ttl_shift(0)


def _ttl_shift(extra_ms: int) -> contextlib.AbstractContextManager[None]:
    take, renew, end = MemoryStore.take, MemoryStore.renew, MemoryStore._end

    def fix(self: MemoryStore, lock_id: str) -> None:
        record = self._records.get(lock_id)
        if record is not None and record.slots is None and record.top.expires_ms is not None:
            record.top.expires_s = memory_records._seconds(record.top.expires_ms + extra_ms)

    def wrap(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: MemoryStore, lock_id: str, *args: Any, **kw: Any) -> Any:
            outcome = method(self, lock_id, *args, **kw)
            if outcome.applied:
                fix(self, lock_id)
            return outcome

        return call

    return _patched(
        (MemoryStore, "take", wrap(take)),
        (MemoryStore, "renew", wrap(renew)),
        (MemoryStore, "_end", wrap(end)),
    )


def forgotten_probe() -> contextlib.AbstractContextManager[None]:
    """5. Attempts that may have landed unanswered are forgotten, not released."""
    return _patched((acquisition.Acquisition, "abandon", lambda self, keep=None: None))


def pool_apart_from_lock() -> contextlib.AbstractContextManager[None]:
    """6. A pool lives apart from the plain lock of its name (``--slots 1`` against a pool of 2
    then over-admits)."""
    methods = ("take", "renew", "release", "force_release", "read", "resize_pool")
    originals = {name: getattr(MemoryStore, name) for name in methods}

    def wrap(name: str) -> Callable[..., Any]:
        method = originals[name]

        def call(self: MemoryStore, lock_id: str, *args: Any, **kw: Any) -> Any:
            slot = _slot_of(name, args, kw)
            if name == "read":  # one name shows its pool if it has one
                slot = lock_id + "#pool" in self._records
            key = lock_id + "#pool" if slot else lock_id
            outcome = method(self, key, *args, **kw)
            if isinstance(outcome, bool):
                return outcome
            return dataclasses.replace(
                outcome,
                lock=outcome.lock
                if outcome.lock is None
                else dataclasses.replace(outcome.lock, lock_id=lock_id),
            )

        return call

    return _patched(*((MemoryStore, name, wrap(name)) for name in methods))


def _slot_of(name: str, args: tuple[Any, ...], kw: dict[str, Any]) -> bool:
    if name == "take":
        return args[0].slots is not None
    if name == "resize_pool":
        return True
    return kw.get("slot") is not None


def forced_is_released() -> contextlib.AbstractContextManager[None]:
    """7. A force-released holder's release is reported done (as if it had released)."""
    of = verdict.of

    def lenient(outcome: Any, lock_id: str, lease_id: str, operation: str, now: float) -> Any:
        record = outcome.record
        if operation == "release" and record is not None and record.forced:
            return None
        return of(outcome, lock_id, lease_id, operation, now)

    return _patched((verdict, "of", lenient))


def _force_without_audit(table: Any, entry: dict[str, Any]) -> Any:
    """``admin._force``'s step (the real one, saved before any patch), its audit record left
    out."""
    store = table.store

    class NoAudit:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def force_release(self, *args: Any, audit: Any = None, **kwargs: Any) -> Any:
            return store.force_release(*args, **kwargs)

    table_without_audit: Any = types.SimpleNamespace(store=NoAudit(), skew=table.skew)
    return _REAL_FORCE(table_without_audit, entry)


_REAL_FORCE = admin._force


def audit_after_force() -> contextlib.AbstractContextManager[None]:
    """8. The audit record is written by the command after the force-release, and only once the
    force's answer came back applied, not by the force's own step: a force whose answer was
    lost, or whose run died on the way, took effect with no record of it."""
    from awsflock.protocol import AUDIT_APPLIED, audit_key

    def forced_then_audited(table: Any, entry: dict[str, Any]) -> Any:
        outcome = _force_without_audit(table, entry)
        if outcome.applied:
            table.store.put_audit(audit_key(entry["lease_id"]), {**entry, "status": AUDIT_APPLIED})
        return outcome

    return _patched((admin, "_force", forced_then_audited))


def audit_before_force() -> contextlib.AbstractContextManager[None]:
    """P. The audit record is put by the command before the force (its status unset), and
    marked applied after it, as before the force's step wrote it: a force that never took
    effect (refused, or its request never landed) leaves a record of a force-release that did
    not happen; and of two operators' runs, the one whose put landed last is named."""
    from awsflock.protocol import AUDIT_APPLIED, audit_key

    def put_first(table: Any, entry: dict[str, Any]) -> Any:
        key = audit_key(entry["lease_id"])
        table.store.put_audit(key, entry)
        outcome = _force_without_audit(table, entry)
        if outcome.applied:
            table.store.put_audit(key, {**entry, "status": AUDIT_APPLIED})
        return outcome

    return _patched((admin, "_force", put_first))


def renew_outside_the_pool() -> contextlib.AbstractContextManager[None]:
    """9. A slot removed by a shrink can still be renewed (and a renew revives)."""
    original = MemoryStore.renew

    def renew(self: MemoryStore, lock_id: str, lease_id: str, **kw: Any) -> Any:
        slot = kw.get("slot")
        record = self._records.get(lock_id)
        lease_ = record.pool.get(slot) if record is not None and slot is not None else None
        if lease_ is not None and lease_.lease == lease_id and not lease_.ended:
            with self._mutex:
                lease_.expires_ms = kw["now_ms"] + kw["lease_ms"]
                return self._outcome(True, lock_id, record, slot)
        return original(self, lock_id, lease_id, **kw)

    return _patched((MemoryStore, "renew", renew))


def short_history() -> contextlib.AbstractContextManager[None]:
    """10. The leases a lock handed on are forgotten: no ended lease is kept apart from the
    record, which remembers one earlier lease, not three. A release retried after two
    hand-offs is told "not held" although it happened."""
    take = MemoryStore.take

    def forgetful(self: MemoryStore, lock_id: str, attempt: Any) -> Any:
        outcome = take(self, lock_id, attempt)
        if outcome.applied:
            record: _Record = self._records[lock_id]
            lease_ = record.top if attempt.slot is None else record.pool[attempt.slot]
            lease_.history = [lease_.history[0], None, None]
            return self._outcome(True, lock_id, record, attempt.slot)
        return outcome

    return _patched(
        (MemoryStore, "take", forgetful),
        (MemoryStore, "_remembering", lambda self, outcome, lock_id, lease_id: outcome),
    )


# -- bugs of our own making -------------------------------------------------------------------


def skew_backwards() -> contextlib.AbstractContextManager[None]:
    """A. The skew window applied the wrong way: a lease is taken over skew *before* it ends."""
    free = _Lease.free
    return _patched(
        (
            _Lease,
            "free",
            lambda self, cutoff_ms, *, legacy_too: free(
                self, cutoff_ms + 10_000, legacy_too=legacy_too
            ),
        ),
    )


def renew_any_lease() -> contextlib.AbstractContextManager[None]:
    """B. Renew does not check the lease id: any client's renew extends (and takes) the lease."""
    owned = _Lease.owned_by
    renew = MemoryStore.renew

    def renew_unchecked(self: MemoryStore, *args: Any, **kw: Any) -> Any:
        _Lease.owned_by = lambda lease_, lease_id: True  # type: ignore[method-assign,assignment]
        try:
            return renew(self, *args, **kw)
        finally:
            _Lease.owned_by = owned  # type: ignore[method-assign]

    return _patched((MemoryStore, "renew", renew_unchecked))


def fence_not_bumped() -> contextlib.AbstractContextManager[None]:
    """C. The fencing counter is not bumped on a takeover: the new holder gets the old token."""
    take = MemoryStore.take

    def same_token(self: MemoryStore, lock_id: str, attempt: Any) -> Any:
        record = self._records.get(lock_id)
        old = None
        if record is not None:
            lease_ = record.top if attempt.slot is None else record.pool.get(attempt.slot)
            old = lease_.fence if lease_ is not None else None
        outcome = take(self, lock_id, attempt)
        if outcome.applied and old is not None:
            record = self._records[lock_id]
            lease_ = record.top if attempt.slot is None else record.pool[attempt.slot]
            lease_.fence = old
            return self._outcome(True, lock_id, record, attempt.slot)
        return outcome

    return _patched((MemoryStore, "take", same_token))


def margin_backwards() -> contextlib.AbstractContextManager[None]:
    """D. The heartbeat's safety margin applied the wrong way: a hold counts its lease as kept
    for twice the skew window past its end, without a renewal."""
    return _patched((renewal.RenewalPolicy, "margin", lambda _self, lease: -10.0))


def head_not_checked() -> contextlib.AbstractContextManager[None]:
    """E. Any fair waiter in line takes the lock when a poll shows it free, not only the head
    of the line (the store checks only that the taker's place exists)."""
    return _patched((line.Place, "at_head", lambda self: self.state == "in"))


def line_ignored() -> contextlib.AbstractContextManager[None]:
    """F. A take without a place in line does not look at the line: non-fair acquires jump
    fair waiters."""
    return _patched((_Record, "line_clear", lambda self, now_ms, skew_ms: True))


def lapse_too_soon() -> contextlib.AbstractContextManager[None]:
    """G. A waiter takes a place for lapsed after one poll period unchanged, not three: it
    drops (and goes ahead of) places whose waiters poll a little late (jitter, a retried beat)."""
    return _patched((line, "LINE_LAPSE_MS", 1000))


def line_clear_without_skew() -> contextlib.AbstractContextManager[None]:
    """H. The store judges a line clear without the skew window: a non-fair taker whose
    clock runs ahead of a waiter's sees the waiter's last poll older than it is."""
    clear = _Record.line_clear
    return _patched(
        (_Record, "line_clear", lambda self, now_ms, skew_ms: clear(self, now_ms, 0)),
    )


def fence_dies_with_its_record() -> contextlib.AbstractContextManager[None]:
    """I. The fencing counter lives only in the lock's record: a record deleted (TTL, a 0.2.0
    release) or overwritten by 0.2.0 starts again from the clock reading its take carries, so a
    take that lands late starts below tokens granted meanwhile (the protocol before the fence
    record)."""
    take = MemoryStore.take

    def forgetful(self: MemoryStore, lock_id: str, attempt: Any) -> Any:
        if attempt.slot is None:
            record = self._records.get(lock_id)
            old = record.top.fence if record is not None else None
            self._fences[lock_id] = 0 if old is None else old
        return take(self, lock_id, attempt)

    return _patched((MemoryStore, "take", forgetful))


def renew_from_its_own_reading() -> contextlib.AbstractContextManager[None]:
    """J. A renew sets the end from its own clock reading however old: one that lands after a
    later renew moves the lease's end back while its holder counts on the later one."""
    return _patched((_Lease, "renewed_ms", lambda self: None))


def retry_after_any_pause() -> contextlib.AbstractContextManager[None]:
    """K. A retry goes once its backoff ends, however long the process was paused in it: the
    request carries readings (the clock, what the acquisition saw) older than its caller allows
    (the request layer before the third review)."""
    return _patched((retrying, "still_fits", lambda when, end: True))


def pool_ignores_the_fence_counter() -> contextlib.AbstractContextManager[None]:
    """L. A record that becomes a pool starts its slots above the plain token its record shows,
    not above the fencing counter that outlives it: where the record was deleted (TTL, a 0.2.0
    release), a take that lands late starts a slot below plain tokens already granted (found
    by the adversarial review of the fence record). Bars are off too: since a release bars a
    LEASE_ID it found never granted, the late take this needs is refused whenever its acquire
    gave up, which hid the bug from the search."""
    take = MemoryStore.take

    def forgetful(self: MemoryStore, lock_id: str, attempt: Any) -> Any:
        if attempt.slot is None or lock_id not in self._fences:
            return take(self, lock_id, attempt)
        saved = self._fences.pop(lock_id)
        try:
            return take(self, lock_id, attempt)
        finally:
            self._fences[lock_id] = max(saved, self._fences.get(lock_id, 0))

    return _patched(
        (MemoryStore, "take", forgetful),
        (MemoryStore, "_bar", lambda self, lock_id, lease_id, outcome, *_rest: outcome),
    )


def item_not_kept() -> contextlib.AbstractContextManager[None]:
    """M. Without transactions (dynalite) there is no fence record, and a plain lock's record is
    not kept for good: its expiry time is its lease's, so an awsflock 0.2.0 client reclaims it
    (dropping its counter) and deletes it, and a take that lands late starts the counter again
    below tokens granted meanwhile (found by the adversarial review on dynalite). Run with
    ``--no-transactions`` (``NO_TRANSACTIONS``)."""
    return _patched((_Record, "ttl", lambda _self, seconds: seconds))


def audit_after_the_end_without_transactions() -> contextlib.AbstractContextManager[None]:
    """Q. Without transactions (dynalite) the DynamoDB store writes a force's audit record as
    a second request after the end, not in the end's own write to the lock's item: a run that
    dies between the two, or whose answer is lost, leaves a force-release applied with no
    record (issue 39's regression). Beneath the store, on moto with ``--no-transactions``."""
    from awsflock.protocol import audit_key
    from awsflock.stores.dynamodb.forces import Forces

    real = Forces.force_release

    def record_after(
        self: Any, lock_id: str, lease_id: str, *, audit: Any = None, **kw: Any
    ) -> Any:
        outcome = real(self, lock_id, lease_id, **kw)
        if outcome.applied and audit is not None:
            self.put_audit(audit_key(lease_id), audit)
        return outcome

    return _patched((Forces, "force_release", record_after))


# -- beneath the stores: their request code ------------------------------------------------


def gate_always_open() -> contextlib.AbstractContextManager[None]:
    """N. The gate lets every try through: one that waited past its deadline on its way to the
    wire (its process stalled) is still sent, with readings older than its caller allows,
    after the caller may have given up on it. Found on the stores whose tries pass the gate
    (PostgreSQL, Redis: the real ``Connected``; DynamoDB: the simulation's request worker)."""
    return _patched((connected, "gate_open", lambda deadline, now: True))


def timeout_said_not_applied() -> contextlib.AbstractContextManager[None]:
    """O. The error translation says a try that timed out after it was sent was not applied
    (Redis's ``translate``; DynamoDB's ``may_have_applied``): a take whose answer was lost
    is forgotten, never cleaned up, and its lease held by a process that does not know it."""
    from awsflock.stores.dynamodb import base
    from awsflock.stores.redis import link

    translate = getattr(link, "translate")  # noqa: B009 (the names each module imported)
    may_have_applied = getattr(base, "may_have_applied")  # noqa: B009

    def forgetful(exc: BaseException, **kw: Any) -> Any:
        import redis.exceptions as rx

        mapped = translate(exc, **kw)
        if isinstance(exc, rx.TimeoutError):
            mapped.error.maybe_applied = False
        return mapped

    def no_doubt(cause: BaseException | None) -> bool:
        from botocore.exceptions import ReadTimeoutError

        return False if isinstance(cause, ReadTimeoutError) else may_have_applied(cause)

    return _patched((link, "translate", forgetful), (base, "may_have_applied", no_doubt))


MUTANTS: dict[str, Patch] = {
    "1 late renew beside awsflock 0.2.0": late_renew,
    "2 one lease id per acquire": one_lease_id_per_acquire,
    "3 expired own grant reported": expired_own_grant,
    "4 TTL at the lease's end": ttl_at_lease_end,
    "5 unanswered attempts forgotten": forgotten_probe,
    "6 pool apart from its plain lock": pool_apart_from_lock,
    "7 force-released holder told released": forced_is_released,
    "8 audit written after the force-release": audit_after_force,
    "9 renew of a slot removed by a shrink": renew_outside_the_pool,
    "10 ended leases forgotten": short_history,
    "A skew window backwards": skew_backwards,
    "B renew without the lease id": renew_any_lease,
    "C fencing counter not bumped": fence_not_bumped,
    "D heartbeat margin backwards": margin_backwards,
    "E any fair waiter takes, not only the head": head_not_checked,
    "F non-fair take ignores the line": line_ignored,
    "G place lapses after one poll period": lapse_too_soon,
    "H line clear without the skew window": line_clear_without_skew,
    "I fence counter dies with its record": fence_dies_with_its_record,
    "J renew from its own reading, however old": renew_from_its_own_reading,
    "K retry after any pause in its backoff": retry_after_any_pause,
    "L pool ignores the fencing counter": pool_ignores_the_fence_counter,
    "M no-transaction item not kept": item_not_kept,
    "N gate always open": gate_always_open,
    "O timeout after sending said not applied": timeout_said_not_applied,
    "P audit put before the force": audit_before_force,
    "Q no-transaction audit after the end": audit_after_the_end_without_transactions,
    **MUTANTS_AIO,
    **MUTANTS_SETS,
    **MUTANTS_SHARES,
    **MUTANTS_PREVIOUS,
    **MUTANTS_DELAY,
    **MUTANTS_CAPS,
    **MUTANTS_STATES,
}

#: The mutants of the asynchronous API: looked for with a share of the workers on it.
AIO = set(MUTANTS_AIO)

#: The mutants of sets: looked for with a share of the workers' operations on them.
SETS = set(MUTANTS_SETS)

#: The mutants of shared holders: looked for with a share of the workers' operations on them.
SHARES = set(MUTANTS_SHARES) | SHARES_PREVIOUS

#: The mutants of lock-delay: looked for with a share of the takes with a delay.
DELAYS = set(MUTANTS_DELAY)

#: The mutants of max-hold: looked for with a share of the takes with a cap.
CAPS = set(MUTANTS_CAPS)

#: The mutants of state with the lease: looked for with a share of the takes reading it.
STATES = set(MUTANTS_STATES)

#: The mutants of a store's own code, and the stores whose code they are in and where they are
#: looked for: N and O in the request code (the in-memory store has none: its fault layer is the
#: simulation's own), the first the one the fast tier runs (moto).
BENEATH = {
    "N gate always open": ("moto", "postgresql", "redis"),
    "O timeout after sending said not applied": ("moto", "redis"),
    "Q no-transaction audit after the end": ("moto",),
}

#: The mutants that exist only on a store without transactions (``--no-transactions``).
NO_TRANSACTIONS = {"M no-transaction item not kept", "Q no-transaction audit after the end"}

#: The mutants that break only the order of fair waiters: the fairness invariant must be what
#: finds them (its messages say "line of" the lock), not some other failure they provoke.
ORDER_ONLY = {name for name in MUTANTS if name[0] in "EFGH"}
