"""Shared holders through the library (``awsflock.shares``, ``acquire(shared=True)``): many
shares at once, never beside an exclusive holder, tokens that only go up, and a waiting
exclusive acquire that keeps new shares out; on the in-memory store in fake time."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import FakeClock, LockTable, MemoryStore, aio, errors, shares
from awsflock.lock import admin
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores import kinds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def table(clock: FakeClock) -> LockTable:
    return LockTable(store=MemoryStore(clock=clock), clock=clock, owner="ops")


def test_shares_are_held_together_and_an_exclusive_grant_goes_above_them(table, clock):
    one = table.acquire("state", shared=True, lease=60)
    two = table.acquire("state", shared=True, lease=60, wait=0)
    assert shares.is_share_id(one.lease_id) and shares.is_share_id(two.lease_id)
    assert two.fencing_token > one.fencing_token
    with pytest.raises(errors.LockBusy, match="2 shared holders"):
        table.acquire("state", wait=0)
    one.release()
    two.release()
    writer = table.acquire("state", wait=0)
    assert writer.fencing_token > two.fencing_token
    with pytest.raises(errors.LockBusy):
        table.acquire("state", shared=True, wait=0)
    writer.release()
    after = table.acquire("state", shared=True, wait=0)
    assert after.fencing_token > writer.fencing_token


def test_a_waiting_exclusive_acquire_keeps_new_shares_out_until_it_gives_up(clock):
    class Watched(MemoryStore):
        """Another reader tries for a share right after each claim of the waiting writer."""

        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self.kept_out: list[bool] = []

        def claim(self, lock_id: str, **step: Any) -> Any:
            claimed = super().claim(lock_id, **step)
            who = Identity(owner="another reader")
            attempt = Attempt(shares.new_share_id(), who, step["now_ms"], 60_000, 5_000)
            self.kept_out.append(not self.take(lock_id, attempt).applied)
            return claimed

    store = Watched(clock=clock)
    table = LockTable(store=store, clock=clock, owner="ops")
    reader = table.acquire("state", shared=True, lease=600)
    with pytest.raises(errors.LockBusy):
        table.acquire("state", wait=5)
    assert len(store.kept_out) >= 3 and all(store.kept_out)
    table.renew(reader)  # shares held keep going
    # Found by review 5: a writer that gave up kept readers out for up to 3 s more, and was
    # named as waiting. Its claim ends with its wait, to the store's millisecond (the fake
    # clock's float sums may read a hair before it).
    claimed = table.state("state").claimed_until
    assert claimed is not None and claimed <= clock.time() + 0.001
    table.acquire("state", shared=True, wait=0)


def test_a_no_wait_exclusive_acquire_claims_nothing(table, clock):
    table.acquire("state", shared=True)
    with pytest.raises(errors.LockBusy):
        table.acquire("state", wait=0)
    assert table.state("state").claimed_until is None
    table.acquire("state", shared=True, wait=0)


def test_a_share_renews_on_its_own_and_says_why_it_was_lost(table, clock):
    one = table.acquire("state", shared=True, lease=30)
    two = table.acquire("state", shared=True, lease=30)
    clock.advance(20)
    table.renew(one)
    assert one.expires_at == pytest.approx(clock.time() + 30)
    group = table.state("state")
    assert group.expires_at == pytest.approx(one.expires_at)
    admin.force_release(table, "state", reason="stuck", lease_id=two.lease_id, actor="oncall")
    with pytest.raises(errors.NotHeld, match="it was force-released"):
        table.renew(two)
    table.renew(one)  # the other share is untouched
    admin.force_release(table, "state", reason="all", lease_id=group.lease_id, actor="oncall")
    with pytest.raises(errors.NotHeld, match="force-released by oncall"):
        table.renew(one)


def test_a_release_retried_after_it_went_through_succeeds(table):
    one = table.acquire("state", shared=True)
    table.acquire("state", shared=True)
    table.release_lease("state", one.lease_id)
    table.release_lease("state", one.lease_id)  # a retry: its first try ended it


def test_a_group_id_is_neither_renewed_nor_released(table):
    table.acquire("state", shared=True)
    group = table.state("state").lease_id
    for step in (table.renew_lease, table.release_lease):
        with pytest.raises(errors.UsageError, match="nobody holds"):
            step("state", group)


def test_shared_takes_neither_slots_nor_fair_nor_several_names(table):
    for options in ({"slots": 2}, {"fair": True}):
        with pytest.raises(errors.UsageError, match="shared lock is a plain lock"):
            table.acquire("state", shared=True, **options)
    with pytest.raises(errors.UsageError, match="plain exclusive locks"):
        table.acquire(["a", "b"], shared=True)


def test_a_store_without_shares_refuses_a_shared_acquire(monkeypatch):
    without = dataclasses.replace(kinds.MEMORY, shares=False)
    monkeypatch.setattr(kinds, "of", lambda store: without)
    other = LockTable(store=MemoryStore(), owner="x")
    with pytest.raises(errors.ConfigurationError, match="does not hold shared locks"):
        other.acquire("state", shared=True)


def test_lock_holds_a_share_and_releases_it_after_the_body(table):
    with table.lock("state", shared=True, lease=30) as held:
        assert shares.is_share_id(held.lease_id)
        other = table.acquire("state", shared=True, wait=0)
        assert other.fencing_token > held.fencing_token
        # Not again in this thread: a writer's claim between the two would deadlock them.
        with pytest.raises(errors.UsageError, match="already held by this thread"):
            table.acquire("state", shared=True)
        other.release()
    assert table.state("state").released


def test_asyncio_shares_and_a_waiting_writer(clock):
    async def main() -> None:
        store = kinds.awaited(MemoryStore(clock=clock))
        table = aio.LockTable(store=store, clock=clock, owner="svc")
        async with table.lock("state", shared=True, lease=30) as one:
            two = await table.acquire("state", shared=True, wait=0)
            assert two.fencing_token > one.fencing_token
            with pytest.raises(errors.LockBusy):
                await table.acquire("state", wait=0)
            await two.release()
        writer = await table.acquire("state", wait=0)
        assert writer.fencing_token > two.fencing_token

    asyncio.run(main())


def test_a_claim_is_sent_within_the_wait_s_bound(clock):
    # A claim is a request like a poll: sent within a budget that ends before the wait's hard
    # end, so a store that stalls on it cannot hold the acquire past its bound.
    class Bounded(MemoryStore):
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self.ends: list[float | None] = []
            self.inside: float | None = None

        @contextlib.contextmanager
        def budget(self, end: float) -> Iterator[None]:
            self.inside = end
            try:
                yield
            finally:
                self.inside = None

        def claim(self, lock_id: str, **step: Any) -> Any:
            self.ends.append(self.inside)
            return super().claim(lock_id, **step)

    store = Bounded(clock=clock)
    table = LockTable(store=store, clock=clock, owner="ops")
    table.acquire("state", shared=True, lease=600)
    started = clock.monotonic()
    with pytest.raises(errors.LockBusy):
        table.acquire("state", wait=3)
    assert store.ends and all(end is not None for end in store.ends)
    assert max(e for e in store.ends if e is not None) <= started + 3 + store.request_timeout
