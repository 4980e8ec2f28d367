"""The Redis store's layout: which keys a lock has, and the one script that is every lock step.

A lock ``NAME`` under the prefix ``P`` (``?prefix=``, else the table name) has three keys, all in
one hash slot (the name, encoded so that it holds no ``}``, is their hash tag):

- ``P:{NAME}:lock``, a hash: the plain lease (field ``p``), a pool's size (``slots``) and its
  slots' leases (``s:N``), the line of fair waiters (``w:TICKET``, ``next``, ``polled``); a
  lock held shared (``awsflock.shares``) marks it ``shared``, keeps its group's lease as ``p``
  and each share as ``r:LEASE_ID``, and a waiting writer's ``claim`` (ms). Each
  lease is a JSON object whose numbers are strings (Lua's numbers are doubles: written with
  ``%.0f``, read with ``tonumber``, exact below 2^53). Garbage: once no lease in it can be
  live and nobody waits, ``PEXPIREAT`` removes it ``RETAIN_MS`` later. A pool's hash is kept.
- ``P:{NAME}:fence``, a hash: the highest fencing token ever granted on the name, any slot
  (``token``) and the time of the last grant (``granted``); the plain lease's grant and end
  (``last``); the lock's state (``awsflock.state``): ``state`` (base64, as sent),
  ``state_lease`` (the lease that wrote it) and ``state_ms`` (its stamp), written by a renew
  step, read by the ``state`` step. Never expired, never deleted: tokens go up, and the state
  is kept, for as long as the data survives, whatever happens to the lock's hash.
- ``P:{NAME}:bars``, a sorted set: lease ids an end step found holding nothing here, by when
  (their take may still land late: an acquire gave up without its answer); a take under one
  is refused. Each is kept ``RETAIN_MS``, however many there are; the set expires
  ``RETAIN_MS`` after its latest.
- ``P:{NAME}:done``, a sorted set: every lease id taken over here (its lease ended: released,
  forced, or run out), scored ``when * 4 + how`` (1 released, 2 forced, 3 ran out), kept
  ``DONE_MS`` however many hand-offs there were: a release retried after its first try went
  through unanswered still finds it released, and a take that lands late under an id already
  used is refused. The lease record's ``hist`` keeps only the last few, with their details.
- ``P:{NAME}:forced``, a hash: of those, the force-released ones, by lease id, with the
  force-release's action id (``forced:ACTION``), so a force-release retried after its first try
  went through unanswered still knows it was its own; it expires ``DONE_MS`` after the last.

Waiters listen on the channel ``P:{NAME}:wake``, where the script publishes (after its writes,
as a hint only) when a step may let a waiter take the lock: a lease ended (release,
force-release, a pool slot among them), the head of the line left it or its lapsed places were
removed, a pool's head took its slot, a pool grew.

An audit record (a force-release's) is a string of JSON at ``P:{NAME}:audit:KEY``, in its lock's
slot, written by the force-release's step; ``P:layout`` holds ``LAYOUT`` once
``table-create`` ran. No key of a lock is written outside the step script, ``steps.lua`` beside
this module (``script()``), which documents each step's arguments and answer, but for an audit
record that a force-release run writes from the lock's hash where it finds none
(``audit.lua``).
"""

from __future__ import annotations

import hashlib
import re

from awsflock.protocol import AUDIT_PREFIX, DONE_MS, LINE_LAPSE_MS
from awsflock.shares import MAX_SHARES
from awsflock.state import MAX_STATE
from awsflock.stores import programs

#: The layout's version, kept at ``P:layout``; table-create refuses any other value there.
LAYOUT = "awsflock redis layout 1"
#: A prefix: no hash-tag braces (a lock's tag must be its own), no glob characters (SCAN).
PREFIX = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
#: How long a plain lock's hash is kept after its last lease could have ended: a retried
#: release still finds what it did, and ``status`` shows who held the lock lately.
RETAIN_MS = 24 * 3600 * 1000
#: A lease's record remembers the leases before it (``hist``: id, how it ended, when it was
#: taken over): the last three, and any taken over within ``HISTORY_MS``, at most
#: ``HISTORY_KEEP``. Hand-offs on Redis take milliseconds: three can pass while a release's
#: first try, applied, goes unanswered and its retry waits; the retry must still find it.
HISTORY_MS = 60_000
HISTORY_KEEP = 32
#: A lock remembers the lease ids it took over (``P:{NAME}:done``) for ``DONE_MS``: longer than
#: any retry of a step waits, and than a request held back on the wire is expected to land late.


def encode(lock_id: str) -> str:
    """``lock_id`` without ``{`` or ``}`` (so it can be a hash tag) and without ``%``."""
    return lock_id.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def decode(text: str) -> str:
    return text.replace("%7D", "}").replace("%7B", "{").replace("%25", "%")


def lock_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:lock"


def fence_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:fence"


def bars_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:bars"


def done_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:done"


def forced_key(prefix: str, lock_id: str) -> str:
    return f"{prefix}:{{{encode(lock_id)}}}:forced"


def wake_channel(prefix: str, lock_id: str) -> str:
    """The channel the script publishes on when a step may let a waiter take the lock."""
    return f"{prefix}:{{{encode(lock_id)}}}:wake"


def lock_of(prefix: str, key: str) -> str | None:
    """The lock name of a lock hash's key, None if ``key`` is not one."""
    head, tail = f"{prefix}:{{", "}:lock"
    if not (key.startswith(head) and key.endswith(tail)) or len(key) < len(head + tail):
        return None
    inner = key[len(head) : -len(tail)]
    return None if "}" in inner else decode(inner)


def audit_key(prefix: str, lock_id: str, key: str) -> str:
    """Where audit record ``key`` of lock ``lock_id`` is kept: in the lock's hash slot, so that
    the force-release step writes it with the lease's end."""
    return f"{prefix}:{{{encode(lock_id)}}}:audit:{key}"


def audit_patterns(prefix: str) -> tuple[str, str]:
    """SCAN patterns of every audit record: where they are kept, and where development builds
    before the force-release step wrote them kept them (``P:audit:KEY``, still read)."""
    return f"{prefix}:{{*}}:audit:{AUDIT_PREFIX}*", f"{prefix}:audit:{AUDIT_PREFIX}*"


def layout_key(prefix: str) -> str:
    return f"{prefix}:layout"


def script() -> str:
    """The step script (``steps.lua`` beside this module, which documents every step's keys,
    arguments and answer) with its constants filled in."""
    return programs.load(
        "awsflock.stores.redis",
        "steps.lua",
        LAPSE=int(LINE_LAPSE_MS),
        RETAIN=int(RETAIN_MS),
        HISTORY=int(HISTORY_MS),
        KEEP=int(HISTORY_KEEP),
        DONE=int(DONE_MS),
        MAX_SHARES=int(MAX_SHARES),
        STATE=4 * -(-MAX_STATE // 3),  # the base64 text of MAX_STATE bytes
    )


def sha(text: str) -> str:
    """The SHA-1 that EVALSHA names a script by."""
    return hashlib.sha1(text.encode()).hexdigest()
