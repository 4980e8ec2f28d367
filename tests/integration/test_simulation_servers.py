"""The deterministic simulation (tests/simulation/) on the stores of real servers, PostgreSQL
and Redis: each store's own step (PostgreSQL's function, Redis's script) under every fault the
simulation has on it, every invariant checked after every step, at a small budget (a few
seeds; a longer soak is ``scripts/simulate --store postgresql --duration 300``, or
``--store redis``).

Off on both, as the run says: TTL deletion (PostgreSQL deletes no row by its expiry time; a
Redis lock's hash expires only a day after its last lease, by the server's clock) and
awsflock 0.2.0 clients (0.2.0 speaks only DynamoDB); their place goes to one more worker.
"""

from __future__ import annotations

import itertools

import pytest

from tests.simulation.__main__ import run_many
from tests.simulation.mutants import BENEATH, MUTANTS
from tests.simulation.mutants_delay import STATES_SHARE
from tests.simulation.mutants_sets import SETS_SHARE
from tests.simulation.mutants_shares import SHARES_SHARE

#: Client operations of each run: 4 to 5 seeds of 8 processes, about 15 s alone on one core.
BUDGET = 3_000
#: How many operations a bug put back beneath the store may take to be found: the translation
#: mutant on Redis needs about 6,000 (seed 8), some 25 s.
MUTANT_BUDGET = 12_000


@pytest.mark.timeout(300)  # far longer beside the servers and simulations of other tests
@pytest.mark.parametrize("store", ["postgresql", "redis"])
@pytest.mark.parametrize(
    ("sets", "shares", "states", "budget"),
    [
        (0.0, 0.0, 0.0, BUDGET),
        (SETS_SHARE, 0.0, 0.0, 1_000),
        (0.0, SHARES_SHARE, 0.0, 1_000),
        (0.0, 0.0, STATES_SHARE, 1_000),
    ],
    ids=["locks", "with-sets", "with-shares", "with-states"],
)
def test_the_store_keeps_every_invariant(
    store: str,
    sets: float,
    shares: float,
    states: float,
    budget: int,
    request: pytest.FixtureRequest,
) -> None:
    # With sets, workers also take several names in one call of the step function or script:
    # each name's checks per step, and no partial hold ever visible after a set's take. With
    # shares, they also hold locks shared: never an exclusive holder beside a share. With
    # states, they read the lock's state at their grants and write it with their renewals
    # (renew_state): only live leases write it, and every grant reads the last write.
    server = request.getfixturevalue("postgres" if store == "postgresql" else "redis_server")
    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=budget,
        duration=None,
        store=store,
        sets=sets,
        shares=shares,
        states=states,
        **{"pg_url" if store == "postgresql" else "redis_url": server.url},
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, store)}"
    )
    assert sum(r.operations for r in results) >= budget
    assert all(r.off == ["TTL deletion", "awsflock 0.2.0 clients"] for r in results)
    # Real work happened on the store: grants, fenced writes, the line, requests under faults.
    assert sum(r.grants for r in results) > 0
    assert sum(r.writes for r in results) > 0
    assert sum(r.fair_grants for r in results) > 0
    assert sum(r.tries for r in results) > budget
    assert sets == 0 or sum(r.set_grants for r in results) > 0
    assert shares == 0 or sum(r.share_grants for r in results) > 0
    assert states == 0 or sum(r.state_writes for r in results) > 0
    # What each simulation made was removed when it was over.
    if store == "postgresql":
        tables = server.sql("SELECT tablename FROM pg_tables WHERE tablename LIKE 'sim\\_%'")
        assert tables == []
    else:
        assert list(server.client().scan_iter(match="sim*")) == []


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("name", "store"),
    [(name, store) for name, stores in BENEATH.items() for store in stores if store != "moto"],
)
def test_each_bug_beneath_the_store_put_back_is_found(
    name: str, store: str, request: pytest.FixtureRequest
) -> None:
    # The faults sit beneath the real store's request code (its link): a bug put back in its
    # gate or its error translation is found as a violation the checker names.
    server = request.getfixturevalue("postgres" if store == "postgresql" else "redis_server")
    with MUTANTS[name]():
        results, failed = run_many(
            seeds=itertools.count(0),
            clients=8,
            ops=60,
            budget=MUTANT_BUDGET,
            duration=None,
            store=store,
            **{"pg_url" if store == "postgresql" else "redis_url": server.url},
        )
    spent = sum(r.operations for r in results)
    assert failed is not None, f"{name}: not found in {spent} operations on {store}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store", ["postgresql", "redis"])
def test_aio_processes_on_the_store_keep_every_invariant(
    store: str, request: pytest.FixtureRequest
) -> None:
    # Half the workers on awsflock.aio: their steps run in threads beside the renewer's, each
    # try on a connection of its own. Seed 0 found the simulated link judging one thread's try
    # by another's deadline once the stores kept several connections (402 operations).
    server = request.getfixturevalue("postgres" if store == "postgresql" else "redis_server")
    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=1_000,
        duration=None,
        store=store,
        aio=0.5,
        **{"pg_url" if store == "postgresql" else "redis_url": server.url},
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, store)}"
    )
    assert sum(r.operations for r in results) >= 1_000
    assert sum(r.writes for r in results) > 0
