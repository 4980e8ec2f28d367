"""Max-hold through the library (``max_hold=``): the store records the cap, no renewal moves a
lease past it, and a hold that reaches it ends with ``HoldCapped`` (a ``LeaseLost``), its
work told to stop, before the lease runs out. On the in-memory store in fake time; the
command line's ``--max-hold`` (exit 123) against real servers is in tests/integration."""

from __future__ import annotations

import time

import pytest

from awsflock import FakeClock, LockTable, MemoryStore, errors


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def table(clock: FakeClock) -> LockTable:
    return LockTable(store=MemoryStore(clock=clock), clock=clock, owner="ops")


def eventually(condition, timeout: float = 5.0) -> None:
    """Bounded real-time poll for the renewer thread to catch up with the fake clock."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_no_renewal_moves_the_lease_past_the_cap(table, clock):
    start = clock.time()
    held = table.acquire("deploy", lease=10, max_hold="25s")
    assert held.capped_at == pytest.approx(start + 25) and not held.capped
    clock.advance(5)
    assert held.renew().expires_at == pytest.approx(start + 15)
    clock.advance(9)
    assert held.renew().expires_at == pytest.approx(start + 24) and not held.capped
    clock.advance(8)
    assert held.renew().expires_at == pytest.approx(start + 25)  # not start + 32
    assert held.capped
    state = table.state("deploy")
    assert state is not None and state.capped_at == pytest.approx(start + 25)
    clock.advance(4)
    with pytest.raises(errors.NotHeld):
        held.renew()


def test_a_lease_longer_than_the_cap_ends_at_the_cap(table, clock):
    held = table.acquire("deploy", lease=60, max_hold=20)
    assert held.expires_at == pytest.approx(clock.time() + 20) and held.capped
    assert held.as_dict()["capped_at"] == pytest.approx(held.expires_at, abs=0.001)


def test_a_hold_that_reaches_its_cap_ends_with_hold_capped(table, clock):
    held = table.lock("deploy", lease=30, max_hold=100, margin=5)
    told = []
    held.on_lost = lambda _hold, err: told.append(err)
    with pytest.raises(errors.HoldCapped, match="reached its max-hold"), held:
        for n in range(1, 10):  # renewed every 10 s; from t=70 on, to the cap (t=100) only
            clock.advance(10)
            eventually(lambda n=n: held.renewals >= n)
        assert held.lease.capped and not held.lost.is_set()
        clock.advance(6)  # past the cap less the margin
        eventually(lambda: held.lost.is_set())
        assert isinstance(told[0], errors.HoldCapped) and isinstance(told[0], errors.LeaseLost)
    assert table.state("deploy").released  # released once the body stopped


def test_a_max_hold_out_of_range_or_on_a_share_is_refused(table):
    with pytest.raises(errors.UsageError, match="max-hold '0s' is out of range"):
        table.acquire("deploy", max_hold="0s")
    with pytest.raises(errors.UsageError, match="a shared holder takes no max-hold"):
        table.acquire("deploy", shared=True, max_hold="1h")


def test_each_name_of_a_set_takes_the_cap(table, clock):
    held = table.acquire(["a", "b"], lease=60, max_hold=30)
    assert all(lease.capped_at == pytest.approx(clock.time() + 30) for lease in held.leases)
    assert held.as_dict()["capped_at"] == pytest.approx(clock.time() + 30)
    assert held.expires_at == pytest.approx(clock.time() + 30)


def test_the_command_line_takes_a_max_hold_and_status_shows_the_cap(moto):
    import json

    from click.testing import CliRunner

    from awsflock.cli import cli

    runner = CliRunner()

    def run(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    taken = run("acquire", "deploy", "--max-hold", "1h", "--lease-duration", "2h", "--json")
    assert taken.exit_code == 0, taken.stderr
    lease = json.loads(taken.stdout)
    assert lease["capped_at"] == pytest.approx(lease["expires_at"], abs=0.01)
    status = json.loads(run("status", "deploy", "--json").stdout)
    assert 3590 < status["capped_in_s"] <= 3600
    text = run("status", "deploy").stdout
    assert "max-hold:" in text and "no renewal passes it" in text, text
    refused = run("acquire", "other", "--shared", "--max-hold", "5m")
    assert refused.exit_code == 2 and "takes no max-hold" in refused.stderr
    bad = run("acquire", "other", "--max-hold", "0")
    assert bad.exit_code == 2 and "max-hold" in bad.stderr


def test_an_async_body_is_cancelled_at_the_cap_and_stops_before_the_release():
    import asyncio

    from awsflock import aio
    from awsflock.stores.memory_async import AsyncMemoryStore

    clock = FakeClock()
    store = MemoryStore("t", clock=clock)
    seen: list[str] = []

    async def main() -> None:
        table = aio.LockTable(store=AsyncMemoryStore(store))

        async def hold() -> None:
            async with table.lock("job", lease=30, max_hold=90, margin=5):
                try:
                    await asyncio.Event().wait()  # work that never ends by itself
                except asyncio.CancelledError:
                    released = store.read("job").lock.released
                    seen.append("cancelled, " + ("released" if released else "not released"))
                    raise

        task = asyncio.create_task(hold())
        for _ in range(400):  # the renewals run; the cap comes at 90 s, less the margin
            if task.done():
                break
            clock.advance(0.5)
            await asyncio.sleep(0.002)
        with pytest.raises(errors.HoldCapped, match="reached its max-hold"):
            await task
        assert 85 <= clock.time() - 1_800_000_000.0 < 90

    asyncio.run(main())
    assert seen == ["cancelled, not released"]
    assert store.read("job").lock.released


def test_a_cap_shorter_than_the_lease_s_margin_is_timed_from_the_cap(table, clock):
    # Review: the margin came from the lease (60 s: 10 s), so a hold capped at 8 s counted
    # itself lost at once.
    held = table.lock("deploy", lease=60, max_hold=8)
    with held:
        assert held.margin < 8 and not held.lost.is_set()
        held.check()


def test_run_times_its_kill_from_the_cap_when_that_is_shorter():
    from awsflock.lock import renewal
    from awsflock.supervise.runner import RunOptions, run

    table = LockTable(store=MemoryStore(), owner="ops")
    with pytest.raises(errors.UsageError, match="too long for a 3s max-hold") as refused:
        run(table, "deploy", ["true"], RunOptions(lease=120, max_hold=3, kill_after=20))
    assert "a longer --max-hold" in (refused.value.hint or "")
    kill_after, margin = renewal.POLICY.kill_timing(3, None, True)
    assert kill_after + 0.1 < margin < 3  # dead before the cap, whatever the lease
