"""Waking a waiter early: the engine spends its pauses in the store's waker, which may end one
when the lock may have changed (the next poll then goes at once) but never stretches it; and the
Redis waker (``stores.redis.wake``) on a fake subscription: a message, a cancel, a broken
subscription. On a real server: tests/integration/test_redis_wake.py."""

from __future__ import annotations

import random
import threading
from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import Clock, FakeClock
from awsflock.lock.lease import LockTable
from awsflock.protocol import Sleeper, Waker
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore


class FakeWaker:
    """A waker whose pauses run ``on_pause(n)`` (n: the pause's number) and then wake at once
    (True) or sleep the pause out (False)."""

    def __init__(self, on_pause: Any) -> None:
        self.on_pause = on_pause
        self.pauses: list[float] = []
        self.closed = 0

    def pause(self, clock: Clock, seconds: float, cancel: threading.Event | None) -> bool:
        self.pauses.append(seconds)
        if self.on_pause(len(self.pauses)):
            return True
        return Sleeper().pause(clock, seconds, cancel)

    def close(self) -> None:
        self.closed += 1


class WakingStore(MemoryStore):
    """The in-memory store, with a waker given by the test."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.wakers: list[FakeWaker] = []
        self.on_pause: Any = lambda n: False

    def waker(self, lock_id: str) -> Waker:
        self.wakers.append(FakeWaker(self.on_pause))
        return self.wakers[-1]


@pytest.fixture
def setup() -> tuple[WakingStore, FakeClock]:
    clock = FakeClock()
    return WakingStore(clock), clock


def _table(store: WakingStore, owner: str) -> LockTable:
    return LockTable(store=store, rng=random.Random(7), identity=Identity(owner=owner))


@pytest.mark.parametrize("fair", [False, True])
def test_a_wake_ends_the_pause_and_the_next_poll_takes_the_lock_at_once(setup, fair):
    store, clock = setup
    held = _table(store, "a").acquire("job", lease=60, wait=0)

    def release_then_wake(n: int) -> bool:
        if n == 2:  # the first pause is slept out; the lock is released during the second
            held.release()
            return True
        return False

    store.on_pause = release_then_wake
    start = clock.monotonic()
    lease = _table(store, "b").acquire("job", lease=60, wait=30, fair=fair)
    # Woken at the second pause, which took no time: the grant came at the end of the first.
    [waker] = store.wakers
    assert len(waker.pauses) == 2 and waker.closed == 1
    assert clock.monotonic() - start == pytest.approx(waker.pauses[0], abs=0.05)
    assert lease.fencing_token > held.fencing_token


def test_a_wake_that_finds_the_lock_still_held_only_costs_a_poll(setup):
    store, clock = setup
    _table(store, "a").acquire("job", lease=60, wait=0)
    store.on_pause = lambda n: n <= 3  # three hints, then none
    start = clock.monotonic()
    with pytest.raises(errors.LockBusy):
        _table(store, "b").acquire("job", lease=60, wait=5)
    [waker] = store.wakers
    # The wait still lasted its 5 s, polling about once a second after the hints.
    assert clock.monotonic() - start == pytest.approx(5.0, abs=0.01)
    assert 3 + 4 <= len(waker.pauses) <= 3 + 7 and waker.closed == 1


def test_a_cancel_during_a_wake_wait_ends_the_wait_holding_nothing(setup):
    store, _clock = setup
    _table(store, "a").acquire("job", lease=60, wait=0)
    cancel = threading.Event()

    def cancel_then_wake(n: int) -> bool:
        cancel.set()
        return True

    store.on_pause = cancel_then_wake
    with pytest.raises(errors.Cancelled):
        _table(store, "b").acquire("job", lease=60, wait=30, cancel=cancel)
    [waker] = store.wakers
    assert len(waker.pauses) == 1 and waker.closed == 1
    assert store.read("job").lock is not None and store.read("job").lock.owner == "a"


def test_no_waker_is_made_for_a_lock_that_is_free_or_not_waited_for(setup):
    store, _clock = setup
    _table(store, "a").acquire("job", lease=60, wait=30).release()
    _table(store, "a").acquire("job", lease=60, wait=0)
    with pytest.raises(errors.LockBusy):
        _table(store, "b").acquire("job", lease=60, wait=0)
    assert store.wakers == []


def test_pauses_given_to_the_waker_stop_at_the_deadline_and_the_holders_reclaim_time(setup):
    store, clock = setup
    held = _table(store, "a").acquire("job", lease=2.5, wait=0)
    with pytest.raises(errors.LockBusy):
        _table(store, "b").acquire("job", lease=60, wait=0.5)
    assert sum(store.wakers[-1].pauses) == pytest.approx(0.5, abs=0.01)
    table = _table(store, "b")
    table.acquire("job", lease=60, wait=30)
    assert max(store.wakers[-1].pauses) <= 1.25
    # Taken as the lease became reclaimable (its end plus the skew window), not a poll later.
    reclaim = held.expires_at + table.skew
    assert reclaim <= clock.time() <= reclaim + 0.1


def test_the_default_waker_sleeps_the_pause_out_on_the_callers_clock():
    clock = FakeClock()
    assert Sleeper().pause(clock, 0.7, None) is False
    assert clock.sleeps == [0.7]
    cancel = threading.Event()
    cancel.set()
    start = clock.monotonic()
    assert Sleeper().pause(clock, 5.0, cancel) is False
    assert clock.monotonic() == start  # a set cancel ends the wait at once
    assert isinstance(MemoryStore().waker("x"), Sleeper)
