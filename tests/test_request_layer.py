"""The shared request layer of the network stores (``awsflock.stores.remote``) without a
server: the deadline watchdog, the gate, and the request threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from awsflock import errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores.postgresql.store import PostgresStore
from awsflock.stores.remote import deadline, worker
from awsflock.stores.remote.connected import gate_open
from tests.helpers import every_connection_held
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
    # Other threads' tries hold every connection of the store until this try's deadline has
    # passed: this one fails as never sent, and sends nothing later.
    import psycopg

    executed: list[str] = []
    monkeypatch.setattr(psycopg, "connect", lambda *_a, **_k: FakeConnection(executed))
    store = PostgresStore("postgresql://u@h/db", request_timeout=0.1)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    with every_connection_held(store), pytest.raises(errors.EndpointUnreachable) as raised:
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

    first = workers.run(who, 30, "here", False)
    assert workers.run(who, 30, "here", False) == first  # the same thread, not a new one
    release = threading.Event()

    def stuck() -> Any:
        release.wait(30)
        return threading.current_thread().ident

    with pytest.raises(errors.EndpointUnreachable):
        workers.run(stuck, 0.0, "here", False)
    assert workers.run(who, 30, "here", False) != first  # the stuck thread was left to its try
    release.set()
    assert set(names) == {"awsflock-request"}
    workers.close()


def test_tries_from_other_threads_use_connections_of_their_own(monkeypatch):
    # A table's renewer runs up to 8 workers and a service's threads share one table: with one
    # connection per store, their tries went one at a time, and 1,000 holds' renewals came
    # seconds late. A try stuck on the wire now holds up only its own connection; a thread
    # that sends alone makes one more, and four threads at once are answered together.
    import psycopg

    from awsflock.stores.remote.connected import CONNECTIONS
    from tests.test_postgres_store import StuckConnection

    let_go = threading.Event()
    together = threading.Barrier(4, timeout=30)  # four reads inside at once, or it breaks
    executed: list[str] = []
    made: list[FakeConnection] = []

    class Together(FakeConnection):
        def execute(self, sql: str, params: tuple[Any, ...]) -> Any:
            if params[0] == "read":
                together.wait()
            return super().execute(sql, params)

    def connect(*_a: object, **_k: object) -> FakeConnection:
        conn = StuckConnection(executed, let_go) if not made else Together(executed)
        made.append(conn)
        return conn

    monkeypatch.setattr(psycopg, "connect", connect)
    store = PostgresStore("postgresql://u@h/db", request_timeout=30)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    stuck = threading.Thread(target=store.take, args=("stuck", attempt), daemon=True)
    stuck.start()
    try:
        deadline_ = time.monotonic() + 30
        while not made:
            assert time.monotonic() < deadline_
            time.sleep(0.01)
        assert made[0].inside.wait(30)  # type: ignore[attr-defined]
        for _ in range(3):
            assert store.take("free", attempt).applied
        assert len(made) == 2 and executed == ["take"] * 3
        with ThreadPoolExecutor(4) as pool:
            answers = list(pool.map(lambda n: store.read(f"r{n}"), range(4)))
        assert len(answers) == 4 and len(made) == 5 <= CONNECTIONS
    finally:
        let_go.set()
        stuck.join(30)
    assert executed.count("take") == 4 and executed.count("read") == 4


def _given_up(announced: bool, send_first: bool) -> tuple[errors.EndpointUnreachable, list[str]]:
    """A try that is still running when its caller gives it up; what the caller is told, and
    what the try did once let go (``sent``, or the error at its send gate)."""
    workers = worker.Workers()
    let_go, done = threading.Event(), threading.Event()
    happened: list[str] = []

    def slow() -> None:
        try:
            if send_first:
                worker.at_send()
            let_go.wait(30)
            if announced:
                worker.at_send()
            happened.append("sent")
        except errors.AwsflockError as exc:
            happened.append(exc.message)
        finally:
            done.set()

    with pytest.raises(errors.EndpointUnreachable) as caught:
        workers.run(slow, 0.0, "here", announced)
    let_go.set()
    assert done.wait(30)
    workers.close()
    return caught.value, happened


def test_a_try_given_up_before_its_request_left_is_never_sent_and_not_in_doubt():
    # Its preparation (a credential refresh, a starved thread) outlived its time: the caller
    # is told it was not sent, and the request thread, let go, is stopped at the send gate.
    err, happened = _given_up(announced=True, send_first=False)
    assert err.maybe_applied is False and "given up before it was sent" in err.message
    assert happened == ["the try was given up before it was sent"]


def test_a_try_given_up_after_its_request_left_is_in_doubt():
    err, _ = _given_up(announced=True, send_first=True)
    assert err.maybe_applied is True and "did not answer in time" in err.message


def test_a_try_that_does_not_announce_its_sending_is_in_doubt_once_taken_up():
    err, happened = _given_up(announced=False, send_first=False)
    assert err.maybe_applied is True
    assert happened == ["sent"]  # nothing gates it: it may have gone at any moment
