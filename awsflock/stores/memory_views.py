"""How the in-memory store reads its records: the lease a step is about, and an ``Outcome`` of a
record as the DynamoDB store's answer shows its item."""

from __future__ import annotations

import dataclasses

from awsflock.protocol import Outcome
from awsflock.records import Line, Pool
from awsflock.shares import is_share_id
from awsflock.stores.memory_records import _Lease, _Record


class Views:
    """The reading half of ``MemoryStore`` (and its mixins)."""

    @staticmethod
    def _lease(record: _Record | None, slot: int | None) -> _Lease | None:
        if record is None:
            return None
        return record.top if slot is None else record.pool.get(slot)

    @classmethod
    def _running(
        cls, record: _Record | None, slot: int | None, lease_id: str, group_ok: bool = False
    ) -> _Lease | None:
        """The lease, if it is ``lease_id``'s and not ended, and a plain lease's record is not a
        pool: what renew, release and force-release all need (the DynamoDB store's
        ``owned AND not_ended``, and ``PLAIN_NOT_POOL`` for a plain lease). A share's: in a
        group not ended; a group's own lease only for a force-release (``group_ok``)."""
        if record is not None and is_share_id(lease_id):
            ok = record.shared and not record.top.ended
            return record.shares.get(lease_id) if ok else None
        lease = cls._lease(record, slot)
        if lease is None or record is None or not lease.owned_by(lease_id) or lease.ended:
            return None
        if slot is None and (record.slots is not None or (record.shared and not group_ok)):
            return None
        return lease

    @staticmethod
    def _outcome(applied: bool, lock_id: str, record: _Record | None, slot: int | None) -> Outcome:
        if record is None:
            return Outcome(applied, None, None, slot)
        lock = record.top.record(lock_id, record.slots)
        line = Line(
            record.next_number,
            tuple(sorted(record.line.values(), key=lambda w: w.number)),
            record.polled_ms if record.line else None,
        )
        lock = dataclasses.replace(
            lock,
            line=line,
            shared=record.shared,
            shares=tuple(s.record(lock_id, None) for s in record.shares.values()),
            claimed_until=None if record.claim_ms is None else record.claim_ms / 1000,
        )
        if record.slots is None:
            return Outcome(applied, lock, None, slot, line=line)
        slots = {i: lease.record(lock_id, record.slots) for i, lease in sorted(record.pool.items())}
        return Outcome(applied, lock, Pool(lock_id, record.slots, slots, line), slot, line=line)
