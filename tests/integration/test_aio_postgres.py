"""``awsflock.aio`` on PostgreSQL's asynchronous connection (``stores/postgresql/aio.py``),
through the wire-protocol fault proxy: a take cancelled while it is on the wire (its answer
held back), or whose answer is lost, holds nothing afterwards, and the lock stays usable; a
take that lands late, after the cancelled acquire's clean-up, is refused."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

import pytest

from awsflock import aio
from awsflock.lock.lease import LockTable
from awsflock.stores.postgresql import PostgresStore
from tests.pgproxy import PgFaultProxy
from tests.servers import PostgresServer

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("fault", ["late:1.0", "delay:1.0", "blackhole"])
def test_a_take_cancelled_on_the_wire_holds_nothing_afterwards(
    postgres: PostgresServer, pg_table: str, fault: str
) -> None:
    lock = "aio-pg-" + uuid.uuid4().hex[:8]
    first = {"done": False}

    def plan(target: str, n: int) -> str:
        if target == "take" and not first["done"]:
            first["done"] = True
            return fault
        return "pass"

    with PgFaultProxy(("127.0.0.1", postgres.port), plan) as proxy:
        table = aio.connect(f"{proxy.url_for(postgres.url)}?table={pg_table}", owner="aio")

        async def main() -> None:
            task = asyncio.create_task(table.acquire(lock, lease=60, wait=10))
            await asyncio.sleep(0.3)  # the take is on the wire, its answer held or lost
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await table.aclose()

        asyncio.run(main())
        time.sleep(1.5)  # a late take has landed (and been refused) by now
    other = LockTable(store=PostgresStore(postgres.url, pg_table), owner="other")
    try:
        state = other.state(lock)
        assert state is None or state.released or state.owner != "aio", state
        other.acquire(lock, wait=0).release()
    finally:
        other.store.close()  # type: ignore[attr-defined]
