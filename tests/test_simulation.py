"""The deterministic simulation (tests/simulation/), part one: a run replays exactly from its
seed, and the first half of the CI budget of client operations passes every invariant.

The budget is split over two files so that the two pytest workers share it (the second half,
the known bugs put back, and the run on the DynamoDB store are in test_simulation_mutants.py).
"""

from __future__ import annotations

import itertools

import pytest

from tests.simulation.__main__ import run_many
from tests.simulation.run import simulate

#: Client operations each half of the CI budget runs (200,000 in all).
HALF_BUDGET = 100_000


def test_a_seed_replays_the_same_run_exactly():
    first, again = simulate(7, clients=8, ops=40), simulate(7, clients=8, ops=40)
    assert first.trace == again.trace and first.trace
    assert (first.operations, first.steps, first.tries, first.writes) == (
        again.operations,
        again.steps,
        again.tries,
        again.writes,
    )
    assert simulate(8, clients=8, ops=40).trace != first.trace


def test_every_grant_is_checked_for_how_the_lease_before_it_ended():
    # The check of ``previous`` runs on the in-memory store (the mutants R, R1, R2 show that it
    # finds what it exists for).
    result = simulate(0, clients=8, ops=60)
    assert result.violation is None and result.previous_checked >= result.grants > 0


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 70 s alone; far longer beside the servers of other tests
def test_the_first_half_of_the_budget_keeps_every_invariant():
    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=HALF_BUDGET,
        duration=None,
        store="memory",
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + (f"\nreplay: {failed.replay(60, 'memory')}")
    )
    assert sum(r.operations for r in results) >= HALF_BUDGET


@pytest.mark.parametrize(
    ("records", "found"),
    [
        ([{"lease_id": "L1", "actor": "op", "action_id": "A1", "status": "applied"}], None),
        ([{"lease_id": "L1", "actor": "bo", "action_id": "A2", "status": "applied"}], "names"),
        ([], "has 0 audit records"),
        ([{"lease_id": "L1", "actor": "op", "action_id": "A1"}] * 2, "has 2 audit records"),
        ([{"lease_id": "L2", "actor": "op", "action_id": "A3"}], "never applied"),
    ],
)
def test_the_audit_invariant_names_each_wrong_record(records, found):
    # The checker's audit rule, on records as a store would list them: one per force applied,
    # naming the operator and the action that applied it, none of a force that never did.
    from awsflock.stores.memory import MemoryStore
    from tests.simulation.checker import Checker, Violation
    from tests.simulation.world import World

    checker = Checker(World(0), MemoryStore())
    checker.forced.add("L1")
    checker.forced_by["L1"] = ("op", "A1")
    if found is None:
        checker.check_audit(records)
    else:
        with pytest.raises(Violation, match=found):
            checker.check_audit(records)


#: Client operations with sets (several names taken in one step) in the fast tier.
SETS_BUDGET = 3_000


def test_with_sets_every_invariant_holds_and_no_partial_hold_is_seen():
    # A share of the workers' operations take sets through the real library (acquire([...])
    # waiting or not, lock([...]) with its heartbeat; both orders of L0 and L1, and sets with C,
    # which may become a pool), the operator ending single members now and then.
    from tests.simulation.mutants import SETS_SHARE

    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=SETS_BUDGET,
        duration=None,
        store="memory",
        sets=SETS_SHARE,
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, 'memory')}"
    )
    assert sum(r.set_grants for r in results) > 0 and sum(r.set_refusals for r in results) > 0
    first, again = (
        simulate(2, clients=6, ops=25, sets=1.0),
        simulate(2, clients=6, ops=25, sets=1.0),
    )
    assert first.trace == again.trace and first.set_grants > 0


#: Client operations with shared holders in the fast tier.
SHARES_BUDGET = 3_000


@pytest.mark.parametrize("transactions", [True, False])
def test_with_shares_every_invariant_holds_and_no_exclusive_holder_is_beside_a_share(transactions):
    # A share of the workers' operations take shares of the plain locks (acquire(shared=True)
    # waiting or not, lock(shared=True) with its heartbeat) beside exclusive holders, sets and a
    # 0.2.0 client of the same names; the operator ends one share or a whole group now and then.
    from tests.simulation.mutants import SHARES_SHARE

    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=SHARES_BUDGET,
        duration=None,
        store="memory",
        transactions=transactions,
        sets=0.1,
        shares=SHARES_SHARE,
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, 'memory')}"
    )
    assert sum(r.share_grants for r in results) > 50


@pytest.mark.parametrize(
    ("option", "checked", "least"),
    [
        # Half the plain and pool takes record a lock-delay (2, 10 or 30 s); holders die, hang
        # and are force-released now and then: no grant lands inside a delay after an
        # unreleased end.
        ("delays", "delayed_grants", 5),
        # Half carry a max-hold (3, 15 or 60 s) beside leases of 5 to 40 s: takes are cut to
        # the cap, renewals stop at it, and holders are told so.
        ("caps", "capped_steps", 50),
        # Half the plain takes read the lock's state at the grant and write it with their
        # renewals: only live leases write it, and every grant reads the last write.
        ("states", "state_writes", 20),
    ],
)
def test_with_lock_delays_max_holds_or_state_every_invariant_holds(option, checked, least):
    from tests.simulation.mutants import CAPS_SHARE, DELAYS_SHARE, STATES_SHARE

    share = {"delays": DELAYS_SHARE, "caps": CAPS_SHARE, "states": STATES_SHARE}[option]
    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=SHARES_BUDGET,
        duration=None,
        store="memory",
        **{option: share},
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, 'memory')}"
    )
    assert sum(getattr(r, checked) for r in results) > least
