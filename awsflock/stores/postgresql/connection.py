"""The PostgreSQL store's connection and request layer: one connection per store (per process),
made on first use and made again after it broke, whose ``statement_timeout`` is the request
timeout and whose commits are all durable (``synchronous_commit=on``); each try runs in a worker
thread bounded in real time, so a hung server cannot hold a caller past its budget."""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, TypeVar

from awsflock import errors, extras
from awsflock.stores.postgresql.translate import translate
from awsflock.stores.retrying import RetryingStore

_T = TypeVar("_T")
#: Real time a try is given beyond its timeout before it is given up.
TRY_GRACE = 0.5


class Connected(RetryingStore):
    """What every step of the PostgreSQL store needs: where it is, its connection, its tries."""

    conninfo: str
    table_name: str
    server_time: bool
    _conn: _Connection | None
    _conn_lock: threading.Lock

    # -- where, and errors -------------------------------------------------------------------

    def where(self) -> str:
        return f"PostgreSQL at {self._where()}"

    def _where(self) -> str:
        """user@host:port/db, from the URL and libpq's environment (never the password)."""
        try:
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(self.conninfo)
        except Exception:
            return "(an unreadable URL)"
        import os

        def get(key: str, env: str, default: str) -> str:
            return str(params.get(key) or os.environ.get(env) or default)

        host = get("host", "PGHOST", "localhost")
        user = get("user", "PGUSER", "")
        text = f"{user}@" if user else ""
        return text + f"{host}:{get('port', 'PGPORT', '5432')}/{get('dbname', 'PGDATABASE', user)}"

    def actor(self) -> str | None:
        """None: the database role names an application more often than a person (and the
        connection says where the locks are, not who acts), so the audit names the person as
        on a DynamoDB endpoint without IAM: user@host (``awsflock.lock.admin.default_actor``)."""
        return None

    # -- connection and tries ----------------------------------------------------------------

    def _connection(self, timeout: float) -> _Connection:
        """The store's connection, made now if there is none (or it was given up)."""
        with self._conn_lock:
            if self._conn is not None:
                return self._conn
        try:
            import psycopg
        except ImportError as exc:
            raise errors.ConfigurationError(
                "the PostgreSQL store needs psycopg 3, which is not installed",
                hint=extras.hint("postgres"),
            ) from exc
        statement_ms = max(1, round(self.request_timeout * 1000))
        extra: dict[str, Any] = {}
        if not _given(self.conninfo, "application_name", "PGAPPNAME"):
            extra["application_name"] = "awsflock"
        extra["options"] = _options(self.conninfo, statement_ms)
        conn = psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=max(2, math.ceil(timeout)),
            **extra,
        )
        with self._conn_lock:
            if self._conn is not None:  # another thread made one meanwhile
                _close_quietly(conn)
                return self._conn
            self._conn = _Connection(conn)
            return self._conn

    def close(self) -> None:
        """Close the connection (a later call makes a new one)."""
        with self._conn_lock:
            entry, self._conn = self._conn, None
        if entry is not None:
            entry.give_up()

    def _discard(self, entry: _Connection | None) -> None:
        """Give up a connection that failed or hung: the next try makes a new one. It is
        closed by whichever thread uses it last (closing it under a thread still inside libpq
        could crash the process)."""
        with self._conn_lock:
            if self._conn is entry:
                self._conn = None
        if entry is not None:
            entry.give_up()

    def _attempt(self, operation: str, call: Callable[[Any], _T], timeout: float) -> _T:
        return self._try(operation, call, timeout)

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

    def _try(self, operation: str, call: Callable[[Any], _T], timeout: float) -> _T:
        """One try, in a worker thread given ``timeout`` (plus a grace) of real time. A try
        given up before it sent its statement never sends it (the gate); one given up after
        may still be applied (``maybe_applied``)."""
        box: dict[str, Any] = {}
        gate = threading.Lock()

        def work() -> None:
            try:
                entry = box["conn"] = self._connection(timeout)
                with entry.lock:
                    if entry.given_up:
                        raise errors.EndpointUnreachable(
                            f"{self.where()}: the connection was given up", hint="retry"
                        )
                    with gate:
                        if box.get("abandoned"):  # the caller gave this try up meanwhile
                            raise errors.EndpointUnreachable(
                                f"{self.where()}: the try was given up", hint="retry"
                            )
                        box["sent"] = True
                    try:
                        box["value"] = call(entry.conn)
                    finally:
                        if entry.given_up:
                            _close_quietly(entry.conn)
            except BaseException as exc:  # handed to the caller's thread as is
                box["error"] = exc

        worker = threading.Thread(target=work, name="awsflock-request", daemon=True)
        worker.start()
        worker.join(timeout + TRY_GRACE)
        if worker.is_alive():
            with gate:  # from here on, a worker that has not sent never will
                box["abandoned"] = True
                sent = bool(box.get("sent"))
            self._discard(box.get("conn"))
            err = errors.EndpointUnreachable(
                f"{self.where()} did not answer in time",
                hint="check that the server is up and reachable, and retry",
            )
            err.maybe_applied = sent
            raise err
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, errors.AwsflockError):
                raise exc
            mapped = translate(
                exc,
                operation=operation,
                where=self.where(),
                table=self.table_name,
                sent=bool(box.get("sent")),
            )
            if mapped.broken:
                self._discard(box.get("conn"))
            raise mapped.error from exc
        value: _T = box["value"]
        return value


class _Connection:
    """A psycopg connection and the lock its users hold while inside it (one at a time)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.lock = threading.Lock()
        self.given_up = False

    def give_up(self) -> None:
        """No new statement on it; closed now if nobody is inside it, else by its user."""
        self.given_up = True
        if self.lock.acquire(blocking=False):
            try:
                _close_quietly(self.conn)
            finally:
                self.lock.release()


def _given(conninfo: str, key: str, env: str) -> bool:
    """Whether the URL or libpq's environment sets ``key``."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    return bool(conninfo_to_dict(conninfo).get(key) or os.environ.get(env))


def _options(conninfo: str, statement_ms: int) -> str:
    """libpq's ``options`` for the store's connection: the user's (from the URL, else
    PGOPTIONS) between the store's, so that a ``statement_timeout`` of theirs wins and
    ``synchronous_commit=on`` always does: every commit of this session (table-create's too)
    is on disk before the server answers, whatever the server, database or role says."""
    import os

    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(conninfo).get("options") or os.environ.get("PGOPTIONS") or ""
    parts = [f"-c statement_timeout={statement_ms}", str(given), "-c synchronous_commit=on"]
    return " ".join(part for part in parts if part)


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):
        conn.close()
