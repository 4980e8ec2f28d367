"""An in-memory ``LockStore``: the DynamoDB store's semantics in one process, thread-safe.

For tests of code that takes locks (as moto is for boto3 users) and for the deterministic
simulator: every step checks the same condition and writes the same state as the DynamoDB
store's one conditional UpdateItem, under one mutex. The conformance suite holds both to it.
Sets (``awsflock.sets``): ``memory_sets``.

    from awsflock import LockTable
    from awsflock.stores.memory import MemoryStore

    table = LockTable(store=MemoryStore())
    with table.acquire("deploy", lease=60) as lease: ...

For simulations, ``expire_records(now)`` removes expired records (DynamoDB's TTL deletion),
and ``legacy_*`` act as an awsflock 0.2.0 client (read, conditional put and delete).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any, Callable

from awsflock.clock import Clock, SystemClock
from awsflock.names import slot_of
from awsflock.protocol import (
    AUDIT_PREFIX,
    BAR_KEEP_MS,
    DEFAULT_REQUEST_TIMEOUT,
    DONE_MS,
    ENDED_BARRED,
    Attempt,
    Drops,
    Outcome,
    Sleeper,
    Waker,
    audit_key,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    LockRecord,
    Pool,
    Waiter,
    kept_audit,
)
from awsflock.shares import is_share_id
from awsflock.state import NO_STATE, LockState, StateWrite
from awsflock.state import check as check_state
from awsflock.state import check_plain as check_state_plain
from awsflock.stores import kinds
from awsflock.stores.memory_records import (
    ForSimulations,
    _Lease,
    _Record,
    _seconds,
    _version,
    audit_put_lands,
)
from awsflock.stores.memory_sets import MemorySets
from awsflock.stores.memory_shares import MemoryShares, grant_share, may_share, raise_group
from awsflock.stores.memory_takes import grant, may_take, resize


class MemoryStore(ForSimulations, MemorySets, MemoryShares):
    """Lock records in this process's memory (a ``LockStore``); safe to share between threads.

    ``clock`` is only what ``LockTable(store=...)`` uses unless given one: the steps take their
    times from the caller, as every store's do.
    """

    kind = kinds.MEMORY.name
    skew_free = kinds.MEMORY.skew_free

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
        #: Each plain lock's last lease as its grant and end wrote it (``memory_takes.grant``).
        self._lasts: dict[str, _Lease] = {}
        self._audit: dict[str, dict[str, Any]] = {}
        #: Each plain lock's state (``awsflock.state``), kept as its fence record is.
        self._states: dict[str, LockState] = {}
        #: Each lease that ended by a release or force-release (the DynamoDB store's done items,
        #: written with the end where there are transactions): lease -> (lock, how, expiry s).
        self._done: dict[str, tuple[str, str, int]] = {}
        self.created = False

    def where(self) -> str:
        return f"the in-memory store {self.table_name!r}"

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        yield  # every call is answered at once: there is nothing to bound

    def create(self, *, progress: Callable[[str], None] = lambda _message: None) -> bool:
        created, self.created = not self.created, True
        progress(f"in-memory store {self.table_name!r} is ready")
        return created

    def actor(self) -> str | None:
        return None

    def waker(self, lock_id: str) -> Waker:
        return Sleeper()  # waiters poll; a simulation's clock moves through its sleeps

    # -- the lock steps --------------------------------------------------------------------------

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        shared = is_share_id(attempt.lease_id)
        allowed, write = (may_share, grant_share) if shared else (may_take, grant)
        with self._mutex:
            record = self._records.get(lock_id)
            if not allowed(
                record,
                attempt,
                ended_before=attempt.lease_id in self._done,
                transactions=self.transactions,
            ):
                return self._outcome(False, lock_id, record, attempt.slot)
            if attempt.ticket is not None:
                assert record is not None
                record.remove([attempt.ticket, *(t for t, _ in attempt.drop)])
            if record is None:
                record = self._records[lock_id] = _Record()
            write(
                record,
                attempt,
                lock_id,
                self._fences,
                transactions=self.transactions,
                lasts=self._lasts,
            )
            return self._outcome(True, lock_id, record, attempt.slot)

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
        if state is not None:
            check_state_plain(slot, is_share_id(lease_id))
            check_state(state.data)
        with self._mutex:
            record = self._records.get(lock_id)
            lease = self._running(record, slot, lease_id)
            in_pool = slot is None or (record is not None and (record.slots or 0) > slot)
            if lease is None or record is None or not lease.live(now_ms) or not in_pool:
                return self._outcome(False, lock_id, record, slot)
            if state is not None:
                kept = self._states.get(lock_id, NO_STATE)
                if kept.lease_id == lease_id and kept.stamp_ms > state.stamp_ms:
                    return self._outcome(False, lock_id, record, slot)  # a later write is in
                self._states[lock_id] = LockState(state.data, lease_id, state.stamp_ms)
            # A renew made before the lease's latest grant or renew counts from that one's
            # reading (the DynamoDB store sends it again so), and only if that moves the end no
            # earlier: a renew that lands late never moves the end back. Nor does one read
            # within the skew window of that one (its caller's clock may be ahead, and it sent
            # first): only a renew clearly sent later may shorten the lease.
            renewed_ms = lease.renewed_ms()
            if renewed_ms is not None and renewed_ms > now_ms:
                now_ms = renewed_ms
            shorter = now_ms + lease_ms < (lease.expires_ms or 0)
            if shorter and renewed_ms is not None and now_ms < renewed_ms + skew_ms:
                if state is not None:  # the state is written, the end stays
                    return self._outcome(True, lock_id, record, slot)
                return self._outcome(False, lock_id, record, slot)
            expires_ms = now_ms + lease_ms
            if lease.cap_ms is not None:  # a max-hold: never past the cap (nor live after it)
                expires_ms = min(expires_ms, lease.cap_ms)
            lease.lease = lease_id
            lease.version = _version()
            lease.lease_ms = lease_ms
            lease.expires_ms = expires_ms
            lease.expires_s = record.ttl(_seconds(expires_ms + skew_ms + lease.delay_ms))
            if keeper is not None:
                lease.keeper = keeper
            if is_share_id(lease_id):
                raise_group(record, lease, skew_ms)
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
        audit: dict[str, Any] | None = None,
    ) -> Outcome:
        forced = {"forced_by": actor, "forced_reason": reason, "forced_ms": now_ms}
        ended = ENDED_FORCED + force_id
        return self._end(lock_id, lease_id, ended, now_ms, skew_ms, slot, forced, audit)

    def _end(
        self,
        lock_id: str,
        lease_id: str,
        ended: str,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
        forced: dict[str, Any] | None = None,
        audit: dict[str, Any] | None = None,
    ) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            lease = self._running(record, slot, lease_id, group_ok=forced is not None)
            if lease is not None and record is not None and is_share_id(lease_id):
                return self._end_share(
                    lock_id, record, lease_id, ended, now_ms, skew_ms, forced, audit
                )
            if lease is None or record is None:
                outcome = self._remembering(
                    self._outcome(False, lock_id, record, slot), lock_id, lease_id
                )
                if not self.transactions or outcome.knows(lease_id):
                    return outcome
                return self._bar(lock_id, lease_id, outcome, record, now_ms, skew_ms, slot)
            if self.transactions:
                self._done[lease_id] = (lock_id, ended, _seconds(now_ms + DONE_MS))
            delay = lease.delay_ms if forced else 0  # a force's lock-delay: TTL waits too
            if delay:  # from when the lease ran out, or now, whichever was first
                end_ms = min(now_ms, lease.expires_ms if lease.expires_ms is not None else now_ms)
                lease.forced_free_ms = end_ms + delay
            lease.ended = ended
            lease.lease = lease_id
            lease.version = _version()
            lease.expires_ms = now_ms
            lease.expires_s = record.ttl(_seconds(now_ms + skew_ms + delay))
            for name, value in (forced or {}).items():
                setattr(lease, name, value)
            if slot is None:
                self._end_last(lock_id, lease_id, ended, forced or {})
            if audit is not None:  # in the same write as the end (protocol.force_release)
                self._audit[audit_key(lease_id)] = kept_audit(audit)
            if self.transactions:  # as DynamoDB's transaction, it answers nothing
                return Outcome(True, None, None, slot)
            return self._outcome(True, lock_id, record, slot)

    def _bar(
        self,
        lock_id: str,
        lease_id: str,
        outcome: Outcome,
        record: _Record | None,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
    ) -> Outcome:
        """An end step found nothing ever granted under ``lease_id``: bar it, as the DynamoDB
        store does (a done item marked barred; on a pool, the pool's bar of a slot's id)."""
        if record is not None and record.slots is not None:
            if slot is None:  # a plain take on a pool is refused whatever its id
                return dataclasses.replace(outcome, barred=True)
            if record.bars.get(lease_id, now_ms - 1) >= now_ms:
                return outcome  # barred already (and still)
            record.bars = {k: v for k, v in record.bars.items() if v >= now_ms}
            record.bars[lease_id] = now_ms + DONE_MS
            return dataclasses.replace(outcome, barred=True)
        if lease_id in self._done:
            return outcome
        self._done[lease_id] = (lock_id, ENDED_BARRED, _seconds(now_ms + BAR_KEEP_MS))
        if slot is not None:
            # A slot's id on a lock not a pool yet: as the DynamoDB store, its fence record is
            # raised and its record keeps the bar. What refuses that id's take on a pool made
            # later, if the record is gone by then, is the take's own token, sent before the
            # raise: this store times a take when it lands and cannot tell, so it does not say
            # the id is barred (an acquire names the release command instead).
            bar_token = (now_ms + skew_ms) * 1000 + 1
            self._fences[lock_id] = max(self._fences.get(lock_id, 0), bar_token)
            if record is not None:
                record.bars[lease_id] = now_ms + DONE_MS
            return outcome
        return dataclasses.replace(outcome, barred=True)

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

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        with self._mutex:
            if lease_id is None:
                return self._outcome(False, lock_id, self._records.get(lock_id), None)
            outcome = self._outcome(False, lock_id, self._records.get(lock_id), slot_of(lease_id))
            return self._remembering(outcome, lock_id, lease_id)

    def read_state(self, lock_id: str) -> LockState:
        with self._mutex:
            return self._states.get(lock_id, NO_STATE)

    def _remembering(self, outcome: Outcome, lock_id: str, lease_id: str) -> Outcome:
        """``outcome`` with how ``lease_id`` ended, where its record no longer remembers it (the
        DynamoDB store's read of the lease's done item)."""
        if outcome.knows(lease_id):
            return outcome
        if outcome.slot is not None and outcome.pool is None:
            return outcome
        done = self._done.get(lease_id)
        if done is None or done[0] != lock_id or done[1] == ENDED_BARRED:
            return outcome
        return outcome.remembering(lease_id, done[1], lock_id)

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
        with self._mutex:  # in one step under the mutex: nothing to mark (``seen``)
            return resize(self._records, lock_id, old, new, now_ms - skew_ms)

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any]) -> None:
        with self._mutex:
            if audit_put_lands(self._audit.get(key), entry):
                self._audit[key] = kept_audit(entry)

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        with self._mutex:
            entries = [dict(e) for k, e in self._audit.items() if k.startswith(AUDIT_PREFIX)]
        yield from entries
