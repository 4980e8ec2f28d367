"""Regression tests for the safety holes an adversarial review found (issue 10), one or more per
finding, with in-process moto and fake clocks. Each failed on the code before its fix.

awsflock 0.2.0's acquire is modelled exactly: a consistent GetItem, then (if the lease it read
expired more than 5 s ago by its clock) a full PutItem conditioned on the ``lease_id`` it read.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import FakeClock
from awsflock.lock.admin import force_release, resize_pool
from awsflock.lock.audit_log import audit_records
from awsflock.lock.lease import LockTable
from awsflock.protocol import Attempt
from awsflock.records import Identity
from tests.helpers import WRITES, CountingClient, LosingClient, ScheduledClock, ScriptedWrites

TABLE = "awsflock"
LEGACY_LEASE = "0" * 8 + "-0000-4000-8000-" + "0" * 12


def read_like_020(client: Any, lock_id: str, now: float) -> str | None:
    """0.2.0's first step: the lease id it would try to reclaim, or None if it would not."""
    item = client.get_item(TableName=TABLE, Key={"lock_id": {"S": lock_id}}, ConsistentRead=True)
    item = item.get("Item")
    if item is None or now - int(item["expiration_time"]["N"]) <= 5:
        return None
    return str(item["lease_id"]["S"])


def put_like_020(client: Any, lock_id: str, read_lease: str, now: float) -> bool:
    """0.2.0's second step: overwrite the item if its lease_id is still the one it read."""
    from botocore.exceptions import ClientError

    try:
        client.put_item(
            TableName=TABLE,
            Item={
                "lock_id": {"S": lock_id},
                "lease_id": {"S": LEGACY_LEASE},
                "lease_duration": {"N": "60"},
                "owner": {"S": "old"},
                "expiration_time": {"N": str(int(now + 60))},
            },
            ConditionExpression="attribute_exists(#lock_id) AND #lease_id = :existing_lease_id",
            ExpressionAttributeNames={"#lock_id": "lock_id", "#lease_id": "lease_id"},
            ExpressionAttributeValues={":existing_lease_id": {"S": read_lease}},
        )
    except ClientError as exc:
        assert exc.response["Error"]["Code"] == "ConditionalCheckFailedException"
        return False
    return True


def item_of(client: Any, lock_id: str) -> dict[str, Any]:
    return client.get_item(TableName=TABLE, Key={"lock_id": {"S": lock_id}}, ConsistentRead=True)[
        "Item"
    ]


class OutageClient(CountingClient):
    """UpdateItem #1 is applied and its answer lost; later UpdateItems fail unsent (connection
    refused) until the clock reaches ``until``."""

    def __init__(self, client: Any, clock: FakeClock, until: float) -> None:
        super().__init__(client)
        self.clock = clock
        self.until = until
        self.sent = 0

    def __getattr__(self, name: str) -> Any:
        inner = super().__getattr__(name)
        if name not in WRITES:
            return inner

        def call(*args: Any, **kwargs: Any) -> Any:
            from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

            self.sent += 1
            if self.sent == 1:
                inner(*args, **kwargs)
                raise ReadTimeoutError(endpoint_url="http://lost")
            if self.clock.time() < self.until:
                raise EndpointConnectionError(endpoint_url="http://down")
            return inner(*args, **kwargs)

        return call


class Slots(random.Random):
    """A random source whose slot choices are scripted: probes go to these slots in turn."""

    def __init__(self, *slots: int) -> None:
        super().__init__(0)
        self.script = list(slots)

    def randrange(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
        return self.script.pop(0) if self.script else 0

    def choice(self, seq: Any) -> Any:
        return seq[0]


# -- 1. mixed fleet, late renew ------------------------------------------------------------------


def test_renew_never_revives_an_expired_lease_that_020_is_reclaiming(make_table, moto, clock):
    lease = make_table("a").acquire("late", lease=10, wait=0)
    clock.advance(10 + 5 + 6)  # 0.2.0 reclaims 5 s after expiration_time (lease end + skew)
    read = read_like_020(moto, "late", clock.time())
    assert read is not None
    with pytest.raises(errors.NotHeld, match="expired"):
        lease.renew()
    assert put_like_020(moto, "late", read, clock.time())


def test_a_renew_by_a_lagging_clock_changes_what_020_compares(make_table, moto, clock):
    lease = make_table("a").acquire("lag", lease=10, wait=0)
    clock.advance(10 + 5 + 6)
    read = read_like_020(moto, "lag", clock.time())
    assert read is not None
    # The holder's clock is 15 s behind (outside the NTP assumption): by its clock the lease
    # still runs, and the renew goes through. 0.2.0's put must then fail.
    behind = FakeClock(clock.time() - 15)
    lagging = make_table("a", clock=behind)
    lagging.renew_lease("lag", lease.lease_id, lease=10)
    assert not put_like_020(moto, "lag", read, clock.time())


# -- 2. mixed fleet, acquire retried past its lease ----------------------------------------------


def test_an_acquire_retried_past_its_lease_never_shares_the_lock_with_020(make_table, moto):
    clock = ScheduledClock()
    start = clock.time()
    reads: list[str | None] = []
    # While our endpoint is down, a 0.2.0 client reads the item: our first (landed, unanswered)
    # grant has expired more than 5 s ago.
    clock.at(start + 21, lambda: reads.append(read_like_020(moto, "retry", clock.time())))
    # A lock granted and released before: the first try is then one that grants (a name never
    # granted is taken in two, the first pinning how the lease before ended: ``fates``).
    make_table("w", clock=clock).acquire("retry", lease=10, wait=0).release()
    client = OutageClient(moto, clock, until=start + 22)
    ours = make_table("a", client=client, clock=clock).acquire("retry", lease=10, wait=60)
    assert reads and reads[0] is not None
    theirs = put_like_020(moto, "retry", reads[0], clock.time())
    assert ours.remaining() > 5 and not theirs


# -- 3. acquire never reports an expired grant ---------------------------------------------------


def test_a_landed_grant_found_inside_the_skew_window_is_not_reported(make_table, moto):
    clock = ScheduledClock()
    start = clock.time()
    client = OutageClient(moto, clock, until=start + 12)  # lease 10, skew 5: inside the window
    lease = make_table("a", client=client, clock=clock).acquire("stale", lease=10, wait=60)
    assert lease.expires_at - clock.time() >= 5
    assert make_table("b", clock=clock).store.read("stale").record.lease_id == lease.lease_id


def test_a_landed_pool_grant_that_ran_out_is_not_reported(make_table, moto):
    clock = ScheduledClock()
    start = clock.time()
    client = OutageClient(moto, clock, until=start + 12)  # lease 10, skew 5: inside the window
    table = make_table("a", client=client, clock=clock, rng=Slots(0, 0, 0, 0))
    lease = table.acquire("stalepool", lease=10, wait=60, slots=2)
    assert lease.expires_at - clock.time() >= 5
    pool = make_table("b", clock=clock).store.read("stalepool").pool
    held = [r for r in pool.slots.values() if not r.released and r.expires_at > clock.time()]
    assert [r.lease_id for r in held] == [lease.lease_id]


# -- 4. no TTL deletion before lease end plus skew -----------------------------------------------


def sweep_ttl(client: Any, true_now: float) -> None:
    """What DynamoDB's TTL does (DynamoDB Local within seconds): delete items whose
    expiration_time has passed."""
    for item in client.scan(TableName=TABLE)["Items"]:
        ttl = item.get("expiration_time")
        if ttl is not None and int(ttl["N"]) < true_now:
            client.delete_item(TableName=TABLE, Key={"lock_id": item["lock_id"]})


def test_fencing_token_never_goes_down_after_ttl_deletion(make_table, moto, clock):
    first = make_table("a").acquire("ttl", lease=2, wait=0)  # a new item: its floor is now
    for _ in range(20):
        clock.advance(0.5)
        sweep_ttl(moto, clock.time())
        # An acquirer whose clock is 3 s behind (inside the 5 s skew window) tries every 0.5 s.
        behind = make_table("b", clock=FakeClock(clock.time() - 3))
        try:
            second = behind.acquire("ttl", lease=2, wait=0)
        except errors.LockBusy:
            continue
        assert second.fencing_token > first.fencing_token
        return
    pytest.fail("never acquired")


def test_every_write_sets_the_ttl_at_least_skew_past_the_lease(make_table, moto, clock):
    table = make_table("a")
    lease = table.acquire("t4", lease=10, wait=0)
    assert int(item_of(moto, "t4")["expiration_time"]["N"]) >= lease.expires_at + 5
    clock.advance(3)
    lease.renew()
    assert int(item_of(moto, "t4")["expiration_time"]["N"]) >= lease.expires_at + 5
    force_release(table, "t4", reason="test", lease_id=lease.lease_id, actor="op")
    assert int(item_of(moto, "t4")["expiration_time"]["N"]) >= clock.time() + 5
    # A plain lock turned into a pool loses its TTL attribute: the pool item never expires.
    table.acquire("t4", lease=10, wait=0, slots=2)
    assert "expiration_time" not in item_of(moto, "t4")


def test_a_020_item_taken_over_gets_our_ttl(make_table, moto, clock):
    moto.put_item(
        TableName=TABLE,
        Item={
            "lock_id": {"S": "old"},
            "lease_id": {"S": LEGACY_LEASE},
            "lease_duration": {"N": "1"},
            "owner": {"S": "old"},
            "expiration_time": {"N": str(int(clock.time()) - 100)},
        },
    )
    lease = make_table("a").acquire("old", lease=10, wait=0)
    assert int(item_of(moto, "old")["expiration_time"]["N"]) >= lease.expires_at + 5


# -- 5. phantom pool slot ------------------------------------------------------------------------


def test_a_pool_probe_whose_answer_was_lost_is_not_left_held(make_table, moto):
    clock = ScheduledClock()
    client = OutageClient(moto, clock, until=clock.time() + 3)
    table = make_table("a", client=client, clock=clock, rng=Slots(0, 1, 1, 1))
    lease = table.acquire("phantom", lease=600, wait=60, slots=2)
    pool = table.store.read("phantom").pool
    held = [r.lease_id for r in pool.slots.values() if not r.released]
    assert held == [lease.lease_id]


# -- 6. holders that disagree on the number of slots -------------------------------------------


def test_slots_1_against_a_pool_is_refused(make_any_table):
    make_any_table("a").acquire("p6", lease=60, wait=0, slots=2)
    make_any_table("b").acquire("p6", lease=60, wait=0, slots=2)
    with pytest.raises(errors.ConfigurationError, match="pool of 2 slots"):
        make_any_table("c").acquire("p6", lease=60, wait=0, slots=1)
    with pytest.raises(errors.ConfigurationError, match="pool of 2 slots"):
        make_any_table("c").acquire("p6", lease=60, wait=0)


def test_a_pool_against_a_held_plain_lock_is_refused(make_any_table):
    make_any_table("a").acquire("p6b", lease=60, wait=0)
    with pytest.raises(errors.ConfigurationError, match="plain lock"):
        make_any_table("b").acquire("p6b", lease=60, wait=0, slots=2)


# -- 7. a force-released holder is told so -------------------------------------------------------


def test_release_after_force_release_is_not_held_naming_who_and_why(make_any_table, clock):
    table = make_any_table("a")
    lease = table.acquire("f7", lease=600, wait=0)
    force_release(table, "f7", reason="runner died", lease_id=lease.lease_id, actor="ana")
    with pytest.raises(errors.NotHeld, match=r"force-released by ana .*runner died"):
        lease.release()
    with pytest.raises(errors.NotHeld, match="force-released by ana"):
        lease.renew()


def test_hold_ends_with_lease_lost_after_force_release(make_any_table):
    table = make_any_table("a")
    held = table.hold("f7h", lease=60)
    held.start()
    force_release(table, "f7h", reason="stuck", lease_id=held.lease_id, actor="ana")
    with pytest.raises(errors.LeaseLost, match="force-released by ana"):
        held.stop()


# -- 8. a retried force-release is truthful and audited once -------------------------------------


def test_force_release_whose_answer_was_lost_succeeds_with_one_audit_record(make_table, moto):
    lease = make_table("a").acquire("f8", lease=600, wait=0)
    client = LosingClient(moto, lambda op, n: op == "transact_write_items" and n == 1)
    operator = make_table("op", client=client)
    entry = force_release(operator, "f8", reason="why", lease_id=lease.lease_id, actor="ana")
    assert entry["lease_id"] == lease.lease_id
    assert client.calls["transact_write_items"] == 2  # the retry found it done
    assert len(audit_records(operator, "f8")) == 1


def test_a_force_release_and_its_audit_record_are_one_request(make_table, moto):
    lease = make_table("a").acquire("f8b", lease=600, wait=0)
    client = LosingClient(moto, lambda op, n: False)
    operator = make_table("op", client=client)
    force_release(operator, "f8b", reason="why", lease_id=lease.lease_id, actor="ana")
    assert client.calls["transact_write_items"] == 1  # the end, its done item and its record
    assert client.calls["put_item"] == 0
    assert [r["actor"] for r in audit_records(operator, "f8b")] == ["ana"]


# -- 9. pool shrink, then a late renew ------------------------------------------------------------


def test_renew_of_a_slot_removed_by_a_resize_is_refused(make_any_table, clock):
    holders = [make_any_table(f"h{i}", rng=Slots(i)) for i in range(3)]
    leases = [h.acquire("p9", lease=30, wait=0, slots=3) for h in holders]
    assert [lease.slot for lease in leases] == [0, 1, 2]
    clock.advance(30 + 6)  # slot 2's holder is paused past its lease and the skew window
    for lease in leases[:2]:
        lease.table.clock = FakeClock(clock.time() - 36)  # the others keep theirs alive
        lease.renew()
    resize_pool(make_any_table("op"), "p9", 2)
    # Its clock is far behind, so by its clock the lease still runs: the slot check refuses.
    late = make_any_table("h2", clock=FakeClock(clock.time() - 36))
    with pytest.raises(errors.NotHeld, match="slot 2 no longer exists"):
        late.renew_lease("p9", leases[2].lease_id, lease=30)


# -- 10. a release retried after hand-offs --------------------------------------------------------


@pytest.mark.parametrize("handoffs", [1, 2, 3])
def test_a_release_retried_after_hand_offs_is_recognised(make_any_table, clock, handoffs):
    table = make_any_table("a")
    lease = table.acquire("r10", lease=60, wait=0)
    now_ms = round(clock.time() * 1000)
    lease.table.store.release("r10", lease.lease_id, now_ms=now_ms, skew_ms=5000)
    for n in range(handoffs):
        other = make_any_table(f"o{n}").acquire("r10", lease=60, wait=0)
        if n < handoffs - 1:
            other.release()
    table.release_lease("r10", lease.lease_id)  # the retry of the first release: done


def test_a_release_of_an_expired_and_taken_lease_says_so(make_any_table, clock):
    lease = make_any_table("a").acquire("r10b", lease=10, wait=0)
    clock.advance(16)
    make_any_table("b").acquire("r10b", lease=10, wait=0)
    with pytest.raises(errors.NotHeld, match="expired and was taken over; now held by b"):
        make_any_table("a").release_lease("r10b", lease.lease_id)


# -- 11. a signal between the grant and the command's start --------------------------------------


def test_a_signal_just_after_the_grant_releases_and_never_starts_the_command(
    make_any_table, tmp_path
):
    from awsflock.supervise.runner import RunOptions, run

    table = make_any_table("a")
    real_acquire = table.acquire

    def acquire_then_signal(*args: Any, **kwargs: Any) -> Any:
        lease = real_acquire(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGUSR1)  # arrives after the grant, before CMD starts
        return lease

    table.acquire = acquire_then_signal  # type: ignore[method-assign]
    marker = tmp_path / "started"
    assert threading.current_thread() is threading.main_thread()
    code = run(table, "s11", ["/bin/touch", str(marker)], RunOptions(lease=60, wait=0))
    assert code == 128 + signal.SIGUSR1
    assert not marker.exists()
    assert make_any_table("b").acquire("s11", lease=60, wait=0)


def _to_the_main_thread() -> None:
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR2)  # held back


def _to_another_thread() -> None:
    def send() -> None:  # this thread takes it in: the main thread's mask does not hold it
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR2})
        os.kill(os.getpid(), signal.SIGUSR2)

    sender = threading.Thread(target=send)
    sender.start()
    sender.join()


@pytest.mark.parametrize("send", [_to_the_main_thread, _to_another_thread])
def test_a_signal_while_the_command_starts_reaches_it(make_any_table, monkeypatch, send):
    # Found by CI: a signal that came while CMD started was handled before awsflock knew CMD's
    # group, so it was dropped and CMD ran on.
    from awsflock.supervise import runner

    real_popen = subprocess.Popen

    def popen_then_signal(*args: Any, **kwargs: Any) -> Any:
        child = real_popen(*args, **kwargs)
        send()
        return child

    monkeypatch.setattr(runner.subprocess, "Popen", popen_then_signal)
    options = runner.RunOptions(lease=60, wait=0)
    code = runner.run(make_any_table("a"), "s11b", ["/bin/sleep", "20"], options)
    assert code == 128 + signal.SIGUSR2  # without the forward: 0, after 20 s


# -- 12. audit records for the longest names ------------------------------------------------------


def test_force_release_of_the_longest_name_is_audited(make_any_table):
    name = "n" * 2048
    table = make_any_table("a")
    lease = table.acquire(name, lease=60, wait=0)
    force_release(table, name, reason="long", lease_id=lease.lease_id, actor="ana")
    records = audit_records(table, name)
    assert len(records) == 1 and records[0]["lock_id"] == name


# -- 16. one meaning of wait=0 in the library ------------------------------------------------------


def test_library_wait_zero_means_do_not_wait_as_number_or_text(make_any_table):
    make_any_table("a").acquire("w16", lease=60, wait=0)
    for wait in (0, "0", "0s"):
        with pytest.raises(errors.LockBusy):
            make_any_table("b").acquire("w16", lease=60, wait=wait)


def test_wait_forever_is_a_named_constant(make_any_table):
    from awsflock.lock.lease import WAIT_FOREVER

    assert WAIT_FOREVER is None
    assert make_any_table("a").acquire("w16b", lease=60, wait=WAIT_FOREVER)


# -- helpers checked ------------------------------------------------------------------------------


def test_the_020_model_reclaims_an_expired_item(moto, clock):
    table = LockTable(TABLE, client=moto, clock=clock, identity=Identity(owner="x"))
    table.acquire("m", lease=10, wait=0)
    assert read_like_020(moto, "m", clock.time()) is None
    clock.advance(21)
    read = read_like_020(moto, "m", clock.time())
    assert read is not None and put_like_020(moto, "m", read, clock.time())


# -- found by the adversarial review of the fixes --------------------------------------------------


def delete_like_020(client: Any, lock_id: str, lease_id: str) -> bool:
    """0.2.0's release: DeleteItem conditioned on the lease_id."""
    from botocore.exceptions import ClientError

    try:
        client.delete_item(
            TableName=TABLE,
            Key={"lock_id": {"S": lock_id}},
            ConditionExpression="attribute_exists(#lock_id) AND #lease_id = :existing_lease_id",
            ExpressionAttributeNames={"#lock_id": "lock_id", "#lease_id": "lease_id"},
            ExpressionAttributeValues={":existing_lease_id": {"S": lease_id}},
        )
    except ClientError:
        return False
    return True


def test_a_late_plain_release_never_lands_on_the_pool_that_replaced_it(make_table, moto, clock):
    plain = make_table("a").acquire("gpu", lease=2, wait=0)
    clock.advance(2 + 5 + 1)  # ran out; the lock is free
    slot = make_table("b").acquire("gpu", lease=3600, wait=0, slots=2)
    with pytest.raises(errors.NotHeld, match="now a pool of 2 slots"):
        plain.release()
    item = item_of(moto, "gpu")
    # No TTL attribute, so DynamoDB never deletes the pool; no lease_id for 0.2.0 to match.
    assert "expiration_time" not in item and "lease_id" not in item
    assert make_table("b").store.read("gpu").pool.slots[slot.slot].lease_id == slot.lease_id


def test_a_020_lease_cannot_be_released_or_renewed_once_its_item_is_a_pool(make_table, moto, clock):
    moto.put_item(
        TableName=TABLE,
        Item={
            "lock_id": {"S": "tpu"},
            "lease_id": {"S": LEGACY_LEASE},
            "lease_duration": {"N": "1"},
            "owner": {"S": "old"},
            "expiration_time": {"N": str(int(clock.time()) - 10)},
        },
    )
    make_table("b").acquire("tpu", lease=3600, wait=0, slots=2)
    assert not delete_like_020(moto, "tpu", LEGACY_LEASE)
    assert not put_like_020(moto, "tpu", LEGACY_LEASE, clock.time())


def test_020_can_never_delete_an_item_of_ours(make_table, moto):
    lease = make_table("a").acquire("e1", lease=60, wait=0)
    assert not delete_like_020(moto, "e1", lease.lease_id)
    lease.release()
    assert not delete_like_020(moto, "e1", lease.lease_id)


def test_a_release_retried_after_the_lock_became_a_pool_is_recognised(make_any_table, clock):
    table = make_any_table("a")
    lease = table.acquire("conv", lease=60, wait=0)
    lease.table.store.release("conv", lease.lease_id, now_ms=table.now_ms(), skew_ms=5000)
    make_any_table("b").acquire("conv", lease=60, wait=0, slots=2)
    table.release_lease("conv", lease.lease_id)  # the retry: done, not "not held"


def test_force_release_whose_answers_are_all_lost_is_audited_once_and_says_so_on_a_rerun(
    make_table, moto, clock
):
    lease = make_table("a").acquire("d1", lease=600, wait=0)
    # The force-release lands; every answer to it is lost (the command exits 1).
    client = LosingClient(moto, lambda op, n: op == "transact_write_items", errors_too=True)
    with pytest.raises(errors.EndpointUnreachable) as caught:
        force_release(
            make_table("op", client=client),
            "d1",
            reason="why",
            lease_id=lease.lease_id,
            actor="ana",
        )
    assert f"--lease-id {lease.lease_id}" in caught.value.one_line()
    assert len(audit_records(make_table("op"), "d1")) == 1  # written with the lease's end
    for _ in range(2):  # run again: it says so; still one record
        with pytest.raises(errors.NotHeld, match=r"force-released by ana .* \(audited\)"):
            force_release(make_table("op"), "d1", reason="again", lease_id=lease.lease_id)
    records = audit_records(make_table("op"), "d1")
    assert len(records) == 1 and records[0]["reason"] == "why"


def test_force_release_rerun_after_a_hand_off_keeps_one_record_and_spares_the_new_holder(
    make_table, moto, clock
):
    lease = make_table("a").acquire("f1", lease=600, wait=0)
    client = LosingClient(moto, lambda op, n: op == "transact_write_items", errors_too=True)
    with pytest.raises(errors.EndpointUnreachable):
        force_release(
            make_table("op", client=client),
            "f1",
            reason="why",
            lease_id=lease.lease_id,
            actor="ana",
        )
    newcomer = make_table("w").acquire("f1", lease=600, wait=0)  # takes the freed lock
    with pytest.raises(errors.NotHeld, match="no longer holds"):
        force_release(make_table("op"), "f1", reason="why", lease_id=lease.lease_id, actor="ana")
    records = audit_records(make_table("op"), "f1")
    assert [r["lease_id"] for r in records] == [lease.lease_id]
    newcomer.renew()  # untouched


def test_a_force_release_that_did_not_take_effect_leaves_no_audit_record(make_table, moto):
    lease = make_table("a").acquire("f0", lease=600, wait=0)
    operator = make_table("op")
    real = operator.store.force_release

    def holder_releases_first(*args, **kwargs):
        lease.release()  # the holder releases just before the operator's write lands
        return real(*args, **kwargs)

    operator.store.force_release = holder_releases_first  # type: ignore[method-assign]
    with pytest.raises(errors.NotHeld, match="changed hands"):
        force_release(operator, "f0", reason="why", lease_id=lease.lease_id, actor="ana")
    assert audit_records(operator, "f0") == []


def test_an_operator_killed_before_its_force_is_never_named_for_anothers(make_any_table):
    """Adversarial review of the audit (h13): ana's force-release ended the lease and her run
    died before it could say so; bo's run, against the same lease, died before its force was
    sent. Each run wrote its record before its force, bo's last: the log named bo for ana's
    force-release. Now the force's own step writes its record: there is none of bo's."""
    lease = make_any_table("a").acquire("two-ops", lease=600, wait=0)
    ana, bo = make_any_table("ana"), make_any_table("bo")  # one store on memory://: patched
    real = ana.store.force_release  # by who calls it

    def bo_runs_then_ana_forces_and_dies(*args: Any, **kwargs: Any) -> Any:
        if kwargs["actor"] == "bo":
            raise SystemExit("bo's run is killed before its force is sent")
        with pytest.raises(SystemExit):
            force_release(bo, "two-ops", reason="bo's", lease_id=lease.lease_id, actor="bo")
        real(*args, **kwargs)
        raise SystemExit("ana's run is killed as its force's answer comes back")

    ana.store.force_release = bo_runs_then_ana_forces_and_dies  # type: ignore[method-assign]
    bo.store.force_release = bo_runs_then_ana_forces_and_dies  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        force_release(ana, "two-ops", reason="ana's", lease_id=lease.lease_id, actor="ana")
    records = audit_records(make_any_table("op"), "two-ops")
    assert [(r["lease_id"], r["actor"], r["reason"]) for r in records] == [
        (lease.lease_id, "ana", "ana's")
    ]


@pytest.mark.parametrize("taken_after", [False, True])
def test_a_force_release_that_lands_late_under_a_rerun_keeps_its_audit_record(
    make_table, moto, taken_after
):
    """Found by the simulator after the request layer stopped sending retries past their
    budget: a force-release gave up without an answer; the operator ran it again, and the first
    one's request landed between the rerun's read and its write. The rerun was refused (the
    lease had ended) and voided the lease's one audit record: a force-release applied, and no
    record of it. (taken_after: another holder took the lock meanwhile too.)"""
    lease = make_table("a").acquire("late-force", lease=600, wait=0)
    first = make_table("op")
    landed: list[Any] = []
    real = first.store.force_release

    def never_answered(*args: Any, **kwargs: Any) -> Any:
        landed.append(lambda: real(*args, **kwargs))  # on its way: it lands later
        error = errors.EndpointUnreachable("no answer")
        error.maybe_applied = True
        raise error

    first.store.force_release = never_answered  # type: ignore[method-assign]
    with pytest.raises(errors.EndpointUnreachable):
        force_release(first, "late-force", reason="stuck", lease_id=lease.lease_id, actor="ana")
    rerun = make_table("op")
    force = rerun.store.force_release

    def lands_now(*args: Any, **kwargs: Any) -> Any:
        if landed:  # the first run's request lands after the rerun read the lock
            landed.pop()()
            if taken_after:
                make_table("w").acquire("late-force", lease=600, wait=0)
        return force(*args, **kwargs)

    rerun.store.force_release = lands_now  # type: ignore[method-assign]
    with pytest.raises(errors.NotHeld, match="earlier force-release"):
        force_release(rerun, "late-force", reason="stuck", lease_id=lease.lease_id, actor="ana")
    records = audit_records(make_table("op"), "late-force")
    assert [r["lease_id"] for r in records] == [lease.lease_id]


def test_a_release_in_doubt_that_finds_no_record_is_not_called_released(make_table, moto, clock):
    """Adversarial review (V4): the lease ran out, another client took the lock over and its
    release deleted the record; our release's first try was lost, the retry found no record,
    and "no record after a try in doubt" was taken as our release having happened: exit 0 for
    a lease that was never released, whose work ran unprotected. Now: not held, and why it
    cannot be told."""
    lease = make_table("a").acquire("gone", lease=10, wait=0)
    clock.advance(20)  # ran out (and past the skew window)
    other = make_table("b").acquire("gone", lease=10, wait=0)
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "gone"}})  # 0.2.0, or TTL
    del other
    client = LosingClient(
        moto, lambda op, n: op == "transact_write_items" and n == 1, errors_too=True
    )
    with pytest.raises(errors.NotHeld, match="cannot be told"):
        make_table("a", client=client).release_lease("gone", lease.lease_id)
    # The retry found no record (nor a done item), and barred the LEASE_ID.
    assert client.calls["transact_write_items"] == 3


# -- found by the second adversarial review -------------------------------------------------------


def test_giving_back_a_late_grant_keeps_the_deadline_and_is_not_called_busy(make_table, moto):
    from botocore.exceptions import EndpointConnectionError, ReadTimeoutError

    clock = ScheduledClock()
    start = clock.time()

    def script(n: int, send: Any, kwargs: Any) -> Any:
        if n == 1:
            send()  # the grant lands; its answer is lost
            raise ReadTimeoutError(endpoint_url="http://lost")
        if clock.time() < start + 1.5:  # then the endpoint is down until the lease is half gone
            raise EndpointConnectionError(endpoint_url="http://down")
        return send()

    table = make_table("a", client=ScriptedWrites(moto, script), clock=clock)
    with pytest.raises(errors.EndpointUnreachable, match="answered too late"):
        table.acquire("f2", lease=2, wait=0)
    assert clock.time() - start <= 0 + 5  # --no-wait: within one request timeout
    assert make_table("b", clock=clock).acquire("f2", lease=2, wait=0)  # it was given back


def test_a_try_that_may_land_after_a_later_try_was_answered_is_not_forgotten(
    make_table, moto, caplog, clock
):
    holder = make_table("h").acquire("f3", lease=60, wait=0)
    clock.advance(1)  # the late try's token is above the holder's: it can still be granted
    late: list[Any] = []
    script = _first_write_held(late)

    from botocore.exceptions import ClientError

    with pytest.raises(errors.LockBusy):
        make_table("a", client=ScriptedWrites(moto, script)).acquire("f3", lease=600, wait=0)
    holder.release()
    # It lands now. It once granted a lease nobody knew (named on stderr with the command that
    # frees it); the acquire's clean-up release now bars its LEASE_ID, and it takes nothing.
    with pytest.raises(ClientError):
        late[0]()
    record = make_table("x").store.read("f3").record
    assert record is not None and record.released
    assert not [r for r in caplog.records if "may have been granted" in r.getMessage()]


@pytest.mark.parametrize("transactions", [True, False])
def test_a_release_whose_item_ttl_deleted_before_the_retry_is_told_truly(
    make_table, moto, transactions
):
    # Once answered "released" (second review): but the same answer, no record after a try in
    # doubt, comes when the lease ran out and another client's release deleted the record
    # (third review, V4), where "released" hid unprotected work. The lease's done item, written
    # with the release, tells the two apart: released. Without transactions (dynalite) there is
    # none: not held either way, and the answer says it cannot tell which.
    from botocore.exceptions import ReadTimeoutError

    from tests.simulation.__main__ import _NoTransactions

    base = moto if transactions else _NoTransactions(moto)
    lease = make_table("a", client=base).acquire("f4", lease=60, wait=0)

    sent: list[Any] = []

    def script(n: int, send: Any, kwargs: Any) -> Any:
        answer = send()  # an endpoint without transactions refuses one here (raised)
        sent.append(answer)
        if len(sent) == 1:  # the release landed; TTL deletes the ended item; the answer is lost
            moto.delete_item(TableName=TABLE, Key={"lock_id": {"S": "f4"}})
            raise ReadTimeoutError(endpoint_url="http://lost")
        return answer

    table = make_table("a", client=ScriptedWrites(base, script))
    if transactions:
        table.release_lease("f4", lease.lease_id)
    else:
        with pytest.raises(errors.NotHeld, match="cannot be told"):
            table.release_lease("f4", lease.lease_id)


def test_a_lease_id_is_granted_at_most_once(make_any_table):
    # A duplicate of an acquire that lands after its lease was released changes nothing.
    lease = make_any_table("a").acquire("once", lease=60, wait=0)
    lease.release()
    again = lease.table.store.take(
        "once",
        Attempt(
            lease_id=lease.lease_id,
            identity=Identity(owner="a"),
            now_ms=round(lease.table.clock.time() * 1000),
            lease_ms=60_000,
            skew_ms=5000,
        ),
    )
    assert not again.applied


def test_a_loss_noticed_just_after_the_command_finished_still_exits_124(make_any_table):
    # The chaos checker caught this: a force-release during the command, noticed by the
    # heartbeat as the command exited 0, and `run` then exited 0 as if all was well.
    from awsflock.supervise.group import EXIT_LOST
    from awsflock.supervise.runner import RunOptions, _release_quietly

    table = make_any_table("a")
    held = table.hold("late-loss", lease=60)
    held.start()
    force_release(table, "late-loss", reason="x", lease_id=held.lease_id, actor="ana")
    held._lose("renewal refused: force-released", "force_released")
    assert _release_quietly(held) is False
    assert EXIT_LOST == 124 and RunOptions().lease == 60


def test_a_grant_kept_while_other_attempts_were_settled_is_rechecked():
    # Found by the simulator: the clean-up of other attempts (a release that takes a request
    # timeout) ran after the grant had been judged fresh enough, so acquire returned a lease
    # with less than half of it left.
    from awsflock.stores.memory import MemoryStore

    clock = FakeClock()
    sent: list[str] = []

    class SlowCleanUp(MemoryStore):
        def take(self, lock_id, attempt):
            sent.append(attempt.lease_id)
            if len(sent) == 1:  # lands, its answer is lost
                super().take(lock_id, attempt)
            if len(sent) <= 2:  # the second is lost on the way: it may land later
                clock.advance(1)
                error = errors.EndpointUnreachable("lost")
                error.maybe_applied = True
                raise error
            return super().take(lock_id, attempt)

        def release(self, lock_id, lease_id, **kw):
            if lease_id == sent[1]:
                clock.advance(6)  # settling the second attempt takes a while
            return super().release(
                lock_id, lease_id, now_ms=round(clock.time() * 1000), skew_ms=5000
            )

    table = LockTable(store=SlowCleanUp(clock=clock), identity=Identity(owner="a"))
    lease = table.acquire("slow", lease=10, wait=30)
    assert lease.remaining() >= 5
    assert lease.lease_id not in sent[:2]


def test_a_resize_whose_answer_was_lost_and_was_retried_is_reported_done():
    # The store's retry of a resize that landed unanswered is refused (the size is no longer
    # the old one); pool-resize must not then say the pool could not be resized.
    from awsflock.stores.memory import MemoryStore

    class LostAnswer(MemoryStore):
        def resize_pool(self, lock_id, old, new, **kw):
            super().resize_pool(lock_id, old, new, **kw)  # lands; its answer is lost
            return super().resize_pool(lock_id, old, new, **kw)  # the retry is refused

    table = LockTable(store=LostAnswer(clock=FakeClock()), identity=Identity(owner="a"))
    table.acquire("gpu", lease=60, wait=0, slots=2)
    assert resize_pool(table, "gpu", 4) == (2, 4)
    assert table.state("gpu").size == 4


def test_a_bare_server_error_after_the_write_applied_leaves_no_phantom(make_table, moto):
    # Found by an adversarial review against moto's server: a proxy (or the server itself)
    # answered 502 after the acquire's write applied. That was taken as "refused, nothing
    # written", leaving the lock held under a LEASE_ID nobody was told of.
    from botocore.exceptions import ClientError

    class BadGatewayAfterWrite(CountingClient):
        def __getattr__(self, name):
            inner = super().__getattr__(name)
            if name != "transact_write_items":  # the acquire
                return inner

            def call(*args, **kwargs):
                result = inner(*args, **kwargs)
                if self.calls["transact_write_items"] == 1:
                    raise ClientError(
                        {
                            "Error": {"Code": "502", "Message": "Bad Gateway"},
                            "ResponseMetadata": {"HTTPStatusCode": 502},
                        },
                        "UpdateItem",
                    )
                return result

            return call

    table = make_table("a", client=BadGatewayAfterWrite(moto))
    lease = table.acquire("gw", lease=3600, wait=0)
    assert make_table("b").store.read("gw").record.lease_id == lease.lease_id


# -- the fourth review: a take's doubt is the whole step's ------------------------------------


def _throttled(operation: str) -> Any:
    from botocore.exceptions import ClientError

    error = {"Error": {"Code": "ThrottlingException", "Message": "slow down"}}
    return ClientError(error, operation)  # type: ignore[arg-type]


def test_a_take_whose_early_try_may_land_is_not_dropped_when_a_later_call_fails(
    make_table, moto, clock, caplog
):
    # B's lease ran out and TTL deleted its item. A's first transaction is refused: the lock's
    # fence record shows B's lease never ended. Its second, pinned to that, is held up in the
    # network (it may land later); its retry is throttled until the budget is spent. The
    # held-up try then lands: A must have kept that attempt unsettled, and named its LEASE_ID,
    # not reported a failure that left the lock held by nobody it told.
    from botocore.exceptions import ConnectionClosedError

    make_table("b").acquire("doubt", lease=10, wait=0)
    clock.advance(16)
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "doubt"}})  # TTL
    held_up: list[Any] = []

    def script(n: int, send: Any, kwargs: Any) -> Any:
        if n == 1:
            return send()  # refused: the fence record shows B's lease never ended
        if n == 2:
            held_up.append(send)
            raise ConnectionClosedError(endpoint_url="http://reset")
        raise _throttled("TransactWriteItems")

    with pytest.raises(errors.Throttled) as caught:
        make_table("a", client=ScriptedWrites(moto, script)).acquire("doubt", lease=60, wait=0)
    assert caught.value.maybe_applied
    held_up[0]()  # lands
    held = make_table("c").store.read("doubt").lock
    assert held is not None and not held.released
    assert held.lease_id in caplog.text and "awsflock release doubt" in caplog.text


def test_a_pool_slot_taken_whose_read_back_fails_is_released_not_forgotten(make_table, moto):
    # The transaction that makes a pool of a free lock is applied; reading back what it made
    # is throttled until the budget is spent. The slot is held: the acquire must give it back
    # (or name it), not drop it as never granted.
    class ThrottledReads(CountingClient):
        taken = False

        def __getattr__(self, name: str) -> Any:
            inner = super().__getattr__(name)
            if name == "transact_write_items":

                def take(*args: Any, **kwargs: Any) -> Any:
                    result = inner(*args, **kwargs)
                    ThrottledReads.taken = True
                    return result

                return take
            if name == "get_item" and ThrottledReads.taken:

                def read(*args: Any, **kwargs: Any) -> Any:
                    raise _throttled("GetItem")

                return read
            return inner

    with pytest.raises(errors.AwsflockError):
        make_table("a", client=ThrottledReads(moto)).acquire("pool", lease=60, wait=0, slots=2)
    pool = make_table("c").store.read("pool").pool
    assert pool is not None
    assert all(record.released for record in pool.slots.values()), pool.slots


# -- a take that lands late, after many hand-offs ---------------------------------------------


@pytest.mark.parametrize("slots", [None, 3])
def test_a_take_landing_late_after_many_hand_offs_takes_nothing(make_table, moto, clock, slots):
    # A try of a granted take that lands after its lease ended and more hand-offs than the
    # record's history keeps (found by review on pools, whose slot counter went up by one
    # whatever the request carried: granted again, to nobody). Every try of one request carries
    # its token: the counter is at it already, or above. Replayed here byte for byte.
    from botocore.exceptions import ClientError

    spy = CountingClient(moto)
    operation = "transact_write_items" if slots is None else "update_item"
    original = getattr(moto, operation)
    spy_call = getattr(spy, operation)
    spy_calls: list[dict[str, Any]] = []

    def capture(**kwargs: Any) -> Any:
        spy_calls.append(kwargs)
        return spy_call(**kwargs)

    table = make_table("a", client=spy)
    kwargs = {} if slots is None else {"slots": slots}
    make_table("b").acquire("late-take", lease=60, wait=0, **kwargs).release()  # made
    clock.advance(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(spy, operation, capture, raising=False)
        lease = table.acquire("late-take", lease=60, wait=0, **kwargs)
    assert len(spy_calls) == 1, spy_calls  # one request: its one try is the late one
    if slots is not None:  # the other slots held: every hand-off below is of this one
        for _ in range(slots - 1):
            make_table("c").acquire("late-take", lease=600, wait=0, **kwargs)
    lease.release()
    for _ in range(8):  # more hand-offs than any record's history keeps
        clock.advance(1)
        make_table("b").acquire("late-take", lease=60, wait=0, **kwargs).release()
    with pytest.raises(ClientError) as refused:
        original(**spy_calls[0])  # the same request, landing now
    assert refused.value.response["Error"]["Code"] in (
        "ConditionalCheckFailedException",
        "TransactionCanceledException",
    )
    state = table.state("late-take")
    record = state if slots is None else state.slots.get(lease.slot)  # type: ignore[union-attr]
    assert record is not None and record.released, record


def test_a_slot_take_landing_after_its_lock_became_a_pool_takes_nothing(make_table, moto, clock):
    # Found by the second adversarial review of the bars: A's slot take (one UpdateItem, which
    # checks a pool's bars only) was held on the wire while the lock was still a plain lock, so
    # its clean-up release barred the id with a done item; then B, whose clock reading came
    # before A's (a pause between reading and sending), made the lock a pool, and A's take
    # landed on it and took a slot for a whole lease, held by nobody. The bar of a slot's id
    # on a lock that is not a pool raises its fence record: a pool made later starts above it.
    from botocore.exceptions import ClientError

    holder = make_table("h").acquire("conv", lease=600, wait=0)  # a plain lock, held
    b_clock = FakeClock(clock.time() + 0.5)  # B reads its clock now, then pauses
    clock.advance(1.0)
    late: list[Any] = []
    script = _first_write_held(late)

    with pytest.raises(errors.AwsflockError):  # a plain lock is held: no pool of it now
        make_table("a", client=ScriptedWrites(moto, script)).acquire(
            "conv", lease=600, wait=0, slots=2
        )
    holder.release()
    pooled = make_table("b", clock=b_clock).acquire("conv", lease=600, wait=0, slots=2)
    pooled.release()
    with pytest.raises(ClientError):
        late[0]()  # lands now, on the pool: refused as too low
    pool = make_table("x").state("conv")
    assert pool is not None and all(
        slot.released
        for slot in pool.slots.values()  # type: ignore[union-attr]
    ), pool


def _first_write_held(late: list[Any]) -> Any:
    """A ``ScriptedWrites`` script: the first write is reset at once while its request is still
    inside the service (kept in ``late``, to land when the test sends it); the others go."""
    from botocore.exceptions import ConnectionClosedError

    def script(n: int, send: Any, kwargs: Any) -> Any:
        if n == 1:
            late.append(send)
            raise ConnectionClosedError(endpoint_url="http://reset")
        return send()

    return script
