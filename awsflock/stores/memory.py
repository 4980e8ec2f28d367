"""An in-memory ``LockStore``: the DynamoDB store's semantics in one process, thread-safe.

For tests of code that takes locks (as moto is for boto3 users) and for the deterministic
simulator: every step checks the same condition and writes the same state as the DynamoDB
store's one conditional UpdateItem, under one mutex. The conformance suite holds both to it.

    from awsflock import LockTable
    from awsflock.stores.memory import MemoryStore

    table = LockTable(store=MemoryStore())
    with table.acquire("deploy", lease=60) as lease: ...

Besides the interface it has what a simulation needs: ``expire_records(now)`` removes records
whose expiry time has passed (DynamoDB's TTL deletion), and ``legacy_*`` act as an awsflock
0.2.0 client does on its table (read, conditional put, conditional delete).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    AUDIT_PREFIX,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
    KEPT_UNTIL,
    LINE_LAPSE_MS,
    MAX_DROPS,
    Attempt,
    Drops,
    Outcome,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    Identity,
    Line,
    LockRecord,
    Pool,
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

    def owned_by(self, lease_id: str) -> bool:
        return self.lease == lease_id if self.lease else self.version == lease_id

    def live(self, now_ms: int) -> bool:
        if self.expires_ms is not None:
            return self.expires_ms > now_ms
        return self.expires_s is not None and self.expires_s > now_ms // 1000

    def free(self, cutoff_ms: int, *, legacy_too: bool) -> bool:
        if not self.lease and not legacy_too:
            return True  # a pool slot never used
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


class MemoryStore:
    """Lock records in this process's memory (a ``LockStore``); safe to share between threads.

    ``clock`` is only what ``LockTable(store=...)`` uses unless given one: the steps take their
    times from the caller, as every store's do.
    """

    #: Leases are timed by the callers' clocks (see ``LockStore.skew_free``).
    skew_free = False

    def __init__(
        self,
        table_name: str = "memory",
        *,
        clock: Clock | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        transactions: bool = True,
    ) -> None:
        self.table_name = table_name
        #: False: as the DynamoDB store on an endpoint without transactions (dynalite): no fence
        #: records; a plain lock's record is kept for good once taken.
        self.transactions = transactions
        self.clock: Clock = clock or SystemClock()
        self.request_timeout = request_timeout
        self._mutex = threading.Lock()
        self._records: dict[str, _Record] = {}
        #: Each plain lock's fence record: the highest token ever granted on it. Never removed
        #: (not by ``expire_records``, not by a 0.2.0 client), as the DynamoDB store's are not.
        self._fences: dict[str, int] = {}
        self._audit: dict[str, dict[str, Any]] = {}
        self.created = False

    def where(self) -> str:
        return f"the in-memory store {self.table_name!r}"

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        """Every call is answered at once: there is nothing to bound."""
        yield

    def create(self, *, progress: Callable[[str], None] = lambda _message: None) -> bool:
        created, self.created = not self.created, True
        progress(f"in-memory store {self.table_name!r} is ready")
        return created

    def actor(self) -> str | None:
        return None

    # -- the lock steps --------------------------------------------------------------------------

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        now_ms, slot = attempt.now_ms, attempt.slot
        cutoff_ms = now_ms - attempt.skew_ms
        with self._mutex:
            record = self._records.get(lock_id)
            if slot is None:
                ok = (
                    record is None
                    or (record.top.free(cutoff_ms, legacy_too=True) and record.slots is None)
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
            if attempt.ticket is None:
                ok = ok and (record is None or record.line_clear(now_ms, attempt.skew_ms))
            else:
                ok = (
                    ok
                    and record is not None
                    and attempt.ticket in record.line
                    and record.unchanged(attempt.drop)
                )
            if not ok:
                return self._outcome(False, lock_id, record, slot)
            if attempt.ticket is not None:
                assert record is not None
                record.remove([attempt.ticket, *(t for t, _ in attempt.drop)])
            if record is None:
                record = self._records[lock_id] = _Record()
            becomes_pool = slot is not None and record.slots is None
            old = record.top if slot is None else record.pool.get(slot, _Lease())
            if slot is None:
                # The token the DynamoDB store's tries settle on: one above its clock reading
                # (x1000), or above the highest granted on the lock ever, if that is higher.
                highest = max(self._fences.get(lock_id, 0), old.fence or 0)
                fence = max(now_ms * 1000, highest) + 1
                if self.transactions:
                    self._fences[lock_id] = fence
                else:
                    record.kept = True
            else:
                # A new slot starts above the plain lock's tokens, as the DynamoDB store's
                # second try does when they are ahead of the caller's clock. An item that
                # becomes a pool goes above every plain token ever granted (the fence record,
                # which outlives the item) and keeps the highest as its plain token, so that
                # every slot made later starts above it too.
                top = record.top.fence
                floor = now_ms * 1000 if top is None else max(now_ms * 1000, top + 1)
                if becomes_pool:
                    floor = max(floor, self._fences.get(lock_id, 0) + 1)
                    record.top.fence = floor - 1
                fence = (floor if old.fence is None else old.fence) + 1
            expires_ms = now_ms + attempt.lease_ms
            new = _Lease(
                lease=attempt.lease_id,
                version=_version(),
                identity=attempt.identity,
                lease_ms=attempt.lease_ms,
                expires_ms=expires_ms,
                expires_s=record.ttl(_seconds(expires_ms + attempt.skew_ms)),
                acquired_ms=now_ms,
                fence=fence,
                history=[(old.lease, old.ended) if old.lease else None, *old.history[:-1]],
            )
            if slot is None:
                record.top = new
            else:
                record.pool[slot] = new
                record.slots = attempt.slots
                # A pool never expires, and gives awsflock 0.2.0 nothing to take.
                record.top.expires_s = None
                record.top.version = ""
            return self._outcome(True, lock_id, record, slot)

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
    ) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            lease = self._running(record, slot, lease_id)
            in_pool = slot is None or (record is not None and (record.slots or 0) > slot)
            if lease is None or record is None or not lease.live(now_ms) or not in_pool:
                return self._outcome(False, lock_id, record, slot)
            # A renew made before the lease's latest grant or renew counts from that one's
            # reading (the DynamoDB store sends it again so), and only if that moves the end no
            # earlier: a renew that lands late never moves the end back.
            renewed_ms = lease.renewed_ms()
            if renewed_ms is not None and renewed_ms > now_ms:
                now_ms = renewed_ms
                if now_ms + lease_ms < (lease.expires_ms or 0):
                    return self._outcome(False, lock_id, record, slot)
            expires_ms = now_ms + lease_ms
            lease.lease = lease_id
            lease.version = _version()
            lease.lease_ms = lease_ms
            lease.expires_ms = expires_ms
            lease.expires_s = record.ttl(_seconds(expires_ms + skew_ms))
            if keeper is not None:
                lease.keeper = keeper
            return self._outcome(True, lock_id, record, slot)

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        return self._end(lock_id, lease_id, ENDED_RELEASED, now_ms, skew_ms, slot)

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
    ) -> Outcome:
        forced = {"forced_by": actor, "forced_reason": reason, "forced_ms": now_ms}
        return self._end(lock_id, lease_id, ENDED_FORCED + force_id, now_ms, skew_ms, slot, forced)

    def _end(
        self,
        lock_id: str,
        lease_id: str,
        ended: str,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
        forced: dict[str, Any] | None = None,
    ) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            lease = self._running(record, slot, lease_id)
            if lease is None or record is None:
                return self._outcome(False, lock_id, record, slot)
            lease.ended = ended
            lease.lease = lease_id
            lease.version = _version()
            lease.expires_ms = now_ms
            lease.expires_s = record.ttl(_seconds(now_ms + skew_ms))
            for name, value in (forced or {}).items():
                setattr(lease, name, value)
            return self._outcome(True, lock_id, record, slot)

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            if record is None or waiter.ticket in record.line:
                return self._outcome(False, lock_id, record, None)
            record.line[waiter.ticket] = dataclasses.replace(waiter, number=record.next_number)
            record.next_number += 1
            record.polled_ms = max(record.polled_ms or 0, waiter.seen_ms)
            return self._outcome(True, lock_id, record, None)

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            if (
                record is None
                or ticket not in record.line
                or record.line[ticket].seen_ms >= now_ms
                or not record.unchanged(drop)
            ):
                return self._outcome(False, lock_id, record, None)
            record.line[ticket] = dataclasses.replace(record.line[ticket], seen_ms=now_ms)
            record.polled_ms = max(record.polled_ms or 0, now_ms)
            record.remove([t for t, _ in drop])
            return self._outcome(True, lock_id, record, None)

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            if record is None or ticket not in record.line:
                return self._outcome(False, lock_id, record, None)
            record.remove([ticket])
            return self._outcome(True, lock_id, record, None)

    def read(self, lock_id: str) -> Outcome:
        with self._mutex:
            return self._outcome(False, lock_id, self._records.get(lock_id), None)

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        with self._mutex:
            names = [name for name in self._records if name.startswith(prefix)]
        for name in names:
            outcome = self.read(name)
            if outcome.pool is not None:
                yield outcome.pool
            elif outcome.lock is not None:
                yield outcome.lock

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        with self._mutex:
            record = self._records.get(lock_id)
            slots = None if record is None else record.slots
            cutoff_ms = now_ms - skew_ms
            if slots != old:
                return False
            if (
                old is None
                and record is not None
                and not record.top.free(cutoff_ms, legacy_too=True)
            ):
                return False  # a live plain lock is not made a pool
            for slot in range(new, old or 0):
                lease = record.pool.get(slot) if record else None
                if lease is not None and not lease.free(cutoff_ms, legacy_too=False):
                    return False
            if record is None:
                record = self._records[lock_id] = _Record()
            record.slots = new
            record.top.expires_s = None  # a pool never expires, and gives 0.2.0 nothing
            record.top.version = ""
            return True

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        with self._mutex:
            if replace or key not in self._audit:
                self._audit[key] = {k: v for k, v in entry.items() if v not in (None, "")}

    def void_audit(self, key: str, action_id: str | None) -> None:
        with self._mutex:
            entry = self._audit.get(key)
            if entry is not None and (action_id is None or entry.get("action_id") == action_id):
                entry["status"] = AUDIT_VOID

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        with self._mutex:
            entries = [dict(e) for k, e in self._audit.items() if k.startswith(AUDIT_PREFIX)]
        yield from entries

    # -- for simulations -----------------------------------------------------------------------

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

    # -- reading -----------------------------------------------------------------------------

    @staticmethod
    def _lease(record: _Record | None, slot: int | None) -> _Lease | None:
        if record is None:
            return None
        return record.top if slot is None else record.pool.get(slot)

    @classmethod
    def _running(cls, record: _Record | None, slot: int | None, lease_id: str) -> _Lease | None:
        """The lease, if it is ``lease_id``'s and not ended, and a plain lease's record is not a
        pool: what renew, release and force-release all need (the DynamoDB store's
        ``owned AND not_ended``, and ``PLAIN_NOT_POOL`` for a plain lease)."""
        lease = cls._lease(record, slot)
        if lease is None or record is None or not lease.owned_by(lease_id) or lease.ended:
            return None
        if slot is None and record.slots is not None:
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
        lock = dataclasses.replace(lock, line=line)
        if record.slots is None:
            return Outcome(applied, lock, None, slot, line=line)
        slots = {i: lease.record(lock_id, record.slots) for i, lease in sorted(record.pool.items())}
        return Outcome(applied, lock, Pool(lock_id, record.slots, slots, line), slot, line=line)


def _legacy(lease: _Lease) -> bool:
    """Written by awsflock 0.2.0: no fencing counter, whole-second expiry only."""
    return lease.fence is None and lease.expires_ms is None


def _version() -> str:
    return str(uuid.uuid4())
