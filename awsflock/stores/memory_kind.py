"""The in-memory store's entry in the store registry (``awsflock.stores.kinds.MEMORY``): no URL
names it, and it is opened for the tests that open every kind alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.stores.kinds import Named, Settings

if TYPE_CHECKING:
    from awsflock.stores.memory import MemoryStore


def parse(url: str) -> Named:
    raise errors.UsageError(
        f"no URL names the in-memory store, not {url!r}",
        hint="pass store=MemoryStore() to LockTable",
    )


def open(named: Named, settings: Settings) -> MemoryStore:
    from awsflock.stores.memory import MemoryStore

    return MemoryStore(
        named.table or settings.table,
        clock=settings.clock,
        request_timeout=settings.request_timeout,
        transactions=bool(settings.extra.get("transactions", True)),
    )


COMMANDS: Mapping[str, Callable[..., Any]] = {}
