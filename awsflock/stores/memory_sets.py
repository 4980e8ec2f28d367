"""The in-memory store's set steps (``awsflock.sets.SetSteps``): a set's take checks every
name's condition and writes them all, or none, under the store's one mutex; its renew and
release are each name's own step."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from awsflock.protocol import Attempt, Outcome
from awsflock.sets import check_set_attempts, no_sets
from awsflock.stores.memory_records import _Lease, _Record
from awsflock.stores.memory_takes import grant, may_take


class MemorySets:
    """``take_all``, ``renew_all`` and ``release_all`` of ``MemoryStore``."""

    _mutex: threading.Lock
    _records: dict[str, _Record]
    _fences: dict[str, int]
    _lasts: dict[str, _Lease]
    _done: dict[str, tuple[str, str, int]]
    transactions: bool

    def take_all(self, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        check_set_attempts(takes)
        store: Any = self
        if not self.transactions:
            raise no_sets(store.where())
        with self._mutex:
            granted = all(
                may_take(
                    self._records.get(name),
                    attempt,
                    ended_before=attempt.lease_id in self._done,
                    transactions=True,
                )
                for name, attempt in takes
            )
            if not granted:
                return tuple(store._outcome(False, n, self._records.get(n), None) for n, _ in takes)
            outcomes = []
            for name, attempt in takes:
                record = self._records.setdefault(name, _Record())
                grant(record, attempt, name, self._fences, transactions=True, lasts=self._lasts)
                outcomes.append(store._outcome(True, name, record, None))
            return tuple(outcomes)

    def renew_all(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        keeper: str | None = None,
    ) -> tuple[Outcome, ...]:
        store: Any = self
        return tuple(
            store.renew(
                name, lease_id, now_ms=now_ms, lease_ms=lease_ms, skew_ms=skew_ms, keeper=keeper
            )
            for name, lease_id in leases
        )

    def release_all(
        self, leases: Sequence[tuple[str, str]], *, now_ms: int, skew_ms: int
    ) -> tuple[Outcome, ...]:
        store: Any = self
        return tuple(
            store.release(name, lease_id, now_ms=now_ms, skew_ms=skew_ms)
            for name, lease_id in leases
        )
