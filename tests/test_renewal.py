"""The renewal policy (``awsflock.lock.renewal``) is the one place its rules live: the heartbeat,
``run``'s kill timing and the keep-alive's shortest lease all follow it."""

from __future__ import annotations

import pytest

from awsflock import errors
from awsflock.lock import renewal
from awsflock.lock.heartbeat import Hold
from awsflock.lock.lease import LockTable
from awsflock.stores.memory import MemoryStore


def test_a_hold_renews_and_counts_loss_as_the_policy_says(monkeypatch):
    monkeypatch.setattr(renewal, "POLICY", renewal.RenewalPolicy(per_lease=4, min_margin=2.0))
    hold = Hold(LockTable(store=MemoryStore()), "x", lease=60.0)
    assert hold.interval == 15.0 and hold.margin == 10.0
    short = Hold(LockTable(store=MemoryStore()), "x", lease=6.0)
    assert short.margin == 2.0  # the policy's least margin


def test_a_margin_that_leaves_no_time_to_renew_is_refused():
    with pytest.raises(errors.UsageError, match="leaves no time to renew"):
        Hold(LockTable(store=MemoryStore()), "x", lease=6.0, margin=4.0)


@pytest.mark.parametrize("lease", [1.0, 3.0, 10.0, 60.0, 3600.0])
def test_the_default_kill_timing_leaves_time_to_renew(lease):
    policy = renewal.POLICY
    kill_after, margin = policy.kill_timing(lease)
    assert margin == kill_after + policy.kill_guard(lease)
    assert margin < lease - policy.interval(lease)


def test_the_keep_alive_shortest_lease_leaves_the_margin_time_to_renew():
    from awsflock.supervise.keepalive_plan import KEEP_ALIVE_MIN

    policy = renewal.POLICY
    assert KEEP_ALIVE_MIN == policy.shortest_lease() == 3.0
    assert policy.margin(KEEP_ALIVE_MIN) < KEEP_ALIVE_MIN - policy.interval(KEEP_ALIVE_MIN)
