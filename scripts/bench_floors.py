"""The library's acquire+release beside its floor on each store (``scripts/bench --floors``).

A floor is the least a client could send for the same durable lease on the same server: redis-py's
``Lock`` on Redis; a plain row lease on PostgreSQL (``INSERT ... ON CONFLICT ... WHERE
expires_at < now()``, then ``DELETE``, autocommit, ``synchronous_commit=on``); on DynamoDB Local
the very requests the library sends, replayed raw with botocore, and a plain conditional
``PutItem`` + ``DeleteItem``. Each pair runs in this process, interleaved (one cycle of each in
turn, the order rotated every repeat, a fresh lock name per cycle), on warm connections; the
table shows medians and 90th percentiles, the library/floor ratio of the medians, and issue
39's target for it. What each cycle sends is counted too: Redis commands through the RESP
proxy and in the server's ``INFO commandstats``, PostgreSQL statements through the wire proxy,
DynamoDB requests by operation through the HTTP proxy (scripts/bench_floors_dynamodb.py).
"""

from __future__ import annotations

import contextlib
import functools
import os
import statistics
import time
import uuid
from typing import Any, Callable

import bench

from tests.servers import REDIS_PASSWORD, PostgresServer, RedisServer

#: A cycle's factory: makes a fresh lock name (and whatever else the cycle needs, untimed) and
#: returns the acquire+release to time.
Maker = Callable[[], Callable[[], None]]
#: Issue 39's targets: library/floor at most this, by floor.
TARGET = {
    "redis-py Lock": 1.25,
    "row lease": 1.25,
    "same requests raw": 1.25,
    "PutItem+Delete": 1.6,
}
#: Lease length for every floor (the library's default lease is longer; the length costs
#: nothing).
LEASE_S = 60


def interleave(makers: dict[str, Maker], repeats: int, warmup: int) -> dict[str, list[float]]:
    """Seconds per cycle of each maker's cycles, run in turn: repeat i starts with the i-th
    maker, so none always runs first. ``warmup`` rounds first, not kept."""
    names = list(makers)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for i in range(warmup + repeats):
        for k in range(len(names)):
            name = names[(i + k) % len(names)]
            cycle = makers[name]()
            start = time.perf_counter()
            cycle()
            elapsed = time.perf_counter() - start
            if i >= warmup:
                samples[name].append(elapsed)
    return samples


def summary(values: list[float]) -> dict[str, float]:
    """Median and 90th percentile, in ms."""
    p90 = statistics.quantiles(values, n=10)[-1] if len(values) > 1 else values[0]
    return {"median_ms": statistics.median(values) * 1e3, "p90_ms": p90 * 1e3}


def library_maker(table: Any) -> Maker:
    def make() -> Callable[[], None]:
        name = bench.lock()
        return lambda: table.acquire(name, wait=0).release()

    return make


def open_table(url: str, stack: contextlib.ExitStack) -> Any:
    """A LockTable on the store a URL names, opened as the CLI opens it, and made ready (its
    store closed when ``stack`` closes)."""
    from awsflock.lock.lease import LockTable
    from awsflock.protocol import DEFAULT_REQUEST_TIMEOUT
    from awsflock.stores import kinds

    named = kinds.parse(url)
    store: Any = kinds.get(named.kind).open(named, kinds.Settings("bench", DEFAULT_REQUEST_TIMEOUT))
    stack.callback(store.close)
    table = LockTable(store=store)
    table.create()
    return table


# -- Redis -------------------------------------------------------------------------------------


def redis_lock_maker(client: Any) -> Maker:
    from redis.lock import Lock

    def make() -> Callable[[], None]:
        held = Lock(client, bench.lock(), timeout=LEASE_S)

        def cycle() -> None:
            if not held.acquire(blocking=False):
                raise RuntimeError("redis-py's Lock found a fresh lock taken")
            held.release()

        return cycle

    return make


def commandstats(client: Any) -> dict[str, int]:
    """The server's count of calls of each command (``INFO commandstats``), by name."""
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def redis_sent(server: RedisServer, cycles: int) -> dict[str, dict[str, float]]:
    """Per cycle of each, what the client sent (through the RESP proxy: commands by name, a
    call of awsflock's script by its step, and round trips) and what the server ran (the
    ``INFO commandstats`` delta, the commands scripts call included; the INFO that reads the
    first snapshot left out). One uncounted cycle first: connection made, scripts loaded."""
    import redis

    out: dict[str, dict[str, float]] = {}
    with contextlib.ExitStack() as stack:
        resp = bench.RedisCounter(("127.0.0.1", server.port))
        stack.enter_context(resp)
        through = redis.Redis(host="127.0.0.1", port=resp.port, password=REDIS_PASSWORD)
        makers = {
            "library": library_maker(open_table(resp.url_for(server.url), stack)),
            "redis-py Lock": redis_lock_maker(stack.enter_context(contextlib.closing(through))),
        }
        counter = stack.enter_context(contextlib.closing(server.client()))
        for name, make in makers.items():
            make()()
            resp.seen()
            before = commandstats(counter)
            for _ in range(cycles):
                make()()
            after = commandstats(counter)
            after["info"] -= 1
            sent = {k.removeprefix("command "): v / cycles for k, v in resp.seen().items()}
            ran = {k: (n - before.get(k, 0)) / cycles for k, n in sorted(after.items())}
            out[f"{name}, sent by the client (RESP proxy)"] = sent
            out[f"{name}, run by the server (INFO commandstats)"] = {
                k: v for k, v in ran.items() if v
            }
    return out


def redis_floor(repeats: int, warmup: int, on_disk: bool = False) -> dict[str, Any]:
    """The library beside redis-py's Lock on one redis-server (AOF fsynced on every write), its
    data in /dev/shm or ``on_disk``."""
    server = RedisServer(on_disk=on_disk).start()
    try:
        sent = redis_sent(server, 20)
        with contextlib.ExitStack() as stack:
            table = open_table(server.url, stack)
            client = stack.enter_context(contextlib.closing(server.client()))
            makers = {"library": library_maker(table), "redis-py Lock": redis_lock_maker(client)}
            samples = interleave(makers, repeats, warmup)
    finally:
        server.stop()
    return {"samples": samples, "sent": sent}


# -- PostgreSQL --------------------------------------------------------------------------------

ROW_TABLE = """CREATE TABLE IF NOT EXISTS floor_lease (
    k text PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)"""
ROW_TAKE = """INSERT INTO floor_lease (k, owner, expires_at)
    VALUES (%s, %s, now() + make_interval(secs => %s))
    ON CONFLICT (k) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
    WHERE floor_lease.expires_at < now()
    RETURNING owner"""
ROW_END = "DELETE FROM floor_lease WHERE k = %s AND owner = %s"


def row_lease_maker(conn: Any) -> Maker:
    def make() -> Callable[[], None]:
        name, owner = bench.lock(), str(uuid.uuid4())

        def cycle() -> None:
            if conn.execute(ROW_TAKE, (name, owner, LEASE_S)).fetchone() is None:
                raise RuntimeError("the row lease found a fresh lock taken")
            if conn.execute(ROW_END, (name, owner)).rowcount != 1:
                raise RuntimeError("the row lease's DELETE ended nothing")

        return cycle

    return make


def row_connection(url: str) -> Any:
    """One autocommit psycopg connection, each commit waiting for its WAL flush."""
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute(ROW_TABLE)
    return conn


def statements(wire: bench.PgCounter, make: Maker, cycles: int) -> dict[str, float]:
    """What a cycle sends through the wire-counting proxy, per cycle (after one uncounted)."""
    make()()
    wire.reset_counts()
    for _ in range(cycles):
        make()()
    return {k: v / cycles for k, v in sorted(wire.counts.items())}


def postgres_floor(repeats: int, warmup: int, on_disk: bool = False) -> dict[str, Any]:
    """The library beside a plain durable row lease on one PostgreSQL 15, its cluster in
    /dev/shm or ``on_disk``."""
    server = PostgresServer(on_disk=on_disk)
    try:
        server.start()
        with contextlib.ExitStack() as stack:
            wire = stack.enter_context(bench.PgCounter(server.port))
            through = server.url.replace(f":{server.port}/", f":{wire.port}/")
            counted = {
                "library": library_maker(open_table(f"{through}?table=bench", stack)),
                "row lease": row_lease_maker(stack.enter_context(row_connection(through))),
            }
            counts = {
                f"{name}, sent (wire-protocol proxy)": statements(wire, make, 20)
                for name, make in counted.items()
            }
            table = open_table(f"{server.url}?table=bench", stack)
            conn = stack.enter_context(row_connection(server.url))
            makers = {"library": library_maker(table), "row lease": row_lease_maker(conn)}
            samples = interleave(makers, repeats, warmup)
    finally:
        server.stop()
    return {"samples": samples, "sent": counts}


# -- the section -------------------------------------------------------------------------------

#: The stores in the order measured, by key: their titles. Redis and PostgreSQL run twice: with
#: their data on the disk, where each durable write waits for an fsync as it does in a durable
#: deployment (issue 39's floors were measured so), and in /dev/shm, where an fsync costs
#: nothing and what is left is each side's CPU and the server's own work.
STORES = {
    "redis-disk": "Redis (appendfsync always), on disk",
    "redis": "Redis (appendfsync always), tmpfs",
    "pg-disk": "PostgreSQL 15 (synchronous_commit=on), on disk",
    "pg": "PostgreSQL 15 (synchronous_commit=on), tmpfs",
    "ddb": "DynamoDB Local",
}


def floors(quick: bool, results: dict[str, Any]) -> list[str]:
    """Measure every store's pairs; put the numbers in ``results`` (``floors``, and the raw
    samples in ``floors_samples``) and return the table's lines."""
    repeats, warmup = (60, 10) if quick else (500, 50)
    began = time.perf_counter()
    out: dict[str, Any] = {"repeats": repeats, "warm-up rounds": warmup}
    out["load average before"] = os.getloadavg()
    raw: dict[str, Any] = {}
    import bench_floors_dynamodb

    measures = {
        "redis-disk": functools.partial(redis_floor, on_disk=True),
        "redis": redis_floor,
        "pg-disk": functools.partial(postgres_floor, on_disk=True),
        "pg": postgres_floor,
        "ddb": bench_floors_dynamodb.floor,
    }
    for key, title in STORES.items():
        got = measures[key](repeats, warmup)
        raw[key] = got.pop("samples")
        timing = {name: summary(values) for name, values in raw[key].items()}
        lib = timing["library"]["median_ms"]
        ratios = {name: lib / t["median_ms"] for name, t in timing.items() if name != "library"}
        out[key] = {"title": title, "timing": timing, "ratio": ratios, **got}
    out["seconds"] = time.perf_counter() - began
    out["load average after"] = os.getloadavg()
    results["floors"], results["floors_samples"] = out, raw
    return table(out)


def table(out: dict[str, Any]) -> list[str]:
    """The section's lines: a row per library/floor pair, then what each cycle sends."""
    lines = [
        f"\nlibrary acquire+release beside its floor (in one process, interleaved,"
        f" {out['repeats']} repeats after {out['warm-up rounds']}; ms)",
        f"{'store: floor':<64} {'lib med':>8} {'lib p90':>8} {'flr med':>8} {'flr p90':>8}"
        f" {'ratio':>6} {'target':>7}",
    ]
    for key in STORES:
        got = out[key]
        lib = got["timing"]["library"]
        for name, ratio in got["ratio"].items():
            floor = got["timing"][name]
            mark = "ok" if ratio <= TARGET[name] else "over"
            lines.append(
                f"{got['title'] + ': ' + name:<64} {lib['median_ms']:8.2f} {lib['p90_ms']:8.2f}"
                f" {floor['median_ms']:8.2f} {floor['p90_ms']:8.2f} {ratio:5.2f}x"
                f" {TARGET[name]:5.2f}x {mark}"
            )
    for key in STORES:
        got = out[key]
        for name, sent in got["sent"].items():
            spelled = ", ".join(f"{k} {v:g}" for k, v in sent.items())
            lines.append(f"  per cycle on {got['title']}: {name}: {spelled}")
    loads = [out["load average before"][0], out["load average after"][0]]
    lines.append(
        f"  this section took {out['seconds']:.0f}s on {os.cpu_count()} cores; load average"
        f" (1 min) {loads[0]:.2f} before, {loads[1]:.2f} after (other work slows both sides)"
    )
    return lines
