"""The Redis store's entry in the store registry (``awsflock.stores.kinds``): its URLs (parsed
by ``urls``: ``redis://[user[:password]@]host:6379/0?prefix=NAME``, ``rediss://`` for TLS), how
it is opened, and its own command (``acl``, the rules a Redis user needs)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from awsflock.stores.kinds import Named, Settings
from awsflock.stores.redis import acl as acl_rules
from awsflock.stores.redis import urls

if TYPE_CHECKING:
    from awsflock.stores.redis.store import RedisStore


def parse(url: str) -> Named:
    """``url`` as a Redis store: a UsageError naming what is wrong with it."""
    return urls.parse(url)


def open(named: Named, settings: Settings) -> RedisStore:
    from awsflock.stores.redis.store import RedisStore
    from awsflock.stores.remote.facade import opened

    return opened(RedisStore, named.url, named.table or settings.table, settings)


def awaited(store: RedisStore) -> Any:
    """The store's lock steps awaited on ``redis.asyncio`` (``awsflock.aio``)."""
    from awsflock.stores.redis.aio import AsyncRedisStore

    return AsyncRedisStore(store)


def acl(prefix: str, user: str, *, read_only: bool) -> str:
    return acl_rules.acl(urls.check_prefix(prefix), user, read_only=read_only)


COMMANDS: Mapping[str, Callable[..., Any]] = {"grants": acl}
