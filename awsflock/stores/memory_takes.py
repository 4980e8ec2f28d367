"""The in-memory store's take, on its records: whether a take is granted (``may_take``, the
DynamoDB store's conditions) and what a granted one writes (``grant``: the new lease and its
fencing token, as the DynamoDB store's tries settle on). ``MemoryStore.take`` runs both under
the store's mutex; ``may_resize`` is ``pool-resize``'s condition."""

from __future__ import annotations

import dataclasses

from awsflock.protocol import Attempt
from awsflock.records import Previous
from awsflock.shares import is_group_id
from awsflock.stores.memory_records import _Lease, _Record, _seconds, _version


def may_take(
    record: _Record | None, attempt: Attempt, *, ended_before: bool, transactions: bool
) -> bool:
    """Whether ``attempt`` takes the lock (or its slot) as ``record`` stands (None: no record);
    ``ended_before``: its LEASE_ID was granted and ended before (a done item); ``transactions``:
    as the DynamoDB store on an endpoint that runs them."""
    slot = attempt.slot
    cutoff_ms = attempt.now_ms - attempt.skew_ms
    if slot is None:
        ok = (
            record is None or (record.top.free(cutoff_ms, legacy_too=True) and record.slots is None)
        ) and (record is None or not record.top.granted(attempt.lease_id))
    else:
        lease = record.pool.get(slot) if record else None
        size_agrees = record is None or (
            record.slots == attempt.slots
            if record.slots is not None
            else record.top.free(cutoff_ms, legacy_too=True)
        )
        ok = (
            (lease is None or lease.free(cutoff_ms, legacy_too=False))
            and size_agrees
            and (lease is None or not lease.granted(attempt.lease_id))
        )
    # A LEASE_ID granted and ended before is never granted again, where the DynamoDB store's
    # take is a transaction that checks its done item: a plain take, and a slot's take that
    # makes a plain lock a pool (not a slot's on a pool: one UpdateItem, whose condition checks
    # the slot's own history).
    transacted = slot is None or record is None or record.slots is None
    if transactions and transacted and ended_before:
        ok = False
    if not transacted and record is not None and attempt.lease_id in record.bars:
        ok = False  # barred on the pool (the DynamoDB store's ``xb_`` attribute)
    if attempt.ticket is None:
        return ok and (record is None or record.line_clear(attempt.now_ms, attempt.skew_ms))
    place = None if record is None else record.line.get(attempt.ticket)
    return (
        ok
        and place is not None
        and attempt.number in (None, place.number)  # not dropped and joined again since
        and record is not None
        and record.unchanged(attempt.drop)
    )


def grant(
    record: _Record,
    attempt: Attempt,
    lock_id: str,
    fences: dict[str, int],
    *,
    transactions: bool,
    lasts: dict[str, _Lease] | None = None,
) -> None:
    """Write the lease ``attempt`` was granted into ``record``, under a token above every one
    granted on the lock before (``fences``: each plain lock's highest, kept apart from its
    record where there are transactions; without them the record is kept for good), with how
    the lease it replaced ended. ``lasts``: each plain lock's last lease, beside its token."""
    now_ms, slot = attempt.now_ms, attempt.slot
    old = record.top if slot is None else record.pool.get(slot, _Lease())
    fence = _token(record, old, attempt, lock_id, fences, transactions)
    cap_ms = now_ms + attempt.max_hold_ms if attempt.max_hold_ms else None
    expires_ms = min(now_ms + attempt.lease_ms, cap_ms or now_ms + attempt.lease_ms)
    new = _Lease(
        lease=attempt.lease_id,
        version=_version(),
        identity=attempt.identity,
        lease_ms=attempt.lease_ms,
        expires_ms=expires_ms,
        expires_s=record.ttl(_seconds(expires_ms + attempt.skew_ms + attempt.delay_ms)),
        acquired_ms=now_ms,
        fence=fence,
        history=[(old.lease, old.ended) if old.lease else None, *old.history[:-1]],
        previous=previous(old, lock_id, None if slot is not None else lasts, record),
        delay_ms=attempt.delay_ms,
        cap_ms=cap_ms,
    )
    if slot is None and transactions and lasts is not None:
        lasts[lock_id] = dataclasses.replace(new)
    # An exclusive grant ends a group of shared holders for good, and the claim made for it.
    record.shares, record.shared, record.claim_ms = {}, False, None
    if slot is None:
        record.top = new
    else:
        record.pool[slot] = new
        record.slots = attempt.slots
        # A pool never expires, and gives awsflock 0.2.0 nothing to take.
        record.top.expires_s = None
        record.top.version = ""


def _token(
    record: _Record,
    old: _Lease,
    attempt: Attempt,
    lock_id: str,
    fences: dict[str, int],
    transactions: bool,
) -> int:
    """The fencing token of ``attempt``'s grant (``grant``)."""
    now_ms, slot = attempt.now_ms, attempt.slot
    becomes_pool = slot is not None and record.slots is None
    if slot is None:
        # As the DynamoDB store's: above its clock (x1000), or the lock's highest ever.
        highest = max(fences.get(lock_id, 0), old.fence or 0)
        fence = max(now_ms * 1000, highest) + 1
        if transactions:
            fences[lock_id] = fence
        else:
            record.kept = True
    else:
        # The token the DynamoDB store's tries settle on: one above its clock reading (x1000),
        # or above the slot's counter or the plain lock's token where either is higher. An
        # item that becomes a pool goes above every plain token ever granted (the fence
        # record, which outlives the item) and keeps the highest as its plain token, so that
        # every slot made later starts above it too.
        fence = max(now_ms * 1000, record.top.fence or 0, old.fence or 0) + 1
        if becomes_pool:
            fence = max(fence, fences.get(lock_id, 0) + 1)
            record.top.fence = fence - 1
    return fence


def previous(
    old: _Lease, lock_id: str, lasts: dict[str, _Lease] | None, record: _Record | None = None
) -> Previous:
    """How ``old`` (the lease a grant replaces; empty: none) ended: a group of shared holders'
    as ``record``'s shares show it. Where there is none, as its record was deleted (TTL, an
    awsflock 0.2.0 release), the lock's last lease in ``lasts``."""
    if old.lease or old.version:
        shown = old.record(lock_id, None)
        if record is not None and record.shared and old is record.top:
            shares = tuple(s.record(lock_id, None) for s in record.shares.values())
            shown = dataclasses.replace(shown, shared=True, shares=shares)
        return Previous.of(shown)
    last = None if lasts is None else lasts.get(lock_id)
    if last is None:
        return Previous.of(None)
    shown = dataclasses.replace(last.record(lock_id, None), shared=is_group_id(last.lease))
    return Previous.of(shown, end_known=False)


def lapsed(share: _Lease, lock_id: str, *, end_known: bool = True) -> Previous:
    """How ``share`` ended, found ended without its holder's release (ran out, or forced)."""
    return Previous.of(share.record(lock_id, None), end_known=end_known)


def may_resize(record: _Record | None, old: int | None, new: int, cutoff_ms: int) -> bool:
    """Whether a pool of ``old`` slots (None: not a pool) may become one of ``new``, as
    ``record`` stands: its size is still ``old``, a plain lock made a pool is free, and every
    slot that goes away is free."""
    if (None if record is None else record.slots) != old:
        return False
    if old is None and record is not None and not record.top.free(cutoff_ms, legacy_too=True):
        return False  # a live plain lock is not made a pool
    for slot in range(new, old or 0):
        lease = record.pool.get(slot) if record else None
        if lease is not None and not lease.free(cutoff_ms, legacy_too=False):
            return False
    return True


def resize(
    records: dict[str, _Record], lock_id: str, old: int | None, new: int, cutoff_ms: int
) -> bool:
    """pool-resize: the record made a pool of ``new`` slots, if ``may_resize``."""
    record = records.get(lock_id)
    if not may_resize(record, old, new, cutoff_ms):
        return False
    if record is None:
        record = records[lock_id] = _Record()
    record.slots = new
    record.top.expires_s = None  # a pool never expires, and gives 0.2.0 nothing
    record.top.version = ""
    return True
