"""The in-memory store against the DynamoDB store (in-process moto), step for step: random
sequences of every lock step, on a few names, with lease ids old and new and clocks that jump
and lag, must give the same outcome on both. This is what lets the simulator's results on the
in-memory store speak for the DynamoDB store's condition expressions.
"""

from __future__ import annotations

import dataclasses
import random
import uuid

import pytest

from awsflock.protocol import Attempt, Outcome
from awsflock.records import Identity, LockRecord, Pool
from awsflock.stores.memory import MemoryStore
from tests.simulation.__main__ import _NoTransactions
from tests.simulation.legacy import DynamoDBStoreWith020

SKEW = 5_000
NAMES = ("a", "b", "c")


def _plain(record: LockRecord | None) -> LockRecord | None:
    # ``version`` is a fresh random value on each store; ``extra`` is each store's raw fields.
    return None if record is None else dataclasses.replace(record, version="", extra={})


def _same(outcome: Outcome) -> tuple[object, ...]:
    pool = outcome.pool
    slots = None
    if pool is not None:
        slots = (pool.size, {i: _plain(r) for i, r in pool.slots.items()})
    lock = _plain(outcome.lock)
    if outcome.applied and pool is None and lock is not None:
        # A plain take's answer need not show earlier leases (a DynamoDB transaction answers
        # nothing); the read after every step compares them.
        lock = dataclasses.replace(lock, history=())
    return (outcome.applied, lock, slots, outcome.slot)


class Script:
    """A random sequence of steps, the same for both stores."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.now = 1_900_000_000_000
        self.leases: list[tuple[str, str, int | None]] = []  # (name, lease id, slot)
        self.size: dict[str, int | None] = {}
        #: Lease ends seen in answers, per name, to aim steps at the edges of the conditions.
        self.ends: dict[str, list[int]] = {}
        #: Leases granted, per name: (lease id, slot), latest last.
        self.granted: dict[str, list[tuple[str, int | None]]] = {}

    def observe(self, name: str, outcome: Outcome) -> None:
        records = [outcome.lock, *(outcome.pool.slots.values() if outcome.pool else ())]
        ends = self.ends.setdefault(name, [])
        for record in records:
            if record is not None and record.expires_at:
                ends.append(round(record.expires_at * 1000))
        del ends[:-10]
        if outcome.applied and outcome.record is not None:
            self.granted.setdefault(name, []).append((outcome.record.lease_id, outcome.slot))

    def step(self) -> tuple[str, tuple[object, ...], dict[str, object]]:
        rng = self.rng
        self.now += rng.choice((0, 1, 200, 1_000, 3_000, 8_000, 20_000))
        at = self.now - rng.choice((0, 0, 0, 2_000, 6_000))  # some clocks lag
        name = rng.choice(NAMES)
        if self.ends.get(name) and rng.random() < 0.3:  # at, or just around, a lease's end
            edge = rng.choice(self.ends[name]) + rng.choice((0, SKEW))
            at = edge + rng.choice((-1, 0, 1))
        size = self.size.setdefault(name, rng.choice((None, None, 2, 3)))
        kind = rng.choice(("take", "take", "renew", "release", "force", "resize", "read"))
        known = [entry for entry in self.leases if entry[0] == name]
        if kind == "take":
            slot = None if size is None else rng.randrange(size + (rng.random() < 0.1))
            if known and rng.random() < 0.15:
                lease_id = rng.choice(known)[1]  # a duplicate of an earlier attempt
            else:
                lease_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
                lease_id += "" if slot is None else f".{slot}"
                self.leases.append((name, lease_id, slot))
            slots = size if rng.random() > 0.05 else (size or 1) + 1  # a holder disagreeing
            attempt = Attempt(
                lease_id,
                Identity(owner=rng.choice(("x", "y")), host="h", pid=rng.randrange(1, 4)),
                at,
                rng.choice((1_000, 10_000, 60_000)),
                SKEW,
                slot,
                slots if slot is not None else None,
            )
            return "take", (name, attempt), {}
        if kind == "resize":
            old = size if rng.random() > 0.2 else rng.choice((None, 2, 3))
            new = rng.choice((2, 3, 4))
            if old == size and rng.random() < 0.5:
                self.size[name] = new
            return "resize_pool", (name, old, new), {"now_ms": at, "skew_ms": SKEW}
        if kind == "read" or not known:
            return "read", (name,), {}
        granted = self.granted.get(name)
        if granted and rng.random() < 0.7:
            lease_id, slot = granted[-1]
        else:
            _, lease_id, slot = rng.choice(known)
        if kind == "renew":
            extra = {"now_ms": at, "lease_ms": rng.choice((1_000, 30_000)), "skew_ms": SKEW}
            return "renew", (name, lease_id), {**extra, "slot": slot}
        if kind == "release":
            return "release", (name, lease_id), {"now_ms": at, "skew_ms": SKEW, "slot": slot}
        forced = {"force_id": f"f{rng.randrange(100)}", "actor": "ops", "reason": "r"}
        return (
            "force_release",
            (name, lease_id),
            {**forced, "now_ms": at, "skew_ms": SKEW, "slot": slot},
        )


#: The seeds of the fast tier: one each with transactions and without (as on dynalite). The
#: others (all with real botocore calls to in-process moto) run in the slow tier.
FAST_SEEDS = {0, 6}


@pytest.mark.parametrize(
    ("seed", "transactions"),
    [
        pytest.param(seed, seed < 6, marks=[] if seed in FAST_SEEDS else [pytest.mark.slow])
        for seed in range(8)
    ],
)
def test_memory_and_dynamodb_stores_agree_step_for_step(moto, seed, transactions):
    # Without transactions (as on dynalite) neither keeps fence records, and both keep a plain
    # lock's record for good: what awsflock 0.2.0 reads of it (``legacy_read``) agrees too.
    memory = MemoryStore(transactions=transactions)
    dynamodb = DynamoDBStoreWith020(
        "awsflock",
        moto if transactions else _NoTransactions(moto),  # type: ignore[arg-type]
    )
    script = Script(seed)
    for number in range(250):
        method, args, kwargs = script.step()
        got = [getattr(store, method)(*args, **kwargs) for store in (memory, dynamodb)]
        if method == "resize_pool":
            assert got[0] == got[1], (seed, number, method, args, kwargs)
            continue
        script.observe(args[0], got[0])  # type: ignore[arg-type]
        assert _same(got[0]) == _same(got[1]), (seed, number, method, args, kwargs)
    for name in NAMES:
        assert _same(memory.read(name)) == _same(dynamodb.read(name))
        legacy = [_plain(store.legacy_read(name)) for store in (memory, dynamodb)]
        assert legacy[0] == legacy[1], name
    listed = {
        store: sorted(
            (e.lock_id, isinstance(e, Pool))
            for e in store.locks("")  # type: ignore[attr-defined]
        )
        for store in (memory, dynamodb)
    }
    assert listed[memory] == listed[dynamodb]
