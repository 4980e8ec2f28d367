"""The PostgreSQL store's link: one psycopg connection, autocommit, whose
``statement_timeout`` is the request timeout and whose commits are all durable
(``synchronous_commit=on``); a step is one statement. The request layer above it
(``stores.remote``) bounds, retries and gates its tries."""

from __future__ import annotations

import contextlib
import math
import os
from typing import Any

from awsflock.stores.postgresql.translate import translate
from awsflock.stores.remote.link import Translated, driver, shut_fd


class PgLink:
    """Connections to one PostgreSQL database (``conninfo``: a libpq URL) for the lock table
    ``table``; a step's request is ``(query, arguments)``."""

    def __init__(self, conninfo: str, table: str, request_timeout: float) -> None:
        self.conninfo = conninfo
        self.table = table
        self.request_timeout = request_timeout
        self._said: str | None = None

    def where(self) -> str:
        if self._said is None:  # libpq's environment is read once, as libpq reads it
            self._said = f"PostgreSQL at {self._where()}"
        return self._said

    def _where(self) -> str:
        """user@host:port/db, from the URL and libpq's environment (never the password)."""
        try:
            from psycopg.conninfo import conninfo_to_dict

            params = conninfo_to_dict(self.conninfo)
        except Exception:
            return "(an unreadable URL)"

        def get(key: str, env: str, default: str) -> str:
            return str(params.get(key) or os.environ.get(env) or default)

        host = get("host", "PGHOST", "localhost")
        user = get("user", "PGUSER", "")
        text = f"{user}@" if user else ""
        return text + f"{host}:{get('port', 'PGPORT', '5432')}/{get('dbname', 'PGDATABASE', user)}"

    def connect(self, timeout: float) -> Any:
        psycopg = driver("psycopg", "PostgreSQL", "psycopg 3", "postgres")
        statement_ms = max(1, round(self.request_timeout * 1000))
        extra: dict[str, Any] = {}
        if not _given(self.conninfo, "application_name", "PGAPPNAME"):
            extra["application_name"] = "awsflock"
        extra["options"] = _options(self.conninfo, statement_ms)
        return psycopg.connect(
            self.conninfo,
            autocommit=True,
            connect_timeout=max(2, math.ceil(timeout)),
            **extra,
        )

    def step(self, conn: Any, request: tuple[str, tuple[Any, ...]], timeout: float) -> Any:
        query, args = request
        return conn.execute(query, args).fetchone()[0]

    def interrupt(self, conn: Any) -> None:
        shut_fd(conn.pgconn.socket)

    def close(self, conn: Any) -> None:
        with contextlib.suppress(Exception):
            conn.close()

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        return translate(exc, operation=operation, where=self.where(), table=self.table, sent=sent)


def _given(conninfo: str, key: str, env: str) -> bool:
    """Whether the URL or libpq's environment sets ``key``."""
    from psycopg.conninfo import conninfo_to_dict

    return bool(conninfo_to_dict(conninfo).get(key) or os.environ.get(env))


def _options(conninfo: str, statement_ms: int) -> str:
    """libpq's ``options`` for the store's connection: the user's (from the URL, else
    PGOPTIONS) between the store's, so that a ``statement_timeout`` of theirs wins and
    ``synchronous_commit=on`` always does: every commit of this session (table-create's too)
    is on disk before the server answers, whatever the server, database or role says."""
    from psycopg.conninfo import conninfo_to_dict

    given = conninfo_to_dict(conninfo).get("options") or os.environ.get("PGOPTIONS") or ""
    parts = [f"-c statement_timeout={statement_ms}", str(given), "-c synchronous_commit=on"]
    return " ".join(part for part in parts if part)
