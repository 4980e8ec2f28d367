"""The deterministic simulation (tests/simulation/) on the PostgreSQL store, on a real server:
the store's own step function under every fault the simulation has on it, every invariant
checked after every step, at a small budget (a few seeds; a longer soak is
``scripts/simulate --store postgresql --duration 300``).

Off on PostgreSQL, as the run says: TTL deletion (PostgreSQL deletes no row by its expiry time)
and awsflock 0.2.0 clients (0.2.0 speaks only DynamoDB); their place goes to one more worker.
"""

from __future__ import annotations

import itertools

import pytest

from tests.servers import PostgresServer
from tests.simulation.__main__ import run_many

#: Client operations of this run: 4 to 5 seeds of 8 processes, about 15 s alone on one core.
BUDGET = 3_000


@pytest.mark.timeout(300)  # far longer beside the servers and simulations of other tests
def test_the_postgresql_store_keeps_every_invariant(postgres: PostgresServer) -> None:
    results, failed = run_many(
        seeds=itertools.count(0),
        clients=8,
        ops=60,
        budget=BUDGET,
        duration=None,
        store="postgresql",
        pg_url=postgres.url,
    )
    assert failed is None, (
        f"{failed.violation}\n"
        + "\n".join(failed.trace[-40:])
        + f"\nreplay: {failed.replay(60, 'postgresql')}"
    )
    assert sum(r.operations for r in results) >= BUDGET
    assert all(r.off == ["TTL deletion", "awsflock 0.2.0 clients"] for r in results)
    # Real work happened on the store: grants, fenced writes, the line, requests under faults.
    assert sum(r.grants for r in results) > 0
    assert sum(r.writes for r in results) > 0
    assert sum(r.fair_grants for r in results) > 0
    assert sum(r.tries for r in results) > 2 * BUDGET
    # Every table was dropped when its simulation was over.
    tables = postgres.sql("SELECT tablename FROM pg_tables WHERE tablename LIKE 'sim\\_%'")
    assert tables == []
