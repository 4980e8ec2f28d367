"""Locks in Redis: the ``LockStore`` whose every step is one call of one server-side script
(``steps.lua``): one round trip, atomic, timed by the server's clock (``TIME``).

Time is the server's, so the skew window is 0 and no client clock is trusted; the script refuses
to grant while the server's clock reads earlier than the lock's last grant (a clock stepped
back). Answers are shifted into the caller's clock as the PostgreSQL store's are: a lease's
times move by (the caller's clock when the try was sent) minus (the server's when it ran).

The connection, the deployment check and the durability wait are ``connection``'s; the key
layout and the script ``layout``'s; turning answers into the library's types ``answers``'.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from typing import Any, Callable

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
    Sleeper,
    Waker,
)
from awsflock.records import ENDED_FORCED, ENDED_RELEASED, LockRecord, Pool, Waiter
from awsflock.stores import kinds, programs
from awsflock.stores.redis import answers, layout, urls
from awsflock.stores.redis.connection import Connected, _Connection
from awsflock.stores.redis.wake import Wake

#: Sets an audit record's status to void if it exists (``void.lua`` says how).
VOID = programs.load("awsflock.stores.redis", "void.lua")


class RedisStore(Connected):
    """Lock records in Redis (a ``LockStore``).

    ``url``: the CLI's form, ``redis://[user[:password]@]host:6379/0?prefix=NAME``
    (``rediss://`` for TLS), with every parameter ``--store`` takes (``prefix``, ``replicas``,
    ``durability``, ``max_lease``, redis-py's ``ssl_*``). The keywords say the same beside it
    (a URL parameter wins; both given, they must agree): ``prefix``: the keys' prefix
    (default ``awsflock``); ``password``: used where the URL has none (else
    ``AWSFLOCK_REDIS_PASSWORD``); ``replicas``: how many replicas each step waits for;
    ``declared``: a ``durability`` value (``deployment.DECLARATIONS``); ``max_lease_s``:
    ``max_lease`` in seconds. ``server_time`` False: steps use the caller's ``now_ms`` and
    ``skew_ms`` instead of the server's clock (for tests and simulations in virtual time).
    Nothing connects until the first request; a bad URL or argument is a UsageError here.
    """

    #: The ``store`` attribute of its metrics (awsflock.metrics).
    metrics_name = "redis"

    def __init__(
        self,
        url: str,
        prefix: str | None = None,
        *,
        password: str | None = None,
        replicas: int | None = None,
        declared: str | None = None,
        max_lease_s: float | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
        server_time: bool = True,
    ) -> None:
        config = urls.configure(
            url,
            prefix,
            password=password,
            replicas=replicas,
            declared=declared,
            max_lease_s=max_lease_s,
        )
        #: redis-py's URL: the one given without awsflock's own parameters.
        self.url = config.url
        self.password = config.password
        self.prefix = self.table_name = config.prefix
        self.replicas = config.replicas
        self.declared = config.declared
        self.max_lease_s = config.max_lease_s
        self.request_timeout = kinds.check_timeout(urls.WHO, request_timeout)
        self.clock: Clock = clock or SystemClock()
        self.server_time = server_time
        self._conn: _Connection | None = None
        self._conn_lock = threading.Lock()
        self._local = threading.local()

    @property
    def skew_free(self) -> bool:
        """Leases are timed by one clock (the server's): no skew window is needed."""
        return self.server_time

    def waker(self, lock_id: str) -> Waker:
        """A waiter wakes as soon as the script publishes that the lock may have changed
        (``wake``); in the caller's time (a simulation's), it sleeps as on any store."""
        if not self.server_time:
            return Sleeper()
        channel = layout.wake_channel(self.prefix, lock_id)
        return Wake(self._subscriber, channel, self.where())

    # -- the lock steps ------------------------------------------------------------------------

    def _call(self, operation: str, op: str, lock_id: str, params: dict[str, Any]) -> Outcome:
        """One call of the step script; its answer as an Outcome in the caller's clock."""
        keys = [
            layout.lock_key(self.prefix, lock_id),
            layout.fence_key(self.prefix, lock_id),
            layout.bars_key(self.prefix, lock_id),
            layout.done_key(self.prefix, lock_id),
            layout.forced_key(self.prefix, lock_id),
        ]

        def call(entry: _Connection) -> tuple[Any, int, float]:
            # The caller's wall and monotonic clocks, read together when this try is sent.
            wall_ms, mono = round(self.clock.time() * 1000), self.clock.monotonic()
            if op in ("take", "renew"):
                entry.check_grant(int(params["lease_ms"]), self.where())
            found = entry.deployment
            body = {**params, "touch": bool(found and found.waits)}
            reply = self._script(entry, keys, [op, json.dumps(body)])
            return reply, wall_ms, mono

        reply, wall_ms, mono = self._send(operation, call)
        code, now = int(reply[0]), int(reply[1])
        if code < 0:
            behind = int(reply[2]) - now
            raise errors.Throttled(
                f"{self.where()}: the server's clock reads {behind} ms earlier than the last "
                f"grant on {lock_id!r} (it was stepped back); no grant until it catches up",
                hint="check the server's time synchronisation (NTP); retry",
            )
        shift = wall_ms - now if self.server_time else 0
        head = answers.fields(reply[2])
        outcome = answers.outcome(
            code == 1, lock_id, head, params.get("slot"), shift, self._in_doubt(), code == 2
        )
        if len(reply) > 3 and reply[3] is not None:
            ended = reply[3].decode() if isinstance(reply[3], bytes) else str(reply[3])
            outcome = outcome.remembering(str(params["lease"]), ended)
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
            "who": json.dumps(dataclasses.asdict(attempt.identity)),
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
        params = {**self._clock(now_ms, skew_ms), "lease": lease_id, "slot": slot}
        return self._call("release", "end", lock_id, {**params, "ended": ENDED_RELEASED})

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
            "who": json.dumps(dataclasses.asdict(waiter.identity)),
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
        """Every lock under the store's prefix whose name starts with ``prefix``: a SCAN, then
        one read per lock (in the order SCAN gives)."""
        pattern = f"{self.prefix}:{{*}}:lock"

        def scan(cursor: int) -> tuple[int, list[Any]]:
            def call(entry: _Connection) -> tuple[int, list[Any]]:
                self._ready(entry)
                found: tuple[int, list[Any]] = entry.client.scan(cursor, match=pattern, count=500)
                return found

            found: tuple[int, list[Any]] = self._send("scan", call)
            return found

        cursor = None
        while cursor != 0:
            cursor, keys = scan(cursor or 0)
            for key in keys:
                name = layout.lock_of(self.prefix, key.decode() if isinstance(key, bytes) else key)
                if name is None or not name.startswith(prefix):
                    continue
                outcome = self.read(name)
                if outcome.pool is not None:
                    yield outcome.pool
                elif outcome.lock is not None:
                    yield outcome.lock

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any], *, replace: bool = True) -> None:
        if not key.startswith(AUDIT_PREFIX):
            raise errors.UsageError(f"audit key {key!r} is not under {AUDIT_PREFIX!r}")
        text = json.dumps({k: v for k, v in entry.items() if v not in (None, "")})
        name = layout.audit_key(self.prefix, key)

        def put(conn: _Connection) -> None:
            self._ready(conn)
            conn.client.set(name, text, nx=not replace)

        self._send("audit", put)

    def void_audit(self, key: str, action_id: str | None) -> None:
        name = layout.audit_key(self.prefix, key)

        def void(conn: _Connection) -> None:
            self._ready(conn)
            conn.client.eval(VOID, 1, name, AUDIT_VOID, action_id or "")

        self._send("audit_void", void)

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        pattern = layout.audit_key(self.prefix, AUDIT_PREFIX) + "*"

        def everything(entry: _Connection) -> list[Any]:
            self._ready(entry)
            client = entry.client
            return [client.get(key) for key in client.scan_iter(match=pattern, count=500)]

        for text in self._send("scan", everything):
            if text is None:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise errors.StoreError(
                    f"{self.where()}: a key under {pattern} holds something other than an "
                    "awsflock audit record",
                    hint="remove it, or name another prefix with ?prefix=",
                )
            yield record

    # -- set-up --------------------------------------------------------------------------------

    def create(self, *, progress: Callable[[str], None] = lambda _message: None) -> bool:
        """Load the step script and record the layout's version (idempotent); True if the
        layout was recorded now. A prefix whose layout key holds anything else is refused."""
        key = layout.layout_key(self.prefix)

        def work(entry: _Connection) -> tuple[bool, Any]:
            client = entry.client
            client.script_load(layout.script())
            created = bool(client.set(key, layout.LAYOUT, nx=True))
            entry.layout = found = client.get(key)
            if isinstance(found, bytes):
                entry.layout = found.decode()
            return created, found

        created, found = self._send("create_table", work)
        found_text = found.decode() if isinstance(found, bytes) else found
        if found_text != layout.LAYOUT:
            raise errors.TableIncompatible(
                f"prefix {self.prefix!r} in {self.where()} holds another layout ({key} is "
                f"{found_text!r}, not {layout.LAYOUT!r})",
                hint="name another prefix with ?prefix= in --store (or --tablename)",
            )
        verb = "recorded" if created else "found"
        progress(f"{verb} awsflock's layout under prefix {self.prefix!r} in {self.where()}")
        return created


def _check_drops(drop: Drops) -> None:
    if len(drop) > MAX_DROPS:
        raise errors.UsageError(f"{len(drop)} places to drop at once; at most {MAX_DROPS}")
