"""``awsflock.aio`` on every real server: tasks take turns on a lock, never together; an
operator's force-release cancels the holder's body and the block raises ``LeaseLost``; a task
whose wait is cut short by a timeout holds nothing."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from awsflock import aio, errors
from awsflock.lock.admin import force_release
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from tests.servers import LOCAL_CREDENTIALS, Server

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _local_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """The access key the CLI made the table with (DynamoDB Local keeps tables per key)."""
    for name, value in LOCAL_CREDENTIALS.items():
        monkeypatch.setenv(name, value)


def _aio(server: Server, table: str, owner: str) -> aio.LockTable:
    if server.store_url is not None:
        return aio.connect(server.store_url, table=table, owner=owner)
    return aio.connect(
        f"dynamodb://{table}", endpoint_url=server.url, region="us-east-1", owner=owner
    )


def _sync(server: Server, table: str, owner: str) -> LockTable:
    """A synchronous table, for a test's set-up and checks: its tries get 30 s (a first try on
    DynamoDB makes botocore's client, which took over 4 s under CI's load, 2026-11-30)."""
    import awsflock

    if server.store_url is not None:
        made = awsflock.connect(server.store_url, table=table, request_timeout=30)
    else:
        made = awsflock.connect(
            f"dynamodb://{table}", endpoint_url=server.url, region="us-east-1", request_timeout=30
        )
    made.identity = Identity(owner=owner, host=owner, pid=1)
    return made


@pytest.fixture
def at(server: Server, shared_table: str) -> tuple[Server, str]:
    """The current server and its session table, on every store kind (a test that takes
    ``server`` itself runs on the DynamoDB-compatible ones only)."""
    return server, shared_table


def _name() -> str:
    return "aio-" + uuid.uuid4().hex[:8]


def test_tasks_take_turns_and_never_hold_together(at):
    server, shared_table = at
    lock = _name()
    inside: list[str] = []
    tokens: list[int] = []

    async def worker(n: int) -> None:
        table = _aio(server, shared_table, f"w{n}")
        try:
            for _ in range(3):
                async with table.lock(lock, lease=10, wait=30) as held:
                    assert not inside, inside  # nobody else is in
                    inside.append(f"w{n}")
                    tokens.append(held.fencing_token)
                    await asyncio.sleep(0.02)
                    inside.remove(f"w{n}")
        finally:
            await table.aclose()

    async def main() -> None:
        await asyncio.gather(*(worker(n) for n in range(3)))

    asyncio.run(main())
    assert len(tokens) == 9 and tokens == sorted(tokens) and len(set(tokens)) == 9


def test_a_force_release_cancels_the_body_and_the_block_raises_lease_lost(at):
    server, shared_table = at
    lock = _name()
    operator = _sync(server, shared_table, "ops")
    seen: list[str] = []

    async def main() -> None:
        table = _aio(server, shared_table, "svc")
        try:
            with pytest.raises(errors.LeaseLost, match="force-released"):
                async with table.lock(lock, lease=3) as held:
                    await asyncio.to_thread(
                        force_release, operator, lock, reason="stuck", lease_id=held.lease_id
                    )
                    try:
                        await asyncio.sleep(30)  # cut short at the next renewal, ~1 s
                    except asyncio.CancelledError:
                        seen.append("cancelled")
                        raise
        finally:
            await table.aclose()

    try:
        asyncio.run(main())
    finally:
        _close(operator)
    assert seen == ["cancelled"]


def test_a_wait_cut_short_by_a_timeout_holds_nothing(at):
    server, shared_table = at
    lock = _name()
    holding = _sync(server, shared_table, "holder")
    holder = holding.acquire(lock, lease=600, wait=0)

    async def main() -> Any:
        table = _aio(server, shared_table, "svc")
        try:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(table.acquire(lock, wait=None, fair=True), 1.5)
            return await table.state(lock)
        finally:
            await table.aclose()

    try:
        state = asyncio.run(main())
        assert state.lease_id == holder.lease_id and state.line.waiters == ()
        holder.release()
    finally:
        _close(holding)


def _close(table: LockTable) -> None:
    close = getattr(table.store, "close", None)
    if close is not None:
        close()


def test_tasks_taking_the_same_locks_in_opposite_orders_never_overlap(at):
    """Sets (``awsflock.sets``) awaited on every store: [a, b] and [b, a] in a loop, a fenced
    counter per name; dynalite (no transactions) refuses a set before sending it."""
    server, shared_table = at
    a, b = _name(), _name()
    holding: list[str] = []
    tokens: dict[str, list[int]] = {a: [], b: []}

    async def worker(table: aio.LockTable, order: list[str]) -> None:
        for _ in range(6):
            async with table.lock(order, lease=20, wait=60) as held:
                assert not holding, holding
                holding.append(held.lease_id)
                for name in order:
                    tokens[name].append(held.fencing_tokens[name])
                await asyncio.sleep(0.01)
                holding.remove(held.lease_id)

    async def main() -> None:
        one, two = _aio(server, shared_table, "one"), _aio(server, shared_table, "two")
        try:
            await asyncio.gather(worker(one, [a, b]), worker(two, [b, a]))
        finally:
            await one.aclose()
            await two.aclose()

    try:
        asyncio.run(main())
    except errors.ConfigurationError as exc:
        assert "several locks in one step" in exc.message and server.name == "dynalite"
        return
    assert all(t == sorted(t) and len(set(t)) == len(t) == 12 for t in tokens.values())
