"""A holder's state with the lease (``awsflock.state``): read at the grant when asked for, and
written with a renewal.

The read at the grant is the acquisition's (``waiting.settle``): right after the grant, before
it is judged fresh, so that a slow read gives the grant up as a slow clean-up does and a failed
one gives it back (released, or named with its release command). It is exact: since the grant
only this holder can write. A resumable job never starts from scratch because its checkpoint
could not be read.

A write is a renewal that carries the state; its stamp is the holder's reading, after its
previous write's, so that a write that lands late never undoes a later one. A refused write
whose lease is still held was refused for a later write of the same lease: ``StateRefused``,
and the lease stays held.
"""

from __future__ import annotations

from typing import Any

from awsflock import errors
from awsflock.state import StateWrite, check, next_stamp


async def write(table: Any, held: Any, data: Any) -> Any:
    """Write ``data`` as the lock's state with a renewal of ``held`` (by its own length)."""
    data = check(data)
    stamp = next_stamp(table.now_ms(), held.state_stamp)
    held.state_stamp = stamp
    fresh = await write_lease(table, held.lock_id, held.lease_id, held.lease_duration, data, stamp)
    held.renewed_by(fresh, wall_clock_ends=not table.store.skew_free)
    held.kept_state(data)
    return held


async def write_lease(
    table: Any, lock_id: str, lease_id: str, lease: float | str, data: Any, stamp: int
) -> Any:
    """Write ``data`` as ``lock_id``'s state with a renewal of ``lease_id`` by ``lease``
    (``awsflock renew --state-file``, which has no Lease): the renewed Lease."""
    try:
        return await table.renew_lease(
            lock_id, lease_id, lease=lease, state=StateWrite(check(data), stamp)
        )
    except errors.NotHeld as refusal:
        later = await _later_write(table, lock_id, lease_id, stamp)
        if later is None:
            raise
        raise later from refusal


async def _later_write(
    table: Any, lock_id: str, lease_id: str, stamp: int
) -> errors.StateRefused | None:
    """The error to raise where a refused write's lease is still held and a later write of it
    is stored; None where the lease is not held (the refusal stands)."""
    outcome = await table.store.read(lock_id)
    record = outcome.lock if outcome.pool is None else None
    held = record is not None and record.lease_id == lease_id and not record.released
    if record is None or not held or record.expires_at <= table.clock.time():
        return None
    found = await table.store.read_state(lock_id)
    if found.lease_id != lease_id or found.stamp_ms <= stamp:
        return None
    return errors.StateRefused(
        f"the state of {lock_id!r} was not written: a later write of this lease is stored",
        hint="write the state from one process only (and keep its clock from stepping back)",
    )
