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
- **Audited**: every lease an operator force-released has exactly one audit record, naming that
  operator and that force's action id; no lease whose force never applied has one.
- **API contract**: the library raises only ``AwsflockError``s, and returns what it says.
- **Fair waiters keep their order** (``fair=True``): no step the store applies passes over or
  removes a *live* place in a lock's (or pool's) line. Passing over: a take with a ticket while
  a live place with a lower number is in line (only the head of the line takes); a take without
  one while any live place is in line (non-fair acquires never jump a live line). Removing: a
  beat or take whose ``drop`` removes a live place (only lapsed places are dropped). A place is
  *live* at a step when the poll that wrote its current ``seen_ms`` (its join, or the latest of
  its beats to land) was *made* (its first try sent, which is when its waiter read its clock)
  less than ``LINE_LAPSE_MS`` of true time before the step was made.

  This is what "fair waiters that stay alive and keep polling are served in order of arrival"
  can be checked as, step by step. A waiter that keeps polling (every 0.75 to 1.25 s, its beats
  landing at once) always has a poll made less than 3 s ago, so it is never passed over and its
  place never dropped: no later arrival is granted before it. A waiter that stops polling stops
  making polls, and its place stops being live 3 s after the last one: a process paused or
  killed, and one whose beat met a fault that stalls it (lost, late, answer lost, an outage:
  each holds the call for its request timeout, 5 s) or was retried for seconds (its ``now_ms``
  is the first try's). A beat that lands late writes the old time it carries, so it makes its
  place no younger than that. No process state enters the check: a place whose waiter was just
  paused or killed is live until 3 s after its last poll, as the protocol promises too (a waiter
  drops only a place it saw unchanged for 3 s of its monotonic clock, and the place's own take
  or beat changes it; the store lets a take without a ticket through only once the line's
  ``polled_ms`` is 3 s plus the skew window old).

  Clocks: a waiter's lapse judgement uses its monotonic clock only (true time here), so fair
  takes and drops need no allowance. The store judges "line clear" by ``polled_ms`` (the
  latest time any poll carried, by its waiter's clock: it only ever rises) against the taker's
  ``now_ms`` (by its own clock) minus ``LINE_LAPSE_MS`` and the skew window. Every simulated
  clock is within ``CLOCK_ERROR`` (half the skew window) of true time, so two differ by at most
  the skew window, and the store's allowance covers the worst case exactly: a take it lets
  through was made at least ``LINE_LAPSE_MS`` of true time after that poll was made. So the
  check needs no slack and uses true times only; a violation is a take the store should have
  refused. Not checked: a line lost with its record (TTL deletion, awsflock 0.2.0's
  overwrite), which the README documents (the waiters join again in the order their joins
  land).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NoReturn

from awsflock.protocol import LINE_LAPSE_MS, Attempt, LockStore, Outcome
from awsflock.records import ENDED_FORCED, ENDED_RELEASED, Line, LockRecord, Waiter
from awsflock.shares import is_group_id, is_share_id
from awsflock.stores import kinds
from tests.simulation.bodies import Bodies
from tests.simulation.checker_previous import PreviousChecks
from tests.simulation.checker_sets import SET_STEPS, SetChecks
from tests.simulation.checker_shares import ShareChecks, held_shares, view
from tests.simulation.checker_state import StateChecks
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
    shared: bool = False  # a share (``awsflock.shares``): beside other shares

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
        #: Lock-delays: each take's that had one (ms), and when each forced lease ended (ms).
        self.delays: dict[str, int] = {}
        self.forced_ms: dict[str, int] = {}
        #: Whether a force's end is its own reading: on the in-memory store (in-process, read
        #: as it lands) and a server's store in the simulation (in its callers' time, where a
        #: real server reads its own clock at the landing). Not on DynamoDB, whose force lands
        #: at a time no clock reads: it ended the lease when that ran out, or when it landed.
        self.forces_by_reading = getattr(inner, "kind", "") != "dynamodb"
        self.ends: dict[str, int] = {}  # the end of each lease with a delay, as last applied
        self.delayed_grants = 0
        #: Max-holds: each capped take's cap (ms, by its clock, as the store records it), and
        #: how many takes and renewals were checked against one.
        self.caps: dict[str, int] = {}
        self.capped_steps = 0
        #: Lease ids force-released -> (the operator, the action id) of the force applied.
        self.forced_by: dict[str, tuple[str, str]] = {}
        self.resource: dict[Key, int] = {}  # the downstream resource: highest token accepted
        self.writes = 0
        self.reported: set[str] = set()  # lease ids the library named as unsettled
        #: Lease ids whose release the store applied -> (grants, deletions) of its lock then.
        self.released: dict[str, tuple[int, int]] = {}
        self.grants: dict[Key, int] = {}  # lock (slot) -> grants applied so far
        self.deletions: dict[str, int] = {}  # lock name -> records removed by expiry so far
        self.operations = 0
        self.violations: list[str] = []
        #: True while a late request is being applied.
        self.landing_late = False
        #: Places in line: (lock name, ticket) -> (its seen_ms, the true time the poll that
        #: wrote it was made).
        self.polls: dict[tuple[str, str], tuple[int, float]] = {}
        #: Lock name -> (ticket, made) of the latest poll to land: what the store's polled_ms is.
        self.last_poll: dict[str, tuple[str, float]] = {}
        #: Grants to the head of a line, and lapsed places removed (the fairness check's reach).
        self.fair_grants = 0
        self.lapsed = 0
        #: Lease ids some client was told it holds (a lease it gave up is not a phantom).
        self.known: set[str] = set()
        #: The bodies run under awsflock.aio's locks (``bodies``: their own invariants).
        self.bodies = Bodies(self)
        #: Acquires cancelled (a task's timeout) and checked to hold nothing afterwards.
        self.cancelled = 0
        #: Sets of names taken together (``checker_sets``: fanned out, and all or none).
        self.sets = SetChecks(self)
        #: Shared holders (``checker_shares``).
        self.shares = ShareChecks(self)
        #: How the lease before each grant ended (``checker_previous``).
        self.previous = PreviousChecks(self)
        #: State with the lease: the last accepted write of each lock (``checker_state``).
        self.state = StateChecks(self)

    def fail(self, what: str) -> NoReturn:
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
        if operation in SET_STEPS:
            return self.sets.before(operation, args)
        return None

    def applied(
        self, operation: str, args: tuple[Any, ...], result: Any, before: Any, made: float
    ) -> None:
        """A step the store applied (``result``: its answer), made at true time ``made``."""
        if operation in SET_STEPS:
            self.sets.applied(operation, args, result, before, made)
        elif operation in ("join", "beat", "leave"):
            if isinstance(result, Outcome) and result.applied:
                self._line_step(operation, args, made)
        elif operation == "take" and isinstance(result, Outcome) and result.applied:
            attempt: Attempt = args[1]
            key = (args[0], attempt.slot)
            self._check_take(key, attempt, before)
            if attempt.delay_ms and result.record is not None:
                self.delays[attempt.lease_id] = attempt.delay_ms
                self.ends[attempt.lease_id] = round(result.record.expires_at * 1000)
            if attempt.max_hold_ms:
                self.caps[attempt.lease_id] = attempt.now_ms + attempt.max_hold_ms
                self._check_cap(key, attempt.lease_id, view(result.record, attempt.lease_id))
            self._check_line_take(args[0], attempt, before, made)
            self.bodies.granted(key, attempt.lease_id, is_share_id(attempt.lease_id))
            self.grants[key] = self.grants.get(key, 0) + 1
            record = result.record
            assert record is not None
            self.shares.granted(key, attempt.lease_id, record)
            old = _record(before, attempt.slot) if before is not None else None
            self.previous.granted(key, attempt, record, old)
            token = record.fencing_token
            if token is not None:
                last = self.max_token.get(key)
                if last is not None and token <= last:
                    self.fail(f"token went down or repeated on {key}: {token} after {last}")
                plain = self.max_token.get((args[0], None)) if attempt.slot is not None else None
                if plain is not None and token <= plain:
                    # A pool made of a lock goes on above its plain tokens: a resource fenced
                    # by the lock's name sees no token go down.
                    self.fail(f"slot token {token} on {key} not above plain token {plain}")
                self.max_token[key] = token
            self.latest[key] = (attempt.lease_id, token)
        elif operation in ("renew", "release", "force_release") and isinstance(result, Outcome):
            if operation == "renew" and args[2].get("state") is not None:
                self.state.renewed(args, result, before)
            if result.applied:
                lease_id = args[1]
                slot = args[2].get("slot")
                old = view(_record(before, slot), lease_id)
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
                    new = view(result.record, lease_id)
                    self._check_cap((args[0], slot), lease_id, new)
                    if new is not None and lease_id in self.delays:
                        self.ends[lease_id] = round(new.expires_at * 1000)
                    if self.landing_late and new is not None and new.expires_at < old.expires_at:
                        # A renew made before a later one that was applied: moving the end back
                        # would leave its holder believing the later end.
                        self.fail(f"a late renew moved the end of {lease_id[:8]} back")
                    pool = before.pool
                    if slot is not None and (
                        pool is None or pool.size is None or slot >= pool.size
                    ):
                        self.fail(f"renew of slot {slot} of {args[0]!r}, outside the pool")
                mark = ENDED_RELEASED if operation == "release" else ENDED_FORCED
                if operation != "renew":
                    self.previous.ended(
                        (args[0], slot), lease_id, mark + args[2].get("force_id", "")
                    )
                if operation == "force_release":
                    self.forced.add(lease_id)
                    self.forced_ms.setdefault(lease_id, self._forced_end(lease_id, args[2]))
                    self.forced_by[lease_id] = (args[2]["actor"], args[2]["force_id"])
                elif operation == "release":
                    name = args[0]
                    self.bodies.released(lease_id, (name, slot))
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
            self.bodies.granted((args[0], None), args[1])
            self.latest[(args[0], None)] = (args[1], None)
            # awsflock 0.2.0 writes the whole record: the leases it remembered are gone, as
            # when it is deleted (what a release retried afterwards can still tell).
            self.deleted(args[0])
            self.previous.legacy_put(args[0], args[1], args[2])
        elif operation == "legacy_delete" and result:
            self.deleted(args[0])

    def _check_take(self, key: Key, attempt: Attempt, before: Any) -> None:
        """An applied take was allowed: the lock (slot) free by the taker's clock, the lease id
        never granted on it, the pool's size agreed on."""
        name, slot = key
        old = _record(before, slot) if before is not None else None
        cutoff = attempt.now_ms - attempt.skew_ms
        if is_share_id(attempt.lease_id):
            self.shares.check_take(key, attempt, old, old is None or _free(old, cutoff))
        elif old is not None and not _free(old, cutoff):
            self.fail(
                f"take of {key} by {attempt.lease_id[:8]} over a live lease {old.lease_id[:8]}"
            )
        self._check_delay(key, attempt, old)
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
            self._check_delay((name, None), attempt, plain)

    def _check_cap(self, key: Key, lease_id: str, record: LockRecord | None) -> None:
        """No take or renewal the store applied sets a capped lease's end past its cap (the
        take's reading plus its max-hold: a holder's belief never outlasts the end it is told,
        so no holder keeps the lock past its cap either)."""
        cap = self.caps.get(lease_id)
        if cap is None or record is None:
            return
        self.capped_steps += 1
        if round(record.expires_at * 1000) > cap:
            self.fail(
                f"the lease {lease_id[:8]} on {key} ends at {round(record.expires_at * 1000)},"
                f" past its cap {cap}"
            )

    def _forced_end(self, lease_id: str, kw: dict[str, Any]) -> int:
        """The earliest true time (ms) a force landing now may have ended ``lease_id`` at: when
        it ran out (the end last applied, by its holder's clock, which may be ahead by half the
        skew window), or when the force landed (true time), whichever came first. A store in its
        callers' time takes the force's reading as its landing (by the forcer's clock)."""
        half = int(kw["skew_ms"]) // 2
        landed = (
            int(kw["now_ms"]) - half if self.forces_by_reading else round(self.world.now * 1000)
        )
        ran_out = self.ends.get(lease_id)
        return landed if ran_out is None else min(ran_out - half, landed)

    def _check_delay(self, key: Key, attempt: Attempt, old: LockRecord | None) -> None:
        """An applied take is past the lock-delay of the lease it replaced: none recorded, or
        released (by the checker's own account: its take's delay, a force's end), or its end
        plus the delay before the taker's time.

        - Ran out, its record still there: the end as the store showed it (by its holder's
          clock), before the taker's time less the skew window (the store's condition).
        - Forced: the earliest true time it may have ended (``_forced_end``: when it ran out, or
          when the force landed), before the true time of the take.
        - Deleted (TTL, no earlier than the end, the skew and the delay): the lock's latest
          lease; its end plus the delay before the true time, plus the skew window.
        """
        deleted = old is None or not old.lease_id
        if deleted:
            lease_id = self.latest.get(key, ("", None))[0]
            end = self.ends.get(lease_id)
            at = round(self.world.now * 1000) + attempt.skew_ms
        else:
            assert old is not None
            lease_id, end = old.lease_id, round(old.expires_at * 1000)
            at = attempt.now_ms - attempt.skew_ms
        delay = self.delays.get(lease_id, 0)
        if not delay or lease_id in self.released or end is None:
            return
        forced = self.forced_ms.get(lease_id)
        if forced is not None:
            end = forced
            if not deleted:
                at = round(self.world.now * 1000)
        self.delayed_grants += 1
        if end + delay >= at:
            self.fail(
                f"take of {key} by {attempt.lease_id[:8]} inside the lock-delay of "
                f"{lease_id[:8]} ({'forced' if forced is not None else 'ran out'} at {end},"
                f" delay {delay} ms, taken at {attempt.now_ms})"
            )

    # -- the line of fair waiters ---------------------------------------------------------------

    def _line_step(self, operation: str, args: tuple[Any, ...], made: float) -> None:
        name = args[0]
        if operation == "join":
            waiter: Waiter = args[1]
            self.polls[(name, waiter.ticket)] = (waiter.seen_ms, made)
            self.last_poll[name] = (waiter.ticket, made)
        elif operation == "beat":
            ticket, kw = args[1], args[2]
            self._check_drops(name, kw.get("drop", ()), made, f"a beat of {ticket[:8]}")
            self.polls[(name, ticket)] = (kw["now_ms"], made)
            self.last_poll[name] = (ticket, made)
        else:
            self.polls.pop((name, args[1]), None)

    def _check_line_take(self, name: str, attempt: Attempt, before: Any, made: float) -> None:
        """An applied take passed over no live place in line (see the module docstring)."""
        line: Line = before.line if before is not None else Line()
        who = f"take by {attempt.lease_id[:8]}"
        if attempt.ticket is None:
            for waiter in line.waiters:
                age = self._poll_age(name, waiter, made)
                if age < LINE_LAPSE_MS / 1000:
                    ticket, last = self.last_poll.get(name, ("", made))
                    self.fail(
                        f"{who} without a place in line jumped the live line of {name!r}: "
                        f"place {waiter.number} ({waiter.identity.owner}) polled {age:.3f}s "
                        f"before it (the latest poll to land, of {ticket[:8]}, was made "
                        f"{made - last:.3f}s before it)"
                    )
            return
        mine = line.find(attempt.ticket)
        if mine is None:
            self.fail(f"{who} with ticket {attempt.ticket[:8]}, not in the line of {name!r}")
        assert mine is not None
        self.fair_grants += 1
        dropped = {ticket for ticket, _ in attempt.drop}
        for waiter in line.waiters:
            if waiter.number >= mine.number or waiter.ticket in dropped:
                continue
            age = self._poll_age(name, waiter, made)
            if age < LINE_LAPSE_MS / 1000:
                self.fail(
                    f"{who} (place {mine.number}, {mine.identity.owner}) went ahead of the live "
                    f"place {waiter.number} ({waiter.identity.owner}) in the line of {name!r}, "
                    f"which polled {age:.3f}s before it"
                )
        self._check_drops(name, attempt.drop, made, who)
        self.polls.pop((name, attempt.ticket), None)

    def _check_drops(
        self, name: str, drop: tuple[tuple[str, int], ...], made: float, who: str
    ) -> None:
        """The places an applied step removed as lapsed (each still showed ``seen_ms``)."""
        for ticket, seen_ms in drop:
            polled = self.polls.pop((name, ticket), None)
            if polled is None or polled[0] != seen_ms:
                self.fail(f"{who} dropped place {ticket[:8]} of {name!r}, which no poll wrote")
            assert polled is not None
            self.lapsed += 1
            if made - polled[1] < LINE_LAPSE_MS / 1000:
                self.fail(
                    f"{who} dropped the live place {ticket[:8]} from the line of {name!r}: it "
                    f"polled {made - polled[1]:.3f}s before"
                )

    def _poll_age(self, name: str, waiter: Waiter, made: float) -> float:
        """How long before ``made`` (true time) the poll behind ``waiter``'s seen_ms was made."""
        polled = self.polls.get((name, waiter.ticket))
        if polled is None or polled[0] != waiter.seen_ms:
            self.fail(
                f"place {waiter.number} ({waiter.ticket[:8]}) of {name!r} shows a poll "
                f"({waiter.seen_ms}) no waiter made"
            )
        assert polled is not None
        return made - polled[1]

    # -- what clients believe --------------------------------------------------------------------

    def hold(
        self,
        proc: Proc,
        key: Key,
        lease_id: str,
        token: int | None,
        expires: float,
        shared: bool = False,
    ) -> None:
        self.beliefs[lease_id] = Belief(proc, key, lease_id, token, expires, shared)
        self.known.add(lease_id)

    def drop(self, lease_id: str) -> None:
        self.beliefs.pop(lease_id, None)

    def check_step(self) -> None:
        if self.violations:
            # One found inside a store's request code, which took it for the driver's error.
            raise Violation(self.violations[0])
        by_key: dict[Key, list[Belief]] = {}
        for belief in self.beliefs.values():
            if not self.shares.forced(belief.lease_id) and belief.valid(self.world):
                by_key.setdefault(belief.key, []).append(belief)
        names: dict[str, list[Belief]] = {}
        for key, holders in by_key.items():
            if len(holders) > 1 and not all(b.shared for b in holders):
                self.fail(f"an exclusive holder of {key} beside another: {_who(holders)}")
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
        if belief.shared:  # readers beside readers: stale only behind a later exclusive grant
            latest = self.shares.stale(key, belief.lease_id, token)
        if (
            latest is not None
            and latest[0] != belief.lease_id
            and not self.shares.forced(belief.lease_id)
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
        records += held_shares(outcome.lock) if outcome.pool is None else []
        for record in records:
            if record is None or record.released or record.owner != proc.name:
                continue
            if is_group_id(record.lease_id):
                continue  # a group's own lease: nobody's (its shares are checked each)
            if record.expires_at <= proc.clock.time() or record.lease_id == keep:
                continue
            if self._told_of(record.lease_id):
                continue
            self.fail(f"phantom: {proc.name} holds {record.lease_id[:8]} on {name!r} unawares")

    def told_held(
        self, proc: Proc, key: Key, lease_id: str, token: int | None, what: str, over: bool = False
    ) -> None:
        """``over``: the holder counts the lease as over already, by its own monotonic clock (an
        answer that reached it after a pause: true when made, and nothing is done under it)."""
        if self.shares.forced(lease_id) or over:
            return  # an operator ended it meanwhile: the holder hears at its next renewal
        record = self._current(key, lease_id)
        if record is None or record.lease_id != lease_id or record.released:
            self.fail(
                f"{proc.name} was told {what} {lease_id[:8]} on {key}, but the store has {record}"
            )
        if token is not None and record.fencing_token != token:
            self.fail(f"{proc.name} was told token {token}, the store has {record.fencing_token}")

    def told_released(self, proc: Proc, key: Key, lease_id: str) -> None:
        # The store applied that lease's release: by this call, or by an earlier try of it
        # whose answer was lost (however many hand-offs or deletions of the record came since).
        if lease_id not in self.released:
            record = self._current(key)
            self.fail(
                f"{proc.name} was told it released {lease_id[:8]} on {key}: store has {record}"
            )

    def deleted(self, name: str) -> None:
        self.deletions[name] = self.deletions.get(name, 0) + 1
        self.previous.removed(name)

    def told_not_held(self, proc: Proc, key: Key, lease_id: str, renewing: bool) -> None:
        if not renewing and lease_id in self.released:
            # The library promises the truth for a release retried after any number of
            # hand-offs, the record's removal (TTL) or overwrite (0.2.0) included: the store
            # keeps each ended lease for an hour. Without transactions (dynalite) it keeps none:
            # up to three hand-offs, as its record's history, and no removal.
            grants, deletions = self.released[lease_id]
            handoffs = self.grants.get(key, 0) - grants
            kept = _keeps_done(self.inner) or (
                # A share's end, there, is in no record's history: nothing remembers it.
                handoffs <= 3
                and self.deletions.get(key[0], 0) == deletions
                and not is_share_id(lease_id)
            )
            if kept:
                self.fail(
                    f"{proc.name} was told {lease_id[:8]} does not hold {key}, but its release "
                    f"was applied ({handoffs} hand-offs ago)"
                )
            return
        record = self._current(key, lease_id)
        if record is None or record.lease_id != lease_id or record.ended:
            return
        if renewing and record.expires_at <= proc.clock.time():
            return  # ran out by the renewer's clock
        self.fail(f"{proc.name} was told {lease_id[:8]} does not hold {key}, but it does: {record}")

    def _told_of(self, lease_id: str) -> bool:
        """Whether a client was told of ``lease_id``, or the library named it (or its set's
        LEASE_ID, for a member of a set) on stderr."""
        if lease_id in self.known or lease_id in self.reported:
            return True
        return self.sets.set_of.get(lease_id, "") in self.reported

    def _current(self, key: Key, lease_id: str = "") -> LockRecord | None:
        return view(_record(self.inner.read(key[0]), key[1]), lease_id)

    # -- the end ---------------------------------------------------------------------------------

    def check_audit(self, entries: list[dict[str, Any]]) -> None:
        """Exactly one record per force-release applied, naming its operator and action, and
        none of a force that never applied: on every store, with transactions or without (the
        record is written by the force's own write, a run killed after it or not)."""
        audited: dict[str, list[dict[str, Any]]] = {}
        for entry in entries:
            if entry.get("status") != "not_applied":
                audited.setdefault(str(entry.get("lease_id")), []).append(entry)
        for lease_id in audited:
            if lease_id not in self.forced:
                self.fail(
                    f"an audit record of a force-release of {lease_id[:8]} that never applied"
                )
        for lease_id in self.forced:
            records = audited.get(lease_id, [])
            if len(records) != 1:
                self.fail(f"force-release of {lease_id[:8]} has {len(records)} audit records")
            actor, action_id = self.forced_by[lease_id]
            named = (records[0].get("actor"), records[0].get("action_id"))
            if named != (actor, action_id):
                self.fail(
                    f"the audit record of the force-release of {lease_id[:8]} names {named},"
                    f" but {(actor, action_id)} ended it"
                )

    def check_end(self) -> None:
        self.check_audit(list(self.inner.audit_entries()))
        now = self.world.now
        alive = {p.name for p in self.world.procs if not p.killed}
        for entry in self.inner.locks(""):
            records = (
                [(entry.lock_id, None, r) for r in (entry, *held_shares(entry))]
                if isinstance(entry, LockRecord)
                else [(entry.lock_id, s, r) for s, r in entry.slots.items()]
            )
            for name, slot, record in records:
                if record.released or record.expires_at <= now or record.legacy:
                    continue
                if is_group_id(record.lease_id):
                    continue
                if record.owner in alive and record.lease_id not in self.known:
                    if self._told_of(record.lease_id):
                        continue
                    self.fail(
                        f"phantom holder at the end: {(name, slot)} held by {record.owner} "
                        f"({record.lease_id[:8]}), which does not know it"
                    )


def _keeps_done(store: LockStore) -> bool:
    """Whether the store keeps the leases it ended apart from their record (every store but
    one without transactions: the in-memory or DynamoDB store as on dynalite)."""
    if getattr(store, "simulated_without_transactions", False):
        return False
    return kinds.transactions(store)


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
