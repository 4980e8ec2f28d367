"""``previous`` on the DynamoDB store (in-process moto): each grant pins how the lease before it
ended (``stores/dynamodb/fates.py``), in one request where that lease was released, and from the
fence record where the lock's item was deleted (TTL, an awsflock 0.2.0 release)."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock.records import EXPIRED, FIRST, FORCED, RELEASED, Previous
from awsflock.stores.dynamodb import DynamoDBStore
from tests.conformance.shares import ShareLab
from tests.conformance.suite import SKEW, Lab


@pytest.fixture
def lab(moto: Any) -> Lab:
    return Lab(DynamoDBStore("awsflock", moto))


@pytest.fixture
def requests(moto_requests: list[str]) -> list[str]:
    """The operations the store sends, in order."""
    return moto_requests


def _deleted(moto: Any, name: str) -> None:
    """What TTL (or a 0.2.0 release) does to the lock's item; its fence record stays."""
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": name}})


def _put_by_020(moto: Any, lab: Lab, name: str) -> None:
    """What awsflock 0.2.0's acquire writes: a lease of 1 s, from the lab's now."""
    moto.put_item(
        TableName="awsflock",
        Item={
            "lock_id": {"S": name},
            "lease_id": {"S": "v-020"},
            "owner": {"S": "old-host"},
            "lease_duration": {"N": "1"},
            "expiration_time": {"N": str(lab.now // 1000 + 1)},
        },
    )


def _next(lab: Lab, name: str, requests: list[str] | None = None) -> Previous:
    if requests is not None:
        requests.clear()
    _, outcome = lab.take(name, at=10 * SKEW, owner="b")
    assert outcome.applied
    said = lab.held(outcome).previous
    assert said is not None
    sent = list(requests or ())
    assert lab.held(lab.store.read(name)).previous == said
    if requests is not None:
        requests[:] = sent
    return said


def test_a_grant_after_a_release_is_one_request(lab: Lab, requests: list[str]):
    name = lab.name()
    first, _ = lab.take(name)
    assert lab.release(name, first, at=10).applied
    assert _next(lab, name, requests) == Previous(RELEASED)
    assert requests == ["TransactWriteItems"]


@pytest.mark.parametrize("ends", ["released", "forced", "ran out"])
def test_after_the_item_is_deleted_the_fence_record_says_how_the_last_lease_ended(
    lab: Lab, moto: Any, requests: list[str], ends: str
):
    name = lab.name()
    first, _ = lab.take(name, lease=1000, owner="a")
    if ends == "released":
        assert lab.release(name, first, at=10).applied
    elif ends == "forced":
        assert lab.force(name, first, "f1", at=10).applied
    _deleted(moto, name)
    said = _next(lab, name, requests)
    if ends == "released":
        assert said == Previous(RELEASED) and requests == ["TransactWriteItems"]
        return
    assert (said.how, said.lease_id, said.owner, said.host) == (
        FORCED if ends == "forced" else EXPIRED,
        first,
        "a",
        "a-host",
    )
    # Pinned to the fence record the first try's refusal showed: one more request.
    assert requests == ["TransactWriteItems"] * 2
    if ends == "forced":
        assert (said.forced_by, said.forced_reason, said.ended_at) == (
            "ops",
            "stuck",
            (lab.now + 10) / 1000,
        )
    else:
        assert said.ended_at is None  # renewals do not write the fence record


def test_the_first_grant_ever_pins_that_there_is_no_fence_record(lab: Lab, requests: list[str]):
    name = lab.name()
    requests.clear()
    _, outcome = lab.take(name)
    assert lab.held(outcome).previous == Previous(FIRST)
    assert requests == ["TransactWriteItems"] * 2  # once per lock name, ever


def test_a_lease_of_awsflock_020_is_reported_while_its_item_exists(lab: Lab, moto: Any):
    name = lab.name()
    _put_by_020(moto, lab, name)
    said = _next(lab, name)
    assert (said.how, said.lease_id, said.owner) == (EXPIRED, "v-020", "old-host")


@pytest.mark.parametrize("transactions", [True, False], ids=["transactions", "dynalite"])
def test_a_lease_of_awsflock_020_that_ran_out_is_named_by_the_take_after_it(
    moto: Any, transactions: bool
):
    # Found by review 7 on dynalite: without transactions the take copied how the lease
    # before ended from the item's `lease`, which a 0.2.0 item has not: it said `first`.
    store = DynamoDBStore("awsflock", moto)
    store._transactions = transactions
    lab = Lab(store)
    name = lab.name()
    _put_by_020(moto, lab, name)
    said = _next(lab, name)
    assert (said.how, said.lease_id, said.owner) == (EXPIRED, "v-020", "old-host")


def test_the_first_grant_after_a_bar_of_a_slot_never_granted_is_first(lab: Lab):
    # Found by review 7: the end of a slot's lease never granted (a pool acquire's lost take,
    # cleaned up) bars it and raises the fence record, made without a last lease; the first
    # grant after it said nothing of the lease before.
    name = lab.name()
    ended = lab.release(name, f"{_attempt(lab, name, at=0).lease_id}.0", slot=0)
    assert not ended.applied
    assert _next(lab, name) == Previous(FIRST)


def test_a_waiter_that_saw_the_lease_run_out_reclaims_it_in_one_request(
    lab: Lab, requests: list[str]
):
    import dataclasses

    name = lab.name()
    first, taken = lab.take(name, lease=1000, owner="a")
    seen = lab.held(taken)
    requests.clear()
    attempt = dataclasses.replace(_attempt(lab, name, at=1000 + SKEW + 1), seen=seen)
    outcome = lab.store.take(name, attempt)
    said = lab.held(outcome).previous
    assert said is not None and (said.how, said.lease_id) == (EXPIRED, first)
    assert requests == ["TransactWriteItems"]


def _attempt(lab: Lab, name: str, *, at: int) -> Any:
    from awsflock.protocol import Attempt
    from awsflock.records import Identity
    from tests.conformance.suite import MINUTE, new_id

    return Attempt(new_id(), Identity(owner="w"), lab.now + at, MINUTE, SKEW)


# -- a group of shared holders: the end of its last share ends the fence record's last lease,
# or names there the share that did not end released (the item may then be deleted).


@pytest.fixture
def shl(moto: Any) -> ShareLab:
    return ShareLab(DynamoDBStore("awsflock", moto))


@pytest.mark.parametrize("view", [True, False], ids=["seen", "unseen"])
def test_a_group_all_released_is_released_after_its_item_is_deleted(
    shl: ShareLab, moto: Any, view: bool
):
    name = shl.name()
    one, _ = shl.share(name, owner="r1")
    two, _ = shl.share(name, at=1, owner="r2")
    assert shl.release(name, one, at=10).applied
    store = shl.store if view else DynamoDBStore("awsflock", moto)  # a release in a new process
    assert store.release(name, two, now_ms=shl.now + 11, skew_ms=SKEW).applied
    _deleted(moto, name)
    assert _next(shl, name) == Previous(RELEASED)


@pytest.mark.parametrize("fate", ["ran out and left on a join", "ran out", "forced"])
def test_a_share_that_did_not_end_released_is_named_after_the_item_is_deleted(
    shl: ShareLab, moto: Any, fate: str
):
    name = shl.name()
    dead, _ = shl.share(name, lease=1000, owner="r1")
    live, _ = shl.share(name, at=1, owner="r2")
    later = 1000 + SKEW + 1
    if fate == "ran out and left on a join":
        joiner, _ = shl.share_seen(name, shl.record(name), at=later)
        assert shl.release(name, joiner, at=later + 1).applied
    if fate == "forced":
        assert shl.force(name, dead, "f1", at=10).applied
    fresh = DynamoDBStore("awsflock", moto)  # the last release, from a process with no view
    assert fresh.release(name, live, now_ms=shl.now + later + 2, skew_ms=SKEW).applied
    _deleted(moto, name)
    said = _next(shl, name)
    how = FORCED if fate == "forced" else EXPIRED
    assert (said.how, said.lease_id, said.owner) == (how, dead, "r1")
    assert said.forced_by == ("ops" if fate == "forced" else "")
