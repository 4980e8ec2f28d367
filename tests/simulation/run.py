"""One simulation: build the world, let the clients run under faults, check every step.

``simulate(seed, ...)`` returns a ``Result``; a violation is in ``Result.violation`` with the
trace that led to it. The same arguments replay the same run exactly.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from awsflock import sets, shares
from awsflock.stores.memory import MemoryStore
from tests.simulation.aioclients import AioClient
from tests.simulation.attach import Attach
from tests.simulation.checker import Checker, Violation
from tests.simulation.clients import SKEW, Client, Reported, Shared
from tests.simulation.network import Faults, Network
from tests.simulation.world import World

#: Clock error bound of every process: half the skew window, so any two clocks agree within it.
CLOCK_ERROR = 2.5

#: What the simulation does only on a store that can: (what, the store's method it needs). A
#: store without the method (DynamoDB on in-process moto has no TTL deletion; PostgreSQL has
#: neither TTL deletion nor awsflock 0.2.0 clients) runs without it; ``off`` names what is off.
NEEDS = (
    ("TTL deletion", "expire_records"),
    ("awsflock 0.2.0 clients", "legacy_read"),
)


def off(store: Any) -> list[str]:
    """What the simulation leaves out on ``store`` (see ``NEEDS``)."""
    return [what for what, method in NEEDS if not callable(getattr(store, method, None))]


@dataclass
class Result:
    seed: int
    clients: int
    operations: int = 0
    steps: int = 0
    tries: int = 0
    #: Grants the store applied (takes that won a lock or slot); fenced writes it accepted.
    grants: int = 0
    writes: int = 0
    #: Grants to the head of a line of fair waiters; lapsed places removed from a line.
    fair_grants: int = 0
    lapsed: int = 0
    virtual_seconds: float = 0.0
    wall_seconds: float = 0.0
    violation: str | None = None
    trace: list[str] = field(default_factory=list)
    #: What the simulation left out on this store (``NEEDS``).
    off: list[str] = field(default_factory=list)

    #: Options the run needs beyond the store's (`` --no-transactions``, `` --aio 0.5``).
    flags: str = ""
    #: Processes that ran awsflock.aio; bodies run under its locks, and those told to stop
    #: (cancelled on loss, or LeaseLost); acquires cancelled by a task's timeout.
    aio_procs: int = 0
    bodies: int = 0
    told: int = 0
    cancelled: int = 0
    #: Shares the store granted.
    share_grants: int = 0
    #: Grants over a lease that had a lock-delay and did not end released (each checked).
    delayed_grants: int = 0
    #: Takes and renewals of leases with a max-hold (each checked against its cap).
    capped_steps: int = 0
    #: State writes applied, and grants whose read of the state was checked.
    state_writes: int = 0
    state_reads: int = 0
    #: Takes of sets the store applied, and refused.
    set_grants: int = 0
    set_refusals: int = 0
    #: Grants whose ``previous`` was checked.
    previous_checked: int = 0

    def replay(self, ops: int, store: str = "memory") -> str:
        return (
            f"scripts/simulate --seed {self.seed} --clients {self.clients} --ops {ops}"
            + ("" if store == "memory" else f" --store {store}")
            + self.flags
        )


def default_faults(seed: int) -> Faults:
    """The network of a seed's run: every other one is a slow network where a tenth of the
    requests land up to a minute late (the interleavings of late requests, TTL deletion and
    0.2.0 clients need many late requests in one run, not a few)."""
    if seed % 2 == 1:
        return Faults(late=0.1, late_by=(1.0, 60.0))
    return Faults()


def simulate(
    seed: int,
    *,
    clients: int = 8,
    ops: int = 60,
    store: str = "memory",
    faults: Faults | None = None,
    chaos: bool = True,
    make_store: Callable[[], Any] | None = None,
    max_steps: int = 2_000_000,
    aio: float = 0.0,
    sets: float = 0.0,
    shares: float = 0.0,
    delays: float = 0.0,
    caps: float = 0.0,
    states: float = 0.0,
) -> Result:
    """Run ``clients`` processes (workers, one operator, one awsflock 0.2.0 client where the
    store has them, else one more worker) for about ``ops`` operations each, on a fresh store.
    ``aio``: the share of the workers (drawn from the seed) that run ``awsflock.aio``;
    ``sets``: the share of a worker's operations that take several names together; ``shares``:
    that take a share of a lock; ``delays``, ``caps``: the share of plain and pool takes with a
    lock-delay, with a max-hold; ``states``: of plain takes that read the lock's state (and
    write it with half their renewals)."""
    started = time.perf_counter()
    world = World(seed)
    inner = make_store() if make_store is not None else MemoryStore()
    network = Network(world, faults or default_faults(seed))
    checker = Checker(world, inner)
    shared = Shared(sets, shares, delays, caps, states)
    result = Result(seed, clients, off=off(inner))
    legacy = "awsflock 0.2.0 clients" not in result.off
    roles = ["operator", "legacy" if legacy else "worker"] + ["worker"] * max(1, clients - 2)
    workers = []
    attach = Attach(inner, network, checker)
    for number, role in enumerate(roles[:clients] if clients >= 3 else ["worker"] * clients):
        kind: type[Client] = Client
        if role == "worker" and aio > 0 and world.rng.random() < aio:
            kind = AioClient
            result.aio_procs += 1
        proc = world.process(f"{'a' if kind is AioClient else role[0]}{number}", CLOCK_ERROR)
        client = kind(world, proc, attach.store(proc), checker, shared, ops)
        world.spawn(proc, getattr(client, role))
        if role == "worker":
            workers.append(proc)
    if chaos:
        _chaos(world, network, inner, workers, checker)
    with _quiet(checker), _seeded_ids(world, checker):
        try:
            while world.step():
                _reap(world)
                if world.blocked_loops:
                    checker.fail(world.blocked_loops[0])
                checker.check_step()
                if world.steps > max_steps:
                    raise Violation(f"no end after {max_steps} steps (a livelock?)")
            checker.check_end()
        except Violation as exc:
            result.violation = checker.violations[0] if checker.violations else str(exc)
        finally:
            world.finish()
            attach.close()
    result.operations = checker.operations
    result.steps = world.steps
    result.tries = network.tries
    result.grants = sum(checker.grants.values())
    result.writes = checker.writes
    result.fair_grants = checker.fair_grants
    result.lapsed = checker.lapsed
    result.bodies, result.told = checker.bodies.started, checker.bodies.told
    result.cancelled = checker.cancelled
    result.set_grants, result.set_refusals = checker.sets.grants, checker.sets.refusals
    result.share_grants = checker.shares.grants
    result.delayed_grants = checker.delayed_grants
    result.capped_steps = checker.capped_steps
    result.state_writes, result.state_reads = checker.state.writes, checker.state.reads
    result.previous_checked = checker.previous.checked
    result.virtual_seconds = world.now - 1_900_000_000.0
    result.wall_seconds = time.perf_counter() - started
    result.trace = list(world.trace)
    return result


def _reap(world: World) -> None:
    for thread in list(world.threads):
        if thread.done:
            if thread.error is not None:
                raise _unexpected(thread.error, thread.name)
            world.threads.remove(thread)


def _unexpected(error: BaseException, where: str) -> Violation:
    if isinstance(error, Violation):
        return error
    return Violation(
        f"{where} raised {type(error).__name__}: {error} (the API allows only AwsflockError)"
    )


def _chaos(
    world: World, network: Network, inner: Any, workers: list[Any], checker: Checker
) -> None:
    """Pauses, kills, outages and TTL sweeps, at random times while workers run."""
    rng = world.rng
    kills = max(1, len(workers) // 4)

    def running() -> bool:
        return any(p.alive() for p in world.procs)

    def strike() -> None:
        if not running():
            return
        x = rng.random()
        live = [p for p in workers if p.alive()]
        if x < 0.4 and live:
            proc = rng.choice(live)
            length = rng.choice((rng.uniform(0.5, 5), rng.uniform(5, 60)))
            proc.paused_until = max(proc.paused_until, world.now + length)
            world.note(f"pause {proc.name} for {length:.1f}s")
        elif x < 0.5 and live and kill_count[0] < kills:
            proc = rng.choice(live)
            proc.killed = True
            kill_count[0] += 1
            world.note(f"kill {proc.name}")
        elif x < 0.75:
            length = rng.choice((rng.uniform(0.5, 8), rng.uniform(8, 50)))
            kind = rng.choice(("refused", "lost"))
            network.outage(world.now, length, kind)
            world.note(f"outage ({kind}) for {length:.1f}s")
        world.at(world.now + rng.uniform(2, 25), strike)

    def sweep() -> None:
        if not running():
            return
        expire = getattr(inner, "expire_records", None)
        if expire is not None:
            # awsflock 0.2.0 writes its lease's end as the expiry time: a record it wrote is
            # deleted only once that is the skew window past (see the README's limits).
            for name in expire(world.now, legacy_after=SKEW):
                world.note(f"TTL deleted {name}")
                checker.deleted(name)
        world.at(world.now + rng.uniform(0.5, 4), sweep)

    kill_count = [0]
    world.at(world.now + rng.uniform(1, 10), strike)
    world.at(world.now + 1, sweep)


@contextmanager
def _seeded_ids(world: World, checker: Checker) -> Iterator[None]:
    """LEASE_IDs, record versions and action ids from the seed (the library takes them from
    ``uuid.uuid4``), and sets' LEASE_IDs (``sets.new_set_id``, from ``secrets``), so that a
    replay names them alike; the checker learns each set id as it is made."""
    real, real_set_id, real_share_id = uuid.uuid4, sets.new_set_id, shares.new_share_id
    uuid.uuid4 = lambda: uuid.UUID(int=world.rng.getrandbits(128), version=4)

    def set_id(names: Sequence[str] = (), bits: int | None = None) -> str:
        return checker.sets.issued(real_set_id(names, world.rng.getrandbits(128)))

    sets.new_set_id = set_id
    shares.new_share_id = lambda bits=None: real_share_id(world.rng.getrandbits(128))
    try:
        yield
    finally:
        uuid.uuid4, sets.new_set_id, shares.new_share_id = real, real_set_id, real_share_id


@contextmanager
def _quiet(checker: Checker) -> Iterator[None]:
    """The library's log lines go to the checker (the LEASE_IDs it names), not to stderr."""
    logger = logging.getLogger("awsflock")
    handler = Reported(checker)
    old = (logger.propagate, logger.level)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate, level = old[0], old[1]
        logger.setLevel(level)
