"""Pools with in-process moto and a fake clock: request counts, random probing, retries."""

from __future__ import annotations

import random

import pytest

from awsflock import errors
from tests.helpers import CountingClient, LosingClient, ScheduledClock


@pytest.mark.parametrize(
    "size,held",
    [(4, 3), (8, 4), *(pytest.param(*p, marks=pytest.mark.slow) for p in [(8, 7), (16, 15)])],
)
def test_an_acquire_with_a_free_slot_costs_about_two_requests(make_table, moto, size, held):
    client = CountingClient(moto)
    for _ in range(held):
        make_table("holder").acquire("pool", lease=600, wait=0, slots=size)
    runs = 30
    for n in range(runs):
        table = make_table("probe", client=client, rng=random.Random(n))
        lease = table.acquire("pool", lease=600, wait=0, slots=size)
        lease.release()
    average = client.calls["update_item"] / runs - 1  # minus the release
    # The first probe hits a free slot with probability free/size; if not, the failed write
    # returns the pool's state and the second probe goes to a free slot.
    assert average <= 2.0, average
    assert client.calls["get_item"] == 0


def test_a_full_pool_costs_one_request_per_poll(make_table, moto):
    clock = ScheduledClock()
    for _ in range(3):
        make_table("holder", clock=clock).acquire("full", lease=600, wait=0, slots=3)
    client = CountingClient(moto)
    with pytest.raises(errors.LockBusy):
        make_table("waiter", client=client, clock=clock).acquire("full", lease=60, wait=10, slots=3)
    polls = len(clock.sleeps) + 1
    assert client.calls["update_item"] == polls


def test_slots_are_probed_in_random_order(make_table):
    first_slots = set()
    for n in range(20):
        table = make_table("p", rng=random.Random(n))
        lease = table.acquire(f"spread-{n}", lease=60, wait=0, slots=4)
        first_slots.add(lease.slot)
    assert len(first_slots) >= 3


def test_lost_answer_in_a_pool_is_recognised_as_ours(make_table, moto):
    client = LosingClient(moto, lambda op, n: op == "update_item" and n == 1)
    clock = ScheduledClock()
    make_table("other", clock=clock).acquire("lp", lease=600, wait=0, slots=2)
    lease = make_table("a", client=client, clock=clock).acquire("lp", lease=60, wait=30, slots=2)
    with pytest.raises(errors.LockBusy):
        make_table("b", clock=clock).acquire("lp", lease=60, wait=0, slots=2)
    state = make_table().store.read("lp").pool
    assert sum(1 for r in state.slots.values() if r.lease_id == lease.lease_id) == 1


def test_pool_lease_ids_carry_the_slot(make_table):
    table = make_table()
    lease = table.acquire("ids", lease=60, wait=0, slots=5)
    assert lease.lease_id.endswith(f".{lease.slot}")
    renewed = table.renew_lease("ids", lease.lease_id, lease=90)
    assert renewed.slot == lease.slot and renewed.lease_duration == 90
    table.release_lease("ids", lease.lease_id)


def test_hold_in_a_pool_reports_its_slot(make_table):
    with make_table().hold("hp", lease=60, slots=3) as held:
        assert held.slot in (0, 1, 2)


def test_pool_names_may_not_take_awsflocks_prefix_or_be_too_long(make_table):
    with pytest.raises(errors.UsageError):
        make_table().acquire("#awsflock#x", lease=60, wait=0, slots=2)
    with pytest.raises(errors.UsageError):
        make_table().acquire("x" * 2049, lease=60, wait=0, slots=2)
    with pytest.raises(errors.UsageError):
        make_table().acquire("x", lease=60, wait=0, slots=101)


def test_a_pool_may_use_the_longest_name_dynamodb_allows(make_table):
    # A pool lives in the item keyed by its own name, so it has the same limit as a plain lock.
    lease = make_table().acquire("x" * 2048, lease=60, wait=0, slots=2)
    assert lease.slot in (0, 1)


def test_a_free_plain_lock_made_a_pool_goes_on_above_its_tokens(make_table, clock):
    # The plain lock's holder had a clock 4 s ahead (inside the skew window): a slot of the pool
    # that replaces it must still start above the plain lock's tokens.
    from awsflock.clock import FakeClock

    ahead = make_table("a", clock=FakeClock(clock.time() + 4))
    plain = ahead.acquire("gpus", lease=60, wait=0)
    plain.release()
    slot = make_table("b").acquire("gpus", lease=60, wait=0, slots=2)
    assert slot.fencing_token > plain.fencing_token


def test_a_pool_made_where_the_plain_locks_item_was_deleted_goes_on_above_its_tokens(
    make_table, clock, moto
):
    """Adversarial review of the fence record: the plain lock's item was deleted (TTL, or an
    awsflock 0.2.0 release) and its tokens lived only in the fence record, which a pool's take
    did not look at: a take made earlier (a clock behind, a pause, a late request) started the
    slot below tokens already granted. Turning an item into a pool now checks the record."""
    from awsflock.clock import FakeClock

    ahead = make_table("a", clock=FakeClock(clock.time() + 60))
    plain = ahead.acquire("gpus", lease=60, wait=0)
    plain.release()
    moto.delete_item(TableName=ahead.table_name, Key={"lock_id": {"S": "gpus"}})
    client = CountingClient(moto)
    slot = make_table("b", client=client).acquire("gpus", lease=60, wait=0, slots=2)
    assert slot.fencing_token > plain.fencing_token
    # Made a pool in a transaction with the fence record; a take of the other slot, new too,
    # starts above the plain token the pool now keeps, without a transaction (a probe of the
    # busy slot if it tries that first, then one request, and one more because its clock is
    # behind that token).
    assert client.calls["transact_write_items"] >= 1
    before = dict(client.calls)
    other = make_table("c", client=client).acquire("gpus", lease=60, wait=0, slots=2)
    assert other.slot != slot.slot and other.fencing_token > plain.fencing_token
    assert client.calls["update_item"] - before.get("update_item", 0) <= 3
    assert client.calls["transact_write_items"] == before["transact_write_items"]
