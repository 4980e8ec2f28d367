"""What a Redis deployment can promise, judged once per connection from what the server says
(``INFO``, ``CONFIG GET``) and what the URL declares, and how each step waits for durability.

- **durable**: every write is on disk before its answer (``appendonly yes``, ``appendfsync
  always``, ``no-appendfsync-on-rewrite no``) and on ``replicas`` replicas (``WAIT``, or on
  Redis 7.2+ ``WAITAOF``'s second count, which also waits for their fsync): a crash, or a
  failover to one of them, keeps every grant.
- **crash-safe without replicas**: on disk before the answer, ``replicas=0``: a crash and
  restart keep every grant; a failover to a replica may not.
- **best effort**: writes can be acknowledged and then lost (no AOF, an ``appendfsync`` other
  than ``always``, or fsyncs skipped while a child process saves): after a crash a lock can be
  granted twice and a token repeated. Refused unless the URL says
  ``durability=best-effort-may-double-grant``; then the delayed-restart rule applies: no lease
  longer than ``max_lease``, and no grant or renewal until ``max_lease`` after the server
  started, so every lease a crash may have made it forget has ended before it grants again.

``WAITAOF`` (Redis 7.2+, Valkey) follows every write step as a second check (it fails where the
AOF is off, and waits out an AOF just turned on), never instead of ``appendfsync always``: with
``everysec``, Valkey 8.1 answered it "fsynced" for writes that no fsync had followed.

Where ``CONFIG`` is not allowed (managed services), ``durability=fsync-always`` declares the
server's persistence (and that it never evicts); awsflock then says it could not check. A
server that may evict keys when full (a ``maxmemory`` with any ``maxmemory-policy`` but
``noeviction``) is refused whatever the URL says.
"""

from __future__ import annotations

from dataclasses import dataclass

from awsflock import errors

DURABLE = "durable"
CRASH_SAFE = "crash-safe without replicas"
BEST_EFFORT = "best effort"

#: The ``durability`` values a URL may declare ("": check the server).
DECLARE_FSYNC = "fsync-always"
ACCEPT_BEST_EFFORT = "best-effort-may-double-grant"
DECLARATIONS = ("", DECLARE_FSYNC, ACCEPT_BEST_EFFORT)
#: A best-effort server's longest lease unless the URL's ``max_lease`` says otherwise: the
#: default lease of ``acquire``.
DEFAULT_MAX_LEASE_S = 7200.0


@dataclass(frozen=True)
class Server:
    """What the server said at connect: its version, role, connected replicas, and its
    persistence settings (None: ``CONFIG GET`` was refused)."""

    version: tuple[int, ...]
    role: str
    replicas: int
    appendonly: str | None
    appendfsync: str | None
    config_error: str = ""
    #: Seconds since the server started (INFO server's uptime_in_seconds).
    uptime_s: float = 0.0
    #: ``maxmemory`` (0: no limit) and ``maxmemory-policy`` (None: CONFIG GET was refused).
    maxmemory: int | None = 0
    eviction: str | None = "noeviction"
    #: ``no-appendfsync-on-rewrite`` ("yes": no fsync while a child saves; None: refused).
    no_fsync_on_rewrite: str | None = "no"
    #: An AOF rewrite is running or scheduled (INFO persistence). If the AOF was just turned
    #: on, what is written until it is done goes to a file no manifest names yet; INFO cannot
    #: tell that rewrite from a routine one.
    aof_rewriting: bool = False

    @property
    def evicts(self) -> bool:
        """Whether the server may evict keys when full: any policy but noeviction, under a
        memory limit. (volatile-* policies evict keys with an expiry, as a lock's record has.)"""
        return bool(self.maxmemory) and self.eviction not in (None, "noeviction")

    @property
    def has_waitaof(self) -> bool:
        return self.version >= (7, 2)


@dataclass(frozen=True)
class Deployment:
    """The class of the deployment and how each write step waits: ``waitaof`` (``WAITAOF 1
    replicas``), else ``WAIT replicas`` if ``replicas``, else nothing (the fsync happens before
    the answer). ``checked``: False where the settings were declared, not read. ``notes``: what
    to tell the user (could not check; the failover caveat)."""

    kind: str
    waitaof: bool
    replicas: int
    checked: bool
    why: str
    notes: tuple[str, ...] = ()
    #: Best effort only: the longest lease allowed, and how long after the check grants and
    #: renewals must still wait (the delayed-restart rule); 0 on the other classes.
    max_lease_s: float = 0.0
    hold_s: float = 0.0

    def check_grant(self, lease_ms: int, held_for_s: float, where: str) -> None:
        """Refuse a take or renew the delayed-restart rule forbids: a lease longer than
        ``max_lease``, or one asked for while ``held_for_s`` (time left of the hold) > 0."""
        if self.kind != BEST_EFFORT:
            return
        if lease_ms > self.max_lease_s * 1000:
            raise errors.UsageError(
                f"a lease of {lease_ms / 1000:g}s is longer than max_lease="
                f"{self.max_lease_s:g}s, the longest {where} may grant while it is best effort",
                hint="ask for a shorter lease, or raise max_lease= in the URL (grants then wait "
                "that long after every restart of the server)",
            )
        if held_for_s > 0:
            raise errors.Throttled(
                f"{where} started {self.max_lease_s - self.hold_s:.0f}s ago and does not write "
                "every grant to disk: it may have forgotten leases that are still held, so it "
                f"grants nothing until max_lease={self.max_lease_s:g}s after its start "
                f"({held_for_s:.0f}s more)",
                hint="wait, or make the server durable (appendonly yes, appendfsync always)",
            )

    @property
    def waits(self) -> bool:
        """Whether a step is followed by a wait (and so must write, for the wait to count)."""
        return self.waitaof or self.replicas > 0


def classify(
    server: Server,
    *,
    declared: str,
    replicas: int,
    where: str,
    max_lease_s: float = DEFAULT_MAX_LEASE_S,
) -> Deployment:
    """The deployment ``server`` is, with ``replicas`` asked for and ``declared`` (a
    ``durability`` value); a ConfigurationError naming why and the fix where it cannot be
    used."""
    _check_usable(server, replicas, where)
    local, how, checked, notes = _persistence(server, declared, where)
    known = server.appendonly is not None and server.appendfsync is not None
    # WAITAOF follows each write step where the server has it (it fails where the AOF is off,
    # and it waits out an AOF just turned on).
    waitaof = server.has_waitaof and (server.appendonly == "yes" or not known)
    if not local:
        if declared != ACCEPT_BEST_EFFORT:
            raise errors.ConfigurationError(
                f"{where} is best effort ({how}): a grant it acknowledges can be lost in a "
                "crash, and the lock then granted twice",
                hint="set appendonly yes and appendfsync always (and no-appendfsync-on-rewrite "
                "no) on the server (CONFIG SET, and in redis.conf), or accept the risk with "
                f"durability={ACCEPT_BEST_EFFORT} in the URL",
            )
        # The delayed-restart rule (whole seconds of uptime: count the started one as past).
        hold = max(0.0, max_lease_s - server.uptime_s + 1)
        return Deployment(
            BEST_EFFORT, False, replicas, checked, how, tuple(notes), max_lease_s, hold
        )
    if server.aof_rewriting and not waitaof:
        raise errors.Throttled(
            f"{where} is rewriting its AOF; before Redis 7.2 nothing tells a routine rewrite "
            "from the first one of an AOF just turned on, whose writes until it is done are "
            "in no file the server would restart from, so awsflock waits until it is done",
            hint="retry when it is done (INFO persistence: aof_rewrite_in_progress:0); Redis "
            "7.2+ and Valkey (WAITAOF) need no wait",
        )
    if replicas == 0 and server.replicas > 0:
        notes.append(_failover_risk(server, declared, where))
    kind = DURABLE if replicas > 0 else CRASH_SAFE
    return Deployment(kind, waitaof, replicas, checked, how, tuple(notes))


def _check_usable(server: Server, replicas: int, where: str) -> None:
    """Refuse a server no URL can make usable: a replica, fewer connected replicas than the URL
    waits for, or one that may evict keys."""
    if server.role not in ("master", "primary"):
        raise errors.ConfigurationError(
            f"{where} is a replica (role {server.role}): it cannot take writes, and what it "
            "shows may lag its primary",
            hint="point --store at the primary (its host and port are in INFO replication)",
        )
    if replicas > server.replicas:
        raise errors.ConfigurationError(
            f"{where} has {server.replicas} connected replica(s), and the URL asks every step "
            f"to wait for {replicas}",
            hint=f"start the replicas, or lower replicas= to {server.replicas}",
        )
    if server.evicts:
        # Unlike a crash, eviction needs no failure: a held lock's record can vanish any time
        # the server is full, and the lock be granted again. No declaration accepts that.
        raise errors.ConfigurationError(
            f"{where} may evict keys when full (maxmemory {server.maxmemory}, "
            f"maxmemory-policy {server.eviction}): a held lock's record could be evicted and "
            "the lock granted twice",
            hint="set maxmemory-policy noeviction on the server (CONFIG SET, and in redis.conf)",
        )


def _persistence(server: Server, declared: str, where: str) -> tuple[bool, str, bool, list[str]]:
    """Whether every write is on disk before its answer, as read from the server or declared
    by the URL: (that, how it is known, whether it was read, notes for the user). A
    ConfigurationError where the declaration contradicts the server, or nothing tells."""
    known = server.appendonly is not None and server.appendfsync is not None
    aof = server.appendonly == "yes"
    always = aof and server.appendfsync == "always" and server.no_fsync_on_rewrite != "yes"
    settings = f"appendonly {server.appendonly}, appendfsync {server.appendfsync}"
    if server.no_fsync_on_rewrite == "yes":
        settings += ", no-appendfsync-on-rewrite yes"
    if known and declared == DECLARE_FSYNC and not always:
        raise errors.ConfigurationError(
            f"the URL declares durability={DECLARE_FSYNC}, and {where} runs with {settings}",
            hint="set appendonly yes and appendfsync always (no-appendfsync-on-rewrite no) on "
            "the server, or drop the declaration",
        )
    if known:
        return always, settings, True, []
    if declared == DECLARE_FSYNC:
        note = (
            f"could not check the persistence settings of {where} ({server.config_error}); "
            f"going by the URL's durability={DECLARE_FSYNC}"
        )
        return True, f"durability={DECLARE_FSYNC} (declared)", False, [note]
    if declared == ACCEPT_BEST_EFFORT:
        return False, "not known (CONFIG GET refused)", False, []
    raise errors.ConfigurationError(
        f"could not check whether {where} writes every grant to disk before answering "
        f"(CONFIG GET: {server.config_error})",
        hint=f"if it runs with appendonly yes and appendfsync always, add "
        f"durability={DECLARE_FSYNC} to the URL (or allow the user CONFIG GET)",
    )


def _failover_risk(server: Server, declared: str, where: str) -> str:
    """The note for a server with replicas that no step waits for; refused unless the URL
    accepts the risk. A failover (Sentinel, an operator's REPLICAOF NO ONE) promotes a replica
    that may lack the newest grants: as a crash without fsync."""
    if declared != ACCEPT_BEST_EFFORT:
        raise errors.ConfigurationError(
            f"{where} has {server.replicas} replica(s) and the URL waits for none "
            "(replicas=0): a failover to one of them can lose grants, and the lock then "
            "be granted twice",
            hint=f"add replicas={server.replicas} to the URL, or accept the risk with "
            f"durability={ACCEPT_BEST_EFFORT}",
        )
    return (
        f"{where} has {server.replicas} replica(s) and replicas=0: a failover to one of "
        f"them may lose grants; add replicas={server.replicas} to the URL to wait for them"
    )
