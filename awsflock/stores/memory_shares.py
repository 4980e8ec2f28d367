"""The in-memory store's shared holders (``awsflock.shares``): a share's take, the end of a
share, and a waiting exclusive acquire's claim, on the records ``memory`` keeps. As the DynamoDB
store's steps on the lock's item, under the store's mutex."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

from awsflock.protocol import DONE_MS, Attempt, Outcome, audit_key
from awsflock.records import Previous, kept_audit
from awsflock.shares import MAX_SHARES, group_of
from awsflock.stores.memory_records import _Lease, _Record, _seconds, _version
from awsflock.stores.memory_takes import previous
from awsflock.stores.memory_views import Views


def may_share(
    record: _Record | None, attempt: Attempt, *, ended_before: bool, transactions: bool
) -> bool:
    """Whether a share's take ``attempt`` is granted as ``record`` stands: the lock free to
    take (a new group) or held by a live group with room (a join); no live claim; the line
    clear; an id never granted before."""
    now_ms, cutoff_ms = attempt.now_ms, attempt.now_ms - attempt.skew_ms
    if attempt.slot is not None or attempt.ticket is not None:
        return False
    if transactions and ended_before:
        return False
    if record is None:
        return True
    group = group_of(attempt.lease_id)
    if (
        record.slots is not None
        or (record.claim_ms is not None and record.claim_ms > now_ms)
        or not record.line_clear(now_ms, attempt.skew_ms)
        or attempt.lease_id in record.shares
        or record.top.granted(group)
    ):
        return False
    if record.top.free(cutoff_ms, legacy_too=True):
        return True
    live = [s for s in record.shares.values() if (s.expires_ms or 0) >= cutoff_ms]
    return record.shared and not record.top.ended and len(live) < MAX_SHARES


def grant_share(
    record: _Record,
    attempt: Attempt,
    lock_id: str,
    fences: dict[str, int],
    *,
    transactions: bool,
    lasts: dict[str, _Lease] | None = None,
) -> None:
    """Write the share ``attempt`` was granted: into a new group if the lock was free, else
    into the live group (whose end it raises); lapsed shares are dropped. Its token is above
    every one granted on the lock before."""
    now_ms, cutoff_ms = attempt.now_ms, attempt.now_ms - attempt.skew_ms
    top = record.top
    fence = max(now_ms * 1000, fences.get(lock_id, 0), top.fence or 0) + 1
    if transactions:
        fences[lock_id] = fence
    else:
        record.kept = True
    end_ms = now_ms + attempt.lease_ms
    share = _Lease(
        lease=attempt.lease_id,
        version=_version(),
        identity=attempt.identity,
        lease_ms=attempt.lease_ms,
        expires_ms=end_ms,
        acquired_ms=now_ms,
        fence=fence,
    )
    if not (top.lease or top.version) or top.free(cutoff_ms, legacy_too=True):
        record.top = _Lease(
            lease=group_of(attempt.lease_id),
            identity=attempt.identity,
            lease_ms=attempt.lease_ms,
            expires_ms=end_ms,
            acquired_ms=now_ms,
            history=[(top.lease, top.ended) if top.lease else None, *top.history[:-1]],
            previous=previous(top, lock_id, lasts, record),
        )
        record.shares, record.shared = {}, True
        if transactions and lasts is not None:  # the fence record names the new group
            lasts[lock_id] = dataclasses.replace(record.top)
    group = record.top
    group.version = _version()
    group.fence = fence
    group.expires_ms = max(group.expires_ms or 0, end_ms)
    group.expires_s = record.ttl(_seconds(group.expires_ms + attempt.skew_ms))
    ran_out = [s for s in record.shares.values() if (s.expires_ms or 0) < cutoff_ms]
    if ran_out:  # they leave: the group did not end as released, whatever comes after
        _lapse(group, max(ran_out, key=lambda s: s.expires_ms or 0), lock_id)
    record.shares = {k: s for k, s in record.shares.items() if (s.expires_ms or 0) >= cutoff_ms}
    record.shares[attempt.lease_id] = share


def _lapse(group: _Lease, share: _Lease, lock_id: str) -> None:
    """``share`` is found ended without its holder's release (ran out, or forced): the group's
    first such share is how it ended (``LockRecord.lapse``)."""
    if group.lapse is None:
        group.lapse = Previous.of(share.record(lock_id, None))


def raise_group(record: _Record, share: _Lease, skew_ms: int) -> None:
    """After a share's renew: the group ends no earlier than the share."""
    group = record.top
    group.version = _version()
    group.expires_ms = max(group.expires_ms or 0, share.expires_ms or 0)
    group.expires_s = max(group.expires_s or 0, record.ttl(_seconds(group.expires_ms + skew_ms)))


class MemoryShares(Views):
    """The share steps of ``MemoryStore`` beyond what its take, renew and end route here."""

    _mutex: threading.Lock
    _records: dict[str, _Record]
    _done: dict[str, tuple[str, str, int]]
    _audit: dict[str, dict[str, Any]]
    _lasts: dict[str, _Lease]
    transactions: bool

    def _end_last(
        self,
        lock_id: str,
        lease_id: str,
        ended: str,
        forced: dict[str, Any],
        lapse: Previous | None = None,
    ) -> None:
        """An end of ``lease_id``, kept with the lock's last lease if it is that one (the
        DynamoDB store's fence record, which the end's transaction updates); a group's with
        its first share that ended unreleased."""
        last = self._lasts.get(lock_id)
        if last is not None and last.lease == lease_id:
            last.ended = ended
            last.lapse = lapse
            for name, value in forced.items():
                setattr(last, name, value)

    def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome:
        with self._mutex:
            record = self._records.get(lock_id)
            if (
                record is None
                or not record.shared
                or record.top.ended
                or (record.claim_ms or 0) >= until_ms
            ):
                return self._outcome(False, lock_id, record, None)
            record.claim_ms = until_ms
            record.top.version = _version()
            return self._outcome(True, lock_id, record, None)

    def _end_share(
        self,
        lock_id: str,
        record: _Record,
        lease_id: str,
        ended: str,
        now_ms: int,
        skew_ms: int,
        forced: dict[str, Any] | None,
        audit: dict[str, Any] | None,
    ) -> Outcome:
        """End the share ``lease_id`` (found running in ``record``): it leaves the group, and a
        group left with no live share ends as the share did."""
        share = record.shares.pop(lease_id)
        group = record.top
        if forced is not None:
            share.ended = ended
            for name, value in forced.items():
                setattr(share, name, value)
            _lapse(group, share, lock_id)
        if self.transactions:
            self._done[lease_id] = (lock_id, ended, _seconds(now_ms + DONE_MS))
        group.version = _version()
        cutoff_ms = now_ms - skew_ms
        if record.shares and any((s.expires_ms or 0) >= cutoff_ms for s in record.shares.values()):
            # The group's end comes down to the latest of the shares left: a waiting exclusive
            # acquire waits for them only.
            group.expires_ms = max(s.expires_ms or 0 for s in record.shares.values())
            group.expires_s = record.ttl(_seconds(group.expires_ms + skew_ms))
        else:
            if record.shares:  # each ran out: they leave with the group
                _lapse(group, max(record.shares.values(), key=lambda s: s.expires_ms or 0), lock_id)
            record.shares = {}
            self._end_last(lock_id, group.lease, ended, forced or {}, group.lapse)
            group.ended = ended
            group.expires_ms = now_ms
            group.expires_s = record.ttl(_seconds(now_ms + skew_ms))
            for name, value in (forced or {}).items():
                setattr(group, name, value)
        if audit is not None:
            self._audit[audit_key(lease_id)] = kept_audit(audit)
        return self._outcome(True, lock_id, record, None)
