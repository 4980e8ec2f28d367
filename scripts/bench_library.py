"""The library as a service uses it (``scripts/bench --library``), on a redis-server and a
PostgreSQL 15 in /dev/shm and on DynamoDB Local, each in this process:

- acquire+release, synchronous and with asyncio (``awsflock.aio``), interleaved with what a
  user would pick instead on the same server (redis-py's ``Lock``; ``pg_advisory_lock``, and a
  plain durable row lease; on DynamoDB, a conditional ``PutItem`` + ``DeleteItem`` with
  botocore), the same with asyncio for the asyncio API (redis.asyncio's ``Lock``, the row lease
  through psycopg's ``AsyncConnection``), and the library's own requests sent raw on every
  store (scripts/bench_replay.py): medians and 90th percentiles, and each API's ratio over
  each;
- 1,000 locks held at once, renewed in the background (lease 6 s: a renewal every 2 s each):
  the threads the process runs, its memory, and how late the renewals come (the most any
  renewal came after it was due) over ``HOLD_FOR`` seconds, synchronous and with asyncio;
- the event loop's worst stall while 200 tasks take and release locks with asyncio: a ticker
  task that asks to wake every millisecond notes the longest gap.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import statistics
import threading
import time
import uuid
from typing import Any, Callable

import bench_floors
import bench_replay

from tests.servers import PostgresServer, RedisServer

HOLDS = 1000
HOLD_LEASE = 6.0
HOLD_FOR = 20.0
TASKS = 200
ROUNDS = 10


def _name() -> str:
    return "lib-" + uuid.uuid4().hex[:10]


def aio_maker(table: Any, loop: asyncio.AbstractEventLoop) -> bench_floors.Maker:
    def make() -> Callable[[], None]:
        name = _name()

        async def cycle() -> None:
            lease = await table.acquire(name, wait=0)
            await lease.release()

        return lambda: loop.run_until_complete(cycle())

    return make


def advisory_maker(conn: Any) -> bench_floors.Maker:
    def make() -> Callable[[], None]:
        key = _name()

        def cycle() -> None:
            if not conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
                raise RuntimeError("pg_advisory_lock found a fresh key taken")
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))

        return cycle

    return make


def aio_table(url: str, stack: contextlib.ExitStack) -> Any:
    from awsflock import aio

    table = aio.connect(url, table="bench")
    stack.callback(table.close)
    return table


#: Floors that run in the library's asyncio cycles' event loop: made from it (and an exit stack).
LoopFloors = Callable[[asyncio.AbstractEventLoop, contextlib.ExitStack], dict[str, Any]]


def cycles(
    url: str, floors: dict[str, bench_floors.Maker], repeats: int, loop_floors: LoopFloors | None
) -> dict[str, Any]:
    """Sync and asyncio acquire+release on ``url`` beside ``floors`` (and those
    ``loop_floors`` makes), interleaved."""
    with contextlib.ExitStack() as stack:
        return tables_cycles(
            bench_floors.open_table(url, stack), aio_table(url, stack), floors, repeats, loop_floors
        )


def tables_cycles(
    table: Any,
    aio_table: Any,
    floors: dict[str, bench_floors.Maker],
    repeats: int,
    loop_floors: LoopFloors | None = None,
) -> dict[str, Any]:
    """Acquire+release through ``table`` and ``aio_table`` beside ``floors``, interleaved."""
    loop = asyncio.new_event_loop()
    try:
        with contextlib.ExitStack() as stack:
            makers = {
                "library": bench_floors.library_maker(table),
                "library, asyncio": aio_maker(aio_table, loop),
                **floors,
                **(loop_floors(loop, stack) if loop_floors else {}),
            }
            samples = bench_floors.interleave(makers, repeats, repeats // 10)
    finally:
        loop.close()
    timing = {name: bench_floors.summary(values) for name, values in samples.items()}
    return {"timing": timing}


def dynamodb(repeats: int) -> dict[str, Any]:
    """The cycles on DynamoDB Local (as users run it), beside the raw requests."""
    import os

    import bench
    import bench_floors_dynamodb as ddb

    from awsflock import aio, connect
    from tests.servers import LOCAL_CREDENTIALS, local_client

    os.environ.update(LOCAL_CREDENTIALS)
    server = bench.DynamoDBLocalAsRun().start(timeout=90)
    try:
        table = connect("dynamodb://bench", endpoint_url=server.url)
        table.create()
        sent, name = ddb.recorded_cycle(server.url)
        raw = local_client(server.url)
        floors = {
            "PutItem+DeleteItem (botocore)": ddb.put_delete_maker(raw),
            "the library's requests, raw": ddb.replay_maker(raw, sent, name),
        }
        aio_tab = aio.connect("dynamodb://bench", endpoint_url=server.url)
        try:
            return tables_cycles(table, aio_tab, floors, max(20, repeats // 5))
        finally:
            aio_tab.close()
            table.close()
    finally:
        server.stop()


def _threads() -> int:
    return threading.active_count()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def holds_sync(url: str) -> dict[str, Any]:
    """1,000 locks held at once with ``table.lock()``: threads, memory, lateness."""
    with contextlib.ExitStack() as stack:
        table = bench_floors.open_table(url, stack)
        before, rss = _threads(), _rss_mb()
        holds = [table.lock(_name(), lease=HOLD_LEASE, wait=0).start() for _ in range(HOLDS)]
        late = _watch(holds, lambda: time.sleep(0.05))
        threads = _threads() - before
        lost = sum(h.lost.is_set() for h in holds)
        for hold in holds:
            with contextlib.suppress(Exception):  # a lost one says so; counted above
                hold.stop()
    return {"threads": threads, "rss_mb": _rss_mb() - rss, "late_max_s": late, "lost": lost}


def holds_aio(url: str) -> dict[str, Any]:
    """The same with asyncio: ``async with table.lock()`` in 1,000 tasks."""

    async def main() -> dict[str, Any]:
        with contextlib.ExitStack() as stack:
            table = aio_table(url, stack)
            before, rss = _threads(), _rss_mb()
            holds = [table.lock(_name(), lease=HOLD_LEASE, wait=0) for _ in range(HOLDS)]
            for hold in holds:
                await hold.start()
            late = 0.0
            end = time.monotonic() + HOLD_FOR
            while time.monotonic() < end:
                late = max(late, _lateness(holds))
                await asyncio.sleep(0.05)
            threads = _threads() - before
            lost = sum(h.lost.is_set() for h in holds)
            for hold in holds:
                with contextlib.suppress(Exception):
                    await hold.stop()
        return {"threads": threads, "rss_mb": _rss_mb() - rss, "late_max_s": late, "lost": lost}

    return asyncio.run(main())


def _lateness(holds: list[Any]) -> float:
    """How far past its next renewal the most overdue hold is now (0: none is)."""
    now = time.monotonic()
    due = [h.wake_at() for h in holds]
    return max([0.0] + [now - d for d in due if d is not None])


def _watch(holds: list[Any], pause: Callable[[], None]) -> float:
    late, end = 0.0, time.monotonic() + HOLD_FOR
    while time.monotonic() < end:
        late = max(late, _lateness(holds))
        pause()
    return late


def stall(url: str) -> dict[str, Any]:
    """The event loop's longest gap while ``TASKS`` tasks take and release locks; and the
    longest single callback (a task's step between two awaits), which is what blocks the loop,
    with the full garbage collections that fell in the run (``gc.callbacks``)."""
    import asyncio.events
    import gc

    slow: list[tuple[float, float]] = []  # (ms, s from the start) of callbacks over 10 ms
    collections: list[float] = []
    began = time.perf_counter()
    real_run = asyncio.events.Handle._run

    def timed(handle: Any) -> None:
        start = time.perf_counter()
        real_run(handle)
        took = time.perf_counter() - start
        if took > 0.01:
            slow.append((took * 1e3, start - began))

    def collected(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            collections.append(time.perf_counter())

    asyncio.events.Handle._run = timed  # type: ignore[method-assign]
    gc.callbacks.append(collected)
    try:
        got = asyncio.run(_stall_run(url))
    finally:
        asyncio.events.Handle._run = real_run  # type: ignore[method-assign]
        gc.callbacks.remove(collected)
    longest = max(slow, default=(0.0, 0.0))
    return {
        **got,
        "longest_callback_ms": longest[0],
        "longest_callback_at_s": longest[1],
        "callbacks_over_10ms": len(slow),
        "full_collections": len(collections) // 2,
    }


async def _stall_run(url: str) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        table = aio_table(url, stack)
        gaps: list[float] = []
        running = True

        async def ticker() -> None:
            last = time.perf_counter()
            while running:
                await asyncio.sleep(0.001)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async def worker() -> None:
            for _ in range(ROUNDS):
                lease = await table.acquire(_name(), wait=0)
                await lease.release()

        tick = asyncio.create_task(ticker())
        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(TASKS)))
        took = time.perf_counter() - began
        running = False
        await tick
    return {
        "cycles_per_s": TASKS * ROUNDS / took,
        "worst_gap_ms": max(gaps) * 1e3,
        "p99_gap_ms": statistics.quantiles(gaps, n=100)[-1] * 1e3,
    }


def library(quick: bool, results: dict[str, Any]) -> list[str]:
    """Measure it all; the numbers go in ``results["library"]``; the report's lines back."""
    repeats = 100 if quick else 500
    out: dict[str, Any] = {}
    redis = RedisServer().start()
    try:
        with contextlib.ExitStack() as stack:
            client = stack.enter_context(contextlib.closing(redis.client()))
            replayed = bench_floors.open_table(redis.url, stack)
            floors = {
                "redis-py Lock": bench_floors.redis_lock_maker(client),
                "the library's requests, raw": bench_replay.redis_replay_maker(replayed, client),
            }

            def redis_async(loop: asyncio.AbstractEventLoop, st: contextlib.ExitStack) -> Any:
                lock = bench_replay.redis_lock_async_maker(redis.url, loop, st)
                return {"redis-py Lock, redis.asyncio": lock}

            out["redis"] = cycles(redis.url, floors, repeats, redis_async)
        out["redis"]["holds, sync"] = holds_sync(redis.url)
        out["redis"]["holds, asyncio"] = holds_aio(redis.url)
        out["redis"]["stall"] = stall(redis.url)
    finally:
        redis.stop()
    pg = PostgresServer()
    try:
        pg.start()
        url = f"{pg.url}?table=bench"
        with contextlib.ExitStack() as stack:
            conn = stack.enter_context(bench_floors.row_connection(pg.url))
            replayed = bench_floors.open_table(url, stack)
            replay = bench_replay.pg_replay_maker(replayed, pg.url, stack)
            floors = {
                "pg_advisory_lock": advisory_maker(conn),
                "row lease": bench_floors.row_lease_maker(conn),
                "the library's requests, raw": replay,
            }

            def pg_async(loop: asyncio.AbstractEventLoop, st: contextlib.ExitStack) -> Any:
                return {"row lease, asyncio": bench_replay.row_lease_async_maker(pg.url, loop, st)}

            out["pg"] = cycles(url, floors, repeats, pg_async)
        out["pg"]["stall"] = stall(url)
    finally:
        pg.stop()
    out["ddb"] = dynamodb(repeats)
    results["library"] = out
    return report(out)


def report(out: dict[str, Any]) -> list[str]:
    lines = ["\nthe library in a service (in one process; ms)"]
    titles = (
        ("redis", "Redis (appendfsync always), tmpfs"),
        ("pg", "PostgreSQL 15"),
        ("ddb", "DynamoDB Local"),
    )
    for key, title in titles:
        got = out[key]
        timing = got["timing"]
        for name, t in timing.items():
            lines.append(f"{title + ': ' + name:<60} {t['median_ms']:8.2f} {t['p90_ms']:8.2f}")
        lines.extend(_ratios(title, timing))
        for name in ("holds, sync", "holds, asyncio"):
            if name in got:
                h = got[name]
                lines.append(
                    f"{title}: {HOLDS} {name}: {h['threads']} threads, {h['rss_mb']:.0f} MB more,"
                    f" renewals at most {h['late_max_s']:.2f} s late, {h['lost']} lost"
                )
        s = got.get("stall")
        if s is None:
            continue
        lines.append(
            f"{title}: {TASKS} tasks: {s['cycles_per_s']:.0f} cycles/s, event loop worst gap"
            f" {s['worst_gap_ms']:.1f} ms (p99 {s['p99_gap_ms']:.1f}); longest callback"
            f" {s['longest_callback_ms']:.1f} ms at {s['longest_callback_at_s']:.2f} s,"
            f" {s['callbacks_over_10ms']} over 10 ms, {s['full_collections']} full GC"
        )
    return lines


def _ratios(title: str, timing: dict[str, Any]) -> list[str]:
    """Each API's median over each alternative's (the goal: 1.25 at most)."""
    ours = [name for name in timing if name.startswith("library")]
    lines = []
    for floor in (name for name in timing if name not in ours):
        said = ", ".join(
            f"{name} {timing[name]['median_ms'] / timing[floor]['median_ms']:.2f}x" for name in ours
        )
        lines.append(f"{title}: over {floor}: {said}")
    return lines
