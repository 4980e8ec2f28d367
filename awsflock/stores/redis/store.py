"""Locks in Redis: the ``LockStore`` whose every step is one call of one server-side script
(``steps.lua``): one round trip, atomic, timed by the server's clock (``TIME``).

Time is the server's, so the skew window is 0 and no client clock is trusted; the script refuses
to grant while the server's clock reads earlier than the lock's last grant (a clock stepped
back). Answers are shifted into the caller's clock as the PostgreSQL store's are: a lease's
times move by (the caller's clock when the try was sent) minus (the server's when it ran).

The lock steps are the shared facade's (``stores.remote.facade``); this store adds its link
(``link``: the connection, the deployment check, the durability wait), its step program
(``program``), the key layout and script (``layout``), and the calls that are not steps: the
scan of ``locks``, the audit records and set-up.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, Callable

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.protocol import (
    AUDIT_APPLIED,
    AUDIT_VOID,
    DEFAULT_REQUEST_TIMEOUT,
    Sleeper,
    Waker,
)
from awsflock.records import LockRecord, Pool, kept_audit
from awsflock.stores import kinds, programs
from awsflock.stores.redis import layout, urls
from awsflock.stores.redis.link import RedisConn, RedisLink
from awsflock.stores.redis.program import RedisProgram
from awsflock.stores.redis.wake import Wake
from awsflock.stores.remote.facade import StepStore, check_audit_key, listed

#: Puts an audit record by the rule of ``LockStore.put_audit`` (``audit.lua``).
AUDIT = programs.load("awsflock.stores.redis", "audit.lua")


class RedisStore(StepStore[RedisConn]):
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

    kind = "redis"
    link: RedisLink

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
        self.link = RedisLink(self)
        self.program = RedisProgram(self.prefix, self.where)
        self._connected_init()

    def waker(self, lock_id: str) -> Waker:
        """A waiter wakes as soon as the script publishes that the lock may have changed
        (``wake``); in the caller's time (a simulation's), it sleeps as on any store."""
        if not self.server_time:
            return Sleeper()
        channel = layout.wake_channel(self.prefix, lock_id)
        return Wake(self._subscriber, channel, self.where())

    def _subscriber(self, timeout: float) -> Any:
        """A pub/sub client for one waiter, on a connection of its own (``wake``)."""
        import redis

        return self.link.client(redis, timeout, timeout).pubsub()

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        """Every lock under the store's prefix whose name starts with ``prefix``: a SCAN, then
        one read per lock (in the order SCAN gives)."""
        pattern = f"{self.prefix}:{{*}}:lock"

        def scan(cursor: int) -> tuple[int, list[Any]]:
            def call(entry: RedisConn) -> tuple[int, list[Any]]:
                self.link.ready(entry)
                found: tuple[int, list[Any]] = entry.client.scan(cursor, match=pattern, count=500)
                return found

            found: tuple[int, list[Any]] = self._send("scan", call)
            return found

        def names() -> Iterator[str]:
            cursor = None
            while cursor != 0:
                cursor, keys = scan(cursor or 0)
                for key in keys:
                    text = key.decode() if isinstance(key, bytes) else key
                    name = layout.lock_of(self.prefix, text)
                    if name is not None and name.startswith(prefix):
                        yield name

        yield from listed(self.read(name) for name in names())

    # -- audit -------------------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any]) -> None:
        check_audit_key(key)
        name = layout.audit_key(self.prefix, str(entry.get("target", "")), key)
        text = json.dumps(kept_audit(entry))

        def call(conn: RedisConn) -> None:
            self.link.ready(conn)
            conn.client.eval(AUDIT, 1, name, AUDIT_APPLIED, AUDIT_VOID, text)

        self._send("audit", call)

    def audit_entries(self) -> Iterator[dict[str, Any]]:
        patterns = layout.audit_patterns(self.prefix)

        def everything(entry: RedisConn) -> list[Any]:
            self.link.ready(entry)
            client = entry.client
            return [
                client.get(key)
                for match in patterns
                for key in client.scan_iter(match=match, count=500)
            ]

        for text in self._send("scan", everything):
            if text is None:
                continue
            try:
                record = json.loads(text)
            except ValueError:
                record = None
            if not isinstance(record, dict):
                raise errors.StoreError(
                    f"{self.where()}: a key under {' or '.join(patterns)} holds something "
                    "other than an awsflock audit record",
                    hint="remove it, or name another prefix with ?prefix=",
                )
            yield record

    # -- set-up --------------------------------------------------------------------------------

    def create(self, *, progress: Callable[[str], None] = lambda _message: None) -> bool:
        """Load the step script and record the layout's version (idempotent); True if the
        layout was recorded now. A prefix whose layout key holds anything else is refused."""
        from awsflock.stores.redis.prefixes import create_layout

        return create_layout(self.prefix, self.where(), self._send, progress)
