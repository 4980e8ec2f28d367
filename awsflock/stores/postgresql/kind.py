"""The PostgreSQL store's entry in the store registry (``awsflock.stores.kinds``): its URLs
(``postgresql://user@host:5432/db?table=NAME`` or ``postgres://``, a libpq URL, so libpq's
environment fills in what it leaves out; ``table`` is awsflock's own parameter), how it is
opened, and its own command (``grants``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from awsflock.stores.kinds import Named, Settings
from awsflock.stores.postgresql import schema, urls

if TYPE_CHECKING:
    from awsflock.stores.postgresql.store import PostgresStore


def parse(url: str) -> Named:
    return Named("postgresql", url, table=urls.split_url(url)[1])


def open(named: Named, settings: Settings) -> PostgresStore:
    from awsflock.stores.postgresql.store import PostgresStore
    from awsflock.stores.remote.facade import opened

    return opened(PostgresStore, named.url, settings.table, settings)


def awaited(store: PostgresStore) -> Any:
    """The store's lock steps awaited on psycopg's asynchronous connection (``awsflock.aio``)."""
    from awsflock.stores.postgresql.aio import AsyncPostgresStore

    return AsyncPostgresStore(store)


def grants(table: str, role: str, *, read_only: bool) -> str:
    return schema.grants(schema.check_name(table), role, read_only=read_only)


COMMANDS: Mapping[str, Callable[..., Any]] = {"grants": grants}
