"""The synchronous renewer declares an overdue hold lost *on its scheduler
thread* (``_Schedule.due`` -> ``overdue`` -> ``_lose`` -> ``on_lost``). An ``on_lost`` that
stops its hold (which waits for the hanging step, then releases) holds up the scheduler, and
with it every other hold's renewals: a healthy lock is lost because another one's renewal hung
(promise 6: "a hanging renewal of one hold does not delay others' renewals or loss
declarations"). Real time, ~6 s."""

from __future__ import annotations

import time
from typing import Any

import awsflock
from awsflock.clock import SystemClock
from awsflock.stores.memory import MemoryStore


class HangsOnA(MemoryStore):
    """Renewals of lock "a" hang for ``hang`` seconds once ``cut`` is set (a stuck request)."""

    cut = False
    hang = 4.0

    def renew(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        if lock_id == "a" and self.cut:
            time.sleep(self.hang)
        return super().renew(lock_id, lease_id, **step)


def test_one_hanging_renewal_whose_on_lost_stops_its_hold_does_not_lose_another_lock() -> None:
    store = HangsOnA("t", clock=SystemClock())
    table = awsflock.LockTable(store=store)
    lost: list[str] = []

    def stop_on_loss(hold: Any, err: Any) -> None:
        lost.append(hold.lock_id)
        hold.stop()

    a = table.hold("a", lease=3, on_lost=stop_on_loss)
    b = table.hold("b", lease=3, on_lost=lambda hold, err: lost.append(hold.lock_id))
    a.start()
    b.start()
    store.cut = True
    time.sleep(6)
    b_lost = b.lost.is_set()
    b.stop(release=False)
    assert "a" in lost
    assert not b_lost, f"lock b, renewed fine, was lost too ({b.renewals} renewals): {lost}"
