"""What a waiting acquire or run says on stderr by default: who holds the lock when the wait
begins, how the wait stands now and then on a long one (and when the holder changes), and the
grant that ends it. Nothing for a lock free at once, nothing with -q, only its one line for a
try that does not wait. On the in-memory store, in fake time."""

from __future__ import annotations

import json
import re
import sys
import threading
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner

from awsflock.cli import cli
from awsflock.cli.options import Common
from awsflock.lock.held import Lease
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore
from tests.helpers import ScheduledClock

ALICE = Identity(owner="alice", host="build-7", pid=41, ci_url="https://ci.example/runs/9")
BOB = Identity(owner="bob", host="build-8", pid=42)


class Ticking(ScheduledClock):
    """Fake time that the command's wait on an event moves forward, as a sleep does (the
    CLI's acquire waits on its cancel event between polls). Other threads (the renewer's) wait
    for it as on any fake clock: they must not race the time on by themselves."""

    def wait(self, event: threading.Event, seconds: float) -> bool:
        if threading.current_thread() is not threading.main_thread():
            return super().wait(event, seconds)
        if not event.is_set():
            self.sleep(seconds)
        return event.is_set()


@dataclass
class World:
    clock: Ticking
    store: MemoryStore

    def table(self, who: Identity) -> LockTable:
        return LockTable(store=self.store, identity=who)

    def hold(self, who: Identity, until: float, lock: str = "deploy") -> Lease:
        """``who`` holds ``lock`` (a 10-minute lease) and releases it ``until`` seconds from
        now, in fake time."""
        lease = self.table(who).acquire(lock, lease=600, wait=0)
        self.clock.at(self.clock.time() + until, lease.release)
        return lease

    def hand_over(self, held: Lease, after: float, to: Identity, until: float) -> None:
        """``held`` is released after ``after`` s and ``to`` takes the lock at once, holding
        it ``until`` s more."""

        def swap() -> None:
            held.release()
            self.hold(to, until)

        self.clock.at(self.clock.time() + after, swap)

    def run(self, *args: str) -> Any:
        return CliRunner().invoke(cli, list(args))


@pytest.fixture
def world(monkeypatch) -> World:
    clock = Ticking()
    world = World(clock, MemoryStore(clock=clock))

    def table(self: Common, owner: str | None = None) -> LockTable:
        return world.table(Identity(owner=owner or "waiter", host="h", pid=7))

    monkeypatch.setattr(Common, "table", table)
    return world


def lines(text: str) -> list[str]:
    return text.splitlines()


HELD_BY_ALICE = (
    "lock 'deploy' is held by alice (host build-7, pid 41, https://ci.example/runs/9) since "
    "2027-01-15T08:00:00Z"
)


def test_a_lock_free_at_once_says_nothing(world):
    result = world.run("acquire", "deploy")
    assert (result.exit_code, result.stderr) == (0, "")


def test_a_wait_says_who_holds_the_lock_and_then_the_grant(world):
    world.hold(ALICE, until=12)
    result = world.run("acquire", "deploy", "--wait-time", "1m")
    assert result.exit_code == 0 and len(lines(result.stdout)) == 1
    begun, granted = lines(result.stderr)
    assert begun == (f"awsflock: {HELD_BY_ALICE} (0s ago), expires in 10m; waiting up to 1m")
    assert re.fullmatch(
        r"awsflock: acquired 'deploy' \(fencing token \d+\) after 1[23]s and \d+ request\(s\)",
        granted,
    ), granted


def test_a_long_wait_says_how_it_stands_now_and_then(world):
    world.hold(ALICE, until=200)
    result = world.run("acquire", "deploy", "--wait-time", "10m")
    assert result.exit_code == 0
    said = lines(result.stderr)
    assert len(said) == 5, said  # begun, after 30s, 1m, 2m, granted
    progress = said[1:4]
    # At the first poll (about a second apart) once 30 s, 1 min, 2 min have passed.
    for line, after in zip(progress, ("3[01]s", "1m(1s)?", "2m(1s)?")):
        said_after = rf"awsflock: still waiting after {after} \(\S+ left\): "
        assert re.match(said_after + re.escape(HELD_BY_ALICE), line), line
        assert "expires in" in line
    assert said[4].startswith("awsflock: acquired 'deploy'") and "after 3m2" in said[4]


def test_waiting_forever_says_no_time_left(world):
    world.hold(ALICE, until=40)
    said = lines(world.run("acquire", "deploy", "--wait-time", "0").stderr)
    assert said[0].endswith("; waiting forever")
    assert re.match(r"awsflock: still waiting after 3[01]s: " + re.escape(HELD_BY_ALICE), said[1])


def test_a_new_holder_is_said(world):
    world.hand_over(world.hold(ALICE, until=600), after=4, to=BOB, until=20)
    said = lines(world.run("acquire", "deploy", "--wait-time", "2m").stderr)
    assert len(said) == 3, said
    assert said[0].startswith(f"awsflock: {HELD_BY_ALICE}")
    assert re.match(
        r"awsflock: still waiting after 1[01]s \(1m[45]\ds left\): lock 'deploy' is now held by "
        r"bob \(host build-8, pid 42\) since",
        said[1],
    ), said[1]
    assert said[2].startswith("awsflock: acquired 'deploy'")


def test_quiet_says_nothing_while_waiting(world):
    world.hold(ALICE, until=40)
    result = world.run("acquire", "deploy", "-q", "--wait-time", "1m")
    assert (result.exit_code, result.stderr) == (0, "")


def test_a_wait_that_runs_out_says_its_start_and_its_end(world):
    world.hold(ALICE, until=600)
    result = world.run("acquire", "deploy", "--wait-time", "20s")
    assert (result.exit_code, result.stdout) == (3, "")
    begun, busy = lines(result.stderr)
    assert begun.endswith("; waiting up to 20s")
    assert busy.startswith(f"awsflock: {HELD_BY_ALICE}") and busy.endswith("gave up after 20s")


def test_no_wait_says_only_that_the_lock_is_held(world):
    world.hold(ALICE, until=600)
    result = world.run("acquire", "deploy", "--no-wait")
    assert result.exit_code == 3
    assert lines(result.stderr) == [f"awsflock: {HELD_BY_ALICE} (0s ago), expires in 10m"]


def test_run_says_its_wait_too(world):
    world.hold(ALICE, until=5)
    result = world.run("run", "deploy", "--", sys.executable, "-c", "pass")
    assert result.exit_code == 0
    begun, granted = lines(result.stderr)
    assert begun.startswith(f"awsflock: {HELD_BY_ALICE}") and "waiting up to 1m" in begun
    assert granted.startswith("awsflock: acquired 'deploy'")


def test_fair_waiting_says_the_place_in_line_too(world):
    world.hold(ALICE, until=20)
    said = lines(world.run("acquire", "deploy", "--fair", "--wait-time", "2m").stderr)
    assert len(said) == 3, said
    assert said[0].startswith(f"awsflock: {HELD_BY_ALICE}")
    assert said[1].startswith("awsflock: 1st in line for 'deploy' (ahead: alice holding since")
    assert said[2].startswith("awsflock: acquired 'deploy'")


def test_json_says_the_wait_as_events(world):
    world.hold(ALICE, until=45)
    result = world.run("acquire", "deploy", "--log-format", "json", "--wait-time", "1m")
    # (The holder's release, in this process, is an event too: left out.)
    events = [e for e in map(json.loads, lines(result.stderr)) if e["event"] != "released"]
    assert [(e["event"], e["level"]) for e in events] == [
        ("contended", "notice"),
        ("waiting", "notice"),
        ("acquired", "notice"),
    ]
    assert events[0]["owner"] == "alice" and events[1]["owner"] == "alice"
    assert 30 <= events[1]["waited_s"] < 32 and 45 <= events[2]["waited_s"] < 47
    assert all("lease_id" not in e for e in events)


def test_the_grant_says_how_long_the_hand_off_took_at_most(world):
    free = json.loads(world.run("acquire", "free", "--log-format", "json").stderr)
    assert free["event"] == "acquired" and free["handoff_s"] is None
    world.hold(ALICE, until=12.5)
    result = world.run("acquire", "deploy", "--wait-time", "1m", "--log-format", "json")
    granted = json.loads(lines(result.stderr)[-1])
    # Polls about a second apart: the release came between the last refusal and the grant.
    assert granted["event"] == "acquired" and 0 < granted["handoff_s"] <= 1.5, granted
    assert granted["waited_s"] > 12


@pytest.mark.parametrize("wait", ["30s", "1m", "2m"])
def test_a_wait_never_says_less_than_nothing_left(world, monkeypatch, wait):
    # Found by the SPEC audit: "still waiting after 1m (-0.0s left)": a try that went out just
    # before the end of the wait, and was answered just after it.
    take = world.store.take

    def slow_take(*args: Any, **kwargs: Any) -> Any:
        world.clock.sleep(0.9)  # on the wire
        return take(*args, **kwargs)

    monkeypatch.setattr(world.store, "take", slow_take)
    world.hold(ALICE, until=600)
    result = world.run("acquire", "deploy", "--wait-time", wait)
    assert result.exit_code == 3
    assert not re.search(r"\(-", result.stderr), result.stderr
    *_, gave_up = lines(result.stderr)
    assert "still waiting" not in gave_up, gave_up
