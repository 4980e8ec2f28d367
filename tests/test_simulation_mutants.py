"""The deterministic simulation, part two: the second half of the CI budget; every known bug,
put back, is found within the budget; a run on the DynamoDB store (in-process moto) keeps every
invariant too; and the limit the simulator found (a request landing long after it was made) is
pinned down."""

from __future__ import annotations

import itertools

import pytest

from tests.simulation.__main__ import run_many
from tests.simulation.mutants import (
    AIO,
    BENEATH,
    CAPS,
    CAPS_SHARE,
    DELAYS,
    DELAYS_SHARE,
    MUTANTS,
    NO_TRANSACTIONS,
    ORDER_ONLY,
    SETS,
    SETS_SHARE,
    SHARES,
    SHARES_SHARE,
    STATES,
    STATES_SHARE,
)
from tests.simulation.network import Faults
from tests.test_simulation import HALF_BUDGET

#: Each known bug must be found within this many client operations (seeds 0, 1, ...).
MUTANT_BUDGET = 60_000
#: ... but for these, which need a rare interleaving (a take that turns a lock into a pool,
#: landing late over a plain grant and the deletion of the lock's record), more. L is found at
#: seed 292 after 183,931 operations since a successful force-release marks its audit record
#: applied (one more request moves every later step of the seeds); it was within 100,000.
RARE = {"L pool ignores the fencing counter": 250_000, "4 TTL at the lease's end": 100_000}
#: Bugs found only after more than 2,500 operations (or, on moto, 100): left out of the fast
#: tier, which they took a minute of (measured 2026-11-29: 7 at seed 6 after 4,415 operations,
#: H at seed 5 after 3,655, 10 at seed 4 after 2,781; Q on moto after 261). The full suite runs
#: them all.
SLOW = {
    "L pool ignores the fencing counter",
    "4 TTL at the lease's end",
    "O timeout after sending said not applied",
    "7 force-released holder told released",
    "10 ended leases forgotten",
    "H line clear without the skew window",
    "Q no-transaction audit after the end",
    "Y set attempt cleaned up by its first name",
}
#: The bugs beneath the stores (``mutants.BENEATH``) are looked for on DynamoDB over moto, whose
#: requests are real botocore calls: within this many operations (on the servers' stores:
#: ``tests/integration/test_simulation_servers.py``).
MOTO_BUDGET = 3_000


@pytest.mark.slow
@pytest.mark.timeout(900)  # about 70 s alone; far longer beside the servers of other tests
def test_the_second_half_of_the_budget_keeps_every_invariant():
    results, failed = run_many(
        seeds=itertools.count(100_000),
        clients=8,
        ops=60,
        budget=HALF_BUDGET,
        duration=None,
        store="memory",
    )
    assert failed is None, f"{failed.violation}\nreplay: {failed.replay(60, 'memory')}"
    assert sum(r.operations for r in results) >= HALF_BUDGET


#: The bugs looked for here: all but those looked for only on a server's store (integration tier).
#: (The asynchronous API's are looked for with aio workers: ``test_simulation_aio.py``.)
HERE = [n for n in MUTANTS if BENEATH.get(n, ("memory",))[0] in ("memory", "moto") and n not in AIO]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else []) for n in HERE]
)
def test_each_known_bug_put_back_is_found(name):
    store = BENEATH.get(name, ("memory",))[0]
    moto = store == "moto"
    with MUTANTS[name]():
        results, failed = run_many(
            seeds=itertools.count(0),
            clients=6 if moto else 8,
            ops=30 if moto else 60,
            budget=MOTO_BUDGET if moto else RARE.get(name, MUTANT_BUDGET),
            duration=None,
            store=store,
            transactions=name not in NO_TRANSACTIONS,
            sets=SETS_SHARE if name in SETS else 0.0,
            shares=SHARES_SHARE if name in SHARES else 0.0,
            delays=DELAYS_SHARE if name in DELAYS else 0.0,
            caps=CAPS_SHARE if name in CAPS else 0.0,
            states=STATES_SHARE if name in STATES else 0.0,
        )
    spent = sum(r.operations for r in results)
    assert failed is not None, f"{name}: not found in {spent} operations"
    if name in ORDER_ONLY:
        assert "line of" in (failed.violation or ""), failed.violation


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("sets", "shares", "delays", "caps", "states"),
    [
        (0.0, 0.0, 0.0, 0.0, 0.0),
        (SETS_SHARE, 0.0, 0.0, 0.0, 0.0),
        (0.0, SHARES_SHARE, 0.0, 0.0, 0.0),
        (0.0, 0.0, DELAYS_SHARE, CAPS_SHARE, STATES_SHARE),
    ],
)
def test_the_dynamodb_store_on_moto_keeps_every_invariant(sets, shares, delays, caps, states):
    # With sets: each take one TransactWriteItems of several lock items, watched as one step;
    # with shares: the DynamoDB store's share steps, with faults beneath them; with delays: its
    # forces of leases with a lock-delay (two requests and a third once answered); with caps:
    # its renewals refused for a cap and sent again for it; with states: its renewals that
    # write the state (a transaction and a read), and the reads at the grant.
    _, failed = run_many(
        seeds=itertools.count(0),
        clients=6,
        ops=30,
        budget=1_500 if not (sets or shares or delays or caps) else 600,
        duration=None,
        store="moto",
        sets=sets,
        shares=shares,
        delays=delays,
        caps=caps,
        states=states,
    )
    assert failed is None, f"{failed.violation}\nreplay: {failed.replay(30, 'moto')}"


#: The runs without transactions, in the slow tier only (the fast one finds M without them).
NO_TX_BUDGETS = [("memory", 20_000), ("moto", 800)]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("store", "budget"),
    [pytest.param(store, budget, marks=pytest.mark.slow) for store, budget in NO_TX_BUDGETS],
)
def test_without_transactions_every_invariant_holds_too(store, budget):
    # As on dynalite: no fence records; a plain lock's record is kept for good instead.
    _, failed = run_many(
        seeds=itertools.count(0),
        clients=6 if store == "moto" else 8,
        ops=30 if store == "moto" else 60,
        budget=budget,
        duration=None,
        store=store,
        transactions=False,
    )
    assert failed is None, f"{failed.violation}\nreplay: {failed.replay(60, store)}"


@pytest.mark.slow
def test_requests_landing_up_to_a_minute_late_never_lower_a_token_or_shorten_a_lease():
    # Once a limit of the protocol: a take carried the time it was made, and a record created
    # afresh took its first token from it, so one landing tens of seconds late, after the record
    # was deleted, started below tokens granted meanwhile; a renew landing after a later one
    # moved the lease's end back. Here a tenth of all requests land 1 to 60 s late.
    faults = Faults(late=0.1, late_by=(1.0, 60.0))
    _, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=20_000,
        duration=None,
        store="memory",
        faults=faults,
    )
    assert failed is None, f"{failed.violation}\nreplay: {failed.replay(60)}"
