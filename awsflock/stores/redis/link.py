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
from awsflock.stores.redis.program import GRANTS, READS, REPORTS_GRANTS, Request
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
        #: The client's one connection, which steps use without taking it out of the client's
        #: pool (``wire.send``; the calls that are not steps take it as usual). A connection is
        #: used by one try at a time (``stores.remote.connected``).
        self.wire: Any = None
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
        #: The last settings read again with a grant (``durability.recheck_key``), and what
        #: was wrong with them ("" nothing): the same answer is judged the same way.
        self.rechecked: tuple[Any, str] | None = None

    def check_grant(self, lease_ms: int, where: str) -> None:
        """The deployment's delayed-restart rule, for a take or renew about to be sent."""
        if self.deployment is not None:
            left = self.deployment.hold_s - (time.monotonic() - self.checked_mono)
            self.deployment.check_grant(lease_ms, left, where)


class Plan:
    """The commands of one step, in order: the script's call, the durability wait (``wait``:
    the deployment it waits for, or None), then the ``asked`` commands that read the settings
    again."""

    __slots__ = ("asked", "commands", "wait")

    def __init__(
        self, commands: list[wire.Command], wait: deployment.Deployment | None, asked: int
    ) -> None:
        self.commands = commands
        self.wait = wait
        self.asked = asked

    def lost_script(self, answers: list[Any]) -> bool:
        """Whether the server answered that it does not have the script (NOSCRIPT)."""
        import redis.exceptions as rx

        return isinstance(answers[0], rx.NoScriptError)

    def commands_with_the_script(self) -> list[wire.Command]:
        """The commands again, the script sent whole (EVAL) instead of by its SHA."""
        first = self.commands[0]
        return [("EVAL", SCRIPT, *first[2:]), *self.commands[1:]]


class RedisLink:
    """Connections to the Redis server of ``store`` (a ``RedisStore``: its URL, password,
    prefix, and what its URL declares of the deployment)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._said: str | None = None
        #: The deployment's notes logged already (each once, whatever the connections made).
        self._noted: set[str] = set()

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
            conn.wire = wire.checkout(pool)  # connect (and log in) now
            pool.release(conn.wire)
            pipe = client.pipeline(transaction=False)
            durability.ask_check(pipe, self.store.prefix)
            conn.facts, conn.layout = durability.read_check(pipe.execute(raise_on_error=False))
            conn.deployment = self.classify(conn.facts)
            for note in conn.deployment.notes:
                if note not in self._noted:
                    self._noted.add(note)
                    log.warning("%s", note)
            log.debug("%s: %s (%s)", self.where(), conn.deployment.kind, conn.deployment.why)
            conn.checked_mono = time.monotonic()
        except BaseException:
            self.close(conn)
            raise
        return conn

    def client(self, redis: Any, socket_timeout: float, connect_timeout: float) -> Any:
        """A redis-py client on a connection of its own (made on first use), never retrying:
        of ``redis`` (the module ``redis``, or ``redis.asyncio`` for ``awsflock.aio``)."""
        import importlib

        from redis.backoff import NoBackoff

        Retry = importlib.import_module(f"{redis.__name__}.retry").Retry
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
        shut(getattr(conn.wire, "_sock", None))  # a step's
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
        it. (What is sent is ``plan``'s, what the answers mean ``read``'s: a sender of another
        kind, asynchronous, sends the same plan and reads its answers the same way.)"""
        plan = self.plan(conn, request, timeout)
        answers = wire.send(conn.wire, plan.commands)
        if plan.lost_script(answers):  # a server that lost it (restarted, flushed)
            if not self.store.may_send():  # never sent again once the caller's time is over
                raise errors.EndpointUnreachable(
                    f"{self.where()} had lost awsflock's script, and the try's time ran out "
                    "before it could be sent again",
                    hint="retry",
                )
            answers = wire.send(conn.wire, plan.commands_with_the_script())
        return self.read(conn, plan, answers)

    def plan(self, conn: RedisConn, request: Request, timeout: float) -> Plan:
        """What a step sends on ``conn`` (checked against what the connection found first)."""
        self.ready(conn)
        found = conn.deployment if request.op not in READS else None
        if found is not None and request.op in GRANTS:
            conn.check_grant(int(request.params["lease_ms"]), self.where())
        wait = found if found is not None and found.waits else None
        # Settings read at connect may have changed since (CONFIG SET appendonly no under a
        # long-lived holder): read again with every grant, wherever CONFIG GET answered at
        # connect; also with a poll in line, whose answer may show a grant of ours that landed
        # late. WAITAOF fails where the AOF is off, but says nothing of eviction.
        facts = conn.facts
        recheck = (
            request.op in REPORTS_GRANTS and facts is not None and facts.appendonly is not None
        )
        keys, args = request.keys, request.args(wait is not None)
        behind: list[wire.Command] = []
        if wait is not None:
            behind.append(durability.ask_wait(wait, max(100, int((timeout - 0.2) * 1000))))
        asked = durability.ask_recheck(facts) if recheck and facts else []
        return Plan(
            [("EVALSHA", SCRIPT_SHA, len(keys), *keys, *args), *behind, *asked], wait, len(asked)
        )

    def read(self, conn: RedisConn, plan: Plan, answers: list[Any]) -> Any:
        """The script's answer among a plan's ``answers``, once the wait and the settings read
        again confirm it; raised where they do not (the step may have been applied)."""
        if isinstance(answers[0], Exception):
            raise answers[0]
        if plan.wait is not None:
            self._waited(plan.wait, answers[1])
        if plan.asked:
            self._rechecked(conn, answers[-plan.asked :])
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
        key = durability.recheck_key(answers)
        if key is not None and conn.rechecked is not None and conn.rechecked[0] == key:
            why = conn.rechecked[1]
        else:
            why = self._changed(before, then, answers)
            if key is not None:
                conn.rechecked = (key, why)
        if not why:
            return
        err = errors.EndpointUnreachable(
            f"{self.where()} changed since awsflock connected, so the step may not last ({why})",
            hint="check the server's settings (appendonly, appendfsync, replicas, eviction); "
            "the step may have been applied",
        )
        err.maybe_applied = True
        raise err

    def _changed(
        self, before: deployment.Server, then: deployment.Deployment, answers: list[Any]
    ) -> str:
        """What the settings read again show has changed for the worse ("": nothing)."""
        now = durability.read_recheck(before, answers)
        if isinstance(now, str):
            return now
        try:
            judged = self.classify(now)
        except errors.AwsflockError as refused:
            return refused.one_line()
        weaker = KEPT.index(judged.kind) > KEPT.index(then.kind)
        return f"it is now {judged.kind}: {judged.why}" if weaker else ""


def _no_setinfo() -> dict[str, None]:
    """The arguments that keep redis-py from sending CLIENT SETINFO at connect (two more round
    trips per process): ``driver_info`` where redis-py has it (7.1 on), ``lib_name`` before."""
    import importlib.util

    if importlib.util.find_spec("redis.driver_info") is not None:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}
