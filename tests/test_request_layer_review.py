"""Findings of the adversarial review of the shared request layer (issue 39) that need no
server: psycopg's connect is replaced by a fake, and the interleaving of two threads is chosen
exactly (no sleeping)."""

from __future__ import annotations

import threading
from typing import Any, Callable

from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores.postgresql.store import PostgresStore
from tests.test_postgres_store import StuckConnection


class _GivenBackAsCloseLooks:
    """The store's connection lock, met by ``close()`` while a try holds it: that try ends and
    gives the connection back just as ``close()`` finds the lock taken (``on_busy``)."""

    def __init__(self, real: Any, on_busy: Callable[[], None]) -> None:
        self.real = real
        self.on_busy: Callable[[], None] | None = on_busy

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = bool(self.real.acquire(blocking, timeout))
        if not got and not blocking and self.on_busy is not None:
            on_busy, self.on_busy = self.on_busy, None
            on_busy()
        return got

    def release(self) -> None:
        self.real.release()


def test_close_while_a_try_ends_closes_the_connection(monkeypatch):
    # Found by the review of issue 39: close() that found the connection in use left its
    # closing to the try using it, by a flag; a try that gave the connection back between
    # close()'s look and the flag never saw it, so the connection stayed open after close()
    # (and was used, then closed, by whatever try came next).
    import psycopg

    let_go = threading.Event()
    conn = StuckConnection([], let_go)
    monkeypatch.setattr(psycopg, "connect", lambda *_a, **_k: conn)
    store = PostgresStore("postgresql://u@h/db", request_timeout=30)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    taker = threading.Thread(target=store.take, args=("lock", attempt), daemon=True)
    taker.start()
    assert conn.inside.wait(30)

    def the_try_ends() -> None:
        let_go.set()
        taker.join(30)

    store._slots[0].lock = _GivenBackAsCloseLooks(store._slots[0].lock, the_try_ends)  # type: ignore[assignment]
    try:
        store.close()
    finally:
        the_try_ends()
    assert not taker.is_alive()
    assert conn.closed, "the connection stayed open after close()"
    assert store._connection_now() is None
