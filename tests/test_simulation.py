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
