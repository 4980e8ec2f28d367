"""Repros of h17's adversarial review of ``awsflock.aio`` on real servers (PostgreSQL and
Redis), through their wire fault proxies: a task cancelled while it waits for its loop's
connection (another task's step is on it) holds nothing afterwards and ends cancelled; an
``aclose()`` cut short while a step is on the connection still closes it."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

import awsflock
from awsflock import aio, errors
from tests.faultproxy import FaultProxy, Plan
from tests.integration.conftest import PgCli, UrlCli
from tests.pgproxy import PgFaultProxy
from tests.redisproxy import RedisFaultProxy
from tests.servers import PostgresServer, RedisServer, Server


@pytest.fixture(scope="module", params=["postgresql", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Server, str, type[FaultProxy]]]:
    """A server of each kind with a lock table made by ``table-create``, and its protocol's
    fault proxy: (server, table, proxy class)."""
    if request.param == "postgresql":
        srv: Server = PostgresServer().start()
        table = "adv_" + uuid.uuid4().hex[:8]
        cli: Any = PgCli(srv, table)
        proxy: type[FaultProxy] = PgFaultProxy
    else:
        srv = RedisServer().start()
        table = "adv" + uuid.uuid4().hex[:8]
        cli = UrlCli(srv, table)
        proxy = RedisFaultProxy
    try:
        made = cli("table-create", "-q")
        assert made.returncode == 0, made.stderr
        yield srv, table, proxy
    finally:
        srv.stop()


def _table(store: tuple[Server, str, Any], proxy: FaultProxy | None = None) -> aio.LockTable:
    srv, table, _ = store
    assert srv.store_url is not None
    url = srv.store_url if proxy is None else proxy.url_for(srv.store_url)
    return aio.connect(url, table=table, owner="adv")


def _proxy(store: tuple[Server, str, Any], plan: Plan) -> FaultProxy:
    srv, _, kind = store
    made: FaultProxy = kind(("127.0.0.1", srv.port), plan)
    return made


async def _holder(table: aio.LockTable, lock_id: str) -> str | None:
    """The lease holding ``lock_id`` now (None: free)."""
    record: Any = await table.state(lock_id)
    if record is None or record.ended or record.expires_at <= time.time():
        return None
    return f"{record.owner} (token {record.fencing_token})"


def _name() -> str:
    return "adv-" + uuid.uuid4().hex[:8]


def test_a_task_cancelled_while_waiting_for_the_connection_ends_cancelled_holding_nothing(
    store: tuple[Server, str, Any],
) -> None:
    """Task B waits for the loop's connection while task A's take is on it. A's take is
    answered and, in the same turn of the loop, B is cancelled (what a TaskGroup does when a
    sibling fails, or "the first to get a lock cancels the rest"). B sent nothing yet: it
    must end cancelled, and lock ``b`` must stay free."""
    first, second = _name(), _name()
    seen: dict[str, Any] = {}

    async def main() -> None:
        async with _table(store) as table:
            await table.store.read(first)  # the loop's connection is made
            waiting: list[asyncio.Task[Any]] = []

            async def take_then_cancel_the_other() -> Any:
                held = await table.acquire(first, lease=30, wait=0)
                waiting[0].cancel()
                return held

            winner = asyncio.create_task(take_then_cancel_the_other())
            await asyncio.sleep(0)  # the winner's take holds the connection
            waiting.append(asyncio.create_task(table.acquire(second, lease=30, wait=0)))
            await asyncio.wait([winner, *waiting])
            seen["cancelled"] = waiting[0].cancelled()
            seen["second"] = await _holder(table, second)
            await table.release(winner.result())
            if not waiting[0].cancelled():
                await table.release(waiting[0].result())

    asyncio.run(main())
    assert seen["second"] is None, f"lock {second!r} is held after its task was cancelled"
    assert seen["cancelled"], "the cancelled task went on and took the lock"


def test_an_aclose_cut_short_by_a_timeout_still_closes_the_connection(
    store: tuple[Server, str, Any],
) -> None:
    """A service shuts down with a timeout around ``aclose()`` while another task's step is on
    the connection (its answer late). The close must still happen once that step is done (or
    at the latest when ``aclose()`` is called again): no connection is left open, to be found
    by the garbage collector (a ResourceWarning)."""
    slow = {"on": False}

    def plan(target: str, n: int) -> str:
        return "delay:1.0" if slow["on"] and target == "read" else "pass"

    async def main(proxy: FaultProxy) -> None:
        table = _table(store, proxy)
        await table.state(_name())  # the loop's connection is made
        slow["on"] = True
        step = asyncio.create_task(table.state(_name()))  # its answer comes in 1 s
        await asyncio.sleep(0.2)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(table.aclose(), 0.2)
        await step
        await table.aclose()  # again, the step done

    with warnings.catch_warnings(record=True) as caught, _proxy(store, plan) as proxy:
        warnings.simplefilter("always")
        asyncio.run(main(proxy))
        gc.collect()
    left_open = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert not left_open, left_open


def test_a_hold_whose_renewals_go_unanswered_stops_its_body_before_another_can_take_the_lock(
    store: tuple[Server, str, Any],
) -> None:
    """Every renewal of an ``async with table.lock(...)`` block is blackholed. The body must be
    cancelled by the safety deadline (``margin`` before the lease's end), not when the stuck
    renewal is finally cut off (its try's time plus a grace later): meanwhile the lease ends
    on the server and another client takes the lock while the body still runs."""
    srv, table_name, _ = store
    lock, seen = _name(), {}
    blackholed = threading.Event()

    def plan(target: str, n: int) -> str:
        return "blackhole" if blackholed.is_set() and target == "renew" else "pass"

    def other() -> None:
        assert srv.store_url is not None
        rival = awsflock.connect(srv.store_url, table=table_name)
        try:
            while "taken" not in seen and time.monotonic() < seen["start"] + 10:
                try:
                    rival.release(rival.acquire(lock, lease=5, wait=0))
                    seen["taken"] = time.monotonic()
                except errors.LockBusy:
                    time.sleep(0.01)
        finally:
            rival.store.close()  # type: ignore[attr-defined]

    async def main(proxy: FaultProxy) -> None:
        table = _table(store, proxy)
        with contextlib.suppress(errors.LeaseLost):
            async with table.lock(lock, lease=3, margin=0.3):
                blackholed.set()
                seen["start"] = time.monotonic()
                rival = threading.Thread(target=other, daemon=True)
                rival.start()
                try:
                    await asyncio.sleep(30)
                finally:
                    seen["stopped"] = time.monotonic()
        await table.aclose()
        await asyncio.to_thread(rival.join, 15)

    with _proxy(store, plan) as proxy:
        asyncio.run(main(proxy))
    assert "taken" in seen, "the rival never took the lock"
    overlap = seen["stopped"] - seen["taken"]
    assert overlap < 0, f"the body ran {overlap:.2f}s after another client took the lock"


def test_a_step_cut_off_unanswered_leaves_no_warning_from_the_driver(
    store: tuple[Server, str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """A read whose answer never comes in time is cut off and reported (EndpointUnreachable,
    in doubt); the driver must not add a warning of its own on stderr (psycopg's "query
    cancellation interrupted (OperationalError): closing connection")."""
    srv, table_name, _ = store

    def plan(target: str, n: int) -> str:
        return "delay:2.5" if target == "read" else "pass"

    async def main(proxy: FaultProxy) -> None:
        assert srv.store_url is not None
        url = proxy.url_for(srv.store_url)
        table = aio.connect(url, table=table_name, owner="adv", request_timeout=1)
        try:
            with pytest.raises(errors.EndpointUnreachable):
                await table.state(_name())
        finally:
            await table.aclose()

    with _proxy(store, plan) as proxy:
        asyncio.run(main(proxy))
    foreign = [
        f"{r.name}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.WARNING and not r.name.startswith("awsflock")
    ]
    assert not foreign, foreign
