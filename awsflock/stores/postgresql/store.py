"""A lock table in PostgreSQL: the ``LockStore`` whose every step is one call of the table's
step function (``steps.sql``): one statement, one round trip, one transaction.

Time is the database server's: each step reads ``clock_timestamp()`` and judges expiry by it,
so the skew window is 0 and no client clock is trusted. Answers are shifted into the caller's
clock: a lease's times are moved by (the caller's clock when the try was sent) minus (the
server's clock when it ran), so a holder's deadline, measured from before the request left,
always falls before the lease really ends, whatever the two clocks say.

The connection and the tries are ``connection``'s (one connection per process, each try bounded
in real time); turning rows into the library's types is ``rows``'.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.names import slot_of
from awsflock.protocol import (
    AUDIT_PREFIX,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
    MAX_DROPS,
    RENEW_ORDER_MS,
    Attempt,
    Drops,
    Outcome,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    RESERVED_PREFIX,
    LockRecord,
    Pool,
    Waiter,
)
from awsflock.stores import kinds
from awsflock.stores.postgresql import schema, urls
from awsflock.stores.postgresql.connection import Connected, _Connection
from awsflock.stores.postgresql.rows import _outcome

_T = TypeVar("_T")
#: The store class, as errors of its arguments name it.
WHO = "PostgresStore"


class PostgresStore(Connected):
    """Lock records in a PostgreSQL table (a ``LockStore``).

    ``url``: the CLI's form, a libpq URL (``postgresql://user@host:5432/db``; libpq's
    environment variables and ``~/.pgpass`` fill in what it leaves out), optionally with
    ``?table=NAME``; ``table_name`` says the same beside it (both given, they must agree;
    default ``awsflock``). Nothing connects until the first request; a bad URL or argument is
    a UsageError here. ``server_time`` False: steps use the caller's ``now_ms`` and
    ``skew_ms`` instead of the server's clock (for tests and simulations in virtual time).
    """

    #: The ``store`` attribute of its metrics (awsflock.metrics).
    metrics_name = "postgresql"

    def __init__(
        self,
        url: str,
        table_name: str | None = None,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        server_time: bool = True,
    ) -> None:
        self.conninfo, url_table = urls.split_url(kinds.check_url(url, "postgresql", WHO))
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
        self._conn: _Connection | None = None
        self._conn_lock = threading.Lock()
        self._local = threading.local()
        self._table = schema.quote(name)
        self._step = f"SELECT {schema.quote(schema.function_name(name))}(%s, %s, %s::jsonb)"

    @property
    def skew_free(self) -> bool:
        """Leases are timed by one clock (the server's): no skew window is needed."""
        return self.server_time

    # -- the lock steps ------------------------------------------------------------------------

    def _call(self, operation: str, op: str, lock_id: str, params: dict[str, Any]) -> Outcome:
        """One call of the step function; its answer as an Outcome in the caller's clock."""

        def call(conn: Any) -> tuple[Any, int, float]:
            # The wall clock the answer is given in and the monotonic clock, read together when
            # this try is sent, and returned with its answer.
            wall_ms, mono = round(self.clock.time() * 1000), self.clock.monotonic()
            row = conn.execute(self._step, (op, lock_id, json.dumps(params))).fetchone()
            return row[0], wall_ms, mono

        answer, wall_ms, mono = self._send(operation, call)
        outcome = _outcome(
            bool(answer["applied"]),
            lock_id,
            answer["rows"],
            params.get("slot"),
            wall_ms - int(answer["now"]) if self.server_time else 0,
            self._in_doubt(),
            bool(answer.get("barred")),
        )
        if answer.get("ended") is not None:
            outcome = outcome.remembering(str(params["lease"]), str(answer["ended"]))
        if not self.server_time:
            return outcome
        # A lease's end on the caller's monotonic clock: when the try was sent plus what the
        # server had left of it, so no step of the caller's wall clock can stretch it.
        return dataclasses.replace(outcome, to_mono=mono - wall_ms / 1000)

    def _clock(self, now_ms: int, skew_ms: int) -> dict[str, Any]:
        return {} if self.server_time else {"now": now_ms, "skew": skew_ms}

    def take(self, lock_id: str, attempt: Attempt) -> Outcome:
        _check_drops(attempt.drop)
        params = {
            **self._clock(attempt.now_ms, attempt.skew_ms),
            "lease": attempt.lease_id,
            "who": dataclasses.asdict(attempt.identity),
            "lease_ms": attempt.lease_ms,
            "sent": attempt.now_ms,
            "slot": attempt.slot,
            "slots": attempt.slots,
            "ticket": attempt.ticket,
            "drop": [list(d) for d in attempt.drop],
        }
        return self._call("acquire", "take", lock_id, params)

    def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
    ) -> Outcome:
        params = {
            **self._clock(now_ms, skew_ms),
            "lease": lease_id,
            "lease_ms": lease_ms,
            "sent": now_ms,
            "order": RENEW_ORDER_MS,
            "slot": slot,
            "keeper": keeper,
        }
        return self._call("renew", "renew", lock_id, params)

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        params = {
            **self._clock(now_ms, skew_ms),
            "lease": lease_id,
            "slot": slot,
            "ended": ENDED_RELEASED,
        }
        return self._call("release", "end", lock_id, params)

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        force_id: str,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
    ) -> Outcome:
        params = {
            **self._clock(now_ms, skew_ms),
            "lease": lease_id,
            "slot": slot,
            "ended": ENDED_FORCED + force_id,
            "forced_by": actor,
            "forced_reason": reason,
        }
        return self._call("force_release", "end", lock_id, params)

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        params: dict[str, Any] = {
            "ticket": waiter.ticket,
            "who": dataclasses.asdict(waiter.identity),
        }
        if not self.server_time:
            params.update(now=waiter.seen_ms, since=waiter.since_ms)
        return self._call("join", "join", lock_id, params)

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        _check_drops(drop)
        params = {**self._clock(now_ms, 0), "ticket": ticket, "drop": [list(d) for d in drop]}
        return self._call("beat", "beat", lock_id, params)

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        return self._call("leave", "leave", lock_id, {"ticket": ticket})

    def read(self, lock_id: str, lease_id: str | None = None) -> Outcome:
        if lease_id is None:
            return self._call("get", "read", lock_id, {})
        return self._call("get", "read", lock_id, {"lease": lease_id, "slot": slot_of(lease_id)})

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        params = {**self._clock(now_ms, skew_ms), "old": old, "new": new}
        return self._call("resize", "resize", lock_id, params).applied

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        query = (
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
            f" to_jsonb(t) - 'audit' - 'barred' FROM {self._table} t"
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
        for lock_id, lock_rows in by_lock.items():
            outcome = _outcome(False, lock_id, lock_rows, None, shift, False)
            if outcome.pool is not None:
                yield outcome.pool
            elif outcome.lock is not None:
                yield outcome.lock

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        if not key.startswith(AUDIT_PREFIX):
            raise errors.UsageError(f"audit key {key!r} is not under {AUDIT_PREFIX!r}")
        fields = {k: v for k, v in entry.items() if v not in (None, "")}
        on_conflict = "DO UPDATE SET audit = EXCLUDED.audit" if replace else "DO NOTHING"
        query = (
            f"INSERT INTO {self._table} (lock_id, slot, audit) VALUES (%s, -1, %s::jsonb)"
            f" ON CONFLICT (lock_id, slot) {on_conflict}"
        )
        self._send("audit", lambda conn: conn.execute(query, (key, json.dumps(fields))))

    def void_audit(self, key: str, action_id: str | None) -> None:
        query = (
            f"UPDATE {self._table} SET audit = audit || %s::jsonb"
            " WHERE lock_id = %s AND slot = -1 AND audit IS NOT NULL"
            " AND (%s::text IS NULL OR audit->>'action_id' = %s)"
        )
        status = json.dumps({"status": AUDIT_VOID})
        self._send(
            "audit_void", lambda conn: conn.execute(query, (status, key, action_id, action_id))
        )

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


def _check_drops(drop: Drops) -> None:
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")
