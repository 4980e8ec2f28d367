"""A small ASGI service, as a user writes one with ``awsflock.aio``: run by uvicorn with several
workers (tests/integration/test_service.py). Each worker campaigns for leadership of
"scheduler" and, while it leads, writes a tick with its term's fencing token to a fenced
ledger (an HTTP server of the test's) every ``TICK`` seconds; and serves ``/work/KEY``, which
does one fenced read-modify-write of KEY under the lock ``req:KEY``.

Configured by the environment: ``AWSFLOCK_STORE`` (and ``AWSFLOCK_TABLE``,
``AWSFLOCK_ENDPOINT_URL``: as the CLI), ``APP_LEDGER`` (the ledger's URL), ``APP_LEASE``,
``APP_SKEW``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from awsflock import aio

TICK = 0.1
LEDGER = os.environ.get("APP_LEDGER", "")
LEASE = float(os.environ.get("APP_LEASE", "2"))
SKEW = os.environ.get("APP_SKEW")


def _post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """One request to the ledger (in a thread: the event loop is not blocked)."""
    request = urllib.request.Request(
        LEDGER + path, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


async def ledger(path: str, **body: Any) -> dict[str, Any]:
    return await asyncio.to_thread(_post, path, {**body, "pid": os.getpid()})


async def lead(term: aio.Term) -> None:
    while True:
        await ledger("/tick", token=term.fencing_token)
        await asyncio.sleep(TICK)


async def work(request: Request) -> JSONResponse:
    key = request.path_params["key"]
    table: aio.LockTable = request.app.state.table
    async with table.lock(f"req:{key}", lease=LEASE * 2, wait=30) as held:
        got = await ledger("/read", key=key, token=held.fencing_token)
        await asyncio.sleep(0.01)
        done = await ledger("/write", key=key, token=held.fencing_token, value=got["value"] + 1)
    return JSONResponse({"pid": os.getpid(), **done})


async def leader(request: Request) -> JSONResponse:
    record = await request.app.state.election.leader()
    return JSONResponse({"pid": os.getpid(), "leader": record.owner if record else None})


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    skew = float(SKEW) if SKEW is not None else None
    table = aio.connect(owner=f"worker-{os.getpid()}", skew=skew)
    app.state.table = table
    app.state.election = table.election("scheduler", lease=LEASE)
    campaign = asyncio.create_task(app.state.election.run(lead))
    await ledger("/hello")
    try:
        yield
    finally:
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign
        await table.aclose()


app = Starlette(
    routes=[Route("/work/{key}", work, methods=["POST"]), Route("/leader", leader)],
    lifespan=lifespan,
)
