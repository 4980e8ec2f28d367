"""``table.lock()``: the lock held while a body runs, and a thread that asks again for a lock it
holds so, which is refused at once instead of waiting on itself."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading

import pytest

import awsflock
from awsflock import errors
from awsflock.clock import FakeClock
from awsflock.lock import owners
from awsflock.stores.memory import MemoryStore


@pytest.fixture
def table():
    return awsflock.connect("memory://", clock=FakeClock(), owner="svc")


def test_lock_holds_while_the_body_runs_and_releases_after_it(table):
    other = awsflock.LockTable(store=table.store, owner="other")
    with table.lock("reindex", lease="60s", wait="5m") as held:
        assert held.fencing_token is not None and held.lease_id
        held.check()
        assert not held.lost.is_set()
        with pytest.raises(errors.LockBusy):
            other.acquire("reindex", wait=0)
        token = held.fencing_token
    assert held.lease.released
    again = other.acquire("reindex", wait=0)
    assert again.fencing_token > token


def test_hold_is_lock_under_its_earlier_name(table):
    with table.hold("h", lease=30, wait=0) as held:
        assert held.lease_s == 30 and held.wait_s == 0
    assert held.lease.released


@pytest.mark.parametrize(
    "again",
    [
        lambda t: t.lock("x", wait=None).start(),  # it would wait for ever
        lambda t: t.lock("x", wait=30).start(),
        lambda t: t.acquire("x", wait=None),
        lambda t: t.acquire("x", wait=1),
    ],
    ids=["lock, waiting for ever", "lock, waiting", "acquire, for ever", "acquire, waiting"],
)
def test_asking_again_for_a_lock_this_thread_holds_is_refused_at_once(table, again):
    with table.lock("x", lease=60) as held:
        before = table.clock.monotonic()
        with pytest.raises(errors.UsageError) as refused:
            again(table)
        assert table.clock.monotonic() == before  # not a moment waited
        held.check()
    assert "already held by this thread" in refused.value.one_line()
    assert "another thread" in refused.value.one_line()
    # Once its block is left, the thread may take it again.
    with table.lock("x", wait=0):
        pass


def test_another_table_on_the_same_store_is_the_same_lock(table):
    second = awsflock.LockTable(store=table.store, owner="second")
    with table.lock("x"), pytest.raises(errors.UsageError):
        second.acquire("x", wait=5)


def test_a_try_that_does_not_wait_is_answered_busy(table):
    # No wait, no deadlock: the store's answer, naming the holder (this process).
    with table.lock("x"), pytest.raises(errors.LockBusy) as busy:
        table.lock("x", wait=0).start()
    assert busy.value.holder is not None and busy.value.holder.owner == "svc"


def test_another_in_memory_store_of_the_same_name_is_another_lock():
    clock = FakeClock()
    first = awsflock.LockTable(store=MemoryStore("same", clock=clock))
    second = awsflock.LockTable(store=MemoryStore("same", clock=clock))
    with first.lock("x"), second.lock("x", wait=0) as held:
        assert held.fencing_token is not None


def test_another_thread_waits_for_the_lock_as_usual(table):
    seen: list[BaseException] = []

    def take() -> None:
        try:
            table.acquire("x", wait=0)
        except BaseException as exc:
            seen.append(exc)

    with table.lock("x"):
        worker = threading.Thread(target=take)
        worker.start()
        worker.join(10)
    assert len(seen) == 1 and isinstance(seen[0], errors.LockBusy)


def test_a_pool_slot_holder_may_take_another_slot(table):
    with table.lock("pool", slots=3) as one, table.lock("pool", slots=3, wait=0) as two:
        assert one.slot != two.slot


def test_a_hold_dropped_without_being_stopped_no_longer_counts(table):
    held = table.lock("x", lease=60)
    held.acquire()  # taken, registered, then dropped: its lease simply runs out
    with pytest.raises(errors.UsageError):
        table.acquire("x", wait=1)
    del held
    gc.collect()
    with pytest.raises(errors.LockBusy):  # held in the store still, by nobody in this thread
        table.acquire("x", wait=1)


def test_a_hold_of_a_thread_that_ended_no_longer_counts(table):
    holds: list[object] = []
    worker = threading.Thread(target=lambda: holds.append(table.lock("x", lease=60).start()))
    worker.start()
    worker.join(10)
    # This thread never held it: an ordinary busy lock.
    with pytest.raises(errors.LockBusy):
        table.acquire("x", wait=1)
    key = owners._place(table.store, "x")
    assert owners._live(owners._open.get(key, [])) == []


def test_a_failed_release_still_forgets_the_hold(table):
    held = table.lock("x", lease=60).start()
    table.store.force_release(
        "x", held.lease_id, force_id="f", now_ms=table.now_ms(), skew_ms=0, actor="ops",
        reason="test",
    )  # fmt: skip
    with pytest.raises(errors.LeaseLost):
        held.stop()
    table.acquire("x", wait=0).release()


def test_the_synchronous_api_and_the_command_line_never_import_asyncio():
    # Its import is about 40 ms of a command's start-up: only the asynchronous API pays it.
    code = (
        "import sys, awsflock\n"
        "from awsflock.cli import main\n"
        "table = awsflock.connect('memory://')\n"
        "with table.lock('x', wait=0) as held:\n"
        "    held.check()\n"
        "try:\n    main(['acquire', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('asyncio' in sys.modules, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stderr.strip() == "False"
