"""A lock table in PostgreSQL: the ``LockStore`` whose every step is one call of the table's
step function (``steps.sql``): one statement, one round trip, one transaction.

Time is the database server's: each step reads ``clock_timestamp()`` and judges expiry by it,
so the skew window is 0 and no client clock is trusted. Answers are shifted into the caller's
clock: a lease's times are moved by (the caller's clock when the try was sent) minus (the
server's clock when it ran), so a holder's deadline, measured from before the request left,
always falls before the lease really ends, whatever the two clocks say.

The lock steps are the shared facade's (``stores.remote.facade``); this store adds its link
(``link``: the connection), its step program (``program``), and the calls that are not steps:
the scan of ``locks``, the audit records and set-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    AUDIT_APPLIED,
    AUDIT_PREFIX,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
)
from awsflock.records import RESERVED_PREFIX, LockRecord, Pool, kept_audit
from awsflock.stores import kinds
from awsflock.stores.postgresql import program, schema, urls
from awsflock.stores.postgresql.link import PgLink
from awsflock.stores.remote import answers
from awsflock.stores.remote.facade import StepStore, check_audit_key, listed

_T = TypeVar("_T")
#: The store class, as errors of its arguments name it.
WHO = "PostgresStore"
#: The audit statuses the audit statements compare, as their parameters.
_STATUSES = {"applied": AUDIT_APPLIED, "void": AUDIT_VOID}


class PostgresStore(StepStore[Any]):
    """Lock records in a PostgreSQL table (a ``LockStore``).

    ``url``: the CLI's form, a libpq URL (``postgresql://user@host:5432/db``; libpq's
    environment variables and ``~/.pgpass`` fill in what it leaves out), optionally with
    ``?table=NAME``; ``table_name`` says the same beside it (both given, they must agree;
    default ``awsflock``). Nothing connects until the first request; a bad URL or argument is
    a UsageError here. ``server_time`` False: steps use the caller's ``now_ms`` and
    ``skew_ms`` instead of the server's clock (for tests and simulations in virtual time).
    """

    kind = "postgresql"
    link: PgLink

    def __init__(
        self,
        url: str,
        table_name: str | None = None,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        server_time: bool = True,
    ) -> None:
        conninfo, url_table = urls.split_url(kinds.check_url(url, "postgresql", WHO))
        if table_name is not None:
            kinds.check_type(WHO, "table_name", table_name, (str,), "a string")
            if url_table is not None and table_name != url_table:
                raise errors.UsageError(
                    f"{WHO}: table={url_table} in the URL and table_name {table_name!r} disagree",
                    hint="name the table in one place",
                )
        name = schema.check_name(url_table or table_name or "awsflock")
        self.table_name = name
        self.request_timeout = kinds.check_timeout(WHO, request_timeout)
        self.clock: Clock = clock or SystemClock()
        self.server_time = server_time
        self.conninfo = conninfo
        self.link = PgLink(conninfo, name, self.request_timeout)
        self.program = program.PgProgram(name)
        self._connected_init()
        self._table = schema.quote(name)

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        query = (
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
            f" to_jsonb(t) - {schema.HIDDEN} FROM {self._table} t"
            " WHERE starts_with(t.lock_id, %s) AND NOT starts_with(t.lock_id, %s)"
            " ORDER BY t.lock_id, t.slot"
        )

        def call(conn: Any) -> tuple[list[tuple[Any, ...]], int]:
            wall_ms = round(self.clock.time() * 1000)
            return list(conn.execute(query, (prefix, RESERVED_PREFIX)).fetchall()), wall_ms

        rows, wall_ms = self._send("scan", call)
        shift = wall_ms - int(rows[0][0]) if rows and self.server_time else 0
        by_lock: dict[str, list[dict[str, Any]]] = {}
        for _now, row in rows:
            by_lock.setdefault(row["lock_id"], []).append(row)
        read = (answers.Answer(False, 0, program.head(rows)) for rows in by_lock.values())
        yield from listed(
            answers.outcome(answer, lock_id, None, shift, False)
            for lock_id, answer in zip(by_lock, read)
        )

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any]) -> None:
        check_audit_key(key)
        fields = kept_audit(entry)
        # One statement: a record whose action took effect stays; a void one gives way only
        # to one of an action that took effect (LockStore.put_audit).
        query = (
            f"INSERT INTO {self._table} AS t (lock_id, slot, audit) VALUES (%(key)s, -1,"
            " %(entry)s::jsonb) ON CONFLICT (lock_id, slot) DO UPDATE SET audit = EXCLUDED.audit"
            " WHERE coalesce(t.audit->>'status', '') <> %(applied)s"
            " AND (coalesce(t.audit->>'status', '') <> %(void)s"
            " OR EXCLUDED.audit->>'status' = %(applied)s)"
        )
        values = {"key": key, "entry": json.dumps(fields), **_STATUSES}
        self._send("audit", lambda conn: conn.execute(query, values))

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        query = (
            f"SELECT audit FROM {self._table}"
            " WHERE starts_with(lock_id, %s) AND slot = -1 AND audit IS NOT NULL ORDER BY lock_id"
        )
        rows = self._send("scan", lambda conn: conn.execute(query, (AUDIT_PREFIX,)).fetchall())
        for (entry,) in rows:
            yield dict(entry)

    # -- set-up --------------------------------------------------------------------------------

    def create(self, *, progress: Callable[[str], None] = lambda _message: None) -> bool:
        """Create the table and its step function (in one transaction, one creator at a
        time), or accept an awsflock table of this layout; True if created now."""
        from awsflock.stores.postgresql.tables import create_table

        return create_table(self.table_name, self.where(), self.run_admin, progress)

    def run_admin(self, operation: str, call: Callable[[Any], _T]) -> _T:
        """``call(connection)`` with this store's retries and error translation."""
        return self._send(operation, call)
