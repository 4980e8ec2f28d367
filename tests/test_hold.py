"""LockTable.hold(): background renewal, loss detection before expiry, release on exit."""

from __future__ import annotations

import gc
import logging
import threading
import time

import pytest

from awsflock import errors
from awsflock.lock.lease import LockTable
from awsflock.stores.memory import MemoryStore
from tests.helpers import CountingClient, FlakyClient, ParkingClock


def eventually(condition, timeout: float = 5.0) -> None:
    """Bounded real-time poll for the heartbeat thread to catch up with the fake clock."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_hold_renews_every_third_of_the_lease(make_table, moto, clock):
    make_table("before").acquire("h", lease=60, wait=0).release()  # one request per take
    clock.advance(1)
    client = CountingClient(moto)
    held = make_table(client=client).hold("h", lease=60)
    with held:
        assert client.calls["transact_write_items"] == 1
        for n in range(1, 6):
            clock.advance(20)
            eventually(lambda n=n: held.renewals == n)
        assert held.lease.expires_at == pytest.approx(clock.time() + 60, abs=0.01)
        assert client.calls["update_item"] == 5
        held.check()
    # The release: one transaction, with the lease's done item.
    assert client.calls["update_item"] == 5 and client.calls["transact_write_items"] == 2


def test_a_wall_clock_step_neither_stops_renewals_nor_stretches_the_deadline(make_table, clock):
    # The hold goes by the monotonic clock: after the wall clock steps back it still renews
    # every third of the lease (no renewal waits for the wall clock to catch up), and without
    # renewals it counts the lease lost when its own monotonic deadline passes, whatever the
    # wall clock says. (A step back of the clock the renewals are written from shortens what
    # it counts on: see the next test.)
    held = make_table().hold("stepped", lease=60)
    with held:
        clock.step_wall(-10)
        for n in range(1, 4):
            clock.advance(20)
            eventually(lambda n=n: held.renewals == n)
        held.check()
        before = held.mono_deadline()
        clock.step_wall(+600)  # a step forward does not end it before its deadline either
        held.check()
        assert held.mono_deadline() == before
        clock.step_wall(-600)
    held_too = make_table().hold("stepped-2", lease=60, renew_every=50, margin=5)
    with pytest.raises(errors.LeaseLost), held_too:
        clock.step_wall(-3600)
        clock.advance(56)  # past the deadline (60 - 5) by the monotonic clock
        eventually(lambda: held_too.lost.is_set())
        held_too.check()


@pytest.mark.parametrize("step", ["take", "renew"])
def test_a_wall_clock_step_while_the_answer_is_on_its_way_does_not_stretch_the_lease(step):
    # Found by the second adversarial review: the lease's monotonic end was derived from the
    # wall clock read after the answer; a step back in between stretched it by the step. It is
    # now put on the monotonic clock read together with the now_ms the store wrote from.
    from awsflock import LockTable
    from awsflock.clock import FakeClock
    from awsflock.stores.memory import MemoryStore

    clock = FakeClock()
    store = MemoryStore(clock=clock)
    table = LockTable(store=store)
    lease = table.acquire("stepped", lease=10, wait=0) if step == "renew" else None
    real = getattr(store, step)

    def answered_then_stepped(*args, **kwargs):
        out = real(*args, **kwargs)
        clock.step_wall(-60)  # an NTP step back while the answer is on its way
        return out

    setattr(store, step, answered_then_stepped)
    if lease is None:
        lease = table.acquire("stepped", lease=10, wait=0)
    else:
        table.renew(lease)
    assert lease.expires_mono - clock.monotonic() == pytest.approx(10, abs=0.01)


def test_a_wall_clock_step_back_during_a_hold_never_moves_the_lease_end_back():
    # On a store that writes a lease's end from the holder's wall clock, a renewal after a step
    # back would write an end others see earlier by the step. The store now renews from the
    # latest reading the lease was written with instead (a renew never moves its end back), and
    # the holder counts on no more than that end, as others read it.
    from awsflock import LockTable
    from awsflock.clock import FakeClock
    from awsflock.stores.memory import MemoryStore

    clock = FakeClock()
    table = LockTable(store=MemoryStore(clock=clock))
    lease = table.acquire("stepped-mid-hold", lease=60, wait=0)
    end = lease.expires_at
    clock.advance(20)
    clock.step_wall(-30)
    table.renew(lease)
    assert lease.expires_at == pytest.approx(end)  # not moved back by the step
    assert lease.expires_mono - clock.monotonic() == pytest.approx(40, abs=0.01)
    clock.advance(20)  # the wall clock is past the last reading again: the renew extends
    table.renew(lease)
    assert lease.expires_at == pytest.approx(end + 10)
    assert lease.expires_mono - clock.monotonic() == pytest.approx(30, abs=0.01)


def test_hold_keeps_the_lock_for_many_lease_periods(make_table, clock):
    with make_table("a").hold("long", lease=30) as held:
        for n in range(1, 31):
            clock.advance(10)
            eventually(lambda n=n: held.renewals == n)
        with pytest.raises(errors.LockBusy):
            make_table("b").acquire("long", lease=10, wait=0)
        held.check()


def test_hold_exposes_a_fencing_token_that_grows(make_table):
    with make_table().hold("f", lease=60) as first:
        token = first.fencing_token
    with make_table().hold("f", lease=60) as second:
        assert second.fencing_token > token


def test_failed_renewals_are_retried_and_loss_is_declared_before_expiry(
    make_table, moto, clock, caplog
):
    # Time moves on only while every renewer thread waits on the clock: under load, a clock
    # moved on a real-time beat ran ahead of a lagging renewer, and the loss was seen late.
    clock = ParkingClock()
    lost = []
    client = FlakyClient(moto, failures=0)
    table = make_table(client=client, clock=clock)
    held = table.hold("l", lease=60, on_lost=lambda h, err: lost.append((clock.time(), err)))
    held.start()
    expires = held.lease.expires_at
    client.failures = 10_000  # the endpoint goes away
    for _ in range(400):
        eventually(lambda: held.lost.is_set() or clock.parked() == table.renewer().threads)
        if held.lost.is_set():
            break
        clock.advance(0.5)
    eventually(lambda: bool(lost))  # on_lost runs after the event is set
    when, err = lost[0]
    assert isinstance(err, errors.LeaseLost)
    # Declared lost at the safety margin (lease/6 = 10 s) before expiry, not after.
    assert expires - 10 - 0.6 <= when <= expires - 10 + 0.6
    assert 10_000 - client.failures > 3  # it kept retrying before giving up
    with pytest.raises(errors.LeaseLost):
        held.check()
    with caplog.at_level(logging.WARNING, "awsflock"), pytest.raises(errors.LeaseLost):
        held.stop()
    # Third review: the release after the loss failed silently, and a renewal that landed
    # later kept the lock held for a lease by nobody. What frees it is named.
    (warning,) = [r for r in caplog.records if getattr(r, "event", None) == "release_failed"]
    assert f"`awsflock release l {held.lease_id}`" in warning.getMessage()


def test_refused_renewal_is_loss_at_once(make_table, moto, clock):
    held = make_table("a").hold("r", lease=60)
    held.start()
    # An operator (or a clock gone wrong) lets someone else take the lock.
    moto.update_item(
        TableName="awsflock",
        Key={"lock_id": {"S": "r"}},
        UpdateExpression="SET lease_id = :other, lease = :other",
        ExpressionAttributeValues={":other": {"S": "9" * 8 + "-9999-4999-8999-" + "9" * 12}},
    )
    clock.advance(20)
    eventually(held.lost.is_set)
    with pytest.raises(errors.LeaseLost, match="renewal refused"):
        held.check()
    held.stop(release=False)


def test_check_fails_past_the_deadline_even_if_the_thread_is_stuck(make_table, clock):
    held = make_table().hold("stuck", lease=60, margin=5)
    held.start()
    # The renewer loses it (simulated): check() must still notice the deadline by the clock.
    held.table.renewer().remove(held)
    clock.advance(54)
    held.check()
    clock.advance(1.5)
    with pytest.raises(errors.LeaseLost):
        held.check()
    held.stop(release=False)


def test_exit_releases_and_propagates_the_callers_exception(make_table):
    with pytest.raises(ValueError, match="inside"), make_table().hold("x", lease=60):
        raise ValueError("inside")
    make_table("b").acquire("x", lease=60, wait=0)


def test_exit_raises_lease_lost_when_the_lease_was_lost_silently(make_table, moto, clock):
    with pytest.raises(errors.LeaseLost), make_table().hold("silent", lease=60):
        moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "silent"}})
        clock.advance(20)
        time.sleep(0.2)


def _renewer_threads(table) -> list[threading.Thread]:
    name = f"awsflock-renewer:{table.table_name}"
    return [t for t in threading.enumerate() if t.name.startswith(name)]


def test_the_renewer_threads_are_named_daemons_that_end_with_the_last_hold(make_table, clock):
    table = make_table()
    held = table.hold("t", lease=60)
    held.start()
    clock.advance(20)
    eventually(lambda: held.renewals == 1)
    threads = _renewer_threads(table)
    assert {t.name for t in threads} == {
        "awsflock-renewer:awsflock",
        "awsflock-renewer:awsflock-worker",
    }
    assert all(t.daemon for t in threads)
    held.stop()
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


def test_a_dropped_hold_does_not_keep_itself_alive(make_table, clock):
    table = make_table()
    held = table.hold("drop", lease=60)
    held.start()
    threads = _renewer_threads(table)
    assert threads
    del held
    gc.collect()
    clock.advance(20)
    for thread in threads:
        thread.join(5)
        assert not thread.is_alive()


def test_stop_from_the_lost_callback_does_not_join_itself(make_table, moto, clock):
    done = threading.Event()

    def stop_inside(hold, err):
        hold.stop(release=False)
        done.set()

    held = make_table().hold("cb", lease=60, on_lost=stop_inside)
    held.start()
    moto.delete_item(TableName="awsflock", Key={"lock_id": {"S": "cb"}})
    clock.advance(20)
    assert done.wait(5)


def test_margin_that_leaves_no_time_to_renew_is_refused(make_table):
    with pytest.raises(errors.UsageError):
        make_table().hold("m", lease=60, margin=45)


class _StuckRenewals(MemoryStore):
    """A store whose renewals hang until the test lets them fail (an endpoint gone silent)."""

    def __init__(self, clock) -> None:
        super().__init__(clock=clock)
        self.renewing = threading.Event()
        self.answer = threading.Event()

    def renew(self, *args, **kwargs):
        self.renewing.set()
        assert self.answer.wait(5)
        raise errors.EndpointUnreachable("the endpoint did not answer in time")


class _Said(logging.Handler):
    """Records what was logged, in order, and whether the hold counted as lost at each line."""

    def __init__(self, hold_of) -> None:
        super().__init__(logging.DEBUG)
        self.hold_of = hold_of
        self.lines: list[tuple[str, str, bool]] = []

    def emit(self, record: logging.LogRecord) -> None:
        lost = self.hold_of().lost.is_set()
        self.lines.append((record.levelname, record.getMessage(), lost))


def test_loss_lines_come_in_the_order_of_events(clock):
    # Issue 38 (13): a renewal cut off by the safety deadline failed while the
    # caller's own check declared the loss, and said "renewal failed ... retrying" after "lost".
    store = _StuckRenewals(clock)
    held = LockTable(store=store, clock=clock).hold("order", lease=60, margin=10)
    said = _Said(lambda: held)
    logger = logging.getLogger("awsflock.heartbeat")
    logger.addHandler(said)
    level, logger.level = logger.level, logging.DEBUG
    try:
        held.start()
        clock.advance(20)
        assert store.renewing.wait(5)  # a renewal is on its way, unanswered
        clock.advance(31)  # past the safety deadline (60 - 10)
        with pytest.raises(errors.LeaseLost):
            held.check()
        store.answer.set()
        held.stop(release=False)
    finally:
        logger.removeHandler(said)
        logger.level = level
    shown = [(lvl, msg) for lvl, msg, _ in said.lines if lvl != "DEBUG"]
    assert len(shown) == 1 and shown[0][1].startswith("lost the lock 'order'"), said.lines
    # Said before the hold counted as lost: a caller that acts on the loss (run, stopping its
    # command and saying so) writes its own lines after this one.
    assert [lost for _, msg, lost in said.lines if msg.startswith("lost")] == [False]
