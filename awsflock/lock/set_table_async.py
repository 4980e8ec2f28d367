"""Several locks held together (``awsflock.sets``): the table's steps on a set, and the lease
that covers it (``LeaseSet``).

A set is acquired in one step of the store per attempt (``SetAcquisition``), waiting for all
the names together: nothing is held while another name is waited for, so two holders that
name the same locks in any order never deadlock. It is renewed and released in one step too;
a set with one name lost is lost (``NotHeld`` names that lock), and releasing it ends the rest.
"""

from __future__ import annotations

import dataclasses
import logging
import shlex
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from awsflock import errors, metrics, sets
from awsflock.durations import lease_seconds, wait_limit
from awsflock.lock import owners, telling, verdict, waiting_async
from awsflock.lock.held_async import Lease, release_on_exit
from awsflock.lock.set_acquisition_async import SetAcquisition, SetGrant
from awsflock.lock.terms import NO_TERMS, Terms
from awsflock.names import check_lease_id
from awsflock.records import Identity, LockRecord, Previous
from awsflock.sets import AsyncSetSteps
from awsflock.stores import kinds
from awsflock.text import format_seconds, iso_utc

log = logging.getLogger("awsflock.lease")


@dataclass(repr=False)
class LeaseSet:
    """Leases we hold on several locks together, under one LEASE_ID (``lease_id``): one
    ``Lease`` per name (``leases``, in the order asked), each with its own fencing token
    (``fencing_tokens``). Renewed and released as one."""

    table: Any
    lease_id: str
    leases: tuple[Lease, ...]
    waited: float = 0.0
    released: bool = False
    slot: int | None = None
    #: Whose hold this is, for messages and ``as_dict``.
    owner: str = field(default="")

    @property
    def lock_ids(self) -> tuple[str, ...]:
        return tuple(lease.lock_id for lease in self.leases)

    @property
    def lock_id(self) -> str:
        """The names, as messages say them ("a, b")."""
        return ", ".join(self.lock_ids)

    @property
    def fencing_tokens(self) -> dict[str, int | None]:
        """Each lock's fencing token, by name."""
        return {lease.lock_id: lease.fencing_token for lease in self.leases}

    @property
    def fencing_token(self) -> int | None:
        """A set has one token per lock: ``fencing_tokens[name]``. None here."""
        return None

    @property
    def previous(self) -> dict[str, Previous | None]:
        """How the lease before each lock's ended, by name (None where the store does not say)."""
        return {lease.lock_id: lease.previous for lease in self.leases}

    @property
    def expires_at(self) -> float:
        return min(lease.expires_at for lease in self.leases)

    @property
    def expires_mono(self) -> float:
        return min(lease.expires_mono for lease in self.leases)

    @property
    def capped(self) -> bool:
        """Whether a name's lease now ends at the set's cap (each took the same one)."""
        return any(lease.capped for lease in self.leases)

    @property
    def acquired_at(self) -> float:
        return min(lease.acquired_at for lease in self.leases)

    @property
    def lease_duration(self) -> float:
        return self.leases[0].lease_duration

    async def renew(self, lease: float | str | None = None) -> LeaseSet:
        """Extend every lock's lease by ``lease`` (default: its duration) from now."""
        found: LeaseSet = await self.table.renew_set(self, lease=lease)
        return found

    async def release(self) -> None:
        """End every lock's lease. Raises NotHeld, naming it, if one was lost meanwhile."""
        await self.table.release_set(self)

    def remaining(self) -> float:
        now: float = self.table.clock.time()
        return self.expires_at - now

    def as_dict(self) -> dict[str, Any]:
        """The public fields, as ``acquire --json`` prints them (lease id included)."""
        return {
            "lock_ids": list(self.lock_ids),
            "lease_id": self.lease_id,
            "fencing_tokens": self.fencing_tokens,
            "owner": self.owner,
            "acquired_at": round(self.acquired_at, 3),
            "expires_at": round(self.expires_at, 3),
            "lease_duration": self.lease_duration,
            "previous": {n: p.as_dict() for n, p in self.previous.items() if p is not None},
            **({} if (cap := self.capped_at) is None else {"capped_at": round(cap, 3)}),
        }

    @property
    def capped_at(self) -> float | None:
        """The set's cap (``max_hold=``; each name took the same one), or None."""
        caps = [lease.capped_at for lease in self.leases if lease.capped_at is not None]
        return min(caps) if caps else None

    def __repr__(self) -> str:
        state = ", released" if self.released else ""
        return (
            f"LeaseSet(lock_ids={self.lock_ids!r}, fencing_tokens={self.fencing_tokens}, "
            f"expires_at={iso_utc(self.expires_at)}, lease_id=<redacted>{state})"
        )

    async def __aenter__(self) -> LeaseSet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await release_on_exit(self, exc[0])


def check_set_options(slots: int | None, fair: bool, shared: bool) -> None:
    """Refuse what a set cannot be: a pool, a fair waiter, a shared holder."""
    if slots is not None or fair or shared:
        raise errors.UsageError(
            "locks taken together are plain exclusive locks, served as they come",
            hint="drop slots/fair/shared (--slots/--fair/--shared), or take that lock on its own",
        )


class SetTable:
    """The set steps of ``LockTable`` (``awsflock.lock.table``), which this is mixed into."""

    store: Any
    clock: Any
    rng: Any
    skew: float
    identity: Identity
    started: float | None

    def _set_store(self) -> AsyncSetSteps:
        if not kinds.sets(self.store):
            raise sets.no_sets(self.store.where())
        found: Any = self.store
        return found  # type: ignore[no-any-return]

    async def acquire_set(
        self,
        lock_ids: Sequence[str],
        *,
        lease: float | str,
        wait: float | str | None,
        identity: Identity | None = None,
        cancel: threading.Event | None = None,
        terms: Terms = NO_TERMS,
    ) -> LeaseSet:
        """Take every lock of ``lock_ids`` together, waiting up to ``wait`` (see ``acquire``)."""
        names = sets.check_names(lock_ids)
        lease_s = lease_seconds(lease)
        wait_s = None if wait is None else wait_limit(wait)
        self._set_store()
        if wait_s != 0:
            for name in names:
                owners.refuse_reentry(self.store, name)
        who = identity or self.identity
        opts = {"clock": self.clock, "rng": self.rng, "skew": self.skew}
        run = SetAcquisition(self.store, names, lease_s, who, terms=terms, **opts)
        run.origin = self.started  # the CLI's process start: its bound counts from it
        try:
            grant = await waiting_async.wait(run, wait_s=wait_s, cancel=cancel, **opts)
        except BaseException as exc:
            failed = telling.outcome(exc, wait_s)
            for name in names:
                metrics.record("awsflock.acquisitions", 1, name, self.store, outcome=failed)
            raise
        assert isinstance(grant, SetGrant)
        table: Any = self
        leases = tuple(
            Lease.of_record(table, record, name, sets.member_id(grant.lease_id, name), to_mono)
            for name, record, to_mono in zip(names, grant.records, grant.to_monos)
        )
        for name, record in zip(names, grant.records):
            metrics.record("awsflock.acquisitions", 1, name, self.store, outcome=metrics.GRANTED)
            telling.granted_after(name, record, self.store)
        held = LeaseSet(self, grant.lease_id, leases, waited=grant.waited, owner=who.owner)
        level = telling.NOTICE if grant.contended else logging.INFO
        log.log(
            level,
            "acquired %s (fencing tokens %s) after %s and %d request(s)",
            ", ".join(map(repr, names)),
            ", ".join(str(lease.fencing_token) for lease in leases),
            format_seconds(grant.waited),
            grant.attempts,
            extra={"event": "acquired", "lock_ids": list(names), "outcome": metrics.GRANTED},
        )
        return held

    async def renew_set(self, held: LeaseSet, *, lease: float | str | None = None) -> LeaseSet:
        """Extend ``held`` from now (by its own duration unless ``lease`` is given), in place."""
        fresh = await self.renew_set_lease(
            held.lock_ids, held.lease_id, lease=held.lease_duration if lease is None else lease
        )
        for mine, new in zip(held.leases, fresh):
            mine.renewed_by(new, wall_clock_ends=not self.store.skew_free)
        return held

    async def renew_set_lease(
        self,
        lock_ids: Sequence[str],
        set_id: str,
        *,
        lease: float | str,
        keeper: str | None = None,
    ) -> tuple[Lease, ...]:
        """Extend every lock's lease of set ``set_id`` from now, in one step. Raises NotHeld
        naming the first lock that is not held any more (the set is lost)."""
        names, set_id = _checked(lock_ids, set_id)
        lease_s, lease_ms = lease_seconds(lease), round(lease_seconds(lease) * 1000)
        members = [(name, sets.member_id(set_id, name)) for name in names]
        mono, now_ms = self.clock.monotonic(), round(self.clock.time() * 1000)
        skew_ms = round(self.skew * 1000)
        step = {"now_ms": now_ms, "lease_ms": lease_ms, "skew_ms": skew_ms, "keeper": keeper}
        outcomes = await self._set_store().renew_all(members, **step)
        table: Any = self
        leases = []
        refusals: list[errors.NotHeld] = []
        renewed: list[str] = []
        for (name, member), outcome in zip(members, outcomes):
            record = outcome.record
            if not outcome.applied and verdict.held_longer(record, member, now_ms, lease_ms):
                outcome = dataclasses.replace(outcome, applied=True)
            if not outcome.applied:
                metrics.record("awsflock.renewals", 1, name, self.store, outcome=metrics.LOST)
                refused = verdict.of(outcome, name, member, "renew", self.clock.time())
                refusals.append(refused or errors.NotHeld(f"the lease of {name!r} was not renewed"))
                continue
            renewed.append(name)
            if record is None:  # a transaction answers nothing: the end it wrote
                record = LockRecord(
                    lock_id=name,
                    lease_id=member,
                    expires_at=(now_ms + lease_ms) / 1000,
                    lease_duration=lease_s,
                )
            to_mono = outcome.to_mono if outcome.to_mono is not None else mono - now_ms / 1000
            leases.append(Lease.of_record(table, record, name, member, to_mono))
        if refusals:
            raise _lost_with(refusals[0], names, set_id, renewed, "renewed, and {} held")
        for name in names:
            metrics.record("awsflock.renewals", 1, name, self.store, outcome=metrics.OK)
        log.info("renewed %s for %s", ", ".join(map(repr, names)), format_seconds(lease_s))
        return tuple(leases)

    async def release_set(self, held: LeaseSet) -> None:
        """End every lock's lease of ``held``."""
        await self.release_set_lease(held.lock_ids, held.lease_id)
        held.released = True

    async def release_set_lease(self, lock_ids: Sequence[str], set_id: str) -> None:
        """End every lock's lease of set ``set_id``, in one step. Raises NotHeld naming the
        first lock whose lease was lost (the others are released all the same); a release
        whose first try went through (or a second release) succeeds."""
        names, set_id = _checked(lock_ids, set_id)
        members = [(name, sets.member_id(set_id, name)) for name in names]
        now_ms, skew_ms = round(self.clock.time() * 1000), round(self.skew * 1000)
        outcomes = await self._set_store().release_all(members, now_ms=now_ms, skew_ms=skew_ms)
        refusals, released = [], []
        for (name, member), outcome in zip(members, outcomes):
            refusal = None
            if not outcome.applied:
                refusal = verdict.of_release(outcome, name, member, self.clock.time())
            said = metrics.RELEASED if refusal is None else metrics.NOT_HELD
            metrics.record("awsflock.releases", 1, name, self.store, outcome=said)
            if refusal is not None:
                refusals.append(refusal)
            else:
                released.append(name)
        if refusals:
            raise _lost_with(refusals[0], (), set_id, released, "released")
        log.info("released %s", ", ".join(map(repr, names)))


def _checked(lock_ids: Sequence[str], set_id: str) -> tuple[tuple[str, ...], str]:
    """The names and the LEASE_ID of a set's renew or release, checked: the LEASE_ID must be
    the one acquired for exactly these names (any order)."""
    names, set_id = sets.check_names(lock_ids), check_lease_id(set_id)
    if not sets.names_fit(set_id, names):
        raise errors.UsageError(
            f"LEASE_ID {set_id} was not acquired for {', '.join(map(repr, names))}",
            hint="name every lock it was acquired for, no other (in any order)",
        )
    return names, set_id


def _lost_with(
    refusal: errors.NotHeld,
    names: Sequence[str],
    set_id: str,
    others: list[str],
    done: str,
) -> errors.NotHeld:
    """``refusal`` of one lock of a set, saying what became of the others (``others``, whose
    own step was applied: ``done``), and, where they stay held (``names``), what frees them:
    a script that stops on the refusal must not leave them held unknowingly (found by a
    review: a renew that exited 3 had renewed the others for its whole lease)."""
    if not others:
        return refusal
    verb, stays = ("were", "stay") if len(others) > 1 else ("was", "stays")
    said = f"{refusal.message}; {', '.join(map(repr, others))} {verb} {done.format(stays)}"
    hint = refusal.hint
    if names:
        hint = "release them with `" + shlex.join(["awsflock", "release", *names, set_id]) + "`"
    lost = errors.NotHeld(said, hint=hint)
    lost.reason = refusal.reason
    return lost
