"""Which locks each thread (or asyncio task) holds through ``table.lock()``, so that waiting
again for one of them fails at once instead of waiting on itself (an acquire that does not
wait is answered as usual: busy, held by this process).

A hold is registered when it is granted and forgotten when it stops. Its owner is the asyncio
task that entered it if there is one, else the thread: the objects themselves (held weakly),
never their ids, which CPython reuses once a thread or task is gone. A hold that was dropped
without being stopped, or whose owner is gone, no longer counts. Pools are not checked: a
holder of one slot may take another while one is free.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from typing import Any

from awsflock import errors

_state = threading.Lock()
#: (the store's place, lock id) -> [(weakref to the hold, weakref to its owner)]
_open: dict[tuple[Any, str], list[tuple[weakref.ref[Any], weakref.ref[Any]]]] = {}


def owner() -> Any:
    """The running asyncio task, else the current thread. (A process that never imported
    asyncio runs no task: the command line does not pay for its import.)"""
    asyncio = sys.modules.get("asyncio")
    task = None
    if asyncio is not None:
        with contextlib.suppress(RuntimeError):  # no event loop running in this thread
            task = asyncio.current_task()
    return task if task is not None else threading.current_thread()


def _is_task(who: Any) -> bool:
    return hasattr(who, "get_coro")


def _place(store: Any, lock_id: str) -> tuple[Any, str]:
    """Where ``lock_id`` lives: two tables on one store (or one server's table) share it. An
    in-process store is its own place: two of them with one name are two stores."""
    if getattr(store, "kind", None) == "memory":
        return (id(store), lock_id)
    return ((store.kind, store.where(), store.table_name), lock_id)


def _live(entries: list[tuple[weakref.ref[Any], weakref.ref[Any]]]) -> list[Any]:
    kept = []
    for hold_ref, owner_ref in entries:
        held, who = hold_ref(), owner_ref()
        if held is None or who is None or not _alive(who):
            continue
        kept.append((hold_ref, owner_ref))
    return kept


def _alive(who: Any) -> bool:
    return not who.done() if _is_task(who) else who.is_alive()


def enter(store: Any, lock_id: str, hold: Any) -> None:
    """``hold`` now holds ``lock_id`` for the current thread or task."""
    key = _place(store, lock_id)
    with _state:
        _open[key] = [*_live(_open.get(key, [])), (weakref.ref(hold), weakref.ref(owner()))]


def leave(store: Any, lock_id: str, hold: Any) -> None:
    """``hold`` no longer holds ``lock_id``."""
    key = _place(store, lock_id)
    with _state:
        kept = [(h, o) for h, o in _live(_open.get(key, [])) if h() is not hold]
        if kept:
            _open[key] = kept
        else:
            _open.pop(key, None)


def refuse_reentry(store: Any, lock_id: str) -> None:
    """Raise ``UsageError`` if the current thread or task holds ``lock_id`` (a
    ``table.lock()`` of it still open): waiting for it would wait on itself."""
    if not _open:  # nothing held through table.lock() in this process: the common case
        return
    key = _place(store, lock_id)
    who = owner()
    with _state:
        entries = _live(_open.get(key, []))
        held = any(o() is who for _h, o in entries)
    if held:
        what = "task" if _is_task(who) else "thread"
        raise errors.UsageError(
            f"lock {lock_id!r} is already held by this {what} (its table.lock() is still "
            "open): taking it again would wait on itself",
            hint=f"use the lock already held, or take it from another {what}",
        )
