"""The library's types: who asks (``Identity``), what a lock says (``LockRecord``: who holds it,
until when, with which fencing token, how its last leases ended), a pool's slots (``Pool``) and
a place in a lock's line of fair waiters (``Waiter``).

Every store reads its rows or items into these; nothing here knows how a store keeps them.
"""

from __future__ import annotations

import getpass
import os
import platform
import socket
from dataclasses import dataclass, field, replace
from typing import Any

from awsflock.text import format_seconds, iso_utc, printable

#: A place in line lapses when its waiter has not polled for this long (three poll periods).
LINE_LAPSE_MS = 3000

#: Keys of awsflock's own records (audit records) start with this; no lock name may.
RESERVED_PREFIX = "#awsflock#"

#: ``LockRecord.ended`` values: released by its holder, or force-released (then the action's id).
ENDED_RELEASED = "released"
ENDED_FORCED = "forced:"
#: How a lease's keep-alive renewer names itself when it ends the lease (``forced_by``), the
#: process it followed having exited.
KEEPALIVE_ACTOR = "awsflock keep-alive"
#: The action id of a keep-alive renewer's end starts with this (``forced:keepalive-PID``): not an
#: operator's force-release, and not audited.
KEEPALIVE_FORCE = "keepalive-"


@dataclass(frozen=True)
class Identity:
    """Who is asking: written into the item so that a waiter can name the holder."""

    owner: str
    host: str = ""
    pid: int = 0
    user: str = ""
    ci_url: str = ""
    command: str = ""

    @classmethod
    def of_this_process(cls, owner: str | None = None, command: str = "") -> Identity:
        host = socket.gethostname() or platform.node()
        return cls(
            # 0.2.0's default owner is the host name, with "NULL" when even that is unknown.
            owner=owner or platform.node() or "NULL",
            host=host,
            pid=os.getpid(),
            user=_user(),
            ci_url=ci_run_url(os.environ),
            command=command,
        )


def holder_fields(who: Identity) -> dict[str, Any]:
    """``who`` as a ``LockRecord``'s holder fields (owner, host, pid, user, CI URL, command)."""
    return {
        "owner": who.owner,
        "host": who.host,
        "pid": who.pid,
        "user": who.user,
        "ci_url": who.ci_url,
        "command": who.command,
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers) and no USER variable
        return ""


def ci_run_url(env: Any) -> str:
    """The URL of the CI run this process belongs to, for the usual CI systems; '' if none."""
    if env.get("GITHUB_ACTIONS") == "true" and env.get("GITHUB_RUN_ID"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com")
        url = f"{server}/{env.get('GITHUB_REPOSITORY', '')}/actions/runs/{env['GITHUB_RUN_ID']}"
        attempt = env.get("GITHUB_RUN_ATTEMPT")
        return f"{url}/attempts/{attempt}" if attempt else url
    for name in ("CI_JOB_URL", "BUILDKITE_BUILD_URL", "CIRCLE_BUILD_URL", "BUILD_URL"):
        if env.get(name):
            return str(env[name])
    return ""


@dataclass(frozen=True)
class Waiter:
    """One place in a lock's line of fair waiters (``--fair``), as the store keeps it.

    ``number`` orders the line: the store hands them out one by one as waiters join, so a lower
    number arrived earlier. ``seen_ms`` is the waiter's last poll by its own clock; a place
    whose ``seen_ms`` stops changing has lapsed (its waiter died or went away).
    """

    ticket: str
    number: int
    identity: Identity
    since_ms: int
    seen_ms: int

    def describe(self) -> str:
        """'owner (host h, pid p, CI URL)', for a waiter's stderr and ``status``."""
        who = self.identity
        details = [f"host {who.host}"] if who.host and who.host != who.owner else []
        if who.pid:
            details.append(f"pid {who.pid}")
        if who.ci_url:
            details.append(who.ci_url)
        return printable(
            (who.owner or "unknown owner") + (f" ({', '.join(details)})" if details else "")
        )


@dataclass(frozen=True)
class Line:
    """A lock's line of fair waiters: its places in order of arrival, the number the next
    arrival gets, and the latest poll of any waiter (``polled_ms``, by that waiter's clock)."""

    next_number: int = 0
    waiters: tuple[Waiter, ...] = ()
    polled_ms: int | None = None
    #: The reader's clock less the clock the places' times were written by, in ms: 0 where
    #: waiters write their own clock (DynamoDB), the server's offset on a store that times the
    #: line by its own clock (PostgreSQL). The places keep the store's values (a drop must
    #: name a place's ``seen_ms`` exactly); what is shown goes by ``at``.
    shift_ms: int = 0

    def find(self, ticket: str) -> Waiter | None:
        return next((w for w in self.waiters if w.ticket == ticket), None)

    def at(self, ms: int) -> float:
        """A place's time (``since_ms``, ``seen_ms``) as epoch seconds by the reader's clock."""
        return (ms + self.shift_ms) / 1000

    def lapsed(self, waiter: Waiter, now: float, skew: float) -> bool:
        """``waiter`` has not polled for the lapse bound plus the skew window by the reader's
        clock reading ``now`` (what the store's line-clear condition, ``status`` and busy
        messages go by)."""
        return waiter.seen_ms + self.shift_ms < (now - skew) * 1000 - LINE_LAPSE_MS


NO_LINE = Line()


#: ``Previous.how``: how the lease before a grant ended.
FIRST = "first"  # nothing was granted on the lock (slot) before
RELEASED = "released"  # its holder released it
EXPIRED = "expired"  # it ran out, and the grant reclaimed it
FORCED = "forced"  # force-released (by an operator, or its keep-alive after its process exited)


@dataclass(frozen=True)
class Previous:
    """How the lease before a grant ended, with who held it where it did not end by its
    holder's release: what the grant replaced, exactly (``docs/contributing/design-remembering
    .md``). ``ended_at``: when an unreleased lease ended (its expiry, or the force), epoch
    seconds; None where that is not known (its record was deleted since)."""

    how: str
    lease_id: str = ""
    owner: str = ""
    host: str = ""
    ci_url: str = ""
    ended_at: float | None = None
    forced_by: str = ""
    forced_reason: str = ""

    @property
    def unreleased(self) -> bool:
        """The lease before did not end by its holder's release."""
        return self.how in (EXPIRED, FORCED)

    @classmethod
    def of(cls, record: LockRecord | None, *, end_known: bool = True) -> Previous:
        """How the lease of ``record`` (the record a grant replaced; None: none) ended.
        ``end_known``: its expiry is its end (False where the record was deleted and only what
        its grant wrote remains)."""
        if record is None or not record.lease_id:
            return cls(FIRST)
        if record.shared:
            return cls._of_group(record, end_known=end_known)
        if record.ended == ENDED_RELEASED:
            return cls(RELEASED)  # a release says only that (a DynamoDB take learns no more)
        held = cls(EXPIRED, record.lease_id, record.owner, record.host, record.ci_url)
        if record.forced:
            return replace(
                held,
                how=FORCED,
                ended_at=record.forced_at,
                forced_by=record.forced_by,
                forced_reason=record.forced_reason,
            )
        return replace(held, ended_at=record.expires_at if end_known else None)

    @classmethod
    def _of_group(cls, group: LockRecord, *, end_known: bool) -> Previous:
        """How a group of shared holders ended: released only if every share was released by
        its holder; else the first share the store found that was not (``group.lapse``), or
        the group's force-release, or the latest of the shares that ran out in it."""
        if group.lapse is not None:  # its end known only while the group's record is
            ended = group.lapse.ended_at if end_known or group.lapse.how == FORCED else None
            return replace(group.lapse, ended_at=ended)
        if group.forced or (not group.shares and group.ended != ENDED_RELEASED):
            return cls.of(replace(group, shared=False), end_known=end_known)
        if group.shares:
            last = max(group.shares, key=lambda s: s.expires_at)
            return cls.of(replace(last, ended=""), end_known=end_known)
        return cls(RELEASED)

    def as_dict(self) -> dict[str, Any]:
        """As ``--json`` prints it: empty fields left out."""
        return {k: v for k, v in self.__dict__.items() if v not in ("", None)}

    def describe(self, lock_id: str) -> str:
        """One line on a lease before that its holder did not release, naming that holder."""
        who = self.owner or "unknown owner"
        details = [f"host {self.host}"] if self.host and self.host != self.owner else []
        details += [self.ci_url] if self.ci_url else []
        holder = who + (f" ({', '.join(details)})" if details else "")
        when = f" at {iso_utc(self.ended_at)}" if self.ended_at is not None else ""
        if self.how == FORCED:
            end = f"it was force-released by {self.forced_by or 'an operator'}{when}"
            end += f": {self.forced_reason}" if self.forced_reason else ""
        else:
            end = f"its lease ran out{when}" + ("" if when else " (its record has since gone)")
        return printable(f"the previous holder of {lock_id!r}, {holder}, did not release it: {end}")


@dataclass(frozen=True)
class LockRecord:
    """One lock item as read from the table. Times are epoch seconds (floats)."""

    lock_id: str
    #: The LEASE_ID of the current (or last) lease.
    lease_id: str = ""
    #: The item's ``lease_id`` attribute: awsflock 0.2.0's compare-and-swap value.
    version: str = ""
    owner: str = ""
    host: str = ""
    pid: int = 0
    user: str = ""
    ci_url: str = ""
    command: str = ""
    acquired_at: float | None = None
    expires_at: float = 0.0
    lease_duration: float = 0.0
    fencing_token: int | None = None
    #: How the current lease ended: "" (running or expired), "released", "forced:ID".
    ended: str = ""
    #: Earlier leases, latest first: (LEASE_ID, how it ended; "" if it expired and was taken).
    history: tuple[tuple[str, str], ...] = ()
    slots: int | None = None
    forced_by: str = ""
    forced_reason: str = ""
    forced_at: float | None = None
    #: True when the item was written by awsflock 0.2.0 (it lacks our attributes).
    legacy: bool = False
    #: Who keeps this lease alive in the background (``acquire --keep-alive``): host, pid.
    keeper: str = ""
    #: Its holder's lock-delay, seconds (``free_after``; 0: none).
    lock_delay: float = 0.0
    #: The hold's cap (epoch seconds; None: no max-hold): its lease never runs past it.
    capped_at: float | None = None
    #: Where the store keeps it: when that delay ends (epoch seconds) if this lease ends
    #: unreleased (DynamoDB's ``free_after_ms``, which a force moves only once it landed).
    delay_end: float | None = None
    #: Held by shared holders (``awsflock.shares``): this lease is their group's, each
    #: share's record is in ``shares``; ``claimed_until``: a waiting exclusive acquire's claim
    #: (epoch seconds by its clock; None: none).
    shared: bool = False
    shares: tuple[LockRecord, ...] = field(default=(), compare=False, repr=False)
    claimed_until: float | None = None
    #: A group's first share found ended without its holder's release (dropped once it ran
    #: out, or force-released on its own): how the group ended, whatever its last share did.
    lapse: Previous | None = field(default=None, compare=False, repr=False)
    #: How the lease before the current one ended (None where the store does not say).
    previous: Previous | None = field(default=None, compare=False, repr=False)
    #: The lock's line of fair waiters (on a plain lock's record; a pool has its own).
    line: Line = field(default=NO_LINE, compare=False, repr=False)
    #: The store's raw fields (for debugging; their names are the store's own).
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def released(self) -> bool:
        """The current lease was ended (by its holder or by an operator)."""
        return bool(self.ended)

    @property
    def forced(self) -> bool:
        return self.ended.startswith(ENDED_FORCED)

    def forced_text(self) -> str:
        """'force-released by X at T: why', for messages."""
        when = f" at {iso_utc(self.forced_at)}" if self.forced_at else ""
        return f"force-released by {self.forced_by or 'an operator'}{when}: {self.forced_reason}"

    def free_after(self) -> float | None:
        """Until when its lock-delay keeps the lock after this lease ended without its
        holder's release (ran out, or forced): its end plus the delay. None: no delay."""
        if not self.lock_delay or self.ended == ENDED_RELEASED:
            return None
        if self.delay_end is not None:
            return self.delay_end
        end = self.forced_at if self.forced and self.forced_at is not None else self.expires_at
        return end + self.lock_delay

    def is_free(self, now: float, skew: float) -> bool:
        """Whether an acquire at ``now`` may take this item (mirror of the store's condition)."""
        after = self.free_after()
        if after is not None and after >= now - skew:
            return False
        return self.released or self.expires_at < now - skew

    def is_expired(self, now: float) -> bool:
        return not self.released and self.expires_at <= now

    def describe(self, now: float) -> str:
        """One line naming the holder (a shared lock's: how many, and the first), for a
        waiter's stderr."""
        if self.shared and self.shares:
            first = min(self.shares, key=lambda s: s.acquired_at or 0.0)
            n = len(self.shares)
            text = f"{n} shared holders, the first " if n > 1 else "a shared holder, "
            text += first.describe(now)
            if self.claimed_until is not None and self.claimed_until > now:
                text += "; an exclusive acquire waits, so no share is added until it is served"
            return text
        who = self.owner or "unknown owner"
        details = []
        if self.host and self.host != self.owner:
            details.append(f"host {self.host}")
        if self.pid:
            details.append(f"pid {self.pid}")
        if self.user:
            details.append(f"user {self.user}")
        if self.legacy:
            details.append("awsflock 0.2.0 client")
        if self.ci_url:
            details.append(self.ci_url)
        text = printable(who + (f" ({', '.join(details)})" if details else ""))
        if self.acquired_at is not None:
            text += (
                f" since {iso_utc(self.acquired_at)} ({format_seconds(now - self.acquired_at)} ago)"
            )
        after = self.free_after()
        if after is not None and (self.released or self.expires_at < now) and after > now:
            ended = "was force-released" if self.forced else "did not release it"
            return (
                f"{text}; it {ended}, and its lock-delay keeps the lock until "
                f"{iso_utc(after)} (in {format_seconds(after - now)})"
            )
        left = self.expires_at - now
        if left >= 0:
            text += f", expires in {format_seconds(left)}"
        else:
            text += f", expired {format_seconds(-left)} ago"
        return text


@dataclass(frozen=True)
class Pool:
    """A pool's state: its size (None if unknown: written before sizes were kept) and each
    used slot's record. ``resizing_to``: the size a shrink in steps (DynamoDB's, see
    ``stores.dynamodb.resizes``) is going to, from its first step to its last: no slot is
    taken meanwhile. ``resized_by``: the id of the resize that last set the size, if kept."""

    lock_id: str
    size: int | None
    slots: dict[int, LockRecord]
    line: Line = field(default=NO_LINE, compare=False, repr=False)
    resizing_to: int | None = None
    resized_by: str | None = field(default=None, compare=False)

    def free_slots(self, size: int, now: float, skew: float) -> list[int]:
        """Slots an acquire could take now."""
        return [i for i in range(size) if i not in self.slots or self.slots[i].is_free(now, skew)]


def kept_audit(entry: dict[str, Any]) -> dict[str, Any]:
    """An audit record as every store keeps it and ``audit`` lists it: empty fields left out."""
    return {k: v for k, v in entry.items() if v not in (None, "")}
