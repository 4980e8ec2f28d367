"""One acquisition of a set of locks (``awsflock.sets``), attempt by attempt: each attempt takes
every name in one step of the store (``take_all``), or none.

It is an ``Acquisition`` (``awsflock.lock.acquisition``) whose attempt is a set's: a fresh set
id per attempt, each name under its member id. What an acquisition promises holds for the set
as a whole: an attempt whose answer was lost stays unsettled until every name's member is
released (``release_all``) or named on stderr with the command that frees the set; a grant
found by its ids (a lost answer's) is kept only with at least half of every name's lease left.
The wait loop (``awsflock.lock.waiting``) drives it with the plain policy, and what it says
names the lock that kept the set (``lock_id``, ``holder``: the first name held by another).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from awsflock import errors, sets
from awsflock.lock.acquisition_async import MIN_LEFT, Acquisition, log
from awsflock.lock.grants import Grant
from awsflock.protocol import Attempt, Outcome
from awsflock.protocol_async import AsyncLockStore
from awsflock.records import Identity, LockRecord
from awsflock.sets import AsyncSetSteps


@dataclass(frozen=True)
class SetGrant(Grant):
    """A set held: ``lease_id`` is the set's, ``record`` its first name's; ``records`` every
    name's, in the order asked, and ``to_monos`` each one's ``to_mono``."""

    records: tuple[LockRecord, ...] = ()
    to_monos: tuple[float | None, ...] = ()


class SetAcquisition(Acquisition):
    """The attempts of one ``acquire`` of several names together."""

    def __init__(
        self,
        store: AsyncLockStore,
        lock_ids: tuple[str, ...],
        lease_s: float,
        identity: Identity,
        **options: Any,
    ) -> None:
        super().__init__(store, lock_ids[0], lease_s, identity, None, **options)
        self.lock_ids = lock_ids
        #: Each name's record as the last answer showed it (None: not seen, or free).
        self.seen: dict[str, LockRecord | None] = {}

    @property
    def steps(self) -> AsyncSetSteps:
        found: Any = self.store
        return found  # type: ignore[no-any-return]

    def fresh_id(self, slot: int | None) -> str:
        return sets.new_set_id(self.lock_ids)

    def release_command(self, lease_id: str) -> str:
        return shlex.join(["awsflock", "release", *self.lock_ids, lease_id])

    def attempted(self) -> tuple[str, str]:
        return ", ".join(map(repr, self.lock_ids)), "every one of those locks is"

    def what(self) -> str:
        others = [name for name in self.lock_ids if name != self.lock_id]
        return f"lock {self.lock_id!r} (asked for with {', '.join(map(repr, others))})"

    def members(self, set_id: str) -> list[tuple[str, str]]:
        """Each name of the set and the lease id it is held under in attempt ``set_id``."""
        return [(name, sets.member_id(set_id, name)) for name in self.lock_ids]

    async def step(self) -> Grant | None:
        set_id = self._new_attempt(None)
        try:
            with self.store.budget(self.attempt_end()):
                mono, now_ms = self.clock.monotonic(), self._now_ms()
                self.to_mono[set_id] = mono - now_ms / 1000
                takes = [
                    (name, self._attempt(member, now_ms, self.seen.get(name)))
                    for name, member in self.members(set_id)
                ]
                outcomes = await self.steps.take_all(takes)
        except (errors.Throttled, errors.EndpointUnreachable) as err:
            self.error = err
            if not err.maybe_applied:
                self.unsettled.pop(set_id, None)
            return None
        except errors.AwsflockError as err:
            if not err.maybe_applied:
                self.unsettled.pop(set_id, None)
            raise
        self.error = None
        self.late_grant = False
        if not any(o.applied or o.in_doubt for o in outcomes):
            self.unsettled.pop(set_id, None)
        return await self.look_all(outcomes)

    def _attempt(self, member: str, now_ms: int, seen: LockRecord | None) -> Attempt:
        return Attempt(
            lease_id=member,
            identity=self.identity,
            now_ms=now_ms,
            lease_ms=round(self.lease_s * 1000),
            skew_ms=round(self.skew * 1000),
            seen=seen,
            delay_ms=self.terms.delay_ms,
            max_hold_ms=self.terms.max_hold_ms,
        )

    async def look_all(self, outcomes: tuple[Outcome, ...]) -> Grant | None:
        """Learn from a set's answer: our own grant (this attempt's, or an earlier one whose
        answer was lost) if every name shows it; else None, with the first name held by
        another as ``lock_id`` and ``holder``."""
        records: list[LockRecord | None] = []
        for name, outcome in zip(self.lock_ids, outcomes):
            if outcome.pool is not None:
                raise errors.ConfigurationError(
                    f"{name!r} is a pool of {outcome.pool.size} slots; locks taken together "
                    "must be plain locks",
                    hint="take the pool on its own (--slots), apart from the others",
                )
            records.append(outcome.lock)
        for set_id in list(self.sent):
            mine = [
                r is not None and r.lease_id == member and not r.released
                for r, (_, member) in zip(records, self.members(set_id))
            ]
            if all(mine):
                held = tuple(r for r in records if r is not None)
                return await self._keep_set(set_id, held, tuple(o.to_mono for o in outcomes))
        now = self.clock.time()
        self.holder, self.lock_id = None, self.lock_ids[0]
        for name, record, outcome in zip(self.lock_ids, records, outcomes):
            self.seen[name] = record
            if record is not None and not record.is_free(now, self.skew) and self.holder is None:
                self.holder, self.lock_id, self.line = record, name, outcome.line
        return None

    async def _keep_set(
        self,
        set_id: str,
        records: tuple[LockRecord, ...],
        answered: tuple[float | None, ...],
    ) -> Grant | None:
        """Our own set: kept if at least ``MIN_LEFT`` of every name's lease is left, else given
        up (every name released) and the attempts go on."""
        self.unsettled[set_id] = None
        to_monos = tuple(t if t is not None else self.to_mono.get(set_id) for t in answered)
        left = min(self._left(r, t) for r, t in zip(records, to_monos))
        if left >= self.terms.granted(self.lease_s) * MIN_LEFT:
            self.unsettled.pop(set_id, None)
            waited = self.clock.monotonic() - self.start
            return SetGrant(
                set_id,
                records[0],
                None,
                self.attempts,
                waited,
                to_monos[0],
                records=records,
                to_monos=to_monos,
            )
        await self._give_up(set_id, None, left, "from an earlier attempt")
        return None

    async def still_fresh(self, grant: Grant) -> Grant | None:
        assert isinstance(grant, SetGrant)
        left = min(self._left(r, t) for r, t in zip(grant.records, grant.to_monos))
        if left >= self.terms.granted(self.lease_s) * MIN_LEFT:
            return grant
        self.unsettled[grant.lease_id] = None
        await self._give_up(grant.lease_id, None, left, "kept while other attempts were settled")
        return None

    async def _release(self, lease_id: str, slot: int | None) -> bool:
        """Release every name of our attempt ``lease_id``; True once none is held by it."""
        try:
            outcomes = await self.steps.release_all(
                self.members(lease_id),
                now_ms=self._now_ms(),
                skew_ms=round(self.skew * 1000),
            )
        except errors.AwsflockError as err:
            log.debug("clean-up release of %r failed: %s", self.lock_ids, err.one_line())
            return False
        done = all(
            o.applied or o.knows(member) or o.barred
            for o, (_, member) in zip(outcomes, self.members(lease_id))
        )
        if done:
            self.unsettled.pop(lease_id, None)
        return done
