"""One renewer for all the holds of a table (``awsflock.lock.renewer``): 1,000 holds take a
handful of threads, each renewed on its schedule; a renewal that hangs neither delays the
others nor keeps its own hold from being declared lost at its deadline."""

from __future__ import annotations

import threading
import time
from typing import Any

from awsflock.clock import FakeClock
from awsflock.lock import renewer
from awsflock.lock.lease import LockTable
from awsflock.stores.memory import MemoryStore
from tests.helpers import ParkingClock


def eventually(condition: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def advance(clock: ParkingClock, table: LockTable, seconds: float, running: int = 0) -> None:
    """Move the fake clock once every thread of the table's renewer waits on it, but
    ``running``. (A scheduler that read the time just before a move then waits from the new
    time: on a fake clock, which moves only when told, it would wait for good.)"""
    eventually(lambda: clock.parked() >= table.renewer().threads - running)
    clock.advance(seconds)


def _threads(name: str = "awsflock-renewer:t") -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith(name))


def test_a_thousand_holds_take_a_few_threads_and_all_are_renewed():
    clock = ParkingClock()
    table = LockTable(store=MemoryStore("t", clock=clock))
    before = threading.active_count()
    holds = [table.lock(f"lock-{n}", lease=60).start() for n in range(1000)]
    for turn in range(1, 4):
        advance(clock, table, 20)  # every hold is due
        eventually(lambda turn=turn: all(h.renewals >= turn for h in holds))
        assert _threads() <= 1 + renewer.MAX_WORKERS
    assert threading.active_count() - before <= 1 + renewer.MAX_WORKERS
    assert not any(h.lost.is_set() for h in holds)
    for hold in holds:
        hold.stop()
    eventually(lambda: _threads() == 0)


class Hanging(MemoryStore):
    """A renewal of ``hung`` hangs (real time) until ``go`` is set; the rest answer at once."""

    def __init__(self, clock: ParkingClock) -> None:
        super().__init__("t", clock=clock)
        self.go = threading.Event()
        self.hung = "slow"

    def renew(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        if lock_id == self.hung:
            self.go.wait(30)
        return super().renew(lock_id, lease_id, **step)


def test_a_hanging_renewal_delays_no_other_hold_and_loses_its_own_at_its_deadline():
    clock = ParkingClock()
    store = Hanging(clock)
    table = LockTable(store=store)
    slow = table.lock("slow", lease=60, margin=10).start()
    others = [table.lock(f"ok-{n}", lease=60, margin=10).start() for n in range(20)]
    advance(clock, table, 20)  # all due: "slow"'s renewal hangs
    eventually(lambda: all(h.renewals == 1 for h in others))
    assert slow.renewals == 0 and not slow.lost.is_set()
    advance(clock, table, 20, running=1)  # the worker of the hanging renewal
    eventually(lambda: all(h.renewals == 2 for h in others))
    # Past "slow"'s deadline (60 - 10): lost, its renewal still hanging.
    advance(clock, table, 10.5, running=1)
    eventually(slow.lost.is_set)
    assert not store.go.is_set()
    assert not any(h.lost.is_set() for h in others)
    store.go.set()
    slow.stop(release=False, join_timeout=5)
    for hold in others:
        hold.stop()


class _Due:
    """A hold as the schedule sees it: when its next step is due, and its deadline."""

    def __init__(self, wake: float, deadline: float) -> None:
        self.wake, self.deadline = wake, deadline

    def wake_at(self) -> float:
        return self.wake

    def deadline_at(self) -> float:
        return self.deadline


def test_a_hold_whose_step_starts_is_looked_at_again_by_its_deadline():
    """Its renewal may hang past the deadline: the renewer must wake then to declare the loss
    (and cancel an aio body), not only once the renewal gives up."""
    schedule = renewer._Schedule()
    hold = _Due(wake=5.0, deadline=40.0)
    schedule.add(hold)
    ready, soonest = schedule.due(5.0)
    assert ready == [hold]
    assert soonest == 40.0


def test_an_async_release_waits_for_a_renewal_in_flight_in_a_simulated_clock_s_time():
    # Found by running awsflock.aio in the simulator: the wait for a renewal still in flight
    # counted real seconds, so in virtual time it polled for as long as the machine took.
    import asyncio
    import types

    from awsflock.lock.renewer import AsyncRenewer

    class Simulated(FakeClock):
        def __init__(self) -> None:
            super().__init__()
            self.waits: list[float] = []

        def start_thread(self, target: Any, args: Any, name: str) -> None:
            raise AssertionError("not started here")

        async def wait_async(self, event: Any, seconds: float) -> bool:
            self.waits.append(seconds)
            return bool(event.is_set())

    clock = Simulated()
    hold = types.SimpleNamespace(idle=threading.Event())  # its renewal still runs
    asyncio.run(AsyncRenewer(clock).wait_idle(hold, 0.05))
    assert clock.waits == [0.05]
