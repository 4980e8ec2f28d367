"""What a user of asyncio would pick instead, and the library's own requests sent raw, on Redis
and PostgreSQL (``scripts/bench --library``):

- redis-py's ``Lock`` through ``redis.asyncio``, and the row lease through psycopg's
  ``AsyncConnection``: the floors of ``awsflock.aio`` (each awaited in the same event loop the
  library's asyncio cycles run in);
- the requests one library acquire+release sends (recorded once: the step function's calls on
  PostgreSQL, the script's pipeline on Redis), sent again with the driver alone, each cycle
  under a fresh lock name and fresh lease ids: what the protocol costs on the wire, without
  awsflock's Python. The library's time over this is its own overhead.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from typing import Any, Callable

import bench
from bench_floors import LEASE_S, ROW_END, ROW_TAKE, Maker

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _recorded(table: Any, holder: Any, attr: str) -> tuple[list[Any], str]:
    """The calls of ``holder.attr`` one acquire+release on ``table`` makes (its arguments but
    the first), after one unrecorded cycle; and the lock's name."""
    table.acquire(bench.lock(), wait=0).release()
    real = getattr(holder, attr)
    seen: list[Any] = []

    def spy(*args: Any) -> Any:
        seen.append(args[1:])
        return real(*args)

    setattr(holder, attr, spy)
    try:
        name = bench.lock()
        table.acquire(name, wait=0).release()
    finally:
        setattr(holder, attr, real)
    if not seen:  # the library no longer sends through it: a replay of nothing measures nothing
        raise RuntimeError(f"one library cycle made no call of {holder.__name__}.{attr}")
    return seen, name


def _fresh(name: str, ids: set[str]) -> Callable[[str], str]:
    """A rewriter of recorded text: ``name`` and each of ``ids`` replaced by new ones (the same
    new one wherever the old one was)."""
    new_name = bench.lock()
    new = {old: str(uuid.uuid4()) for old in ids}

    def rewrite(value: str) -> str:
        value = value.replace(name, new_name)
        for old, fresh in new.items():
            value = value.replace(old, fresh)
        return value

    return rewrite


def pg_replay_maker(table: Any, url: str, stack: contextlib.ExitStack) -> Maker:
    """The step function's calls of one library cycle, sent again with psycopg on a connection
    of its own, opened as the library opens its (``synchronous_commit=on``)."""
    import psycopg

    from awsflock.stores.postgresql.link import PgLink

    sent, name = _recorded(table, PgLink, "step")
    conn = stack.enter_context(psycopg.connect(url, autocommit=True))
    conn.execute("SET synchronous_commit = on")
    requests = [request for _conn, request, _timeout in sent]
    ids = set(UUID.findall(repr(requests)))

    def make() -> Callable[[], None]:
        rewrite = _fresh(name, ids)
        calls = [
            (query, tuple(rewrite(a) if isinstance(a, str) else a for a in args))
            for query, args in requests
        ]

        def cycle() -> None:
            for query, args in calls:
                conn.execute(query, args).fetchone()

        return cycle

    return make


def redis_replay_maker(table: Any, client: Any) -> Maker:
    """The script's pipelines of one library cycle (the script, and the settings read again
    with a grant), sent again on ``client``'s one connection, kept: packed and read as the
    library does (``awsflock.stores.redis.wire.send``), with no awsflock layer above."""
    from awsflock.stores.redis import wire

    sent, name = _recorded(table, wire, "send")
    pipelines = [list(commands) for (commands,) in sent]
    pool = client.connection_pool
    conn = wire.checkout(pool)  # kept, as the library's link keeps its step connection
    pool.release(conn)
    ids = set(UUID.findall(repr(pipelines)))

    def make() -> Callable[[], None]:
        rewrite = _fresh(name, ids)
        fresh = [
            [tuple(rewrite(a) if isinstance(a, str) else a for a in cmd) for cmd in commands]
            for commands in pipelines
        ]

        def cycle() -> None:
            for commands in fresh:
                answers = wire.send(conn, commands)
                if isinstance(answers[0], Exception):
                    raise answers[0]

        return cycle

    return make


def redis_lock_async_maker(url: str, loop: asyncio.AbstractEventLoop, stack: Any) -> Maker:
    """redis-py's ``Lock`` through ``redis.asyncio``, awaited in ``loop``."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(url)
    stack.callback(lambda: loop.run_until_complete(client.aclose()))

    def make() -> Callable[[], None]:
        held = client.lock(bench.lock(), timeout=LEASE_S)

        async def cycle() -> None:
            if not await held.acquire(blocking=False):
                raise RuntimeError("redis-py's Lock found a fresh lock taken")
            await held.release()

        return lambda: loop.run_until_complete(cycle())

    return make


def row_lease_async_maker(url: str, loop: asyncio.AbstractEventLoop, stack: Any) -> Maker:
    """The row lease through psycopg's ``AsyncConnection`` (``synchronous_commit=on``),
    awaited in ``loop``."""
    import psycopg

    async def connect() -> Any:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        await conn.execute("SET synchronous_commit = on")
        return conn

    conn = loop.run_until_complete(connect())
    stack.callback(lambda: loop.run_until_complete(conn.close()))

    def make() -> Callable[[], None]:
        name, owner = bench.lock(), str(uuid.uuid4())

        async def cycle() -> None:
            taken = await (await conn.execute(ROW_TAKE, (name, owner, LEASE_S))).fetchone()
            if taken is None:
                raise RuntimeError("the row lease found a fresh lock taken")
            if (await conn.execute(ROW_END, (name, owner))).rowcount != 1:
                raise RuntimeError("the row lease's DELETE ended nothing")

        return lambda: loop.run_until_complete(cycle())

    return make
