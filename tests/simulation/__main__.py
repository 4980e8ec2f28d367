"""``scripts/simulate``: run the deterministic simulation for many seeds, or replay one.

    scripts/simulate                                  # seeds 0.. until the budget is spent
    scripts/simulate --seed 17 --clients 8 --ops 60   # replay one run exactly, with its trace
    scripts/simulate --duration 600                   # a long soak
    scripts/simulate --mutant "C fencing"             # put a known bug back: it must be found
    scripts/simulate --store moto                     # the DynamoDB store, on in-process moto
    scripts/simulate --no-transactions                # as on dynalite (memory or moto)
    scripts/simulate --store postgresql               # the PostgreSQL store, on a throw-away server
    scripts/simulate --store redis                    # the Redis store, on a throw-away server

Exit 0 when no invariant failed, 1 with the seed, the trace and the command that replays it.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable

from awsflock.stores.memory import MemoryStore
from tests.simulation.mutants import (
    AIO,
    AIO_SHARE,
    CAPS,
    CAPS_SHARE,
    DELAYS,
    DELAYS_SHARE,
    MUTANTS,
    SETS,
    SETS_SHARE,
    SHARES,
    SHARES_SHARE,
    STATES,
    STATES_SHARE,
)
from tests.simulation.network import Faults
from tests.simulation.run import Result, simulate


class _NoTransactions:
    """A DynamoDB client that, like dynalite, does not know TransactWriteItems."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def transact_write_items(self, **_kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        error = {"Error": {"Code": "UnknownOperationException", "Message": ""}}
        raise ClientError(error, "TransactWriteItems")  # type: ignore[arg-type]


@contextlib.contextmanager
def moto_store(transactions: bool = True) -> Iterator[Callable[[], Any]]:
    """A factory of fresh DynamoDB stores on in-process moto (one table per simulation);
    without ``transactions``, as on dynalite."""
    import itertools
    import os

    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    from moto import mock_aws

    from tests.simulation.legacy import DynamoDBStoreWith020

    with mock_aws():
        import botocore.session

        client = botocore.session.get_session().create_client("dynamodb", region_name="us-east-1")
        numbers = itertools.count()

        def make() -> Any:
            store: Any = DynamoDBStoreWith020(
                f"sim{next(numbers)}",
                client if transactions else _NoTransactions(client),
            )
            store.create()
            # The store learns it has no transactions at its first one; the checker's own copy
            # never sends one, so it is told (``checker._keeps_done``).
            store.simulated_without_transactions = not transactions
            return store

        yield make


#: Environment variable naming a PostgreSQL server for ``--store postgresql`` (``--pg-url``).
PG_URL_ENV = "AWSFLOCK_SIM_PG_URL"

#: Why a store runs without what the simulation leaves out on it (``run.off``).
WHY_OFF = {
    "postgresql": {
        "TTL deletion": "PostgreSQL deletes no row by its expiry time",
        "awsflock 0.2.0 clients": "awsflock 0.2.0 speaks only DynamoDB",
    },
    "redis": {
        "TTL deletion": "a lock's hash expires a day after its last lease, by the server's "
        "clock, which a simulation does not move; the fence key never expires",
        "awsflock 0.2.0 clients": "awsflock 0.2.0 speaks only DynamoDB",
    },
}


@contextlib.contextmanager
def server_stores(
    kind: str,
    url: str | None,
    start: Callable[[], Any],
    cleaner: Callable[[str], tuple[Callable[[Any], None], Callable[[], None]]],
) -> Iterator[Callable[[], Any]]:
    """A factory of fresh stores of ``kind`` (one table or prefix per simulation, removed when
    the next is made and at the end) timed by the simulation's clocks (``server_time=False``),
    on the server at ``url``, else on one ``start()`` gives, stopped afterwards. ``cleaner(url)``:
    what removes one store's data, and what closes the cleaner."""
    import itertools
    import uuid

    from awsflock.stores import kinds

    server = None
    if url is None:
        server = start().start()
        url = server.url
    assert url is not None
    prefix = f"sim_{os.getpid()}_{uuid.uuid4().hex[:6]}_"
    numbers = itertools.count()
    made: list[Any] = []
    drop, close = cleaner(url)

    def make() -> Any:
        while made:
            drop(made.pop())
        settings = kinds.Settings(f"{prefix}{next(numbers)}", 5.0, extra={"server_time": False})
        store = kinds.get(kind).open(kinds.parse(str(url)), settings)
        made.append(store)
        store.create()
        return store

    try:
        yield make
    finally:
        try:
            while made:
                drop(made.pop())
        finally:
            close()
            if server is not None:
                server.stop()


def _postgres_cleaner(url: str) -> tuple[Callable[[Any], None], Callable[[], None]]:
    from awsflock.stores.postgresql.schema import done_name, function_name, quote

    def drop(store: Any) -> None:
        name = store.table_name

        def work(conn: Any) -> None:
            conn.execute(f"DROP TABLE IF EXISTS {quote(name)}, {quote(done_name(name))}")
            conn.execute(f"DROP FUNCTION IF EXISTS {quote(function_name(name))}")

        try:
            store.run_admin("drop_table", work)
        finally:
            store.close()

    return drop, lambda: None


def _redis_cleaner(url: str) -> tuple[Callable[[Any], None], Callable[[], None]]:
    import redis

    admin = redis.Redis.from_url(url)

    def drop(store: Any) -> None:
        try:
            keys = list(admin.scan_iter(match=store.prefix + ":*", count=1000))
            if keys:
                admin.delete(*keys)
        finally:
            store.close()

    return drop, admin.close


def postgres_store(url: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """Fresh PostgreSQL stores (a table each, dropped afterwards): ``server_stores``."""
    from tests.servers import PostgresServer

    return server_stores("postgresql", url, PostgresServer, _postgres_cleaner)


#: Environment variable naming a Redis server for ``--store redis`` (``--redis-url``).
REDIS_URL_ENV = "AWSFLOCK_SIM_REDIS_URL"


def redis_store(url: str | None = None) -> contextlib.AbstractContextManager[Any]:
    """Fresh Redis stores (a key prefix each, its keys deleted afterwards): ``server_stores``."""
    from tests.servers import RedisServer

    return server_stores("redis", url, RedisServer, _redis_cleaner)


def run_many(
    *,
    seeds: Iterator[int],
    clients: int,
    ops: int,
    budget: int | None,
    duration: float | None,
    store: str,
    faults: Faults | None = None,
    say: Callable[[str], None] = lambda _line: None,
    pg_url: str | None = None,
    redis_url: str | None = None,
    transactions: bool = True,
    aio: float = 0.0,
    sets: float = 0.0,
    shares: float = 0.0,
    delays: float = 0.0,
    caps: float = 0.0,
    states: float = 0.0,
) -> tuple[list[Result], Result | None]:
    """Simulate seed after seed until ``budget`` operations or ``duration`` seconds are spent,
    or a violation is found (returned second). ``store``: memory, moto, postgresql or redis (on
    the server at ``pg_url`` or ``redis_url``, else on a throw-away one); without
    ``transactions`` (memory, moto), as the DynamoDB store on an endpoint that has none
    (dynalite). ``aio``: the share of workers that run ``awsflock.aio``; ``sets``: the share
    of a worker's operations that take several names together; ``shares``: that take a share
    of a lock."""
    started = time.perf_counter()
    results: list[Result] = []
    done = 0
    with contextlib.ExitStack() as stack:
        make = None
        if store == "moto":
            make = stack.enter_context(moto_store(transactions))
        elif not transactions and store == "memory":
            make = functools.partial(MemoryStore, transactions=False)
        elif not transactions:
            raise ValueError(f"{store}: only memory and moto run without transactions")
        elif store == "postgresql":
            make = stack.enter_context(postgres_store(pg_url))
        elif store == "redis":
            make = stack.enter_context(redis_store(redis_url))
        for seed in seeds:
            result = simulate(
                seed,
                clients=clients,
                ops=ops,
                make_store=make,
                faults=faults,
                aio=aio,
                sets=sets,
                shares=shares,
                delays=delays,
                caps=caps,
                states=states,
            )
            result.flags = (
                ("" if transactions else " --no-transactions")
                + (f" --aio {aio}" if aio else "")
                + (f" --sets {sets}" if sets else "")
                + (f" --shares {shares}" if shares else "")
                + (f" --delays {delays}" if delays else "")
                + (f" --caps {caps}" if caps else "")
                + (f" --states {states}" if states else "")
            )
            results.append(result)
            done += result.operations
            if result.violation:
                return results, result
            if len(results) % 50 == 0:
                say(f"{len(results)} runs, {done} operations, {time.perf_counter() - started:.0f}s")
            if budget is not None and done >= budget:
                break
            if duration is not None and time.perf_counter() - started >= duration:
                break
    return results, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/simulate", description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, help="run (replay) this seed only, with its trace")
    parser.add_argument("--first-seed", type=int, default=0, help="start the seeds here")
    parser.add_argument("--clients", type=int, default=8, help="processes per run (default 8)")
    parser.add_argument("--ops", type=int, default=60, help="operations per client (default 60)")
    parser.add_argument("--steps", type=int, help="stop after this many operations in all")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument(
        "--store", choices=("memory", "moto", "postgresql", "redis"), default="memory"
    )
    parser.add_argument(
        "--no-transactions",
        action="store_true",
        help="as on an endpoint without TransactWriteItems (dynalite); memory and moto only",
    )
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_URL_ENV) or None,
        help=f"--store postgresql on this server (default: ${PG_URL_ENV}, else a throw-away "
        "server started for the run); one table per seed, dropped afterwards",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(REDIS_URL_ENV) or None,
        help=f"--store redis on this server (default: ${REDIS_URL_ENV}, else a throw-away "
        "server started for the run); one key prefix per seed, its keys deleted afterwards",
    )
    parser.add_argument(
        "--aio",
        type=float,
        default=None,
        help="the share of workers (drawn per seed) that run awsflock.aio in an event loop in "
        "virtual time (default 0; 0.5 for a mutant of the asynchronous API)",
    )
    parser.add_argument(
        "--sets",
        type=float,
        default=None,
        help="the share of a worker's operations that take several locks together (default 0; "
        f"{SETS_SHARE} for a mutant of sets)",
    )
    parser.add_argument(
        "--shares",
        type=float,
        default=None,
        help="the share of a worker's operations that take a shared lock (default 0; "
        f"{SHARES_SHARE} for a mutant of shares)",
    )
    parser.add_argument(
        "--delays",
        type=float,
        default=None,
        help="the share of plain and pool takes with a lock-delay (default 0; "
        f"{DELAYS_SHARE} for a mutant of lock-delay)",
    )
    parser.add_argument(
        "--caps",
        type=float,
        default=None,
        help="the share of plain and pool takes with a max-hold (default 0; "
        f"{CAPS_SHARE} for a mutant of max-hold)",
    )
    parser.add_argument(
        "--states",
        type=float,
        default=None,
        help="the share of plain takes that read the lock's state and write it with half "
        f"their renewals (default 0; {STATES_SHARE} for a mutant of state)",
    )
    parser.add_argument("--mutant", help="put a known bug back (a name's start: '4', 'C fenc')")
    parser.add_argument(
        "--late-by", type=float, help="how late a late request may land (default 5 s)"
    )
    parser.add_argument(
        "--late", type=float, help="the share of tries that land late (default 0.02)"
    )
    args = parser.parse_args(argv)
    faults: Faults | None = None  # each seed's own (see run.default_faults)
    if args.late_by is not None or args.late is not None:
        faults = Faults()
        if args.late_by is not None:
            faults.late_by = (min(0.5, args.late_by), args.late_by)
        if args.late is not None:
            faults.late = args.late
    mutant: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.mutant:
        names = [name for name in MUTANTS if name.startswith(args.mutant)]
        if len(names) != 1:
            parser.error(f"--mutant {args.mutant!r} names {len(names)} of: {', '.join(MUTANTS)}")
        mutant = MUTANTS[names[0]]()
        print(f"mutant: {names[0]}", file=sys.stderr)
        if args.aio is None and names[0] in AIO:
            args.aio = AIO_SHARE
        if args.sets is None and names[0] in SETS:
            args.sets = SETS_SHARE
        if args.shares is None and names[0] in SHARES:
            args.shares = SHARES_SHARE
        if args.delays is None and names[0] in DELAYS:
            args.delays = DELAYS_SHARE
        if args.caps is None and names[0] in CAPS:
            args.caps = CAPS_SHARE
        if args.states is None and names[0] in STATES:
            args.states = STATES_SHARE
    seeds: Iterator[int]
    if args.seed is not None:
        seeds = iter([args.seed])
    else:
        seeds = iter(range(args.first_seed, sys.maxsize))
    budget = args.steps if args.steps or args.duration else 200_000
    started = time.perf_counter()
    with mutant:
        results, failed = run_many(
            seeds=seeds,
            clients=args.clients,
            ops=args.ops,
            budget=None if args.seed is not None else budget,
            duration=args.duration,
            store=args.store,
            faults=faults,
            say=lambda line: print(line, file=sys.stderr),
            pg_url=args.pg_url,
            redis_url=args.redis_url,
            transactions=not args.no_transactions,
            aio=args.aio or 0.0,
            sets=args.sets or 0.0,
            shares=args.shares or 0.0,
            delays=args.delays or 0.0,
            caps=args.caps or 0.0,
            states=args.states or 0.0,
        )
    wall = time.perf_counter() - started
    operations = sum(r.operations for r in results)
    virtual = sum(r.virtual_seconds for r in results)
    print(
        f"{len(results)} runs (seeds {results[0].seed}..{results[-1].seed}), {args.clients} "
        f"clients each: {operations} client operations, {sum(r.tries for r in results)} "
        f"requests, {sum(r.grants for r in results)} grants, "
        f"{sum(r.writes for r in results)} fenced writes accepted, "
        f"{virtual:.0f} s of virtual time in {wall:.1f} s "
        f"({operations / wall:.0f} operations and {virtual / wall:.0f} virtual seconds per "
        "second)"
    )
    print(
        f"{sum(r.fair_grants for r in results)} grants to the head of a line of fair waiters, "
        f"{sum(r.lapsed for r in results)} lapsed places removed from lines"
    )
    if args.aio:
        print(
            f"{sum(r.aio_procs for r in results)} processes ran awsflock.aio: "
            f"{sum(r.bodies for r in results)} bodies under its locks "
            f"({sum(r.told for r in results)} told to stop), "
            f"{sum(r.cancelled for r in results)} acquires cancelled by a timeout"
        )
    if args.sets:
        print(
            f"{sum(r.set_grants for r in results)} takes of sets applied, "
            f"{sum(r.set_refusals for r in results)} refused"
        )
    if args.shares:
        print(f"{sum(r.share_grants for r in results)} shares granted")
    if args.delays:
        print(f"{sum(r.delayed_grants for r in results)} grants after a lock-delay checked")
    if args.caps:
        print(f"{sum(r.capped_steps for r in results)} takes and renewals checked against a cap")
    if args.states:
        print(
            f"{sum(r.state_writes for r in results)} state writes applied, "
            f"{sum(r.state_reads for r in results)} grants checked to read the last one"
        )
    checked = sum(r.previous_checked for r in results)
    if checked:
        print(f"{checked} grants checked for how the lease before them ended")
    why = WHY_OFF.get(args.store, {})
    left_out = sorted({what for r in results for what in r.off})
    if left_out:
        print(
            f"off on --store {args.store}: "
            + "; ".join(f"{what} ({why.get(what, 'the store cannot')})" for what in left_out)
        )
    if failed is None:
        print("no invariant failed")
        return 0
    print("\n".join(failed.trace[-60:]))
    print(f"VIOLATION (seed {failed.seed}, after {operations} operations): {failed.violation}")
    extra = f" --mutant {args.mutant!r}" if args.mutant else ""
    if args.late_by is not None:
        extra += f" --late-by {args.late_by}"
    if args.late is not None:
        extra += f" --late {args.late}"
    print(f"replay: {failed.replay(args.ops, args.store)}{extra}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
