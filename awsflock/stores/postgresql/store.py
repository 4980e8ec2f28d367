"""A lock table in PostgreSQL: the ``LockStore`` whose every step is one call of the table's
step function (``schema.STEP``): one statement, one round trip, one transaction.

Time is the database server's: each step reads ``clock_timestamp()`` and judges expiry by it,
so the skew window is 0 and no client clock is trusted. Answers are shifted into the caller's
clock: a lease's times are moved by (the caller's clock when the try was sent) minus (the
server's clock when it ran), so a holder's deadline, measured from before the request left,
always falls before the lease really ends, whatever the two clocks say.

One connection per store (per process), made on first use and made again after it broke.
Each try runs in a worker thread bounded in real time (a hung server cannot hold a caller past
its budget), on a connection whose ``statement_timeout`` is the request timeout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import threading
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    AUDIT_PREFIX,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
    MAX_DROPS,
    Attempt,
    Drops,
    Outcome,
)
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    RESERVED_PREFIX,
    Identity,
    Line,
    LockRecord,
    Pool,
    Waiter,
    holder_fields,
)
from awsflock.stores.postgresql import schema
from awsflock.stores.postgresql.translate import translate
from awsflock.stores.retrying import RetryingStore

_T = TypeVar("_T")
#: Real time a try is given beyond its timeout before it is given up.
TRY_GRACE = 0.5
EXTRA_HINT = "pip install 'awsflock[postgres]' (psycopg 3)"


class PostgresStore(RetryingStore):
    """Lock records in a PostgreSQL table (a ``LockStore``).

    ``url``: a libpq URL (``postgresql://user@host:5432/db``; libpq's environment variables
    and ``~/.pgpass`` fill in what it leaves out), optionally with ``?table=NAME``, which wins
    over ``table_name``. ``server_time`` False: steps use the caller's ``now_ms`` and
    ``skew_ms`` instead of the server's clock (for tests and simulations in virtual time).
    """

    def __init__(
        self,
        url: str,
        table_name: str | None = None,
        *,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        server_time: bool = True,
    ) -> None:
        self.conninfo, url_table = schema.split_url(url)
        name = schema.check_name(url_table or table_name or "awsflock")
        self.table_name = name
        self.request_timeout = request_timeout
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
        """The database role this store connects as, and where: postgresql://ROLE@HOST:PORT/DB."""
        try:
            rows = self._send("actor", lambda conn: conn.execute("SELECT session_user").fetchall())
        except errors.AwsflockError:
            return None
        return f"postgresql://{rows[0][0]}@{self._where().partition('@')[2]}" if rows else None

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
                "the PostgreSQL store needs psycopg 3, which is not installed", hint=EXTRA_HINT
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
        )
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

    def read(self, lock_id: str) -> Outcome:
        return self._call("get", "read", lock_id, {})

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        params = {**self._clock(now_ms, skew_ms), "old": old, "new": new}
        return self._call("resize", "resize", lock_id, params).applied

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        query = (
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint,"
            f" to_jsonb(t) - 'audit' FROM {self._table} t"
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


def _check_drops(drop: Drops) -> None:
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")


# -- answers ---------------------------------------------------------------------------------


def _identity(who: Any) -> Identity:
    if not isinstance(who, dict):
        return Identity(owner="")
    fields = {f.name for f in dataclasses.fields(Identity)}
    return Identity(**{k: v for k, v in who.items() if k in fields})


def _seconds(ms: Any, shift: int) -> float | None:
    return None if ms is None else (int(ms) + shift) / 1000


def _record(lock_id: str, row: dict[str, Any], slots: int | None, shift: int) -> LockRecord:
    who = _identity(row.get("who"))
    lease_id = row.get("lease_id") or ""
    return LockRecord(
        lock_id=lock_id,
        lease_id=lease_id,
        # No awsflock 0.2.0 compares it here: it only tells one write of a lease from the next.
        version=f"{lease_id}/{row.get('expires_ms')}" if lease_id else "",
        **holder_fields(who),
        acquired_at=_seconds(row.get("acquired_ms"), shift),
        expires_at=_seconds(row.get("expires_ms"), shift) or 0.0,
        lease_duration=(row.get("lease_ms") or 0) / 1000,
        fencing_token=row.get("fence"),
        ended=row.get("ended") or "",
        history=tuple((str(h[0]), str(h[1])) for h in row.get("history") or () if h),
        slots=slots,
        forced_by=row.get("forced_by") or "",
        forced_reason=row.get("forced_reason") or "",
        forced_at=_seconds(row.get("forced_ms"), shift),
        keeper=row.get("keeper") or "",
        extra=row,
    )


def _line(head: dict[str, Any], shift: int) -> Line:
    """The lock's line; its places' times are the server's, shown shifted by ``shift``."""
    places = head.get("line") or {}
    waiters = sorted(
        (
            Waiter(
                ticket=ticket,
                number=int(place["n"]),
                identity=_identity(place.get("who")),
                since_ms=int(place["since"]),
                seen_ms=int(place["seen"]),
            )
            for ticket, place in places.items()
        ),
        key=lambda w: w.number,
    )
    polled = head.get("polled_ms")
    return Line(
        int(head.get("next_number") or 0),
        tuple(waiters),
        int(polled) if waiters and polled is not None else None,
        shift,
    )


def _outcome(
    applied: bool,
    lock_id: str,
    rows: list[dict[str, Any]],
    slot: int | None,
    shift: int,
    in_doubt: bool,
) -> Outcome:
    head = next((r for r in rows if r["slot"] == -1), None)
    if head is None:
        return Outcome(applied, None, None, slot, in_doubt)
    size = head.get("slots")
    line = _line(head, shift)
    lock = dataclasses.replace(_record(lock_id, head, size, shift), line=line)
    if size is None:
        return Outcome(applied, lock, None, slot, in_doubt, line)
    slots = {int(r["slot"]): _record(lock_id, r, size, shift) for r in rows if r["slot"] >= 0}
    return Outcome(applied, lock, Pool(lock_id, size, slots, line), slot, in_doubt, line)
