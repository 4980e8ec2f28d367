"""The Redis store's link: one redis-py client on one connection, checked when made
(``durability``: is it a primary, does it fsync every write, how many replicas does it have;
``deployment`` judges), never retrying (the request layer above it, ``stores.remote``, bounds,
retries and gates its tries).

A step is one script call and, where the deployment needs one, its durability wait (``WAIT``
or ``WAITAOF``), and after a step whose answer can show a grant (``REPORTS_GRANTS``) the
server's settings read again: all sent together in one round trip. A wait that falls short, or
settings that no longer keep what the step wrote, leave the step's outcome unknown: a lost
answer (``maybe_applied``), never a grant.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

from awsflock import errors
from awsflock.stores.redis import deployment, durability, layout, wire
from awsflock.stores.redis.program import GRANTS, REPORTS_GRANTS, Request
from awsflock.stores.redis.translate import translate
from awsflock.stores.remote.link import Translated, driver, shut

log = logging.getLogger("awsflock.store")
SCRIPT = layout.script()
SCRIPT_SHA = layout.sha(SCRIPT)
#: The kept settings, weakest last.
KEPT = (deployment.DURABLE, deployment.CRASH_SAFE, deployment.BEST_EFFORT)


class RedisConn:
    """A redis-py client on one connection, and what its check found."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.deployment: deployment.Deployment | None = None
        #: What the server said of itself when the connection was made.
        self.facts: deployment.Server | None = None
        #: What the prefix's layout key held when the connection was made (None: nothing).
        self.layout: str | None = None
        #: The time the current try is given (its durability wait must end before).
        self.timeout = 0.0
        #: When the deployment was checked (real monotonic time: the delayed-restart rule
        #: counts the server's uptime, which no simulated clock moves).
        self.checked_mono = 0.0

    def check_grant(self, lease_ms: int, where: str) -> None:
        """The deployment's delayed-restart rule, for a take or renew about to be sent."""
        if self.deployment is not None:
            left = self.deployment.hold_s - (time.monotonic() - self.checked_mono)
            self.deployment.check_grant(lease_ms, left, where)


class RedisLink:
    """Connections to the Redis server of ``store`` (a ``RedisStore``: its URL, password,
    prefix, and what its URL declares of the deployment)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._said: str | None = None

    def where(self) -> str:
        if self._said is None:
            self._said = f"Redis at {self._where()}"
        return self._said

    def _where(self) -> str:
        """user@host:port/db, from the URL (never the password)."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(self.store.url)
            host = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
        except ValueError:
            return "(an unreadable URL)"
        user = f"{parts.username}@" if parts.username else ""
        return f"{user}{host}{parts.path or '/0'}"

    # -- connection --------------------------------------------------------------------------

    def connect(self, timeout: float) -> RedisConn:
        """A connection, made and logged in now, its deployment checked."""
        redis = driver("redis", "Redis", "redis-py", "redis")
        # A backstop under the request layer's deadline; the durability wait ends before it.
        client = self.client(redis, self.store.request_timeout + 1, max(1.0, timeout))
        pool = client.connection_pool
        conn = RedisConn(client)
        try:
            pool.release(pool.get_connection())  # connect (and log in) now
            pipe = client.pipeline(transaction=False)
            durability.ask_check(pipe, self.store.prefix)
            conn.facts, conn.layout = durability.read_check(pipe.execute(raise_on_error=False))
            conn.deployment = self.classify(conn.facts)
            for note in conn.deployment.notes:
                log.warning("%s", note)
            log.debug("%s: %s (%s)", self.where(), conn.deployment.kind, conn.deployment.why)
            conn.checked_mono = time.monotonic()
        except BaseException:
            self.close(conn)
            raise
        return conn

    def client(self, redis: Any, socket_timeout: float, connect_timeout: float) -> Any:
        """A redis-py client on a connection of its own (made on first use), never retrying."""
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        pool = redis.ConnectionPool.from_url(
            self.store.url,
            password=self.store.password,
            max_connections=1,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            protocol=2,
            **_no_setinfo(),
        )
        return redis.Redis(connection_pool=pool)

    def classify(self, facts: deployment.Server) -> deployment.Deployment:
        return deployment.classify(
            facts,
            declared=self.store.declared,
            replicas=self.store.replicas,
            where=self.where(),
            max_lease_s=self.store.max_lease_s,
        )

    def ready(self, conn: RedisConn) -> None:
        """Refuse a prefix where table-create never ran, or that holds another layout."""
        if conn.layout == layout.LAYOUT:
            return
        if conn.layout is None:
            raise errors.TableMissing(
                f"no awsflock layout under prefix {self.store.prefix!r} in {self.where()}",
                hint="run `awsflock table-create --store URL` once, or name the right prefix "
                "with ?prefix= (or --tablename)",
            )
        raise errors.TableIncompatible(
            f"prefix {self.store.prefix!r} in {self.where()} holds another layout "
            f"({layout.layout_key(self.store.prefix)} is {conn.layout!r})",
            hint="name another prefix with ?prefix= in --store (or --tablename)",
        )

    def interrupt(self, conn: RedisConn) -> None:
        pool = conn.client.connection_pool
        for used in list(getattr(pool, "_in_use_connections", ())):
            shut(getattr(used, "_sock", None))

    def close(self, conn: RedisConn) -> None:
        with contextlib.suppress(Exception):
            conn.client.connection_pool.disconnect()

    def translate(self, exc: BaseException, *, operation: str, sent: bool) -> Translated:
        return translate(
            exc, operation=operation, where=self.where(), prefix=self.store.prefix, sent=sent
        )

    # -- a step ------------------------------------------------------------------------------

    def step(self, conn: RedisConn, request: Request, timeout: float) -> Any:
        """One step: the script (EVALSHA, EVAL where the server does not have it yet), its
        durability wait, and after a step that can show a grant the settings it relied on read
        again, in one round trip. The script's answer, once the wait and the settings confirmed
        it."""
        self.ready(conn)
        found = conn.deployment if request.op != "read" else None
        if found is not None and request.op in GRANTS:
            conn.check_grant(int(request.params["lease_ms"]), self.where())
        wait = found is not None and found.waits
        # Settings read at connect may have changed since (CONFIG SET appendonly no under a
        # long-lived holder): read again with every grant, wherever CONFIG GET answered at
        # connect; also with a poll in line, whose answer may show a grant of ours that landed
        # late. WAITAOF fails where the AOF is off, but says nothing of eviction.
        facts = conn.facts
        recheck = (
            request.op in REPORTS_GRANTS and facts is not None and facts.appendonly is not None
        )
        args = request.args(bool(wait))
        behind: list[wire.Command] = []
        if wait:
            assert found is not None
            behind.append(durability.ask_wait(found, max(100, int((timeout - 0.2) * 1000))))
        asked = durability.ask_recheck(facts) if recheck and facts else []
        behind += asked
        keys = request.keys
        answers = wire.call(
            conn.client, [("EVALSHA", SCRIPT_SHA, len(keys), *keys, *args), *behind]
        )
        import redis.exceptions as rx

        if isinstance(answers[0], rx.NoScriptError):  # a server that lost it (restarted, flushed)
            answers = wire.call(conn.client, [("EVAL", SCRIPT, len(keys), *keys, *args), *behind])
        if isinstance(answers[0], Exception):
            raise answers[0]
        if wait:
            assert found is not None
            self._waited(found, answers[1])
        if asked:
            self._rechecked(conn, answers[-len(asked) :])
        return answers[0]

    def _waited(self, found: deployment.Deployment, answer: Any) -> None:
        """Refuse a step whose durability wait fell short: it ran, but may not last."""
        short = durability.wait_short(found, answer)
        if short:
            err = errors.EndpointUnreachable(
                f"{self.where()} did not confirm the step durable in time ({short})",
                hint="check the server's replicas and disk; the step may have been applied",
            )
            err.maybe_applied = True
            raise err

    def _rechecked(self, conn: RedisConn, answers: list[Any]) -> None:
        """Refuse a step after which the server's settings no longer keep what it wrote (the
        step ran, and may not last); the request layer then drops the connection, so the next
        step connects anew and its check names what changed and the fix."""
        before, then = conn.facts, conn.deployment
        if before is None or then is None:
            return
        now = durability.read_recheck(before, answers)
        if isinstance(now, str):
            why = now
        else:
            try:
                judged = self.classify(now)
            except errors.AwsflockError as refused:
                why = refused.one_line()
            else:
                weaker = KEPT.index(judged.kind) > KEPT.index(then.kind)
                why = f"it is now {judged.kind}: {judged.why}" if weaker else ""
        if not why:
            return
        err = errors.EndpointUnreachable(
            f"{self.where()} changed since awsflock connected, so the step may not last ({why})",
            hint="check the server's settings (appendonly, appendfsync, replicas, eviction); "
            "the step may have been applied",
        )
        err.maybe_applied = True
        raise err


def _no_setinfo() -> dict[str, None]:
    """The arguments that keep redis-py from sending CLIENT SETINFO at connect (two more round
    trips per process): ``driver_info`` where redis-py has it (7.1 on), ``lib_name`` before."""
    import importlib.util

    if importlib.util.find_spec("redis.driver_info") is not None:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}
