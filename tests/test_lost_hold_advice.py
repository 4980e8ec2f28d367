"""A lost ``hold()`` as a library user meets it: the library prints nothing of its own (its
loggers have a NullHandler; the application decides what reaches stderr), and the advice in
the ``LeaseLost`` fits the reason: a force-release was someone's decision, not a fault to
retry blindly."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from awsflock import FakeClock, LeaseLost, LockTable, MemoryStore, NotHeld
from awsflock.lock import admin
from awsflock.records import KEEPALIVE_ACTOR


@pytest.fixture
def table() -> LockTable:
    clock = FakeClock()
    return LockTable(store=MemoryStore(clock=clock), clock=clock, owner="worker-1")


def test_a_lost_hold_prints_nothing_where_the_application_set_up_no_logging():
    code = (
        "import awsflock\n"
        "from awsflock.lock import admin\n"
        "table = awsflock.LockTable(store=awsflock.MemoryStore(), owner='a')\n"
        "held = table.hold('deploy', lease=60).start()\n"
        "admin.force_release(table, 'deploy', reason='stuck', lease_id=held.lease_id)\n"
        "try:\n"
        "    held.stop()\n"
        "except awsflock.LeaseLost as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "LeaseLost\n"
    assert done.stderr == ""


def test_a_hold_force_released_by_an_operator_names_who_and_why_and_says_not_to_retry(table):
    held = table.hold("deploy", lease=60).start()
    admin.force_release(
        table, "deploy", reason="stuck deploy", lease_id=held.lease_id, actor="alice"
    )
    with pytest.raises(LeaseLost) as lost:
        held.stop()
    said = str(lost.value)
    assert "force-released by alice" in said and "stuck deploy" in said
    assert lost.value.hint == (
        "the work done under it may be unprotected; it was ended on purpose: ask alice why "
        "before acquiring the lock again"
    )
    assert "retry" not in said


def test_a_renewal_refused_after_a_force_release_gives_the_same_advice(table):
    held = table.hold("deploy", lease=30).start()
    admin.force_release(table, "deploy", reason="wrong host", lease_id=held.lease_id, actor="bob")
    table.clock.advance(10)  # type: ignore[attr-defined]  # the FakeClock: the renewal is due
    deadline = time.monotonic() + 10
    while not held.lost.is_set():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    with pytest.raises(LeaseLost, match="renewal refused") as lost:
        held.check()
    assert "ask bob why before acquiring the lock again" in lost.value.hint
    held.stop(release=False)


@pytest.mark.parametrize(
    "why",
    [
        "pid 2, for which it was kept alive, exited",
        "its keep-alive renewer was stopped by signal 15",  # found by review 6: said "exited"
    ],
)
def test_a_lease_ended_by_its_keep_alive_renewer_says_why(table, why):
    lease = table.acquire("deploy", lease=60, wait=0)
    table.store.force_release(
        "deploy",
        lease.lease_id,
        force_id="keepalive-1",
        now_ms=table.now_ms(),
        skew_ms=0,
        actor=f"{KEEPALIVE_ACTOR} (host h, pid 1, following pid 2)",
        reason=why,
        slot=None,
    )
    with pytest.raises(NotHeld) as refused:
        lease.renew()
    assert refused.value.hint == (
        f"its keep-alive renewer ended it ({why}); acquire the lock again only if that work is "
        "still to be done"
    )


def test_a_hold_lost_by_expiry_still_says_to_check_the_work_and_retry(table):
    held = table.hold("deploy", lease=30, margin=5).start()
    table.renewer().remove(held)  # no renewal comes (a paused process)
    table.clock.advance(26)  # type: ignore[attr-defined]
    with pytest.raises(LeaseLost) as lost:
        held.check()
    assert lost.value.hint == "the work done under it may be unprotected; check it and retry"
    held.stop(release=False)
