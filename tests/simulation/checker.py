"""The invariants, checked after every step of a simulation and at its end.

- **Never two holders**: at no true instant do more clients *believe* they hold a lock (or a pool
  slot) with a lease still valid by their own clock than it allows: one per lock or slot, no
  plain holder beside pool holders of one name, no more pool holders than the pool's size. A
  lease an operator force-released no longer counts: its holder is told at its next renewal,
  and fencing is what protects the resource meanwhile.
- **Tokens only go up**: every grant the store applies carries a fencing token above every
  earlier one of that lock (slot), across releases, expiry, TTL deletion and 0.2.0 overwrites.
- **No stale write accepted**: the downstream resource accepts a fenced write only from the
  latest grant of its lock (slot), unless an operator ended that lease by force.
- **Every step kept its condition**: a renew, release or force-release the store applied was for
  the lease it named, current and not ended.
- **Every answer truthful**: a client told "acquired" or "renewed" holds that lease, current and
  not ended, with that token; "released" released its own lease; "not held" did not hold it.
- **No phantom holder**: after each acquire, and when a client is done, no live lease of that
  lock belongs to the client without its knowing, unless the library named it on stderr (an
  attempt it could not settle); at the end, none at all.
- **Audited**: every lease an operator force-released has exactly one audit record.
- **API contract**: the library raises only ``AwsflockError``s, and returns what it says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from awsflock.protocol import Attempt, Outcome
from awsflock.records import LockRecord
from tests.simulation.world import EPOCH, Proc, World

Key = tuple[str, "int | None"]  # (lock name, slot)


class Violation(AssertionError):
    """An invariant failed."""


@dataclass
class Belief:
    """A client's belief that it holds a lease."""

    proc: Proc
    key: Key
    lease_id: str
    token: int | None
    expires_at: float  # by the holder's own clock

    def valid(self, world: World) -> bool:
        return self.proc.clock.time() < self.expires_at and not self.proc.killed


class Checker:
    def __init__(self, world: World, inner: Any) -> None:
        self.world = world
        self.inner = inner  # the store itself, read without faults
        self.beliefs: dict[str, Belief] = {}  # lease id -> belief
        self.max_token: dict[Key, int] = {}
        self.latest: dict[Key, tuple[str, int | None]] = {}  # lease id, token of the last grant
        self.forced: set[str] = set()
        self.resource: dict[Key, int] = {}  # the downstream resource: highest token accepted
        self.writes = 0
        self.reported: set[str] = set()  # lease ids the library named as unsettled
        #: Lease ids whose release the store applied -> (grants, deletions) of its lock then.
        self.released: dict[str, tuple[int, int]] = {}
        self.grants: dict[Key, int] = {}  # lock (slot) -> grants applied so far
        self.deletions: dict[str, int] = {}  # lock name -> records removed by expiry so far
        self.operations = 0
        self.violations: list[str] = []
        #: True while a late request is being applied; how often the known limit was hit.
        self.landing_late = False
        self.known_limit = 0
        #: Lease ids whose force-release failed without an answer (it may have applied).
        self.force_unsettled: set[str] = set()
        #: Lease ids some client was told it holds (a lease it gave up is not a phantom).
        self.known: set[str] = set()

    def fail(self, what: str) -> None:
        at = self.world.now - EPOCH
        message = f"{what} (at true time {at:.3f}s, step {self.world.steps})"
        self.world.note("VIOLATION " + message)
        self.violations.append(message)
        raise Violation(message)

    # -- what the store applied ------------------------------------------------------------------

    def before(self, operation: str, args: tuple[Any, ...]) -> Any:
        """The state a step is applied to (for the steps whose condition is checked after)."""
        if operation in ("take", "renew", "release", "force_release", "resize"):
            return self.inner.read(args[0])
        return None

    def applied(self, operation: str, args: tuple[Any, ...], result: Any, before: Any) -> None:
        if operation == "take" and isinstance(result, Outcome) and result.applied:
            attempt: Attempt = args[1]
            key = (args[0], attempt.slot)
            self._check_take(key, attempt, before)
            self.grants[key] = self.grants.get(key, 0) + 1
            record = result.record
            assert record is not None
            token = record.fencing_token
            if token is not None:
                last = self.max_token.get(key)
                fresh = before is None or _record(before, key[1]) is None
                if last is not None and token <= last and self.landing_late and fresh:
                    # The known limit (README, "Limits"): a take landing late on a record
                    # deleted meanwhile restarts the counter from the time it carries. Counted
                    # and shown, not failed; its own test finds it with longer delays.
                    self.known_limit += 1
                    self.world.note(f"KNOWN LIMIT: token {token} after {last} on {key}")
                    self.max_token[key] = token
                    last = None
                if last is not None and token <= last:
                    self.fail(f"token went down or repeated on {key}: {token} after {last}")
                self.max_token[key] = token
            self.latest[key] = (attempt.lease_id, token)
        elif operation in ("renew", "release", "force_release") and isinstance(result, Outcome):
            if result.applied:
                lease_id = args[1]
                slot = args[2].get("slot")
                old = _record(before, slot)
                if old is None or old.lease_id != lease_id or old.ended:
                    self.fail(
                        f"{operation} of {lease_id[:8]} on {(args[0], slot)} applied to "
                        f"{'nothing' if old is None else old.lease_id[:8]}"
                        f"{' (ended)' if old is not None and old.ended else ''}"
                    )
                if operation == "renew":
                    now_ms = args[2]["now_ms"]
                    if round(old.expires_at * 1000) <= now_ms:
                        self.fail(f"renew revived {lease_id[:8]} on {(args[0], slot)}, expired")
                    pool = before.pool
                    if slot is not None and (
                        pool is None or pool.size is None or slot >= pool.size
                    ):
                        self.fail(f"renew of slot {slot} of {args[0]!r}, outside the pool")
                if operation == "force_release":
                    self.forced.add(lease_id)
                elif operation == "release":
                    name = args[0]
                    self.released[lease_id] = (
                        self.grants.get((name, slot), 0),
                        self.deletions.get(name, 0),
                    )
        elif operation == "resize" and result is True:
            name, old, new, kw = args
            pool = before.pool
            cutoff = kw["now_ms"] - kw["skew_ms"]
            for slot in range(new, old or 0):
                record = pool.slots.get(slot) if pool is not None else None
                if record is not None and not _free(record, cutoff):
                    self.fail(f"pool {name!r} shrunk to {new} over held slot {slot}")
        elif operation == "legacy_put" and result:
            self.latest[(args[0], None)] = (args[1], None)

    def _check_take(self, key: Key, attempt: Attempt, before: Any) -> None:
        """An applied take was allowed: the lock (slot) free by the taker's clock, the lease id
        never granted on it, the pool's size agreed on."""
        name, slot = key
        old = _record(before, slot) if before is not None else None
        cutoff = attempt.now_ms - attempt.skew_ms
        if old is not None and not _free(old, cutoff):
            self.fail(
                f"take of {key} by {attempt.lease_id[:8]} over a live lease {old.lease_id[:8]}"
            )
        if old is not None and attempt.lease_id in (old.lease_id, *(h[0] for h in old.history)):
            self.fail(f"lease id {attempt.lease_id[:8]} granted twice on {key}")
        pool = before.pool if before is not None else None
        if slot is None and pool is not None:
            self.fail(f"a plain take applied to pool {name!r}")
        if slot is not None and pool is not None and pool.size not in (None, attempt.slots):
            self.fail(f"a take for {attempt.slots} slots applied to pool {name!r} of {pool.size}")
        if slot is not None and pool is None and before is not None and before.lock is not None:
            plain = before.lock
            if not _free(plain, cutoff):
                self.fail(f"a live plain lock {name!r} made a pool")

    # -- what clients believe --------------------------------------------------------------------

    def hold(self, proc: Proc, key: Key, lease_id: str, token: int | None, expires: float) -> None:
        self.beliefs[lease_id] = Belief(proc, key, lease_id, token, expires)
        self.known.add(lease_id)

    def drop(self, lease_id: str) -> None:
        self.beliefs.pop(lease_id, None)

    def check_step(self) -> None:
        by_key: dict[Key, list[Belief]] = {}
        for belief in self.beliefs.values():
            if belief.lease_id not in self.forced and belief.valid(self.world):
                by_key.setdefault(belief.key, []).append(belief)
        names: dict[str, list[Belief]] = {}
        for key, holders in by_key.items():
            if len(holders) > 1:
                self.fail(f"two holders of {key}: {_who(holders)}")
            names.setdefault(key[0], []).extend(holders)
        for name, holders in names.items():
            slots = [b for b in holders if b.key[1] is not None]
            if slots and len(slots) < len(holders):
                self.fail(f"a plain holder beside pool holders of {name!r}: {_who(holders)}")
            if len(slots) > 2:
                pool = self.inner.read(name).pool
                size = pool.size if pool is not None else None
                if size is not None and len(slots) > size:
                    self.fail(f"{len(slots)} holders of pool {name!r} of {size}: {_who(slots)}")

    def write(self, proc: Proc, belief: Belief) -> bool:
        """A fenced write by ``belief``'s holder, who just checked its lease by its own clock."""
        self.operations += 1
        key, token = belief.key, belief.token
        if token is None:
            return False
        if token < self.resource.get(key, -1):
            return False  # refused by the resource: stale, and caught
        self.resource[key] = token
        self.writes += 1
        latest = self.latest.get(key)
        if (
            latest is not None
            and latest[0] != belief.lease_id
            and belief.lease_id not in self.forced
        ):
            self.fail(
                f"stale write accepted on {key}: {proc.name} wrote with token {token} of lease "
                f"{belief.lease_id[:8]}, but {latest[0][:8]} (token {latest[1]}) was granted since"
            )
        return True

    # -- what clients were told -----------------------------------------------------------------

    def told_acquired(self, proc: Proc, key: Key, lease: Any, lease_s: float) -> None:
        """An acquire returned ``lease``: held, as the store says, with at least half of it left
        (the library's promise), and no other lease of this client left on the lock."""
        self.told_held(proc, key, lease.lease_id, lease.fencing_token, "acquired")
        left = lease.expires_at - proc.clock.time()
        if left < lease_s / 2:
            self.fail(f"{proc.name} acquired {key} with only {left:.2f}s of {lease_s}s left")
        self.no_phantom(proc, key[0], keep=lease.lease_id)

    def no_phantom(self, proc: Proc, name: str, keep: str | None = None) -> None:
        """No live lease of ``name`` is ``proc``'s without its knowing (or being told)."""
        outcome = self.inner.read(name)
        records = [outcome.lock] if outcome.pool is None else list(outcome.pool.slots.values())
        for record in records:
            if record is None or record.released or record.owner != proc.name:
                continue
            if record.expires_at <= proc.clock.time() or record.lease_id == keep:
                continue
            if record.lease_id in self.known or record.lease_id in self.reported:
                continue
            self.fail(f"phantom: {proc.name} holds {record.lease_id[:8]} on {name!r} unawares")

    def told_held(self, proc: Proc, key: Key, lease_id: str, token: int | None, what: str) -> None:
        if lease_id in self.forced:
            return  # an operator ended it meanwhile: the holder hears at its next renewal
        record = self._current(key)
        if record is None or record.lease_id != lease_id or record.released:
            self.fail(
                f"{proc.name} was told {what} {lease_id[:8]} on {key}, but the store has {record}"
            )
        if token is not None and record.fencing_token != token:
            self.fail(f"{proc.name} was told token {token}, the store has {record.fencing_token}")

    def told_released(self, proc: Proc, key: Key, lease_id: str) -> None:
        record = self._current(key)
        if record is None:
            return  # ended and since removed by TTL
        mine = (record.lease_id == lease_id and record.ended == "released") or (
            lease_id,
            "released",
        ) in record.history
        if not mine:
            self.fail(
                f"{proc.name} was told it released {lease_id[:8]} on {key}: store has {record}"
            )

    def deleted(self, name: str) -> None:
        self.deletions[name] = self.deletions.get(name, 0) + 1

    def told_not_held(self, proc: Proc, key: Key, lease_id: str, renewing: bool) -> None:
        if not renewing and lease_id in self.released:
            # The library promises the truth for a release retried after up to three hand-offs
            # of its lock, unless the record was removed by expiry meanwhile.
            grants, deletions = self.released[lease_id]
            handoffs = self.grants.get(key, 0) - grants
            if handoffs <= 3 and self.deletions.get(key[0], 0) == deletions:
                self.fail(
                    f"{proc.name} was told {lease_id[:8]} does not hold {key}, but its release "
                    f"was applied ({handoffs} hand-offs ago)"
                )
            return
        record = self._current(key)
        if record is None or record.lease_id != lease_id or record.ended:
            return
        if renewing and record.expires_at <= proc.clock.time():
            return  # ran out by the renewer's clock
        self.fail(f"{proc.name} was told {lease_id[:8]} does not hold {key}, but it does: {record}")

    def _current(self, key: Key) -> LockRecord | None:
        return _record(self.inner.read(key[0]), key[1])

    # -- the end ---------------------------------------------------------------------------------

    def check_audit(self, entries: list[dict[str, Any]]) -> None:
        audited: dict[str, int] = {}
        for entry in entries:
            if entry.get("status") != "not_applied":
                audited[str(entry.get("lease_id"))] = audited.get(str(entry.get("lease_id")), 0) + 1
        for lease_id in audited:
            # A force whose answer never came may have applied: its record stays, as the
            # command says when it fails (run it again to settle it).
            if lease_id not in self.forced and lease_id not in self.force_unsettled:
                self.fail(
                    f"an audit record of a force-release of {lease_id[:8]} that never applied"
                )
        for lease_id in self.forced:
            if audited.get(lease_id) != 1:
                self.fail(
                    f"force-release of {lease_id[:8]} has {audited.get(lease_id, 0)} audit records"
                )

    def check_end(self) -> None:
        self.check_audit(list(self.inner.audit_entries()))
        now = self.world.now
        alive = {p.name for p in self.world.procs if not p.killed}
        for entry in self.inner.locks(""):
            records = (
                [(entry.lock_id, None, entry)]
                if isinstance(entry, LockRecord)
                else [(entry.lock_id, s, r) for s, r in entry.slots.items()]
            )
            for name, slot, record in records:
                if record.released or record.expires_at <= now or record.legacy:
                    continue
                if record.owner in alive and record.lease_id not in self.known:
                    if record.lease_id in self.reported:
                        continue
                    self.fail(
                        f"phantom holder at the end: {(name, slot)} held by {record.owner} "
                        f"({record.lease_id[:8]}), which does not know it"
                    )


def _free(record: LockRecord, cutoff_ms: int) -> bool:
    """Whether a take at ``cutoff_ms`` (its time minus the skew window) may replace ``record``,
    as the store's condition judges it (0.2.0's records by their whole-second expiry time)."""
    if record.released or not record.lease_id:
        return True
    if record.legacy:
        return int(record.expires_at) < cutoff_ms // 1000
    return round(record.expires_at * 1000) < cutoff_ms


def _who(holders: list[Belief]) -> str:
    return ", ".join(f"{b.proc.name} ({b.lease_id[:8]}, token {b.token})" for b in holders)


def _record(outcome: Any, slot: int | None) -> LockRecord | None:
    if outcome is None:
        return None
    if slot is None:
        return None if outcome.pool is not None else outcome.lock
    return outcome.pool.slots.get(slot) if outcome.pool is not None else None
