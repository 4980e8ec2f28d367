"""State with the lease on the DynamoDB store (in-process moto): kept on the fence record, so
it outlives the lock's item (TTL, an awsflock 0.2.0 client's release and take); what a write
and a read cost in requests."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock.stores.dynamodb import DynamoDBStore
from awsflock.stores.dynamodb.items import fence_key
from tests.conformance.state import StateLab
from tests.conformance.suite import SKEW


@pytest.fixture
def lab(moto: Any) -> StateLab:
    return StateLab(DynamoDBStore("awsflock", moto))


@pytest.fixture
def requests(moto_requests: list[str]) -> list[str]:
    """The operations the store sends, in order."""
    return moto_requests


def test_the_state_outlives_the_lock_item_and_a_020_client(lab: StateLab, moto: Any):
    name = lab.name()
    lease_id, _ = lab.take(name, lease=4000)
    assert lab.write(name, lease_id, b"batch=7", at=100, lease=4000).applied
    # TTL deletes the item (or a 0.2.0 client releases it), then 0.2.0 takes the lock.
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": name}})
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
    assert lab.data(name) == b"batch=7"
    _, taken = lab.take(name, at=10 * SKEW)
    assert taken.applied and lab.data(name) == b"batch=7"


def test_the_state_is_kept_on_the_fence_record_not_the_item(lab: StateLab, moto: Any):
    name = lab.name()
    lease_id, _ = lab.take(name)
    assert lab.write(name, lease_id, b"x", at=100).applied
    item = moto.get_item(TableName="awsflock", Key={"lock_id": {"S": name}})["Item"]
    fence = moto.get_item(TableName="awsflock", Key={"lock_id": {"S": fence_key(name)}})["Item"]
    assert "state" not in item
    assert fence["state"] == {"S": "v1:eA=="} and fence["state_lease"] == {"S": lease_id}


def test_a_write_is_a_transaction_and_a_read_and_a_read_of_state_is_one_request(
    lab: StateLab, requests: list[str]
):
    name = lab.name()
    lease_id, _ = lab.take(name)
    requests.clear()
    assert lab.write(name, lease_id, b"x", at=100).applied
    assert requests == ["TransactWriteItems", "GetItem"]
    requests.clear()
    assert lab.data(name) == b"x"
    assert requests == ["BatchGetItem"]
    requests.clear()
    assert lab.renew(name, lease_id, at=200).applied  # a renewal without state: as before
    assert requests == ["UpdateItem"]


def test_a_write_refused_by_a_later_stamp_is_refused_again_as_a_keeping_write(
    lab: StateLab, requests: list[str]
):
    name = lab.name()
    lease_id, _ = lab.take(name)
    assert lab.write(name, lease_id, b"new", at=200).applied
    requests.clear()
    late = lab.write(name, lease_id, b"old", at=200, stamp=100)
    assert not late.applied and lab.held(late).lease_id == lease_id
    # Its record looks like a renewal refused for moving the end earlier: sent once more as a
    # write that keeps the end, refused again by the stamp (a rare case: two writers).
    assert requests == ["TransactWriteItems", "GetItem"] * 2
    assert lab.data(name) == b"new"


@pytest.mark.parametrize("transactions", [True, False])
def test_a_write_that_keeps_the_end_is_refused_once_the_lease_ended(
    lab: StateLab, monkeypatch, transactions: bool
):
    """A write whose renewal alone was refused for moving the end earlier is sent again to
    keep the end; if the lease was released in between, that one is refused too."""
    store: Any = lab.store
    store._transactions = transactions
    name = lab.name()
    lease_id, _ = lab.take(name)
    sent = store._renew_with_state

    def released_in_between(*args: Any, **kw: Any) -> Any:
        outcome = sent(*args, **kw)
        if not kw.get("keep", args[-1] if len(args) > 4 else False):
            assert lab.release(name, lease_id, at=5).applied
        return outcome

    monkeypatch.setattr(store, "_renew_with_state", released_in_between)
    assert not lab.write(name, lease_id, b"stale", at=10, lease=4000).applied
    assert lab.data(name) is None


def test_a_long_name_and_the_name_of_its_hash_keep_their_own_state(lab: StateLab):
    # Review 10: the fence record of a name too long for a key was keyed by its SHA-256 under
    # the prefix every name's is: the lock named "sha256:<that hash>" shared it.
    import hashlib

    long_name = lab.name("x" * 2030)  # its fence key would pass the key limit
    twin = "sha256:" + hashlib.sha256(long_name.encode()).hexdigest()
    assert fence_key(long_name) != fence_key(twin)
    first, _ = lab.take(long_name)
    assert lab.write(long_name, first, b"long", at=100).applied
    second, _ = lab.take(twin)
    assert lab.write(twin, second, b"twin", at=100).applied
    assert (lab.data(long_name), lab.data(twin)) == (b"long", b"twin")


def test_a_denied_read_of_the_state_names_the_action_to_grant(lab: StateLab, moto: Any):
    # Review 10: the read is a BatchGetItem, but the refusal said to grant GetItem.
    from botocore.exceptions import ClientError

    from awsflock import errors

    def deny(model: Any, **_: Any) -> None:
        if model.name == "BatchGetItem":
            denied: Any = {"Error": {"Code": "AccessDeniedException", "Message": "not allowed"}}
            raise ClientError(denied, "BatchGetItem")

    moto.meta.events.register("before-call.dynamodb", deny)
    with pytest.raises(errors.AccessDenied, match="dynamodb:BatchGetItem"):
        lab.store.read_state(lab.name())
