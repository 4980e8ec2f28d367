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
