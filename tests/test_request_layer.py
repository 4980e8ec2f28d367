"""The shared request layer of the network stores (``awsflock.stores.remote``) without a
server: the deadline watchdog, the gate, and the request threads."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from awsflock import errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores.postgresql.store import PostgresStore
from awsflock.stores.remote import deadline, worker
from awsflock.stores.remote.connected import gate_open
from tests.test_postgres_store import FakeConnection


def test_a_try_past_its_deadline_is_interrupted_by_the_watchdog():
    interrupted = threading.Event()
    with deadline.watched(time.monotonic() - 1, interrupted.set) as watch:
        assert interrupted.wait(30)
    assert watch.fired


def test_a_try_that_ends_in_time_is_never_interrupted():
    interrupted = threading.Event()
    with deadline.watched(time.monotonic() + 3600, interrupted.set) as watch:
        pass
    assert not watch.fired and not interrupted.is_set()


def test_the_gate_is_shut_once_the_deadline_has_passed():
    assert gate_open(10.0, 9.999) and not gate_open(10.0, 10.0) and not gate_open(10.0, 11.0)


def test_a_try_that_waited_past_its_deadline_for_the_connection_is_never_sent(monkeypatch):
    # Another thread's try holds the store's one connection until this try's deadline has
    # passed: this one fails as never sent, and sends nothing later.
    import psycopg

    executed: list[str] = []
    monkeypatch.setattr(psycopg, "connect", lambda *_a, **_k: FakeConnection(executed))
    store = PostgresStore("postgresql://u@h/db", request_timeout=0.1)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    with store._conn_lock, pytest.raises(errors.EndpointUnreachable) as raised:
        store.take("lock", attempt)
    assert not raised.value.maybe_applied
    assert executed == []
    assert store.take("lock", attempt).applied and executed == ["take"]  # free again: sent


def test_request_threads_are_kept_between_tries_and_a_given_up_one_is_not_reused():
    workers = worker.Workers()
    names: list[str] = []

    def who() -> str:
        names.append(threading.current_thread().name)
        return threading.current_thread().ident or 0  # type: ignore[return-value]

    first = workers.run(who, 30, "here")
    assert workers.run(who, 30, "here") == first  # the same thread, not a new one
    release = threading.Event()

    def stuck() -> Any:
        release.wait(30)
        return threading.current_thread().ident

    with pytest.raises(errors.EndpointUnreachable):
        workers.run(stuck, 0.0, "here")
    assert workers.run(who, 30, "here") != first  # the stuck thread was left to its try
    release.set()
    assert set(names) == {"awsflock-request"}
    workers.close()
