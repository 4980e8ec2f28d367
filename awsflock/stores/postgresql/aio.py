"""The PostgreSQL store for ``awsflock.aio``: the same step function, sent on psycopg's
asynchronous connection (``AsyncPgLink``), through the asynchronous request layer
(``stores.remote.connected_async``) and the shared step facade's asynchronous source
(``stores.remote.facade_async``). It is made from a ``PostgresStore`` (``awaited``) and keeps
it for the calls that are not lock steps (scans, audit, set-up), which stay synchronous."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from awsflock.stores.postgresql import program
from awsflock.stores.postgresql.link import PgLink, _given, _options
from awsflock.stores.postgresql.store import PostgresStore
from awsflock.stores.remote.facade_async import StepStore
from awsflock.stores.remote.link import Translated, driver


class AsyncPgLink:
    """``PgLink`` on psycopg's ``AsyncConnection``: the same connection settings (autocommit,
    the request timeout as ``statement_timeout``, ``synchronous_commit=on``)."""

    def __init__(self, link: PgLink) -> None:
        self.sync = link

    def where(self) -> str:
        return self.sync.where()

    async def connect(self, timeout: float) -> Any:
        psycopg = driver("psycopg", "PostgreSQL", "psycopg 3", "postgres")
        link = self.sync
        extra: dict[str, Any] = {}
        if not _given(link.conninfo, "application_name", "PGAPPNAME"):
            extra["application_name"] = "awsflock"
        extra["options"] = _options(link.conninfo, max(1, round(link.request_timeout * 1000)))
        return await psycopg.AsyncConnection.connect(
            link.conninfo, autocommit=True, connect_timeout=max(2, math.ceil(timeout)), **extra
        )

    async def step(self, conn: Any, request: tuple[str, tuple[Any, ...]], timeout: float) -> Any:
        query, args = request
        cursor = await conn.execute(query, args)
        row = await cursor.fetchone()
        return row[0]

    async def close(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            await conn.close()

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        return self.sync.translate(exc, operation=operation, sent=sent)


class AsyncPostgresStore(StepStore[Any]):
    """``store``'s lock steps, awaited on an asynchronous connection of its own."""

    kind = "postgresql"

    def __init__(self, store: PostgresStore) -> None:
        self.sync = store
        self.table_name = store.table_name
        self.request_timeout = store.request_timeout
        clock: Any = store.clock
        self.clock = clock
        self.server_time = store.server_time
        self.link: Any = AsyncPgLink(store.link)
        self.program = program.PgProgram(store.table_name)
        self._connected_init()

    def close(self) -> None:
        """Close the synchronous store's connection. An event loop's own connection is closed
        by ``close_async``, in that loop."""
        self.sync.close()
