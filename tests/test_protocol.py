"""The lease protocol against in-process moto with a fake clock: no real sleeping."""

from __future__ import annotations

import random
from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.dynamodb import DynamoDBStore as Store
from tests.helpers import (
    WRITES,
    CountingClient,
    FlakyClient,
    LosingClient,
    ScheduledClock,
    ScriptedWrites,
)


def test_acquire_free_lock_grants_a_lease_with_a_fencing_token(make_table, clock):
    lease = make_table().acquire("deploy", lease=60, wait=0)
    assert lease.fencing_token is not None and lease.fencing_token > 0
    assert lease.expires_at == pytest.approx(clock.time() + 60)
    assert len(lease.lease_id) == 36


def test_second_acquirer_is_told_who_holds_the_lock(make_table):
    make_table("host-a").acquire("deploy", lease=60, wait=0)
    with pytest.raises(errors.LockBusy) as caught:
        make_table("host-b").acquire("deploy", lease=60, wait=0)
    assert caught.value.holder is not None
    assert caught.value.holder.owner == "host-a"
    assert "host-a" in str(caught.value) and "expires in 1m" in str(caught.value)
    assert caught.value.exit_code == 3


def test_release_frees_the_lock_and_the_next_token_is_higher(make_table):
    a, b = make_table("a"), make_table("b")
    first = a.acquire("deploy", lease=60, wait=0)
    first.release()
    second = b.acquire("deploy", lease=60, wait=0)
    assert second.fencing_token > first.fencing_token


def test_tokens_strictly_increase_over_many_acquisitions(make_table, clock):
    table = make_table()
    tokens = []
    for _ in range(20):
        lease = table.acquire("counter", lease=5, wait=0)
        tokens.append(lease.fencing_token)
        lease.release()
        clock.advance(0.001)
    assert tokens == sorted(set(tokens))


def test_released_item_is_kept_so_the_counter_survives(make_table, moto):
    lease = make_table().acquire("keep", lease=60, wait=0)
    lease.release()
    item = moto.get_item(TableName="awsflock", Key={"lock_id": {"S": "keep"}})["Item"]
    assert item["ended"] == {"S": "released"}
    assert int(item["fence"]["N"]) == lease.fencing_token


def test_expired_lease_is_reclaimed_only_after_the_skew_window(make_table, clock):
    make_table("a").acquire("job", lease=10, wait=0)
    clock.advance(10 + 4.9)  # expired, but inside the 5 s skew window
    with pytest.raises(errors.LockBusy):
        make_table("b").acquire("job", lease=10, wait=0)
    clock.advance(0.2)
    lease = make_table("b").acquire("job", lease=10, wait=0)
    assert lease.reclaimed is not None and lease.reclaimed.history[0][1] == ""


def test_skew_window_is_configurable(make_table, clock):
    make_table("a").acquire("job", lease=10, wait=0)
    clock.advance(10 + 6)
    with pytest.raises(errors.LockBusy):
        make_table("b", skew=30).acquire("job", lease=10, wait=0)
    make_table("c", skew=5).acquire("job", lease=10, wait=0)


def test_token_increases_across_deletion_of_the_item(make_table, moto, clock):
    first = make_table().acquire("gone", lease=10, wait=0)
    clock.advance(10 + 5 + 1)
    # What TTL (or an operator) does: the item and its counter disappear.
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "gone"}})
    second = make_table().acquire("gone", lease=10, wait=0)
    assert second.fencing_token > first.fencing_token


def _put_like_020(client, lock_id: str, lease_id: str, expiration: int, owner: str = "old") -> None:
    """Write the item exactly as awsflock 0.2.0's acquire/reclaim does (a full PutItem)."""
    client.put_item(
        TableName="awsflock",
        Item={
            "lock_id": {"S": lock_id},
            "lease_id": {"S": lease_id},
            "lease_duration": {"N": "60"},
            "owner": {"S": owner},
            "expiration_time": {"N": str(expiration)},
        },
    )


def test_token_increases_across_an_overwrite_by_a_020_client(make_table, moto, clock):
    first = make_table().acquire("mixed", lease=10, wait=0)
    first.release()
    clock.advance(11)  # 0.2.0 waits until expiration_time is 5 s past before reclaiming
    _put_like_020(moto, "mixed", "0" * 8 + "-0000-4000-8000-" + "0" * 12, int(clock.time()) + 60)
    with pytest.raises(errors.LockBusy) as caught:
        make_table().acquire("mixed", lease=10, wait=0)
    assert caught.value.holder.legacy
    clock.advance(60 + 6)
    second = make_table().acquire("mixed", lease=10, wait=0)
    assert second.fencing_token > first.fencing_token


def test_a_020_holder_is_respected_until_its_expiration_plus_skew(make_table, moto, clock):
    _put_like_020(moto, "legacy", "1" * 8 + "-1111-4111-8111-" + "1" * 12, int(clock.time()) + 30)
    with pytest.raises(errors.LockBusy):
        make_table().acquire("legacy", lease=10, wait=0)
    clock.advance(30 + 5.5)
    with pytest.raises(errors.LockBusy):  # whole seconds: 0.2.0 items are judged conservatively
        make_table().acquire("legacy", lease=10, wait=0)
    clock.advance(1.0)
    assert make_table().acquire("legacy", lease=10, wait=0).fencing_token


def test_released_item_reads_as_free_to_a_020_client_after_its_skew(make_table, moto, clock):
    # 0.2.0 reclaims when time.time() - expiration_time > 5; our release sets it `skew` ahead.
    lease = make_table().acquire("r", lease=600, wait=0)
    lease.release()
    item = moto.get_item(TableName="awsflock", Key={"lock_id": {"S": "r"}})["Item"]
    expiration = int(item["expiration_time"]["N"])
    assert clock.time() < expiration <= clock.time() + 5 + 1


def test_waiter_longer_than_its_lease_gets_a_full_lease_from_the_grant(make_table):
    """awsflock 0.2.0 counted the lease from before waiting: a waiter that waited longer than its
    lease got an already-expired lock and a third process took it at once (lost updates).
    Here the lease counts from the grant, so the third process is refused."""
    clock = ScheduledClock()
    holder = make_table("holder", clock=clock).acquire("lock", lease=3600, wait=0)
    clock.at(clock.time() + 100, holder.release)
    waiter = make_table("waiter", clock=clock).acquire("lock", lease=20, wait=300)
    assert waiter.waited >= 100
    assert waiter.expires_at == pytest.approx(clock.time() + 20, abs=0.01)
    with pytest.raises(errors.LockBusy):
        make_table("third", clock=clock).acquire("lock", lease=20, wait=0)


@pytest.mark.parametrize(
    "waited_before_release", [1, 10, 35, pytest.param(600, marks=pytest.mark.slow)]
)
def test_waiter_notices_a_release_within_about_a_second_however_long_it_waited(
    make_table, waited_before_release
):
    clock = ScheduledClock()
    client = CountingClient(make_table().store.client)
    holder = make_table("holder", clock=clock).acquire("h", lease=7200, wait=0)
    released_at = clock.time() + waited_before_release
    clock.at(released_at, holder.release)
    waiter = make_table("waiter", clock=clock, client=client).acquire("h", lease=60, wait=None)
    assert clock.time() - released_at <= 1.25 + 1e-6
    # About one request a second while waiting, never a burst.
    requests = client.calls["transact_write_items"]
    assert requests <= waited_before_release / 0.75 + 2
    assert all(0 < s <= 1.25 + 1e-9 for s in clock.sleeps)
    assert waiter.fencing_token > holder.fencing_token


def test_poll_intervals_are_jittered(make_table):
    clock = ScheduledClock()
    holder = make_table("holder", clock=clock).acquire("j", lease=7200, wait=0)
    clock.at(clock.time() + 30, holder.release)
    make_table("waiter", clock=clock).acquire("j", lease=60, wait=None)
    assert len({round(s, 3) for s in clock.sleeps}) > 5


def test_waiter_never_sleeps_past_the_holders_expiry_plus_skew(make_table):
    clock = ScheduledClock()
    make_table("dead", clock=clock).acquire("e", lease=10.3, wait=0)
    reclaim_at = clock.time() + 10.3 + 5
    lease = make_table("waiter", clock=clock).acquire("e", lease=60, wait=120)
    assert reclaim_at < clock.time() <= reclaim_at + 0.1
    assert lease.reclaimed is not None


def test_wait_time_makes_a_last_attempt_at_its_deadline(make_table):
    clock = ScheduledClock()
    holder = make_table("holder", clock=clock).acquire("d", lease=7200, wait=0)
    start = clock.time()
    clock.at(start + 9.999, holder.release)
    # The polls' jitter drawn from a fixed seed: with a random one, about one run in 1,500 had
    # a regular poll fall between the release and the deadline (seeds 506 and 2286 of 3,000),
    # which takes the lock before the last attempt this test is about.
    polls = random.Random(1)
    lease = make_table("waiter", clock=clock, rng=polls).acquire("d", lease=60, wait=10)
    assert clock.time() == pytest.approx(start + 10, abs=1e-6)
    assert lease.fencing_token > holder.fencing_token


def test_wait_time_never_gives_up_early(make_table):
    clock = ScheduledClock()
    make_table("holder", clock=clock).acquire("d2", lease=7200, wait=0)
    start = clock.monotonic()
    with pytest.raises(errors.LockBusy) as caught:
        make_table("waiter", clock=clock).acquire("d2", lease=60, wait=7)
    assert clock.monotonic() - start == pytest.approx(7, abs=1e-6)
    assert "gave up after 7s" in str(caught.value)


def test_uncontended_operations_are_one_request_each(make_table, moto, clock):
    make_table("before").acquire("one", lease=60, wait=0).release()
    clock.advance(1)  # later than that grant, as a clock is: a token above it
    client = CountingClient(moto)
    table = make_table(client=client)
    lease = table.acquire("one", lease=60, wait=0)
    # A plain take is one transaction: the lock's item and its fence record.
    assert dict(client.calls) == {"transact_write_items": 1}
    lease.renew()
    assert dict(client.calls) == {"transact_write_items": 1, "update_item": 1}
    # A release is one transaction: the lock's item and the lease's done item.
    lease.release()
    assert dict(client.calls) == {"transact_write_items": 2, "update_item": 1}


def test_busy_acquire_learns_the_holder_from_the_same_request(make_table, moto):
    make_table("a").acquire("busy", lease=60, wait=0)
    client = CountingClient(moto)
    with pytest.raises(errors.LockBusy) as caught:
        make_table("b", client=client).acquire("busy", lease=60, wait=0)
    assert dict(client.calls) == {"transact_write_items": 1}
    assert caught.value.holder.owner == "a"


def test_renew_keeps_the_lease_id_and_counts_from_now(make_table, clock):
    table = make_table()
    lease = table.acquire("r", lease=60, wait=0)
    clock.advance(50)
    renewed = table.renew_lease("r", lease.lease_id, lease=300)
    assert renewed.lease_id == lease.lease_id
    assert renewed.expires_at == pytest.approx(clock.time() + 300)
    assert renewed.fencing_token == lease.fencing_token


def test_renew_by_another_lease_is_refused(make_table):
    table = make_table()
    table.acquire("r", lease=60, wait=0)
    with pytest.raises(errors.NotHeld):
        table.renew_lease("r", "2" * 8 + "-2222-4222-8222-" + "2" * 12, lease=60)


def test_renew_after_release_is_refused(make_table):
    lease = make_table().acquire("r", lease=60, wait=0)
    lease.release()
    with pytest.raises(errors.NotHeld):
        lease.renew()


def test_renew_after_reclaim_by_another_is_refused(make_table, clock):
    lease = make_table("a").acquire("r", lease=10, wait=0)
    clock.advance(16)
    make_table("b").acquire("r", lease=10, wait=0)
    with pytest.raises(errors.NotHeld):
        lease.renew()


def test_release_by_wrong_lease_is_refused_and_the_lock_stays_held(make_table):
    table = make_table()
    table.acquire("rel", lease=60, wait=0)
    with pytest.raises(errors.NotHeld):
        table.release_lease("rel", "3" * 8 + "-3333-4333-8333-" + "3" * 12)
    with pytest.raises(errors.LockBusy):
        make_table("b").acquire("rel", lease=60, wait=0)


def test_release_after_reclaim_by_another_is_refused(make_table, clock):
    lease = make_table("a").acquire("rel", lease=10, wait=0)
    clock.advance(16)
    make_table("b").acquire("rel", lease=10, wait=0)
    with pytest.raises(errors.NotHeld) as caught:
        lease.release()
    assert "now held by b" in str(caught.value)


def test_release_of_a_missing_lock_is_refused(make_table):
    with pytest.raises(errors.NotHeld):
        make_table().release_lease("never", "4" * 8 + "-4444-4444-8444-" + "4" * 12)


def test_malformed_ids_are_usage_errors(make_table):
    table = make_table()
    with pytest.raises(errors.UsageError):
        table.release_lease("x", "not-a-lease")
    with pytest.raises(errors.UsageError):
        table.acquire("", lease=60, wait=0)
    with pytest.raises(errors.UsageError):
        table.acquire("x" * 2049, lease=60, wait=0)
    with pytest.raises(errors.UsageError):
        table.acquire("x", lease=0, wait=0)
    with pytest.raises(errors.UsageError):
        table.acquire("x", lease=60, wait=-1)


# -- retries: a request that went through but whose answer was lost ---------------------------


def test_lost_acquire_answer_then_retry_is_not_reported_busy(make_table, moto):
    # The first UpdateItem is applied by the server, then its answer is lost; the next try sees
    # our own lease in the item and knows the lock is ours.
    client = LosingClient(moto, lambda op, n: op == "transact_write_items" and n == 1)
    clock = ScheduledClock()
    lease = make_table("a", client=client, clock=clock).acquire("lost", lease=60, wait=30)
    with pytest.raises(errors.LockBusy) as caught:
        make_table("b", clock=clock).acquire("lost", lease=60, wait=0)
    assert caught.value.holder.lease_id == lease.lease_id
    assert client.calls["transact_write_items"] == 2


def test_lost_acquire_answer_with_no_time_left_leaves_no_phantom_lock(make_table, moto):
    # Every answer is lost, the clean-up release's too: the acquire fails, but the grant it
    # never heard of was released (the release went through), so the lock is free right away.
    client = LosingClient(moto, lambda op, n: op in WRITES, errors_too=True)
    with pytest.raises(errors.EndpointUnreachable):
        make_table("a", client=client).acquire("phantom", lease=3600, wait=0)
    assert make_table("b").acquire("phantom", lease=60, wait=0).fencing_token


def test_lost_acquire_answer_retried_at_once_is_a_grant(make_table, moto):
    client = LosingClient(moto, lambda op, n: op == "transact_write_items" and n == 1)
    lease = make_table("a", client=client).acquire("phantom", lease=3600, wait=0)
    assert client.calls["transact_write_items"] == 2 and lease.fencing_token


def test_lost_release_answer_then_someone_else_acquires_is_still_a_success(make_table, moto):
    table = make_table("a")
    lease = table.acquire("rr", lease=60, wait=0)
    store = Store("awsflock", moto)
    outcome = store.release(
        "rr", lease.lease_id, now_ms=int(table.clock.time() * 1000), skew_ms=5000
    )
    assert outcome.applied
    make_table("b").acquire("rr", lease=60, wait=0)
    table.release_lease("rr", lease.lease_id)  # the retry: no NotHeld


def test_the_first_grant_of_a_name_is_two_requests_pinning_that_none_came_before(make_table, moto):
    # A transaction answers nothing: the first try asks for a lock whose last lease was
    # released; on a name never granted its refusal shows no fence record, and the second try
    # pins that (the grant then says "first"). Once per name, ever.
    client = CountingClient(moto)
    lease = make_table(client=client).acquire("new-name", lease=60, wait=0)
    assert dict(client.calls) == {"transact_write_items": 2}
    assert lease.previous is not None and lease.previous.how == "first"


def test_lost_release_answer_retried_at_once_is_a_success(make_table, moto, clock):
    make_table("before").acquire("rr2", lease=60, wait=0).release()
    clock.advance(1)
    client = LosingClient(moto, lambda op, n: op == "transact_write_items" and n == 2)
    table = make_table("a", client=client)
    lease = table.acquire("rr2", lease=60, wait=0)
    lease.release()  # the retry finds it released by this very lease
    assert client.calls["transact_write_items"] == 3
    table.release_lease("rr2", lease.lease_id)  # and a second release is harmless


def test_release_of_an_expired_lease_that_was_reclaimed_is_not_confused_with_a_retry(
    make_table, clock
):
    lease = make_table("a").acquire("x", lease=10, wait=0)
    clock.advance(16)
    make_table("b").acquire("x", lease=10, wait=0)
    with pytest.raises(errors.NotHeld):
        make_table("a").release_lease("x", lease.lease_id)


def test_context_manager_releases_and_never_swallows_the_callers_exception(make_table):
    with pytest.raises(RuntimeError, match="boom"), make_table().acquire("cm", lease=60, wait=0):
        raise RuntimeError("boom")
    assert make_table("b").acquire("cm", lease=60, wait=0)


def test_table_missing_is_a_clear_error(moto, clock):
    table = LockTable("nope", client=moto, clock=clock, identity=Identity(owner="x"))
    with pytest.raises(errors.TableMissing) as caught:
        table.acquire("x", lease=60, wait=0)
    assert "awsflock table-create --tablename nope" in caught.value.one_line()


def test_transient_errors_while_waiting_are_retried_within_the_wait(make_table, moto):
    client = FlakyClient(moto, failures=3)
    clock = ScheduledClock()
    lease = make_table("a", client=client, clock=clock).acquire("t", lease=60, wait=10)
    assert lease.fencing_token and len(clock.sleeps) == 3


def test_transient_errors_past_the_wait_are_reported(make_table, moto):
    client = FlakyClient(moto, failures=1000)
    clock = ScheduledClock()
    with pytest.raises(errors.EndpointUnreachable):
        make_table("a", client=client, clock=clock).acquire("t", lease=60, wait=5)
    # Retries count against the wait: all is over within the wait plus one request timeout.
    assert 5 <= clock.time() - 1_800_000_000.0 <= 5 + 5


# -- requests that land late ---------------------------------------------------------------------


def test_a_take_landing_after_the_item_was_deleted_never_lowers_the_token(make_table, moto, clock):
    # X's take is held up in the network; meanwhile Y takes and releases the lock, and its item
    # is deleted (TTL, or an awsflock 0.2.0 client's release). X's take lands last, carrying the
    # clock reading it was made with: the lock's fence record refuses it.
    from botocore.exceptions import ClientError, ConnectionClosedError

    held_up: list[Any] = []

    def script(n: int, send: Any, kwargs: Any) -> Any:
        held_up.append(send)
        raise ConnectionClosedError(endpoint_url="http://reset")

    with pytest.raises(errors.EndpointUnreachable):
        make_table("x", client=ScriptedWrites(moto, script)).acquire("late", lease=60, wait=0)
    clock.advance(30)
    y = make_table("y").acquire("late", lease=60, wait=0)
    y.release()
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "late"}})
    with pytest.raises(ClientError, match="TransactionCanceled"):
        held_up[0]()
    assert make_table("x").store.read("late").lock is None
    assert make_table("z").acquire("late", lease=60, wait=0).fencing_token > y.fencing_token


def test_a_renew_landing_after_a_later_renew_never_moves_the_end_back(make_table, moto, clock):
    held_up: list[Any] = []

    def script(n: int, send: Any, kwargs: Any) -> Any:
        from botocore.exceptions import ConnectionClosedError, EndpointConnectionError

        if n == 1:  # held up in the network; the retries find the endpoint down
            held_up.append(send)
            raise ConnectionClosedError(endpoint_url="http://reset")
        raise EndpointConnectionError(endpoint_url="http://down")

    table = make_table("a")
    lease = table.acquire("late-renew", lease=30, wait=0)
    renewing = make_table("a", client=ScriptedWrites(moto, script))
    clock.advance(5)
    with pytest.raises(errors.EndpointUnreachable):
        renewing.renew_lease("late-renew", lease.lease_id, lease=30)
    clock.advance(10)
    later = table.renew_lease("late-renew", lease.lease_id, lease=30)
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        held_up[0]()  # made 10 s before the later renew: refused, the end stays
    assert table.state("late-renew").expires_at == pytest.approx(later.expires_at)


def test_an_endpoint_without_transactions_takes_the_lock_item_alone(make_table, moto):
    # dynalite has no TransactWriteItems: the take falls back to one UpdateItem on the lock's
    # item (with the same token check on it), and remembers so.
    from botocore.exceptions import ClientError

    transactions: list[int] = []

    def script(n: int, send: Any, kwargs: Any) -> Any:
        if "TransactItems" in kwargs:
            transactions.append(n)
            raise ClientError(
                {"Error": {"Code": "UnknownOperationException", "Message": ""}},
                "TransactWriteItems",
            )
        return send()

    client = ScriptedWrites(moto, script)
    table = make_table("a", client=client)
    first = table.acquire("no-tx", lease=60, wait=0)
    first.release()
    second = table.acquire("no-tx", lease=60, wait=0)
    assert second.fencing_token > first.fencing_token
    assert len(transactions) == 1  # tried once, then not again


def test_without_transactions_a_late_take_never_starts_below_an_earlier_token(
    make_table, moto, clock
):
    # dynalite has no transactions, so no fence record: the lock's item alone keeps the
    # counter. An awsflock 0.2.0 client that reclaimed it (PutItem, which drops the counter)
    # and released it (DeleteItem) would let a take held up since before Y's grant start again
    # below Y's token. There awsflock keeps its items for good: 0.2.0 sees them held.
    from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError

    held_up: list[Any] = []

    def no_transactions(hold: bool) -> Any:
        def script(n: int, send: Any, kwargs: Any) -> Any:
            if "TransactItems" in kwargs:
                raise ClientError(
                    {"Error": {"Code": "UnknownOperationException", "Message": ""}},
                    "TransactWriteItems",
                )
            if hold and not held_up:  # held up in the network; the retries find it down
                held_up.append(send)
                raise ConnectionClosedError(endpoint_url="http://reset")
            if hold:
                raise EndpointConnectionError(endpoint_url="http://down")
            return send()

        return ScriptedWrites(moto, script)

    with pytest.raises(errors.EndpointUnreachable):
        make_table("x", client=no_transactions(True)).acquire("late", lease=60, wait=0)
    clock.advance(30)
    y = make_table("y", client=no_transactions(False)).acquire("late", lease=60, wait=0)
    y.release()
    clock.advance(11)
    # awsflock 0.2.0's acquire: read, reclaim if expired more than 5 s ago, else busy.
    key = {"lock_id": {"S": "late"}}
    item = moto.get_item(TableName="awsflock", Key=key, ConsistentRead=True)["Item"]
    if clock.time() - int(item["expiration_time"]["N"]) > 5:
        moto.put_item(
            TableName="awsflock",
            Item={**key, "lease_id": {"S": "old"}, "expiration_time": {"N": "1"}},
            ConditionExpression="#l = :l",
            ExpressionAttributeNames={"#l": "lease_id"},
            ExpressionAttributeValues={":l": item["lease_id"]},
        )
        moto.delete_item(TableName="awsflock", Key=key)  # and its release
    try:
        held_up[0]()
    except ClientError as exc:
        assert "ConditionalCheckFailed" in str(exc)
    late = make_table("z").store.read("late").lock
    assert late is not None and late.fencing_token == y.fencing_token  # refused: Y's stays
    z = make_table("z", client=no_transactions(False)).acquire("late", lease=60, wait=0)
    assert z.fencing_token > y.fencing_token


def test_a_waiter_reclaims_an_expired_lease_in_one_request(make_table, moto):
    # A transaction answers nothing, so a first contact learns that a lease ran out from a
    # refusal (a second request); a waiter saw it in its last answer: each of its tries, the
    # reclaim included, is one request.
    clock = ScheduledClock()
    make_table("dead", clock=clock).acquire("gone-holder", lease=10, wait=0)
    client = CountingClient(moto)
    lease = make_table("waiter", clock=clock, client=client).acquire(
        "gone-holder", lease=60, wait=60
    )
    assert lease.reclaimed is not None and lease.reclaimed.history[0][1] == ""
    assert client.calls["transact_write_items"] == len(clock.sleeps) + 1


def test_the_fence_record_has_no_ttl_and_fits_the_longest_lock_name(make_table, moto, clock):
    name = "n" * 2048  # the longest name: its fence record's key is the name's SHA-256
    first = make_table().acquire(name, lease=10, wait=0)
    records = [
        item
        for item in moto.scan(TableName="awsflock")["Items"]
        if item["lock_id"]["S"].startswith("#awsflock#fence")  # the hashed form too
    ]
    assert len(records) == 1 and "expiration_time" not in records[0]
    assert int(records[0]["fence"]["N"]) == first.fencing_token
    clock.advance(10 + 5 + 1)
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": name}})  # TTL's deletion
    assert make_table().acquire(name, lease=10, wait=0).fencing_token > first.fencing_token
    assert [lock.lock_id for lock in make_table().locks()] == [name]  # the record is not a lock


def test_a_renew_asking_less_than_a_later_renew_holds_is_a_success(make_table, clock):
    # Two renewers of one lease (a keep-alive renewer and the script's own `renew`), the second
    # with a clock 1 s behind and a shorter lease: it is refused (it would move the end back),
    # and the lease is held past what it asked: renewed, not "no longer held".
    lease = make_table("a").acquire("two-renewers", lease=60, wait=0)
    make_table("a").renew_lease("two-renewers", lease.lease_id, lease=120)
    behind = make_table("a", clock=FakeClock(clock.time() - 1))
    renewed = behind.renew_lease("two-renewers", lease.lease_id, lease=30)
    assert renewed.expires_at == pytest.approx(clock.time() + 120)


def test_a_lock_whose_fence_record_name_is_taken_by_020_is_refused_clearly(make_table, moto):
    # An awsflock 0.2.0 client, which does not know awsflock's reserved prefix, locked the fence
    # record's name: it would delete it on release, so the lock is not taken meanwhile.
    moto.put_item(
        TableName="awsflock",
        Item={
            "lock_id": {"S": "#awsflock#fence#squatted"},
            "lease_id": {"S": "x"},
            "expiration_time": {"N": "4102444800"},
        },
    )
    with pytest.raises(errors.ConfigurationError, match="holds something else"):
        make_table("a").acquire("squatted", lease=60, wait=0)
    assert make_table("a").state("squatted") is None
