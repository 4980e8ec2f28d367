"""The Redis store's connection and request layer: one connection per store (per process), made
on first use and made again after it broke, checked when made (``deployment``: is it a primary,
does it fsync every write, how many replicas does it have); each try runs in a worker thread
bounded in real time, so a hung server cannot hold a caller past its budget.

A step is one script call and, where the deployment needs one, its durability wait (``WAIT`` or
``WAITAOF``), sent together in one round trip. A wait that falls short leaves the step's
outcome unknown: it is a lost answer (``maybe_applied``), never a grant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, TypeVar

from awsflock import errors, extras
from awsflock.stores.redis import deployment, layout
from awsflock.stores.redis.translate import clears_up, translate
from awsflock.stores.retrying import RetryingStore

_T = TypeVar("_T")
log = logging.getLogger("awsflock.store")
#: Real time a try is given beyond its timeout before it is given up.
TRY_GRACE = 0.5
SCRIPT = layout.script()
SCRIPT_SHA = layout.sha(SCRIPT)


class Connected(RetryingStore):
    """What every step of the Redis store needs: where it is, its connection, its tries."""

    url: str
    password: str | None
    prefix: str
    replicas: int
    declared: str
    max_lease_s: float
    table_name: str
    _conn: _Connection | None
    _conn_lock: threading.Lock

    def where(self) -> str:
        return f"Redis at {self._where()}"

    def _where(self) -> str:
        """user@host:port/db, from the URL (never the password)."""
        from urllib.parse import urlsplit

        try:
            parts = urlsplit(self.url)
            host = f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
        except ValueError:
            return "(an unreadable URL)"
        user = f"{parts.username}@" if parts.username else ""
        return f"{user}{host}{parts.path or '/0'}"

    def actor(self) -> str | None:
        """None: a Redis user names an application more often than a person, so the audit
        names the person as on the other stores: user@host (``lock.admin.default_actor``)."""
        return None

    # -- connection --------------------------------------------------------------------------

    def _connection(self, timeout: float) -> _Connection:
        """The store's connection, made (and its deployment checked) now if there is none."""
        with self._conn_lock:
            if self._conn is not None:
                return self._conn
        try:
            import redis
        except ImportError as exc:
            raise errors.ConfigurationError(
                "the Redis store needs redis-py, which is not installed",
                hint=extras.hint("redis"),
            ) from exc
        # A backstop under the worker's bound; the durability wait ends well before it.
        client = self._client(redis, self.request_timeout + 1, max(1.0, timeout))
        pool = client.connection_pool
        entry = _Connection(client)
        try:
            pool.release(pool.get_connection())  # connect (and log in) now
            entry.deployment, entry.layout, entry.facts = self._check(client)
            entry.checked_mono = time.monotonic()
        except BaseException:
            entry.give_up()
            raise
        with self._conn_lock:
            if self._conn is not None:  # another thread made one meanwhile
                entry.give_up()
                return self._conn
            self._conn = entry
            return entry

    def _client(self, redis: Any, socket_timeout: float, connect_timeout: float) -> Any:
        """A redis-py client on a connection of its own (made on first use), never retrying."""
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        pool = redis.ConnectionPool.from_url(
            self.url,
            password=self.password,
            max_connections=1,
            socket_timeout=socket_timeout,
            socket_connect_timeout=connect_timeout,
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
            protocol=2,
            **_no_setinfo(),
        )
        return redis.Redis(connection_pool=pool)

    def _subscriber(self, timeout: float) -> Any:
        """A pub/sub client for one waiter, on a connection of its own (``wake``)."""
        import redis

        return self._client(redis, timeout, timeout).pubsub()

    def _check(self, client: Any) -> tuple[deployment.Deployment, str | None, deployment.Server]:
        """Classify the deployment and read the prefix's layout key (one round trip); refuse
        a deployment that cannot keep grants. Also what the server said."""
        pipe = client.pipeline(transaction=False)
        pipe.info("server")
        pipe.info("replication")
        pipe.config_get("appendonly")
        pipe.config_get("appendfsync")
        pipe.config_get("maxmemory")
        pipe.config_get("maxmemory-policy")
        pipe.config_get("no-appendfsync-on-rewrite")
        pipe.info("persistence")
        pipe.get(layout.layout_key(self.prefix))
        answers = pipe.execute(raise_on_error=False)
        server, replication, appendonly, appendfsync, maxmemory, policy, on_rewrite = answers[:7]
        persistence, recorded = answers[7:]
        for answer in (server, replication, persistence, recorded):
            if isinstance(answer, Exception):
                raise answer
        configs = (appendonly, appendfsync, maxmemory, policy, on_rewrite)
        refused = next((a for a in configs if isinstance(a, Exception)), None)
        if refused is not None and clears_up(refused):
            # Busy or loading is no refusal: the settings are unknown only for now (retried).
            raise refused
        version = tuple(int(x) for x in str(server.get("redis_version", "0")).split(".")[:3])
        facts = deployment.Server(
            version=version,
            role=str(replication.get("role", "master")),
            replicas=_replicas(replication),
            appendonly=None if refused else _config(appendonly, "appendonly"),
            appendfsync=None if refused else _config(appendfsync, "appendfsync"),
            maxmemory=None if refused else int(_config(maxmemory, "maxmemory") or 0),
            eviction=None if refused else _config(policy, "maxmemory-policy"),
            no_fsync_on_rewrite=None
            if refused
            else _config(on_rewrite, "no-appendfsync-on-rewrite"),
            config_error=str(refused).splitlines()[0] if refused else "",
            uptime_s=float(server.get("uptime_in_seconds", 0)),
            aof_rewriting=_aof_rewriting(persistence),
        )
        found = self._classify(facts)
        for note in found.notes:
            log.warning("%s", note)
        log.debug("%s: %s (%s)", self.where(), found.kind, found.why)
        return found, recorded.decode() if isinstance(recorded, bytes) else recorded, facts

    def _classify(self, facts: deployment.Server) -> deployment.Deployment:
        return deployment.classify(
            facts,
            declared=self.declared,
            replicas=self.replicas,
            where=self.where(),
            max_lease_s=self.max_lease_s,
        )

    def _ready(self, entry: _Connection) -> None:
        """Refuse a prefix where table-create never ran, or that holds another layout."""
        if entry.layout == layout.LAYOUT:
            return
        if entry.layout is None:
            raise errors.TableMissing(
                f"no awsflock layout under prefix {self.prefix!r} in {self.where()}",
                hint="run `awsflock table-create --store URL` once, or name the right prefix "
                "with ?prefix= (or --tablename)",
            )
        raise errors.TableIncompatible(
            f"prefix {self.prefix!r} in {self.where()} holds another layout "
            f"({layout.layout_key(self.prefix)} is {entry.layout!r})",
            hint="name another prefix with ?prefix= in --store (or --tablename)",
        )

    def close(self) -> None:
        """Close the connection (a later call makes a new one)."""
        with self._conn_lock:
            entry, self._conn = self._conn, None
        if entry is not None:
            entry.give_up()

    def _discard(self, entry: _Connection | None) -> None:
        with self._conn_lock:
            if self._conn is entry:
                self._conn = None
        if entry is not None:
            entry.give_up()

    # -- tries -------------------------------------------------------------------------------

    def _attempt(self, operation: str, call: Callable[[Any], _T], timeout: float) -> _T:
        return self._try(operation, call, timeout)

    def _try_may_have_applied(self, err: errors.StoreError) -> bool:
        return err.maybe_applied

    def _script(self, entry: _Connection, keys: list[str], args: list[str]) -> Any:
        """One step: the script (EVALSHA, EVAL where the server does not have it yet), its
        durability wait, and the settings it relied on read again right after it, in one round
        trip. The script's answer, once the wait and the settings confirmed it."""
        self._ready(entry)
        found = entry.deployment if args[0] != "read" else None
        wait = found.waits if found is not None else 0
        wait_ms = max(100, int((entry.timeout - 0.2) * 1000))
        # Read at connect, the settings may have changed since (CONFIG SET appendonly no on a
        # server a long-lived holder is connected to): read again after every write step,
        # wherever CONFIG GET answered at connect. WAITAOF fails where the AOF is off, but it
        # says nothing of eviction or of new replicas.
        facts = entry.facts
        recheck = found is not None and facts is not None and facts.appendonly is not None

        def send(by_sha: bool) -> list[Any]:
            pipe = entry.client.pipeline(transaction=False)
            if by_sha:
                pipe.evalsha(SCRIPT_SHA, len(keys), *keys, *args)
            else:
                pipe.eval(SCRIPT, len(keys), *keys, *args)
            if wait:
                assert entry.deployment is not None
                if entry.deployment.waitaof:
                    pipe.execute_command("WAITAOF", 1, entry.deployment.replicas, wait_ms)
                else:
                    pipe.execute_command("WAIT", entry.deployment.replicas, wait_ms)
            if recheck:
                pipe.config_get("append*")
                pipe.config_get("maxmemory*")
                pipe.config_get("no-appendfsync-on-rewrite")
                pipe.info("replication")
                pipe.info("persistence")
            return list(pipe.execute(raise_on_error=False))

        import redis.exceptions as rx

        answers = send(True)
        if isinstance(answers[0], rx.NoScriptError):
            answers = send(False)
        if isinstance(answers[0], Exception):
            raise answers[0]
        if wait:
            self._waited(entry, answers[1])
        if recheck:
            self._rechecked(entry, answers[-5:])
        return answers[0]

    def _rechecked(self, entry: _Connection, answers: list[Any]) -> None:
        """Refuse a step after which the server's settings no longer keep what it wrote (the
        step ran, and may not last): the connection is dropped, so the next step connects
        anew and its check names what changed and the fix."""
        appendonly, memory, on_rewrite, replication, persistence = answers
        before, then = entry.facts, entry.deployment
        if before is None or then is None or any(isinstance(a, Exception) for a in answers):
            why = next((str(a).splitlines()[0] for a in answers if isinstance(a, Exception)), "")
        else:
            facts = dataclasses.replace(
                before,
                role=str(replication.get("role", "master")),
                replicas=_replicas(replication),
                appendonly=_config(appendonly, "appendonly"),
                appendfsync=_config(appendonly, "appendfsync"),
                maxmemory=int(_config(memory, "maxmemory") or 0),
                eviction=_config(memory, "maxmemory-policy"),
                no_fsync_on_rewrite=_config(on_rewrite, "no-appendfsync-on-rewrite"),
                aof_rewriting=_aof_rewriting(persistence),
            )
            try:
                now = self._classify(facts)
            except errors.AwsflockError as refused:
                why = refused.one_line()
            else:
                kept = (deployment.DURABLE, deployment.CRASH_SAFE, deployment.BEST_EFFORT)
                weaker = kept.index(now.kind) > kept.index(then.kind)
                why = f"it is now {now.kind}: {now.why}" if weaker else ""
        if not why:
            return
        self._discard(entry)
        err = errors.EndpointUnreachable(
            f"{self.where()} changed since awsflock connected, so the step may not last ({why})",
            hint="check the server's settings (appendonly, appendfsync, replicas, eviction); "
            "the step may have been applied",
        )
        err.maybe_applied = True
        raise err

    def _waited(self, entry: _Connection, answer: Any) -> None:
        """Refuse a step whose durability wait fell short: it ran, but may not last."""
        assert entry.deployment is not None
        if isinstance(answer, Exception):
            short = str(answer).splitlines()[0]
        elif entry.deployment.waitaof:
            local, replicas = (int(x) for x in answer)
            ok = local >= 1 and replicas >= entry.deployment.replicas
            short = "" if ok else f"WAITAOF: fsynced on {local} local, {replicas} replica(s)"
        else:
            got = int(answer)
            ok = got >= entry.deployment.replicas
            short = "" if ok else f"WAIT: {got} of {entry.deployment.replicas} replica(s)"
        if short:
            err = errors.EndpointUnreachable(
                f"{self.where()} did not confirm the step durable in time ({short})",
                hint="check the server's replicas and disk; the step may have been applied",
            )
            err.maybe_applied = True
            raise err

    def _try(self, operation: str, call: Callable[[_Connection], _T], timeout: float) -> _T:
        """One try, in a worker thread given ``timeout`` (plus a grace) of real time. A try
        given up before it sent its command never sends it (the gate); one given up after may
        still be applied (``maybe_applied``)."""
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
                    entry.timeout = timeout
                    try:
                        box["value"] = call(entry)
                    finally:
                        if entry.given_up:
                            entry.close()
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
                if exc.maybe_applied:
                    self._discard(box.get("conn"))
                raise exc
            mapped = translate(
                exc,
                operation=operation,
                where=self.where(),
                prefix=self.prefix,
                sent=bool(box.get("sent")),
            )
            if mapped.broken:
                self._discard(box.get("conn"))
            raise mapped.error from exc
        value: _T = box["value"]
        return value


class _Connection:
    """A redis-py client on one connection, its deployment, and the lock its users hold while
    inside it (one at a time)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.lock = threading.Lock()
        self.given_up = False
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

    def give_up(self) -> None:
        """No new command on it; closed now if nobody is inside it, else by its user."""
        self.given_up = True
        if self.lock.acquire(blocking=False):
            try:
                self.close()
            finally:
                self.lock.release()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.connection_pool.disconnect()


def _no_setinfo() -> dict[str, None]:
    """The arguments that keep redis-py from sending CLIENT SETINFO at connect (two more round
    trips per process): ``driver_info`` where redis-py has it (7.1 on), ``lib_name`` before."""
    import importlib.util

    if importlib.util.find_spec("redis.driver_info") is not None:
        return {"driver_info": None}
    return {"lib_name": None, "lib_version": None}


def _config(answer: Any, name: str) -> str:
    """A CONFIG GET answer's value (redis-py gives a dict)."""
    value = answer.get(name, "") if isinstance(answer, dict) else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _aof_rewriting(persistence: dict[str, Any]) -> bool:
    """Whether INFO persistence shows an AOF rewrite running or scheduled. An AOF turned on
    while the server ran writes to a file no manifest names until its first rewrite is done,
    and nothing in INFO tells that rewrite from a routine one (``aof_base_size`` keeps the
    value of an earlier rewrite): without WAITAOF, every rewrite is waited out."""
    return str(persistence.get("aof_enabled", 0)) == "1" and "1" in (
        str(persistence.get("aof_rewrite_in_progress", 0)),
        str(persistence.get("aof_rewrite_scheduled", 0)),
    )


def _replicas(replication: dict[str, Any]) -> int:
    """The replicas INFO replication lists (``slaveN``), but for those without a listening port
    (0): a backup's ``redis-cli --rdb`` connects as one, and no failover can promote it."""
    listed = [v for k, v in replication.items() if k.startswith("slave") and k[5:].isdigit()]
    return sum(1 for v in listed if not isinstance(v, dict) or str(v.get("port", "")) != "0")
