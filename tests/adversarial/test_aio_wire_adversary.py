"""Repros of h17's adversarial review of ``awsflock.aio`` on real servers (PostgreSQL and
Redis): promise 2, a task cancelled while it waits for its loop's connection (another task's
step is on it) holds nothing afterwards and ends cancelled."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import aio
from tests.integration.conftest import PgCli, UrlCli
from tests.servers import PostgresServer, RedisServer, Server


@pytest.fixture(scope="module", params=["postgresql", "redis"])
def store(request: pytest.FixtureRequest) -> Iterator[tuple[Server, str]]:
    """A server of each kind with a lock table made by ``table-create``: (server, table)."""
    if request.param == "postgresql":
        srv: Server = PostgresServer().start()
        table = "adv_" + uuid.uuid4().hex[:8]
        cli: Any = PgCli(srv, table)
    else:
        srv = RedisServer().start()
        table = "adv" + uuid.uuid4().hex[:8]
        cli = UrlCli(srv, table)
    try:
        made = cli("table-create", "-q")
        assert made.returncode == 0, made.stderr
        yield srv, table
    finally:
        srv.stop()


def _table(store: tuple[Server, str]) -> aio.LockTable:
    srv, table = store
    assert srv.store_url is not None
    return aio.connect(srv.store_url, table=table, owner="adv")


async def _holder(table: aio.LockTable, lock_id: str) -> str | None:
    """The lease holding ``lock_id`` now (None: free)."""
    record: Any = await table.state(lock_id)
    if record is None or record.ended or record.expires_at <= time.time():
        return None
    return f"{record.owner} (token {record.fencing_token})"


def _name() -> str:
    return "adv-" + uuid.uuid4().hex[:8]


def test_a_task_cancelled_while_waiting_for_the_connection_ends_cancelled_holding_nothing(
    store: tuple[Server, str],
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
