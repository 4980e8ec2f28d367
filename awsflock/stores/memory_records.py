"""The in-memory store's records: what the DynamoDB store keeps in one item (a plain lock's lease
at the top, a pool's slots, the line of fair waiters), as Python objects. ``memory`` runs the
lock steps on them."""

from __future__ import annotations

import dataclasses
import math
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from awsflock import errors
from awsflock.protocol import (
    AUDIT_APPLIED,
    AUDIT_VOID,
    KEPT_UNTIL,
    LINE_LAPSE_MS,
    MAX_DROPS,
    Drops,
)
from awsflock.records import (
    ENDED_RELEASED,
    Identity,
    LockRecord,
    Previous,
    Waiter,
    holder_fields,
)

#: How many earlier leases a record remembers.
HISTORY = 3


@dataclass
class _Lease:
    """One lease's state: a plain lock's, or one pool slot's."""

    lease: str = ""  # the LEASE_ID ("" on a record only awsflock 0.2.0 wrote)
    version: str = ""  # changes on every write: 0.2.0's compare-and-swap value
    identity: Identity | None = None
    lease_ms: int = 0
    expires_ms: int | None = None  # None: written by 0.2.0 (whole-second expiry only)
    expires_s: int | None = None  # the record's expiry time (DynamoDB's TTL attribute)
    acquired_ms: int | None = None
    fence: int | None = None
    ended: str = ""
    #: The last leases, latest first; None where DynamoDB's item has an empty history slot.
    history: list[tuple[str, str] | None] = field(default_factory=lambda: [None] * HISTORY)
    forced_by: str = ""
    forced_reason: str = ""
    forced_ms: int | None = None
    keeper: str = ""
    #: How the lease before this one ended (written by its grant).
    previous: Previous | None = None
    #: A group's first share found ended without its holder's release (``LockRecord.lapse``).
    lapse: Previous | None = None
    #: Its holder's lock-delay (``Attempt.delay_ms``), and where a force ended the lease, when
    #: that delay ends: from when the lease ran out or the force came, whichever was first (as
    #: DynamoDB's ``free_after_ms``).
    delay_ms: int = 0
    forced_free_ms: int | None = None
    #: The hold's cap (``Attempt.max_hold_ms``): its end never passes it.
    cap_ms: int | None = None

    def delay_end(self) -> int | None:
        """When its lock-delay ends if it ended unreleased (ms); None: it has none."""
        if not self.delay_ms or self.ended == ENDED_RELEASED:
            return None
        if self.forced_free_ms is not None and self.ended:
            return self.forced_free_ms
        return None if self.expires_ms is None else self.expires_ms + self.delay_ms

    def owned_by(self, lease_id: str) -> bool:
        return self.lease == lease_id if self.lease else self.version == lease_id

    def live(self, now_ms: int) -> bool:
        if self.expires_ms is not None:
            return self.expires_ms > now_ms
        return self.expires_s is not None and self.expires_s > now_ms // 1000

    def free(self, cutoff_ms: int, *, legacy_too: bool) -> bool:
        if not self.lease and not legacy_too:
            return True  # a pool slot never used
        if self.delay_ms and self.ended != ENDED_RELEASED:  # its lock-delay after its end
            end = self.delay_end()
            if end is None or end >= cutoff_ms:
                return False
        if self.ended:
            return True
        if self.expires_ms is not None:
            return self.expires_ms < cutoff_ms
        return legacy_too and self.expires_s is not None and self.expires_s < cutoff_ms // 1000

    def renewed_ms(self) -> int | None:
        """The clock reading the lease was granted or last renewed with: its end less its
        length (None for a lease awsflock 0.2.0 wrote)."""
        return None if self.expires_ms is None else self.expires_ms - self.lease_ms

    def granted(self, lease_id: str) -> bool:
        return self.lease == lease_id or any(h and h[0] == lease_id for h in self.history)

    def record(self, lock_id: str, slots: int | None) -> LockRecord:
        who = self.identity or Identity(owner="")
        return LockRecord(
            lock_id=lock_id,
            lease_id=self.lease or self.version,
            version=self.version,
            **holder_fields(who),
            acquired_at=None if self.acquired_ms is None else self.acquired_ms / 1000,
            expires_at=(
                self.expires_ms / 1000
                if self.expires_ms is not None
                else float(self.expires_s or 0)
            ),
            lease_duration=self.lease_ms / 1000,
            fencing_token=self.fence,
            ended=self.ended,
            history=tuple(h for h in self.history if h is not None),
            slots=slots,
            forced_by=self.forced_by,
            forced_reason=self.forced_reason,
            forced_at=None if self.forced_ms is None else self.forced_ms / 1000,
            legacy=self.fence is None and self.expires_ms is None,
            keeper=self.keeper,
            lock_delay=self.delay_ms / 1000,
            capped_at=None if self.cap_ms is None else self.cap_ms / 1000,
            delay_end=None if (end := self.delay_end()) is None else end / 1000,
            previous=self.previous,
            lapse=self.lapse,
        )


@dataclass
class _Record:
    """What the DynamoDB store keeps in one item: a plain lock's lease at the top, and, once it
    is a pool, its size and slots (the plain lease's last state stays, for retried releases)."""

    top: _Lease = field(default_factory=_Lease)
    slots: int | None = None
    pool: dict[int, _Lease] = field(default_factory=dict)
    #: The line of fair waiters: ticket -> place; the next number; the latest poll.
    line: dict[str, Waiter] = field(default_factory=dict)
    next_number: int = 0
    polled_ms: int | None = None
    #: Kept for good (an endpoint without transactions: see the DynamoDB store's
    #: ``kept_until``): its expiry time is ``KEPT_UNTIL`` from its first take on.
    kept: bool = False
    #: A pool's bars: LEASE_ID -> until when (epoch ms), each a slot's id that a release found
    #: never granted (the DynamoDB store's ``xb_`` attributes of the pool's item).
    bars: dict[str, int] = field(default_factory=dict)
    #: Shared holders (``awsflock.shares``): the top is their group's lease; each share's lease
    #: by its id; a waiting exclusive acquire's claim (epoch ms, by its clock).
    shared: bool = False
    shares: dict[str, _Lease] = field(default_factory=dict)
    claim_ms: int | None = None

    def ttl(self, seconds: int) -> int:
        """The record's expiry time for a plain lease's write (DynamoDB's TTL attribute)."""
        return KEPT_UNTIL if self.kept else seconds

    def line_clear(self, now_ms: int, skew_ms: int) -> bool:
        """No live place in line: none at all, or none polled lately (by the caller's clock)."""
        return not self.line or (
            self.polled_ms is not None and self.polled_ms < now_ms - LINE_LAPSE_MS - skew_ms
        )

    def unchanged(self, drop: Drops) -> bool:
        if len(drop) > MAX_DROPS:
            raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")
        return all(t in self.line and self.line[t].seen_ms == seen for t, seen in drop)

    def remove(self, tickets: list[str]) -> None:
        for ticket in tickets:
            del self.line[ticket]


def _seconds(ms: int) -> int:
    """Whole epoch seconds at or after ``ms`` (an expiry time is never early)."""
    return math.ceil(ms / 1000)


def _legacy(lease: _Lease) -> bool:
    """Written by awsflock 0.2.0: no fencing counter, whole-second expiry only."""
    return lease.fence is None and lease.expires_ms is None


def _version() -> str:
    return str(uuid.uuid4())


class ForSimulations:
    """What the simulator needs of the in-memory store beyond the lock steps: TTL deletion, and
    awsflock 0.2.0's three requests on the same records."""

    _mutex: threading.Lock
    _records: dict[str, _Record]
    _done: dict[str, tuple[str, str, int]]

    def expire_records(self, now: float, *, legacy_after: float = 0.0) -> list[str]:
        """Remove the records whose expiry time (whole seconds) is before ``now``, as DynamoDB's
        TTL deletion may; a pool never expires. A record awsflock 0.2.0 wrote (its expiry time is
        its lease's end) is removed only ``legacy_after`` seconds after it. Returns the names
        removed."""
        with self._mutex:
            gone = [
                name
                for name, record in self._records.items()
                if record.top.expires_s is not None
                and record.top.expires_s + (legacy_after if _legacy(record.top) else 0) < now
            ]
            for name in gone:
                del self._records[name]
            for lease, (_, _, expires_s) in list(self._done.items()):
                if expires_s < now:
                    del self._done[lease]
            return gone

    def legacy_read(self, lock_id: str) -> LockRecord | None:
        """The record as awsflock 0.2.0 reads it: ``lease_id`` is the compare-and-swap value and
        ``expires_at`` the whole-second expiry time (DynamoDB's TTL attribute, which is all 0.2.0
        knows). None if there is no record, or it is a pool, which 0.2.0 cannot parse."""
        with self._mutex:
            record = self._records.get(lock_id)
            if record is None or not record.top.version or record.top.expires_s is None:
                return None  # a pool has neither
            top = record.top
            return dataclasses.replace(
                top.record(lock_id, None),
                lease_id=top.version,
                expires_at=float(top.expires_s or 0),
            )

    def legacy_put(
        self, lock_id: str, lease_id: str, owner: str, expires_s: int, *, expect: str | None
    ) -> bool:
        """awsflock 0.2.0's put: replace the whole record by a lease of its own, if the record's
        compare-and-swap value is still ``expect`` (None: if there is no record)."""
        with self._mutex:
            record = self._records.get(lock_id)
            current = None if record is None else record.top.version
            if current != expect or (record is not None and expect is None):
                return False
            lease = _Lease(
                version=lease_id,
                identity=Identity(owner=owner),
                expires_s=expires_s,
            )
            self._records[lock_id] = _Record(top=lease)
            return True

    def legacy_delete(self, lock_id: str, expect: str) -> bool:
        """awsflock 0.2.0's release: delete the record if its compare-and-swap value is
        ``expect``."""
        with self._mutex:
            record = self._records.get(lock_id)
            if record is None or record.top.version != expect:
                return False
            del self._records[lock_id]
            return True


def audit_put_lands(there: dict[str, Any] | None, entry: dict[str, Any]) -> bool:
    """Whether a put of audit ``entry`` replaces the record ``there`` (``put_audit``'s rule,
    which every store's put states in its own language): a record of an action that took
    effect stays, and a void one gives way only to one of an action that took effect."""
    status = None if there is None else there.get("status")
    return status != AUDIT_APPLIED and (
        status != AUDIT_VOID or entry.get("status") == AUDIT_APPLIED
    )
