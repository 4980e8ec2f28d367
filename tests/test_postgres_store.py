"""The PostgreSQL store's request layer, without a server: psycopg's connect is replaced by a
fake, so the timing of a try can be chosen exactly. (Everything else of the store is tested on
a real server in tests/integration/test_postgres.py.)"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from awsflock import errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores.postgresql.store import PostgresStore


class FakeConnection:
    """Answers every step as applied; records when each statement ran."""

    def __init__(self, executed: list[str]) -> None:
        self.executed = executed
        self.closed = False

    def execute(self, sql: str, params: tuple[Any, ...]) -> Any:
        op = params[0]
        self.executed.append(op)
        now = round(time.time() * 1000)
        row = {"slot": -1, "lease_id": "L1", "expires_ms": now + 60_000, "lease_ms": 60_000}
        answer = {"applied": True, "now": now, "rows": [{**row, "acquired_ms": now, "fence": 1}]}

        class Cursor:
            def fetchone(self) -> list[Any]:
                return [answer]

        return Cursor()

    def close(self) -> None:
        self.closed = True


def test_a_try_given_up_while_still_connecting_never_sends_its_statement(monkeypatch):
    # Found by the third adversarial review: a try whose connect outlasted it was reported as
    # never sent (maybe_applied False, so nobody cleans up after it), yet its worker went on
    # and ran the step once connected: a take landing unnoticed, holding the lock for nobody.
    import psycopg

    executed: list[str] = []
    given_up = threading.Event()

    def slow_connect(conninfo: str, **kwargs: Any) -> FakeConnection:
        given_up.wait(60)  # connected only once the caller has given the try up
        return FakeConnection(executed)

    monkeypatch.setattr(psycopg, "connect", slow_connect)
    before = set(threading.enumerate())  # other tests' idle request threads are not this try's
    store = PostgresStore("postgresql://u@h/db", request_timeout=0.5)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    with pytest.raises(errors.EndpointUnreachable) as raised:
        store.take("lock", attempt)
    workers = [t for t in threading.enumerate() if t.name == "awsflock-request" and t not in before]
    assert workers  # the connect was made in a request thread, and abandoned there
    given_up.set()
    for worker in workers:
        worker.join(60)  # the abandoned worker has connected, and done what it would
    # Either it never sent the statement, or the caller was told it may have been applied.
    assert executed == [] or raised.value.maybe_applied, executed
    assert executed == []


def test_a_connect_interrupted_by_ctrl_c_is_closed_when_it_is_made(monkeypatch):
    # Ctrl-C while a connect is under way: the connection, made later in its request thread,
    # is closed there, not left open for nobody.
    import psycopg

    from awsflock.stores.remote.connected import TryTime

    made: list[FakeConnection] = []
    go = threading.Event()

    def slow_connect(conninfo: str, **kwargs: Any) -> FakeConnection:
        go.wait(60)
        made.append(FakeConnection([]))
        return made[-1]

    class CtrlC(TryTime):
        def wait(self, event: threading.Event, timeout: float) -> bool:
            raise KeyboardInterrupt

    monkeypatch.setattr(psycopg, "connect", slow_connect)
    before = set(threading.enumerate())
    store = PostgresStore("postgresql://u@h/db", request_timeout=5)
    store.try_time = CtrlC()
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    with pytest.raises(KeyboardInterrupt):
        store.take("lock", attempt)
    go.set()
    for worker in threading.enumerate():
        if worker.name == "awsflock-request" and worker not in before:
            worker.join(60)
    assert len(made) == 1 and made[0].closed


class StuckConnection(FakeConnection):
    """Its first statement does not come back until ``let_go`` is set."""

    def __init__(self, executed: list[str], let_go: threading.Event) -> None:
        super().__init__(executed)
        self.let_go = let_go
        self.inside = threading.Event()

    def execute(self, sql: str, params: tuple[Any, ...]) -> Any:
        self.inside.set()
        self.let_go.wait(60)
        return super().execute(sql, params)


def test_close_does_not_wait_for_a_try_on_the_wire_and_its_try_closes_the_connection(
    monkeypatch,
):
    # A CLI exiting after a lost lease closes its store while a renewal may still be stuck on
    # a hung server: closing must not wait for that try (it would hold the exit up to a
    # request timeout), and the connection is closed once the try ends.
    import psycopg

    let_go = threading.Event()
    conn = StuckConnection([], let_go)
    monkeypatch.setattr(psycopg, "connect", lambda *_a, **_k: conn)
    store = PostgresStore("postgresql://u@h/db", request_timeout=30)
    attempt = Attempt("L1", Identity(owner="x"), now_ms=0, lease_ms=60_000, skew_ms=0)
    taker = threading.Thread(target=store.take, args=("lock", attempt), daemon=True)
    taker.start()
    assert conn.inside.wait(30)
    closer = threading.Thread(target=store.close, daemon=True)
    closer.start()
    closer.join(10)
    try:
        assert not closer.is_alive(), "close() waited for the try on the wire"
        assert not conn.closed  # not under the try's feet
    finally:
        let_go.set()
        taker.join(30)
    assert conn.closed and store._connection_now() is None


def test_a_table_on_another_clock_than_its_postgresql_store_is_refused():
    # The store puts its answers on its own clock; a table reading them by another would
    # misjudge its leases (found by the second adversarial review).
    from awsflock import LockTable
    from awsflock.clock import FakeClock

    store = PostgresStore("postgresql://u@h/db", clock=FakeClock())
    with pytest.raises(errors.UsageError, match="clock"):
        LockTable(store=store, clock=FakeClock())
    assert LockTable(store=store).skew == 0  # one clock times its leases: no skew window
    in_caller_time = PostgresStore("postgresql://u@h/db", server_time=False, clock=FakeClock())
    assert LockTable(store=in_caller_time, clock=FakeClock()).skew == 5


@pytest.mark.parametrize(
    ("url", "env", "expected"),
    [
        ("postgresql://h/db", None, "-c statement_timeout=5000 -c synchronous_commit=on"),
        (
            "postgresql://h/db?options=-c%20statement_timeout%3D9000",
            None,
            "-c statement_timeout=5000 -c statement_timeout=9000 -c synchronous_commit=on",
        ),
        (
            "postgresql://h/db",
            "-c synchronous_commit=off",
            "-c statement_timeout=5000 -c synchronous_commit=off -c synchronous_commit=on",
        ),
    ],
)
def test_the_connection_options_keep_the_users_and_always_commit_synchronously(
    monkeypatch: pytest.MonkeyPatch, url: str, env: str | None, expected: str
):
    """The user's options (the URL's, else PGOPTIONS) come after the store's statement timeout
    (theirs wins: the last -c of a name does) and before synchronous_commit=on (the store's
    wins: a grant must be on disk before it is answered)."""
    from awsflock.stores.postgresql.link import _options

    if env is None:
        monkeypatch.delenv("PGOPTIONS", raising=False)
    else:
        monkeypatch.setenv("PGOPTIONS", env)
    assert _options(url, 5000) == expected


def test_the_audit_names_the_person_not_the_connection(monkeypatch):
    """A force-release's actor on PostgreSQL is user@host, as on a DynamoDB endpoint without
    IAM: never the URL, and not the role (often an application's, shared by many people)."""
    import psycopg

    from awsflock.lock.admin import default_actor
    from awsflock.lock.lease import LockTable

    class RoleConnection(FakeConnection):
        def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
            rows = [("app",)]

            class Cursor:
                def fetchall(self) -> list[tuple[str]]:
                    return rows

            return Cursor()

    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: RoleConnection([]))
    store = PostgresStore("postgresql://app:secret@db.example:5432/locks")
    table = LockTable(store=store, identity=Identity(owner="ci", user="alice", host="build-7"))
    assert default_actor(table) == "alice@build-7"


def test_a_role_that_does_not_exist_is_a_login_error_not_an_unreachable_server():
    # With trust authentication, libpq reports a missing role at connect, with no SQLSTATE;
    # it read as "could not be reached" and was retried for the whole wait.
    import psycopg

    from awsflock.stores.postgresql.translate import translate

    exc = psycopg.OperationalError(
        'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
        'FATAL:  role "deploy" does not exist'
    )
    found = translate(exc, operation="acquire", where="PostgreSQL at h", table="t", sent=False)
    assert isinstance(found.error, errors.CredentialsError)
    assert "refused the login" in found.error.message and "create the role" in found.error.hint
