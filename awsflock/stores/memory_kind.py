"""The in-memory store's entry in the store registry (``awsflock.stores.kinds.MEMORY``): its
URLs, for the library's callers only (``awsflock.connect("memory://")``; the CLI refuses them),
and how it is opened.

``memory://`` is a new, empty store each time it is opened. ``memory://NAME`` is the store of
that name in this process, shared by every table opened on it while any of them is in use (a
test's code and the code it tests, each calling ``connect``); the first opens it, with its
clock. ``?table=`` names its table, as the other kinds' URLs do.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import parse_qsl, urlsplit

from awsflock import errors
from awsflock.stores.kinds import Named, Settings

if TYPE_CHECKING:
    from awsflock.stores.memory import MemoryStore

_FORM = "memory://[NAME][?table=NAME]"
#: The named stores in use, by (name, table): a store no table holds any more is forgotten.
_NAMED: weakref.WeakValueDictionary[tuple[str, str], MemoryStore] = weakref.WeakValueDictionary()
_GUARD = threading.Lock()


def parse(url: str) -> Named:
    try:
        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
    except ValueError as exc:
        raise errors.UsageError(f"bad store URL {url!r} ({exc})", hint=f"use {_FORM}") from None
    unknown = sorted(set(query) - {"table"})
    if unknown or parts.path not in ("", "/"):
        what = f"parameter {unknown[0]!r}" if unknown else f"path {parts.path!r}"
        raise errors.UsageError(f"bad store URL {url!r}: unknown {what}", hint=f"use {_FORM}")
    settings = {"name": parts.netloc} if parts.netloc else {}
    return Named("memory", url, table=query.get("table") or None, settings=settings)


def open(named: Named, settings: Settings) -> MemoryStore:
    table = named.table or settings.table
    name = named.settings.get("name")
    if not name:
        return _new(table, settings)
    with _GUARD:
        store = _NAMED.get((name, table))
        if store is None:
            store = _NAMED[(name, table)] = _new(table, settings)
    if settings.clock is not None and settings.clock is not store.clock:
        raise errors.UsageError(
            f"{named.url} is in use with another clock, given by the first to open it",
            hint="give every connect() of one named store the same clock, or none after the first",
        )
    return store


def _new(table: str, settings: Settings) -> MemoryStore:
    from awsflock.stores.memory import MemoryStore

    return MemoryStore(
        table,
        clock=settings.clock,
        request_timeout=settings.request_timeout,
        transactions=bool(settings.extra.get("transactions", True)),
    )


def awaited(store: MemoryStore) -> Any:
    """The store, its steps awaited (``awsflock.aio``)."""
    from awsflock.stores.memory_async import AsyncMemoryStore

    return AsyncMemoryStore(store)


COMMANDS: Mapping[str, Callable[..., Any]] = {}
