"""The invariant of ``previous`` (``docs/contributing/design-remembering.md``): every grant the
store applies says exactly how the lease before it ended.

The checker keeps its own account of each lock's (slot's) lease, from the steps the store
applied: the lease on the record (granted by a take, or by awsflock 0.2.0's put), marked when a
release or force-release of it is applied, and gone when the record is deleted (TTL, 0.2.0's
release). Where the record is gone, the lease before is the lock's last awsflock lease (its
fence record's, which neither TTL nor 0.2.0 touches). The grant's ``previous`` must agree with
this account: how it ended, its LEASE_ID and holder, and, for a lease that ran out, its end as
the record showed it just before the take (renewals move it).

Kinds: those whose grants say ``previous`` (``REMEMBERS``). Not yet checked: shared holders
(a name that ever had a share is left out) and a set member whose grant the store did not
answer.
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
    """A lease as the account keeps it."""

    lease_id: str
    owner: str
    end: str = ""  # "", "released", "forced:ID"


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
        if not self.on or is_share_id(attempt.lease_id) or name in self.unchecked:
            if is_share_id(attempt.lease_id):
                self.unchecked.add(name)
            return
        on_record = self.leases.get(key)
        held = on_record
        if held is None and slot is None:  # the record deleted, or never made
            held = self.lasts.get(name)
        how, lease_id, owner = FIRST, "", ""
        if held is not None:
            lease_id, owner = held.lease_id, held.owner
            how = (
                RELEASED
                if held.end == ENDED_RELEASED
                else FORCED
                if held.end.startswith(ENDED_FORCED)
                else EXPIRED
            )
        if how == RELEASED:  # a release says only that
            lease_id, owner = "", ""
        said = record.previous
        who = f"the grant of {attempt.lease_id[:8]} on {key}"
        if said is None:
            self.checker.fail(f"{who} does not say how the lease before it ended")
        assert said is not None
        if (said.how, said.lease_id, said.owner) != (how, lease_id, owner):
            self.checker.fail(
                f"{who} says the lease before was {said.how} ({said.lease_id[:8]}, "
                f"{said.owner!r}); it was {how} ({lease_id[:8]}, {owner!r})"
            )
        if how == EXPIRED:
            shown = before if on_record is not None else None
            end = None if shown is None else shown.expires_at
            if said.ended_at != end:
                self.checker.fail(f"{who} says the lease before ran out at {said.ended_at}; {end}")
        self.checked += 1
        mine = _Held(attempt.lease_id, attempt.identity.owner)
        self.leases[key] = mine
        if slot is None:
            self.lasts[name] = mine

    def ended(self, key: Key, lease_id: str, mark: str) -> None:
        """An applied release (``mark`` "released") or force-release ("forced:ID")."""
        for held in (self.leases.get(key), self.lasts.get(key[0]) if key[1] is None else None):
            if held is not None and held.lease_id == lease_id:
                held.end = mark

    def legacy_put(self, name: str, version: str, owner: str) -> None:
        self.leases[(name, None)] = _Held(version, owner)

    def removed(self, name: str) -> None:
        """The record was deleted (TTL, awsflock 0.2.0's release)."""
        self.leases[(name, None)] = None

    def lost(self, name: str) -> None:
        """A grant on ``name`` that the account could not see."""
        self.unchecked.add(name)
