"""What a refused renew or release means: released, force-released, expired, taken by another,
or a retry of our own that already happened; told from the record the refusal returned."""

from __future__ import annotations

from awsflock import errors
from awsflock.names import slot_of
from awsflock.protocol import Outcome
from awsflock.records import ENDED_FORCED, ENDED_RELEASED, KEEPALIVE_ACTOR, LockRecord
from awsflock.text import format_seconds


def of(
    outcome: Outcome, lock_id: str, lease_id: str, operation: str, now: float
) -> errors.NotHeld | None:
    """Why a renew or release of ``lease_id`` was refused (NotHeld naming who, when and why),
    or None for a release that had in fact happened (a retry whose first try went through)."""
    record = outcome.record
    again = "acquire the lock again"

    def refused(why: str, hint: str = again, reason: str = "") -> errors.NotHeld:
        if outcome.barred:
            why += "; an acquire attempt under it that lands later is refused"
        # Not the lease id: these lines go to CI logs, where a lease id is a secret (debug only).
        err = errors.NotHeld(f"the lease does not hold {lock_id!r}: {why}", hint=hint)
        if reason:
            err.reason = reason
        return err

    if outcome.lock is None:
        return refused(
            "there is no such lock (never taken, or ended and since deleted by TTL)",
            hint="check the lock name and --tablename",
        )
    slot = slot_of(lease_id)
    if slot is None and outcome.pool is not None:
        # A plain lease on an item that has become a pool: the plain lock's last state is
        # still at the top of the item (a release retried after the conversion was done).
        mine = ended_how(outcome.lock, lease_id)
        if operation == "release" and mine == ENDED_RELEASED:
            return None
        return refused(f"{lock_id!r} is now a pool of {outcome.pool.size} slots")
    if slot is not None and outcome.pool is None:
        return refused(f"{lock_id!r} is a plain lock")
    if record is None:
        return refused("that slot of the pool is unused")
    current = record.lease_id == lease_id
    end = ended_how(record, lease_id)
    if end == ENDED_RELEASED:
        return None if operation == "release" else refused("it was released")
    if end is not None and end.startswith(ENDED_FORCED):
        why, advice = _forced(record if current else None, lock_id)
        return refused(why, hint=advice, reason="force_released")
    if current and operation == "renew":
        size = record.slots
        if slot is not None and size is not None and slot >= size:
            return refused(f"slot {slot} no longer exists (the pool was resized to {size})")
        if record.expires_at <= now:
            return refused(
                f"it expired {format_seconds(now - record.expires_at)} ago, and a renew never "
                "revives an expired lease",
                reason="expired",
            )
    if current:
        return refused("it is no longer held")
    holder = f"now held by {record.describe(now)}" if not record.released else "it is free now"
    if end == "":
        return refused(f"it expired and was taken over; {holder}", reason="expired")
    if outcome.barred:  # the store found nothing under it at all
        return refused(f"the lock has no lease of that id (never granted, or long gone); {holder}")
    return refused(f"it was released, or expired and taken over; {holder}")


def of_release(outcome: Outcome, lock_id: str, lease_id: str, now: float) -> errors.NotHeld | None:
    """Why a release of ``lease_id`` was refused, or None if it had in fact happened (see
    ``of``); with no record and a try that may have landed unanswered, that it cannot be told."""
    if outcome.lock is None and outcome.in_doubt:
        # No record, and an earlier try may have landed unanswered: this release may have
        # ended the lease before the record was deleted, or the lease ran out and the record
        # went by TTL or by another client's release. Which, nothing says: not "released"
        # (its work may have run unprotected), but not held either way.
        return errors.NotHeld(
            f"the lease does not hold {lock_id!r}: there is no such lock now, and whether this "
            "release ended the lease before its record was deleted or the lease ran out first "
            "cannot be told",
            hint="check the work done under it",
        )
    return of(outcome, lock_id, lease_id, "release", now)


def _forced(record: LockRecord | None, lock_id: str) -> tuple[str, str]:
    """Why a force-released lease is not held, and what to do: not to take the lock again
    blindly, for it was ended on purpose. ``record``: the lease's, if it still says who ended
    it; once taken over, the record keeps only that it was forced: by an operator (audited) or
    by the keep-alive renewer when the process it followed exited (not audited)."""
    if record is None:
        return (
            "it was force-released, by an operator (see `awsflock audit`) or by its keep-alive "
            "renewer after the process it followed exited",
            f"it was ended on purpose: find out who and why (`awsflock audit {lock_id}`) before "
            "acquiring the lock again",
        )
    actor = record.forced_by
    if actor.startswith(KEEPALIVE_ACTOR):
        # Why (the process it followed exited, a signal stopped the renewer, its renewal
        # failed) is the record's reason, said before this (found by review 6: always "exited").
        why = f" ({record.forced_reason})" if record.forced_reason else ""
        advice = (
            f"its keep-alive renewer ended it{why}; acquire the lock again only if that work is "
            "still to be done"
        )
    else:
        who = f"ask {actor} why" if actor else f"find out why (`awsflock audit {lock_id}`)"
        advice = f"it was ended on purpose: {who} before acquiring the lock again"
    return f"it was {record.forced_text()}", advice


def held_longer(record: LockRecord | None, lease_id: str, now_ms: int, lease_ms: int) -> bool:
    """Whether ``record`` shows ``lease_id`` live at ``now_ms`` and not ended, until at least
    ``now_ms + lease_ms``: what a renew at ``now_ms`` asked for is held already."""
    slot = slot_of(lease_id)
    return (
        record is not None
        and record.lease_id == lease_id
        and not record.released
        and (slot is None or (record.slots is not None and slot < record.slots))
        and record.expires_at * 1000 >= now_ms + lease_ms
    )


def ended_how(record: LockRecord, lease_id: str) -> str | None:
    """How ``lease_id`` ended by this record: "" (ran out and was taken over), "released",
    "forced:ID", or None if the record does not know the lease."""
    if record.lease_id == lease_id:
        return record.ended
    return next((end for lease, end in record.history if lease == lease_id), None)


def pool_disagrees(
    outcome: Outcome, lock_id: str, size: int, now: float
) -> errors.ConfigurationError | None:
    """Why an acquire of a pool of ``size`` slots can never be granted: the name is a plain
    lock, or a pool of another size (unless a shrink in steps is under way: the size is one in
    between, and the wait goes on until it ends). None if it can."""
    pool = outcome.pool
    if pool is None:
        if outcome.lock is None:
            return None
        return errors.ConfigurationError(
            f"{lock_id!r} is a plain lock (held by {outcome.lock.describe(now)}), but this "
            f"holder asked for a pool of {size} slots",
            hint="use the same --slots (slots=) as every other holder of it",
        )
    if pool.size is None or pool.size == size or pool.resizing_to is not None:
        return None
    return errors.ConfigurationError(
        f"pool {lock_id!r} has {pool.size} slots, but this holder asked for {size}",
        hint=f"use --slots {pool.size}, or resize the pool (awsflock pool-resize)",
    )
