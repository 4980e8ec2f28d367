"""Fair waiting (``fair=True`` / ``--fair``) in virtual time: the real library code, several
processes, the simulator's scheduler (``tests/simulation/world.py``), no real sleeping."""

from __future__ import annotations

import contextlib
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Callable

import pytest

from awsflock import errors
from awsflock.lock.lease import LockTable
from awsflock.protocol import LINE_LAPSE_MS
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore
from tests.simulation.attach import Attach
from tests.simulation.network import Faults, Network
from tests.simulation.world import EPOCH, World

LOCK = "deploy"


@dataclass
class Run:
    """What happened in one little world."""

    world: World
    store: MemoryStore
    #: (name, virtual seconds, slot) per grant, in grant order.
    grants: list[tuple[str, float, int | None]] = field(default_factory=list)
    busy: list[tuple[str, float, str]] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)
    #: Waiters that gave up and were no longer in line when they said so.
    left_at_once: list[str] = field(default_factory=list)

    def order(self) -> list[str]:
        return [name for name, _, _ in self.grants]


def line_world(
    arrivals: list[float],
    *,
    seed: int = 1,
    hold: float = 2.0,
    wait: float | Callable[[int], float] = 60.0,
    fair: Callable[[int], bool] = lambda i: True,
    slots: int | None = None,
    kill: dict[int, float] | None = None,
    pause: dict[int, tuple[float, float]] | None = None,
    clock_error: float = 0.0,
    faults: Faults | None = None,
    slow: dict[int, float] | None = None,
) -> Run:
    """Process i acquires at ``arrivals[i]`` (virtual seconds), holds ``hold`` s, releases.
    ``kill``: process -> when it is killed; ``pause``: process -> (when, how long); ``slow``:
    process -> how long each of its requests, and each answer, travels (besides the rest)."""
    world = World(seed)
    store = MemoryStore()
    network = Network(world, faults or Faults.none())
    run = Run(world, store)
    for i, at in enumerate(arrivals):
        proc = world.process(f"w{i}", clock_error)
        sim = Attach(store, network, None).store(proc)
        counting = _Counting(sim, run.requests, proc.name, (slow or {}).get(i, 0.0), proc.clock)
        table = LockTable(
            store=counting,  # type: ignore[arg-type]
            clock=proc.clock,  # type: ignore[arg-type]
            rng=random.Random(seed * 1000 + i),
            skew=5.0,
            identity=Identity(owner=proc.name, host=proc.name, pid=i + 1),
        )

        def work(
            table: LockTable = table, at: float = at, name: str = proc.name, i: int = i
        ) -> None:
            table.clock.sleep(at)
            waits = wait(i) if callable(wait) else wait
            try:
                lease = table.acquire(
                    LOCK, lease=max(30.0, 2 * hold), wait=waits, fair=fair(i), slots=slots
                )
            except errors.LockBusy as busy:
                run.busy.append((name, world.now - EPOCH, busy.one_line()))
                if name not in [w.identity.owner for w in store.read(LOCK).line.waiters]:
                    run.left_at_once.append(name)
                return
            run.grants.append((name, world.now - EPOCH, lease.slot))
            table.clock.sleep(hold)
            with contextlib.suppress(errors.EndpointUnreachable):
                lease.release()  # under faults it may fail: the lease then runs out

        world.spawn(proc, work)
        if kill and i in kill:
            world.at(EPOCH + kill[i], lambda proc=proc: setattr(proc, "killed", True))
        if pause and i in pause:
            when, length = pause[i]
            world.at(
                EPOCH + when,
                lambda proc=proc, length=length: setattr(proc, "paused_until", world.now + length),
            )
    logging.getLogger("awsflock").setLevel(logging.ERROR)
    try:
        while world.step():
            for thread in list(world.threads):
                if thread.done and thread.error is not None:
                    raise thread.error
        assert world.now - EPOCH < 3600, "the world ran for an hour"
    finally:
        world.finish()
        logging.getLogger("awsflock").setLevel(logging.NOTSET)
    return run


class _Counting:
    """Counts each process's requests by kind (a request is one call to the store)."""

    def __init__(
        self,
        inner: Any,
        counts: dict[str, int],
        name: str,
        delay: float = 0.0,
        clock: Any = None,
    ) -> None:
        self._inner = inner
        self._counts = counts
        self._name = name
        self._delay = delay
        self._clock = clock

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr in ("take", "join", "beat", "leave", "release", "renew", "read"):

            def call(*args: Any, **kwargs: Any) -> Any:
                key = f"{self._name}:{attr}"
                self._counts[key] = self._counts.get(key, 0) + 1
                if self._delay:
                    self._clock.sleep(self._delay)  # the request travels
                result = value(*args, **kwargs)
                if self._delay:
                    self._clock.sleep(self._delay)  # the answer travels
                return result

            return call
        return value


ARRIVALS = [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("seed", range(1, 6))
def test_fair_waiters_are_granted_in_order_of_arrival(seed):
    run = line_world(ARRIVALS, seed=seed, clock_error=2.5)
    assert run.order() == ["w0", "w1", "w2", "w3", "w4"]


def test_without_fair_the_order_is_whoever_polls_first():
    # The same worlds without --fair: some seed hands the lock out of order (this is what the
    # line is for, and shows the test above can fail).
    orders = [line_world(ARRIVALS, seed=s, fair=lambda i: False).order() for s in range(1, 9)]
    assert any(order != ["w0", "w1", "w2", "w3", "w4"] for order in orders)


def test_hand_off_to_the_head_of_the_line_is_prompt_however_long_it_waited():
    run = line_world([0.0, 1.0], hold=600.0, wait=900.0)
    (_, first, _), (_, second, _) = run.grants
    assert 600.0 <= second - first <= 600.0 + 1.5


def test_a_waiter_in_line_makes_about_one_request_per_second():
    run = line_world([0.0, 1.0], hold=120.0, wait=900.0)
    beats = run.requests["w1:beat"]
    assert 120 / 1.25 - 2 <= beats <= 120 / 0.75 + 2
    # Joined once, took once; the first try was the one plain take.
    assert run.requests["w1:join"] == 1
    assert run.requests["w1:take"] == 2


def test_an_uncontended_fair_acquire_is_one_request():
    run = line_world([0.0])
    assert run.requests == {"w0:take": 1, "w0:release": 1}


def test_a_killed_waiter_is_passed_over_within_the_lapse_bound():
    # w1 dies in line, ahead of w2; the holder releases at 10 s.
    run = line_world([0.0, 1.0, 2.0], hold=10.0, kill={1: 5.0})
    assert run.order() == ["w0", "w2"]
    (_, released_at, _) = run.grants[0]
    (_, granted, _) = run.grants[1]
    # Released at 10 s; w1's place lapsed at the latest 5 + lapse + one poll after it died.
    assert granted - (released_at + 10.0) <= 1.5


def test_a_dead_head_of_the_line_is_passed_over_within_the_lapse_bound():
    # The head dies just before the release: the next in line takes over after the lapse.
    run = line_world([0.0, 1.0, 2.0], hold=10.0, kill={1: 9.9})
    assert run.order() == ["w0", "w2"]
    granted = run.grants[1][1]
    assert granted <= 9.9 + LINE_LAPSE_MS / 1000 + 2 * 1.25


def test_a_waiter_whose_wait_runs_out_leaves_the_line_at_once():
    # w1 waits only 3 s (gives up at 4 s); w2 is granted at the release, not held up by it.
    run = line_world([0.0, 1.0, 2.0], hold=10.0, wait=lambda i: 3.0 if i == 1 else 60.0)
    assert run.order() == ["w0", "w2"]
    assert [name for name, _, _ in run.busy] == ["w1"]
    assert run.left_at_once == ["w1"]
    assert run.grants[1][1] <= 10.0 + 1.5


def test_a_non_fair_acquire_never_jumps_a_live_line():
    # w0 holds; w1 and w2 wait in line; w3 (not fair) arrives last and polls as often.
    run = line_world([0.0, 1.0, 2.0, 3.0], fair=lambda i: i != 3, hold=5.0)
    assert run.order() == ["w0", "w1", "w2", "w3"]


def test_no_wait_on_a_free_lock_with_a_line_is_busy_and_says_how_many_wait():
    store = MemoryStore()
    holder = LockTable(store=store, identity=Identity(owner="holder"))
    lease = holder.acquire(LOCK, lease=60)
    # Two fair waiters are in line (as their join would leave them) when the holder releases.
    from awsflock.records import Waiter

    now = round(holder.clock.time() * 1000)
    for number, owner in enumerate(("ana", "ci-2")):
        waiter = Waiter(f"{number:016x}", number, Identity(owner=owner), now, now)
        assert store.join(LOCK, waiter).applied
    lease.release()
    with pytest.raises(errors.LockBusy) as busy:
        LockTable(store=store).acquire(LOCK, wait=0)
    assert "free, but 2 waiters are in line for it (--fair)" in busy.value.one_line()
    # A line nobody polled for the lapse plus the skew window is no line at all.
    later = LockTable(store=store, skew=0.0)
    later.clock = _Shifted(LINE_LAPSE_MS / 1000 + 1)
    assert later.acquire(LOCK, wait=0).fencing_token is not None


class _Shifted:
    """The real clock, some seconds ahead."""

    def __init__(self, ahead: float) -> None:
        import time

        self._time = time
        self.ahead = ahead

    def time(self) -> float:
        return self._time.time() + self.ahead

    def monotonic(self) -> float:
        return self._time.monotonic()

    def sleep(self, seconds: float) -> None:
        raise AssertionError("no sleeping here")

    def wait(self, event: Any, seconds: float) -> bool:
        raise AssertionError("no waiting here")


def test_pool_line_serves_six_waiters_in_order_as_slots_free():
    run = line_world([0.0, 0.1, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], slots=2, hold=5.0)
    order = run.order()
    assert order == [f"w{i}" for i in range(8)]
    assert {slot for _, _, slot in run.grants} == {0, 1}


@pytest.mark.parametrize("seed", range(1, 4))
def test_fair_waiting_under_faults_still_grants_each_waiter_once(seed):
    # Lost answers, late requests, throttling: nobody is granted twice and nobody holds the
    # lock with another (the line only adds conditions); order may bend where a place was lost.
    run = line_world(ARRIVALS, seed=seed, faults=Faults(), wait=300.0)
    assert sorted(run.order()) == sorted(set(run.order()))
    spans = sorted((t, t + 2.0) for _, t, _ in run.grants)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 1e-6


def test_a_paused_waiter_loses_its_place_and_joins_again_at_the_end():
    # w1 is paused (SIGSTOP) for 20 s while in line: its place lapses, w2 goes first.
    run = line_world([0.0, 1.0, 2.0], hold=30.0, wait=300.0, pause={1: (3.0, 20.0)})
    assert run.order() == ["w0", "w2", "w1"]


@pytest.mark.parametrize("seed", range(6))
def test_a_fair_acquire_of_a_pool_with_a_free_slot_takes_no_place(seed):
    store = MemoryStore()
    counts: dict[str, int] = {}
    for owner in ("a", "b"):
        LockTable(store=store, identity=Identity(owner=owner)).acquire("gpus", slots=3)
    table = LockTable(
        store=_Counting(store, counts, "c"),  # type: ignore[arg-type]
        rng=random.Random(seed),
        identity=Identity(owner="c"),
    )
    lease = table.acquire("gpus", slots=3, fair=True, wait=60)
    assert lease.slot is not None
    assert "c:join" not in counts and counts["c:take"] <= 3


def test_a_dead_waiter_behind_the_last_live_one_does_not_outlive_the_line():
    # w2 dies in line behind w1; w1 keeps polling past the lapse, so its next poll removes
    # w2's place: when w1 takes the lock, nobody is left in line.
    run = line_world([0.0, 1.0, 2.0], hold=10.0, kill={2: 3.0})
    assert run.order() == ["w0", "w1"]
    assert run.store.read(LOCK).line.waiters == ()


def test_a_burst_of_dead_waiters_is_cleared_a_bounded_number_per_write():
    # 24 waiters die in line (a cancelled batch of CI jobs); a live one arrives behind them.
    # It removes at most MAX_DROPS lapsed places per write (a DynamoDB expression is limited
    # to 4 KB: the in-memory store refuses more, as DynamoDB would), and still takes the lock
    # promptly after the release.
    dead = list(range(1, 25))
    arrivals = [0.0] + [0.5 + 0.1 * i for i in dead] + [4.0]
    run = line_world(arrivals, hold=12.0, kill={i: 3.5 for i in dead})
    assert run.order() == ["w0", "w25"]
    assert run.grants[1][1] <= 12.0 + 1.5
    assert run.store.read(LOCK).line.waiters == ()


@pytest.mark.parametrize("seed", range(1, 7))
def test_a_slow_but_live_waiter_keeps_its_place(seed):
    # The first waiter's requests and answers take 1.1 s each way (2.2 s a round trip), the
    # others' a few milliseconds: polls are spaced from their starts, so its beats land every
    # 2.2 s and its place never looks lapsed (3 s unchanged) to the quick waiter behind it.
    # (Its take and join take 4.4 s: the third arrives after it is in line.)
    run = line_world([0.0, 1.0, 6.0], seed=seed, hold=20.0, slow={1: 1.1})
    assert run.order() == ["w0", "w1", "w2"]


def test_a_place_wiped_with_the_record_is_said_so(caplog):
    from types import SimpleNamespace

    from awsflock.lock.line import Place
    from awsflock.records import Line, Waiter

    clock = _Shifted(0)
    run = SimpleNamespace(
        lock_id=LOCK, holder=None, clock=clock, skew=5.0, line=Line(), rng=random.Random(7)
    )
    place = Place(run, "00000000000000aa")  # type: ignore[arg-type]
    me = Waiter(place.ticket, 4, Identity(owner="me"), 1, 1)
    place.observe(Line(5, (me,), 1))
    assert place.state == "in"
    with caplog.at_level(logging.WARNING, logger="awsflock"):
        place.observe(Line(0, (), None))  # the record was replaced: numbering starts over
    assert place.state == "out"
    assert "the lock's record was replaced (by awsflock 0.2.0, or deleted by TTL)" in caplog.text
    # Found by review 7: the new line's numbering can give the old number again, so the new
    # place takes a new ticket; a take sent under the old one, landing late, holds no place.
    assert place.ticket != me.ticket and run.own_ticket == place.ticket
    assert place.number is None
    me = Waiter(place.ticket, 4, Identity(owner="me"), 1, 1)
    place.observe(Line(5, (me,), 1))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="awsflock"):
        place.observe(Line(9, (), None))  # the same record: our polls stopped arriving
    assert "no poll of ours arrived for 3s: paused, or requests too slow" in caplog.text


def test_busy_messages_count_only_live_waiters_and_tell_a_non_fair_waiter_who_goes_first():
    from awsflock.records import Waiter

    store = MemoryStore()
    holder = LockTable(store=store, identity=Identity(owner="holder"))
    lease = holder.acquire(LOCK, lease=60)
    now = round(holder.clock.time() * 1000)
    lapsed = now - LINE_LAPSE_MS - 5000 - 1  # not polled for the lapse plus the skew window
    for number, seen in enumerate((now, lapsed, now)):
        assert store.join(
            LOCK, Waiter(f"{number:016x}", 0, Identity(owner="w"), seen, seen)
        ).applied
    with pytest.raises(errors.LockBusy) as busy:
        LockTable(store=store).acquire(LOCK, wait=0)
    assert busy.value.one_line().endswith(
        "and 2 waiters are in line for it (--fair): they go first"
    )
    lease.release()
    with pytest.raises(errors.LockBusy) as busy:
        LockTable(store=store).acquire(LOCK, wait=0)
    assert "is free, but 2 waiters are in line for it (--fair) and go first" in str(busy.value)
