"""The invariant of ``previous`` (``docs/contributing/design-remembering.md``): every grant the
store applies says exactly how the lease before it ended.

The checker keeps its own account of each lock's (slot's) lease, from the steps the store
applied: the lease on the record (granted by a take, or by awsflock 0.2.0's put), marked when a
release or force-release of it is applied, and gone when the record is deleted (TTL, 0.2.0's
release). Where the record is gone, the lease before is the lock's last awsflock lease (its
fence record's, which neither TTL nor 0.2.0 touches). The grant's ``previous`` must agree with
this account: how it ended, its LEASE_ID and holder, and, for a lease that ran out, its end as
the record showed it just before the take (renewals move it).

Shared holders: a share's grant says its group's previous (what the group's first share
replaced). A group is the lease before the grant that replaces it: released only if every share
was released by its holder and no operator force-released the group; else the grant must name
one that was not (a share that ran out or was forced, or the group force-released; or the group
itself, ran out, where its record is gone), as ``how``, LEASE_ID and owner.

Kinds: those whose grants say ``previous`` (``REMEMBERS``). Not checked: a name after a set
member's grant the store did not answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from awsflock.protocol import Attempt
from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    EXPIRED,
    FIRST,
    FORCED,
    RELEASED,
    LockRecord,
)
from awsflock.shares import is_share_id

if TYPE_CHECKING:
    from tests.simulation.checker import Checker, Key

#: The kinds whose grants say ``previous``.
REMEMBERS = {"memory", "postgresql", "redis", "dynamodb"}


@dataclass
class _Held:
    """A lease as the account keeps it: a group of shares keeps its shares too, and the
    ``previous`` its first share was told."""

    lease_id: str
    owner: str
    end: str = ""  # "", "released", "forced:ID"
    shares: dict[str, _Held] | None = None
    told: tuple[str, str, str] | None = None

    def fates(self, gone: bool) -> set[tuple[str, str, str]]:
        """What a grant after this lease may say of it, as (how, LEASE_ID, owner): exactly one
        for a plain lease; for a group, each way it did not end by release (``gone``: its
        record deleted, where the group itself may be named as ran out)."""
        if self.shares is None:
            return {_fate(self)}
        found = {_fate(s) for s in self.shares.values() if s.end != ENDED_RELEASED}
        if self.end.startswith(ENDED_FORCED):
            found.add(_fate(self))
        if found and gone:
            found.add((EXPIRED, self.lease_id, self.owner))
        return found or {(RELEASED, "", "")}


def _fate(held: _Held) -> tuple[str, str, str]:
    if held.end == ENDED_RELEASED:
        return (RELEASED, "", "")  # a release says only that
    how = FORCED if held.end.startswith(ENDED_FORCED) else EXPIRED
    return (how, held.lease_id, held.owner)


class PreviousChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.on = getattr(checker.inner, "kind", "memory") in REMEMBERS
        self.leases: dict[Key, _Held | None] = {}  # the lease on each record (None: deleted)
        self.lasts: dict[str, _Held] = {}  # each lock's last awsflock lease (its fence record)
        self.unchecked: set[str] = set()  # names the account cannot follow (shares)
        self.checked = 0  # grants whose previous was checked

    def granted(self, key: Key, attempt: Attempt, record: LockRecord, before: Any) -> None:
        """An applied take of ``key``: check what its answer says of the lease before."""
        name, slot = key
        if not self.on or name in self.unchecked:
            return
        said = record.previous
        who = f"the grant of {attempt.lease_id[:8]} on {key}"
        if said is None:
            self.checker.fail(f"{who} does not say how the lease before it ended")
        assert said is not None
        on_record = self.leases.get(key)
        share = is_share_id(attempt.lease_id)
        if share and on_record is not None and on_record.lease_id == record.lease_id:
            group = on_record  # a join: its group's previous
            assert group.told is not None and group.shares is not None
            self._agree(who, said, {group.told})
            group.shares[attempt.lease_id] = _Held(attempt.lease_id, attempt.identity.owner)
            self.checked += 1
            return
        held = on_record
        if held is None and slot is None:  # the record deleted, or never made
            held = self.lasts.get(name)
        fates = {(FIRST, "", "")} if held is None else held.fates(gone=on_record is None)
        self._agree(who, said, fates)
        if said.how == EXPIRED and held is not None and held.shares is None:
            shown = before if on_record is not None else None
            end = None if shown is None else shown.expires_at
            if said.ended_at != end:
                self.checker.fail(f"{who} says the lease before ran out at {said.ended_at}; {end}")
        self.checked += 1
        mine = _Held(attempt.lease_id, attempt.identity.owner)
        if share:
            mine = _Held(record.lease_id, attempt.identity.owner, shares={attempt.lease_id: mine})
            mine.told = (said.how, said.lease_id, said.owner)
        self.leases[key] = mine
        if slot is None:
            self.lasts[name] = mine

    def _agree(self, who: str, said: Any, fates: set[tuple[str, str, str]]) -> None:
        if (said.how, said.lease_id, said.owner) not in fates:
            expected = " or ".join(f"{h} ({i[:8]}, {o!r})" for h, i, o in sorted(fates))
            self.checker.fail(
                f"{who} says the lease before was {said.how} ({said.lease_id[:8]}, "
                f"{said.owner!r}); it was {expected}"
            )

    def ended(self, key: Key, lease_id: str, mark: str) -> None:
        """An applied release (``mark`` "released") or force-release ("forced:ID")."""
        for held in (self.leases.get(key), self.lasts.get(key[0]) if key[1] is None else None):
            if held is not None and held.lease_id == lease_id:
                held.end = mark
            elif held is not None and held.shares and lease_id in held.shares:
                held.shares[lease_id].end = mark

    def legacy_put(self, name: str, version: str, owner: str) -> None:
        self.leases[(name, None)] = _Held(version, owner)

    def removed(self, name: str) -> None:
        """The record was deleted (TTL, awsflock 0.2.0's release)."""
        self.leases[(name, None)] = None

    def lost(self, name: str) -> None:
        """A grant on ``name`` that the account could not see."""
        self.unchecked.add(name)
