"""Operator actions: force-release with an audit trail, the audit log, pool resizing."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any, Callable, NoReturn

from awsflock import errors, metrics, shares
from awsflock.lock.audit_log import audit_view
from awsflock.names import check_lease_id, check_lock_id, check_slots, slot_of
from awsflock.protocol import AUDIT_APPLIED, Outcome, audit_key, barred_resize
from awsflock.records import ENDED_FORCED, KEEPALIVE_FORCE, LockRecord, Pool, kept_audit

#: The longest ``--reason`` and ``--actor``: they are kept with the lock (a DynamoDB item holds
#: at most 400 KB, and every forced lease it remembers carries its reason) and in the audit.
MAX_TEXT = 1000

if TYPE_CHECKING:
    from awsflock.lock.lease import LockTable

log = logging.getLogger("awsflock.admin")


def default_actor(table: LockTable) -> str:
    """Who is acting: the AWS caller identity where it can be learned, else user@host."""
    arn = table.store.actor()
    if arn:
        return arn
    ident = table.identity
    return f"{ident.user or 'unknown'}@{ident.host or 'unknown'}"


def force_release(
    table: LockTable,
    lock_id: str,
    *,
    reason: str,
    lease_id: str | None = None,
    actor: str | None = None,
    confirm: Callable[[LockRecord], bool] | None = None,
    slot: int | None = None,
) -> dict[str, Any]:
    """End the current lease of ``lock_id`` whoever holds it, after naming it.

    The lease is named by ``lease_id`` or shown to ``confirm`` (which must return True). The
    write is conditional on exactly that lease, so a new holder that acquired in between is
    never affected. Returns the audit record written.
    """
    lease_id, slot = _checked(lock_id, reason, lease_id, confirm, slot, actor)
    # With the lease named, the store also says how it ended if it is no longer current (a
    # re-run after a lost answer: was it this force, another, or its holder's release?).
    current = shares.about(table.store.read(lock_id, lease_id), lease_id or "")
    now = table.clock.time()
    record = _held(table, current, lock_id, lease_id, slot, now)
    if confirm is not None and not confirm(record):
        raise errors.UsageError("force-release not confirmed", hint="nothing was changed")
    if confirm is not None:
        # The force's time is when it is sent, not when the lease was shown: an operator may
        # answer after the lease ran out (review 8: a lock-delay then counted from too early).
        now = table.clock.time()
    who = actor or default_actor(table)
    action_id = uuid.uuid4().hex[:16]
    entry = _entry(lock_id, slot, record, who, reason, round(now * 1000), action_id)
    # The audit record is written by the force's own step, in the same atomic write: it exists
    # exactly when the force took effect, whether this run lives to see the answer or not, and
    # names the operator whose force it was (protocol.force_release). One record per lease,
    # keyed by it: a lease is forced at most once.
    outcome = shares.about(_force(table, entry), entry["lease_id"])
    if not outcome.applied:
        if not _forced_by_us(outcome.record, record.lease_id, action_id):
            _not_forced(table, entry, record, outcome, now)
        _record_retried(table, entry)
    metrics.record("awsflock.force_releases", 1, lock_id, table.store)
    log.info(
        "force-released %r (held by %s) for %s: %s",
        lock_id,
        record.owner,
        who,
        reason,
        extra={
            "event": "force_released",
            "lock_id": lock_id,
            "owner": record.owner,
            "fencing_token": record.fencing_token,
            "actor": who,
            "reason": reason,
        },
    )
    # As the store keeps it (empty fields left out): what `audit` shows of it, field for field.
    return audit_view(kept_audit(entry))


def _checked(
    lock_id: str,
    reason: str,
    lease_id: str | None,
    confirm: Callable[[LockRecord], bool] | None,
    slot: int | None,
    actor: str | None,
) -> tuple[str | None, int | None]:
    """A force-release's request, checked: (the lease id, the slot: a named pool lease's own)."""
    check_lock_id(lock_id)
    if lease_id is not None:
        lease_id = check_lease_id(lease_id)
        slot = slot_of(lease_id) if slot is None else slot
    if not reason or not reason.strip():
        raise errors.UsageError("--reason is required", hint="say why, e.g. --reason 'runner died'")
    for option, text in (("--reason", reason), ("--actor", actor or "")):
        if len(text) > MAX_TEXT:
            raise errors.UsageError(
                f"{option} is {len(text)} characters; at most {MAX_TEXT}",
                hint="say it shorter (it is kept with the lock and in the audit record)",
            )
    if lease_id is None and confirm is None:
        raise errors.UsageError(
            "force-release needs the lease named",
            hint="pass --lease-id ID, or --yes, or run it at a terminal to confirm",
        )
    return lease_id, slot


def _what(lock_id: str, slot: int | None) -> str:
    return f"lock {lock_id!r}" if slot is None else f"slot {slot} of pool {lock_id!r}"


def _held(
    table: LockTable,
    current: Outcome,
    lock_id: str,
    lease_id: str | None,
    slot: int | None,
    now: float,
) -> LockRecord:
    """The lease to end, as the store shows it (``current``): held, and the one named. Raises
    ``NotHeld`` if it is not (audited, if a force-release ended it)."""
    if slot is None:
        record = current.lock if current.pool is None else None
    else:
        record = current.pool.slots.get(slot) if current.pool else None
    what = _what(lock_id, slot)
    if record is not None and record.forced and (lease_id is None or record.lease_id == lease_id):
        if _by_keep_alive(record.ended):
            raise _ended_by_keep_alive(what)
        # Force-released already, perhaps by an earlier run of this command whose answer was
        # lost: its step wrote its audit record (without transactions it may be missing: it is
        # written now from the item, and a record there stays).
        _ensure_audit(table, lock_id, slot, record)
        raise errors.NotHeld(
            f"{what} is not held: it was {record.forced_text()} (audited)",
            hint="nothing more to do",
        )
    if record is None or record.released:
        raise errors.NotHeld(f"{what} is not held", hint="nothing to force-release")
    if lease_id is not None and record.lease_id != lease_id:
        raise errors.NotHeld(
            f"lease {lease_id} no longer holds {lock_id!r} (now {record.describe(now)})",
            hint="check `awsflock status` and name the current lease",
        )
    return record


def _force(table: LockTable, entry: dict[str, Any]) -> Outcome:
    """The conditional write of the force-release that ``entry`` (its audit record) records;
    a failure that may have applied says how to learn whether it did."""
    lock_id, lease_id = entry["target"], entry["lease_id"]
    try:
        return table.store.force_release(
            lock_id,
            lease_id,
            force_id=entry["action_id"],
            now_ms=entry["at_ms"],
            skew_ms=round(table.skew * 1000),
            actor=entry["actor"],
            reason=entry["reason"],
            slot=entry["slot"],
            audit={**entry, "status": AUDIT_APPLIED},
        )
    except errors.StoreError as exc:
        if exc.maybe_applied:
            exc.hint = (
                "it may have been applied: when the store answers, run `awsflock force-release "
                f"{lock_id} --lease-id {lease_id} --reason ...` (it then says whether "
                "it was; if it was, its audit record was written with it)"
            )
        raise


def _not_forced(
    table: LockTable,
    entry: dict[str, Any],
    record: LockRecord,
    outcome: Outcome,
    now: float,
) -> NoReturn:
    """A force-release of ``record``'s lease refused (the lock is now ``outcome.record``): an
    earlier run's force took effect (its step wrote its audit record), or the lock changed
    hands, or (a try of this run in doubt) which cannot be told. Raises ``NotHeld`` saying
    which."""
    lock_id, slot, after = entry["target"], entry["slot"], outcome.record
    earlier = _forced_mark(after, record.lease_id)
    if earlier is not None and _by_keep_alive(ENDED_FORCED + earlier):
        raise _ended_by_keep_alive(_what(lock_id, slot))
    if earlier is not None:
        # An earlier run's force-release, whose request landed after that run gave up,
        # ended the lease. Its step wrote its record; where the lock still shows that force,
        # a record missing (an endpoint without transactions, whose run died before writing
        # it) is written from it.
        if after is not None and after.lease_id == record.lease_id:
            _ensure_audit(table, lock_id, slot, after)
        raise errors.NotHeld(
            f"{_what(lock_id, slot)} is not held: an earlier force-release of it took effect "
            "(audited)",
            hint="nothing more to do",
        )
    if outcome.in_doubt and not _knows(after, record.lease_id):
        # A try of this run landed unanswered, and the lock no longer says how the lease
        # ended (more hand-offs than it remembers, on an endpoint without the done items of
        # transactions): this force may have ended it. Not "nothing was changed".
        raise errors.NotHeld(
            f"lease {record.lease_id} no longer holds {_what(lock_id, slot)}: this "
            "force-release may have been applied (a try's answer was lost) or the lease ended "
            "otherwise, and the store no longer says which",
            hint=f"check `awsflock audit {lock_id}` and `awsflock status {lock_id}`",
        )
    raise errors.NotHeld(
        f"lock {lock_id!r} changed hands before the force-release "
        + (f"(now {after.describe(now)})" if after and not after.released else ""),
        hint="nothing was changed; check `awsflock status` again",
    )


def _entry(
    lock_id: str,
    slot: int | None,
    record: LockRecord,
    actor: str,
    reason: str,
    at_ms: int,
    action_id: str,
) -> dict[str, Any]:
    return {
        "action_id": action_id,
        "action": "force-release",
        "target": lock_id,
        "slot": slot,
        "lease_id": record.lease_id,
        "holder": record.owner,
        "holder_host": record.host,
        "fencing_token": record.fencing_token,
        "actor": actor,
        "reason": reason,
        "at_ms": at_ms,
    }


def _ensure_audit(table: LockTable, lock_id: str, slot: int | None, record: LockRecord) -> None:
    """The audit record of the force-release that ended ``record``, from what the item itself
    records, marked as applied: it replaces a record written before another run's force (or
    voided), never one already marked applied; no put landing later replaces it."""
    action_id = record.ended[len(ENDED_FORCED) :]
    at_ms = round((record.forced_at or record.expires_at) * 1000)
    entry = _entry(lock_id, slot, record, record.forced_by, record.forced_reason, at_ms, action_id)
    table.store.put_audit(audit_key(record.lease_id), {**entry, "status": AUDIT_APPLIED})


def _forced_mark(record: LockRecord | None, lease_id: str) -> str | None:
    """The action id of the force-release that ended ``lease_id``, as ``record`` (the lock's
    current state) shows it; None if it did not end by a force-release, or is not shown."""
    if record is None:
        return None
    ended = record.ended if record.lease_id == lease_id else None
    if ended is None:
        ended = next((e for lease, e in record.history if lease == lease_id), None)
    if ended is None or not ended.startswith(ENDED_FORCED):
        return None
    return ended[len(ENDED_FORCED) :]


def _record_retried(table: LockTable, entry: dict[str, Any]) -> None:
    """This run's force took effect, its answer lost (a retry found the lease ended by this
    action): a store that writes the record after the end (no transactions) never saw it
    applied, so it is written now. A record there (the step's own) stays (``put_audit``).
    A failure leaves the force done, and a re-run writes the record."""
    try:
        table.store.put_audit(audit_key(entry["lease_id"]), {**entry, "status": AUDIT_APPLIED})
    except errors.StoreError as exc:
        log.warning(
            "the force-release of lease %s took effect, but its audit record could not be "
            "written (%s); run it again to write it",
            entry["lease_id"],
            exc.one_line(),
        )


def _by_keep_alive(ended: str) -> bool:
    """Whether a lease's end mark is its keep-alive renewer's (no audit record: not an
    operator's force-release)."""
    return ended.startswith(ENDED_FORCED + KEEPALIVE_FORCE)


def _ended_by_keep_alive(what: str) -> errors.NotHeld:
    """The lease was ended by its keep-alive renewer, the process it followed gone: nothing to
    force, and no audit record (not an operator's force-release)."""
    return errors.NotHeld(
        f"{what} is not held: its keep-alive renewer ended it when the process it followed "
        "exited (not an operator's force-release: not audited)",
        hint="nothing more to do",
    )


def _knows(record: LockRecord | None, lease_id: str) -> bool:
    """Whether ``record`` (the lock's current state) still shows ``lease_id``."""
    if record is None:
        return False
    return record.lease_id == lease_id or any(lease == lease_id for lease, _ in record.history)


def _forced_by_us(record: LockRecord | None, lease_id: str, action_id: str) -> bool:
    """A refused force-release that is a retry of ours whose first try went through."""
    if record is None:
        return False
    mark = ENDED_FORCED + action_id
    if record.lease_id == lease_id and record.ended == mark:
        return True
    return (lease_id, mark) in record.history


def resize_pool(table: LockTable, lock_id: str, slots: int) -> tuple[int | None, int]:
    """Change a pool's size. Shrinking needs the slots that go away to be free. Holders that
    still use the old size get a clear error at their next acquire. (old size, new size)."""
    check_lock_id(lock_id)
    if check_slots(lock_id, slots) is None:
        raise errors.UsageError("a pool has at least 2 slots", hint="pass --slots 2 or more")
    pool = table.store.read(lock_id).pool
    if pool is None:
        raise errors.NotHeld(f"there is no pool {lock_id!r}", hint="check the name")
    if slots == pool.size and pool.resizing_to is None:
        return pool.size, slots
    old = pool.size
    now = table.clock.time()
    if old is not None and not set(range(slots, old)) <= set(pool.free_slots(old, now, table.skew)):
        # Refused before any write: a shrink in steps (DynamoDB) would stop part-way.
        raise _not_resized(lock_id, slots, pool, None, "")
    resize_id = uuid.uuid4().hex
    try:
        done = table.store.resize_pool(
            lock_id,
            old,
            slots,
            now_ms=round(now * 1000),
            skew_ms=round(table.skew * 1000),
            seen=pool,
            resize_id=resize_id,
        )
    except errors.StoreError as err:
        if err.maybe_applied:
            err.hint = (
                f"the pool may have been resized, or left part-way: see `awsflock status "
                f"{lock_id}`, and run pool-resize again"
            )
        raise
    if not done:
        # A retry of a resize whose first try landed unanswered is refused (the size is no
        # longer ``old``): if the pool has the size asked for, it is done.
        after = table.store.read(lock_id).pool
        done = after is not None and after.size == slots and after.resizing_to is None
        if not done:
            raise _not_resized(lock_id, slots, pool, after, resize_id)
    log.info(
        "resized pool %r from %s to %d slots",
        lock_id,
        old,
        slots,
        extra={"event": "pool_resized", "lock_id": lock_id},
    )
    return old, slots


def _not_resized(
    lock_id: str, slots: int, before: Pool, after: Pool | None, resize_id: str
) -> errors.LockBusy:
    """A resize refused: why, told from the pool before it and after it (None: refused by
    the check before any write)."""
    was, now = before.size, None if after is None else after.size
    hint = "wait until those slots are free, or force-release them, then resize again"
    why = "a slot that would go away is held"
    if after is None:  # refused by the check before any write
        pass
    elif after.resizing_to is not None and after.resized_by != resize_id:
        why = f"another pool-resize, to {after.resizing_to} slots, is under way or stopped"
        hint = "wait for it to end; if it stopped part-way, run pool-resize again"
    elif after.resized_by == resize_id:
        why += f" (taken as the shrink began): it has {was} slots again"
    elif after.resized_by not in (before.resized_by, barred_resize(resize_id)) or now != was:
        why = "another pool-resize changed it meanwhile"
        hint = "check its size (awsflock status), then resize again if still needed"
    where = f"; it has {now} slots (was {was})" if now not in (was, None) else ""
    verb = "shrink" if was is not None and slots < was else "resize"
    return errors.LockBusy(f"cannot {verb} pool {lock_id!r} to {slots}: {why}{where}", hint=hint)
