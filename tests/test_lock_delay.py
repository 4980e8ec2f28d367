"""Lock-delay through the library and the command line (``acquire(lock_delay=)``,
``--lock-delay``): after a lease ends without its holder's release, nobody is granted the lock
until that end plus the holder's delay, and a waiter is told why; a release frees it at once.
On the in-memory store in fake time, and the command line on in-process moto."""

from __future__ import annotations

import pytest

from awsflock import FakeClock, LockTable, MemoryStore, errors
from awsflock.lock import admin
from awsflock.records import LockRecord

SKEW = 5.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def table(clock: FakeClock) -> LockTable:
    return LockTable(store=MemoryStore(clock=clock), clock=clock, owner="ops")


def test_a_holder_that_dies_keeps_the_lock_for_its_delay(table, clock):
    table.acquire("deploy", lease=10, lock_delay="30s")
    state = table.state("deploy")
    assert isinstance(state, LockRecord) and state.lock_delay == 30.0
    clock.advance(10 + SKEW + 1)  # the lease ran out: without a delay, it is reclaimed now
    with pytest.raises(errors.LockBusy, match="its lock-delay keeps the lock until") as busy:
        table.acquire("deploy", wait=0)
    assert "did not release it" in str(busy.value)
    clock.advance(30)
    taken = table.acquire("deploy", wait=0)
    assert taken.previous is not None and taken.previous.how == "expired"


def test_a_force_release_is_followed_by_the_delay_and_a_release_is_not(table, clock):
    held = table.acquire("deploy", lease=60, lock_delay=20)
    admin.force_release(table, "deploy", reason="stuck", lease_id=held.lease_id, actor="ops")
    with pytest.raises(errors.LockBusy, match="was force-released, and its lock-delay"):
        table.acquire("deploy", wait=0)
    clock.advance(20 + SKEW + 1)
    again = table.acquire("deploy", wait=0, lock_delay=20)
    again.release()
    table.acquire("deploy", wait=0).release()  # a release has no delay
    assert held.lease_id != again.lease_id


def test_a_waiter_is_granted_once_the_delay_is_over(table, clock):
    start = clock.time()
    table.acquire("deploy", lease=5, lock_delay=10)
    table.acquire("deploy", wait=60)
    assert start + 5 + 10 + SKEW < clock.time() < start + 5 + 10 + SKEW + 3


@pytest.mark.parametrize("delay", ["-1s", "25h", "soon"])
def test_a_delay_out_of_range_is_refused(table, delay):
    with pytest.raises(errors.UsageError, match=r"lock-delay|duration"):
        table.acquire("deploy", lock_delay=delay)


def test_a_shared_holder_takes_no_delay(table):
    with pytest.raises(errors.UsageError, match="shared holder takes no lock-delay"):
        table.acquire("deploy", shared=True, lock_delay=5)


def test_each_name_of_a_set_keeps_its_delay(table, clock):
    table.acquire(["a", "b"], lease=10, lock_delay=30)
    clock.advance(10 + SKEW + 1)
    with pytest.raises(errors.LockBusy):
        table.acquire("b", wait=0)
    clock.advance(30)
    table.acquire("b", wait=0)


# -- the command line (in-process moto, real time: nothing here waits out a delay) -----------


def test_the_command_line_records_the_delay_and_says_what_it_keeps(moto):
    import json

    from click.testing import CliRunner

    from awsflock.cli import cli

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    taken = run("acquire", "deploy", "--lock-delay", "1h", "--lease-duration", "10m", "--json")
    assert taken.exit_code == 0, taken.stderr
    status = json.loads(run("status", "deploy", "--json").stdout)
    assert status["lock_delay_s"] == 3600.0 and "free_after" not in status
    assert run("force-release", "deploy", "--reason", "hung", "--yes").exit_code == 0
    status = json.loads(run("status", "deploy", "--json").stdout)
    assert 3600 < status["free_in_s"] <= 3600 + SKEW
    text = run("status", "deploy").stdout
    assert "its lock-delay keeps it until" in text, text
    busy = run("acquire", "deploy", "--no-wait")
    assert busy.exit_code == 3
    assert "was force-released, and its lock-delay keeps the lock until" in busy.stderr
    refused = run("acquire", "other", "--shared", "--lock-delay", "5s")
    assert refused.exit_code == 2 and "takes no lock-delay" in refused.stderr


def test_a_dynamodb_force_that_lands_after_the_lease_ran_out_counts_the_delay_from_its_end(moto):
    """Review 8: a force read at F lands after the lease ran out at E. The lease ended at E, so
    nobody is granted the lock before E plus the delay. Counted from F, the delay would end
    E - F early (8 s, reproduced on every DynamoDB server)."""
    from awsflock.stores.dynamodb import DynamoDBStore

    clock = FakeClock()
    store = DynamoDBStore("awsflock", moto, clock=clock)  # type: ignore[arg-type]
    table = LockTable(store=store, clock=clock, owner="ops")
    start = clock.time()
    held = table.acquire("deploy", lease=10, lock_delay=20)
    read_at = start + 2  # the force read its clock 8 s before the lease ran out ...
    clock.advance(12)  # ... and its answer came after
    forced = store.force_release(
        "deploy",
        held.lease_id,
        force_id="late",
        now_ms=round(read_at * 1000),
        skew_ms=round(SKEW * 1000),
        actor="ops",
        reason="hung",
    )
    assert forced.applied
    state = table.state("deploy")
    assert isinstance(state, LockRecord) and state.free_after() == pytest.approx(start + 30)
    clock.advance(read_at + 20 + SKEW + 1 - clock.time())
    with pytest.raises(errors.LockBusy, match="its lock-delay keeps the lock until"):
        table.acquire("deploy", wait=0)
    clock.advance(start + 30 + SKEW + 1 - clock.time())
    assert table.acquire("deploy", wait=0).previous.how == "forced"


def test_a_dynamodb_force_counts_the_delay_from_its_answer_not_the_lease_end(moto):
    """A force of a long lease with a delay frees the lock at the force's answer plus the delay
    (its second write), not at the lease's end plus the delay."""
    from awsflock.stores.dynamodb import DynamoDBStore

    clock = FakeClock()
    store = DynamoDBStore("awsflock", moto, clock=clock)  # type: ignore[arg-type]
    table = LockTable(store=store, clock=clock, owner="ops")
    held = table.acquire("deploy", lease=3600, lock_delay=20)
    clock.advance(5)
    admin.force_release(table, "deploy", reason="stuck", lease_id=held.lease_id, actor="ops")
    state = table.state("deploy")
    assert isinstance(state, LockRecord)
    assert state.free_after() == pytest.approx(clock.time() + 20)
    clock.advance(20 + SKEW + 1)
    assert table.acquire("deploy", wait=0).previous.how == "forced"


def test_a_dynamodb_force_whose_second_write_fails_keeps_the_delay_from_the_lease_end(
    moto, monkeypatch, caplog
):
    """The write that counts the delay from the force's answer fails: the force stands, the
    delay counts from the lease's end (later, never earlier), and the forcer is told."""
    from awsflock.stores.dynamodb import DynamoDBStore
    from awsflock.stores.dynamodb.forces import Forces

    clock = FakeClock()
    store = DynamoDBStore("awsflock", moto, clock=clock)  # type: ignore[arg-type]
    table = LockTable(store=store, clock=clock, owner="ops")
    start = clock.time()
    held = table.acquire("deploy", lease=600, lock_delay=20)

    def fails(*args: object, **kw: object) -> None:
        raise errors.StoreError("throttled", hint="retry")

    monkeypatch.setattr(Forces, "_conditional_update", fails)
    admin.force_release(table, "deploy", reason="stuck", lease_id=held.lease_id, actor="ops")
    assert "its lock-delay could not be counted from now" in caplog.text
    state = table.state("deploy")
    assert isinstance(state, LockRecord) and state.forced
    assert state.free_after() == pytest.approx(start + 600 + 20)
