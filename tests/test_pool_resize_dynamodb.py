"""Resizing a pool on the DynamoDB store (in-process moto, held to DynamoDB's 4 KB per
expression by the ``moto`` fixture): a shrink whose condition would not fit goes in steps, and
one refused part-way says what size it left."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock import errors
from awsflock.lock.admin import resize_pool
from awsflock.names import MAX_SLOTS
from awsflock.stores.dynamodb import DynamoDBStore, expressions
from awsflock.stores.dynamodb.steps import MAX_EXPRESSION, resize_steps
from tests.conformance.suite import SKEW, Lab
from tests.helpers import LosingClient


@pytest.mark.parametrize("old", [None, *range(2, MAX_SLOTS + 1)])
def test_every_step_of_every_resize_fits_and_ends_at_the_size_asked(old: int | None):
    for new in range(2, MAX_SLOTS + 1):
        steps = resize_steps(old, new)
        assert steps[0][0] == old and steps[-1][1] == new
        assert all(low == top for (_, low), (top, _) in zip(steps, steps[1:]))
        for top, low in steps:
            assert len(expressions.resize_condition(top, low).encode()) <= MAX_EXPRESSION
        assert len(steps) == 1 or all(top is not None and low < top for top, low in steps)


def test_a_shrink_of_100_slots_to_2_takes_three_requests(moto: Any, moto_requests: list[str]):
    lab = Lab(DynamoDBStore("awsflock", moto))
    name = lab.name("pool")
    lab.take(name, slot=0, slots=MAX_SLOTS)
    moto_requests.clear()
    assert lab.store.resize_pool(name, MAX_SLOTS, 2, now_ms=lab.now + 10, skew_ms=SKEW)
    assert moto_requests == ["UpdateItem"] * 3


def test_a_shrink_past_a_slot_held_already_writes_nothing(
    make_table: Any, moto_requests: list[str]
):
    table = make_table()
    lab = Lab(table.store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=40, slots=MAX_SLOTS)
    moto_requests.clear()
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 2)
    assert "now has" not in refused.value.one_line()
    assert "UpdateItem" not in moto_requests
    assert table.state("pool").size == MAX_SLOTS


def test_a_shrink_refused_part_way_says_the_size_it_left(
    make_table: Any, monkeypatch: pytest.MonkeyPatch
):
    table = make_table()
    lab = Lab(table.store)
    lab.now = round(table.clock.time() * 1000)
    lab.take("pool", slot=0, slots=MAX_SLOTS)
    before = table.store.read("pool")
    held, _ = lab.take("pool", slot=40, slots=MAX_SLOTS, at=10)  # after pool-resize's read
    reads = iter([before])
    real_read = table.store.read
    monkeypatch.setattr(table.store, "read", lambda name: next(reads, None) or real_read(name))
    with pytest.raises(errors.LockBusy) as refused:
        resize_pool(table, "pool", 2)
    # 100 -> 61 went through; 61 -> 22 met slot 40 held.
    assert "it now has 61 slots (was 100)" in refused.value.one_line()
    assert lab.release("pool", held, slot=40, at=20).applied
    assert resize_pool(table, "pool", 2) == (61, 2)


@pytest.mark.parametrize("lost", [2, 3, 4])
def test_a_step_whose_answer_was_lost_and_was_retried_counts_as_done(moto: Any, lost: int):
    # A step lands, its answer is lost, and its retry is refused: the pool already has the
    # step's size, so the shrink goes on. (UpdateItem 1 is the take; 2, 3 and 4 the steps.)
    client = LosingClient(moto, lambda op, n: op == "update_item" and n == lost)
    lab = Lab(DynamoDBStore("awsflock", client))
    name = lab.name("pool")
    lab.take(name, slot=0, slots=MAX_SLOTS)
    assert lab.store.resize_pool(name, MAX_SLOTS, 2, now_ms=lab.now + 10, skew_ms=SKEW)
    assert lab.pool_size(name) == 2
    assert client.calls["update_item"] == 5  # the take, three steps, one of them twice
