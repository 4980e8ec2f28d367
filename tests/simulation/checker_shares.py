"""The checker's view of shared holders (``awsflock.shares``).

A share is checked as a lease of its lock's name (key ``(name, None)``), through the share's own
view of the lock's record (``shares.share_view``): its renew, release and force-release kept
their conditions (the share current in its group, not ended; a renew never revives it); what a
client was told is true of it. Besides, the invariants of shares:

- **Never an exclusive holder beside any other holder**: at no true instant does a client
  believe it holds a lock exclusively, with a lease valid by its own clock, while another
  client believes it holds the same lock, shared or not (shares beside shares are allowed).
  A share of a group an operator force-released no longer counts, as a forced lease does not.
- **Tokens strictly increasing per name across shared and exclusive grants** (the plain check
  of every grant, which sees a share's take as a grant of its name).
- **A share's take kept its condition**: the lock free by the taker's clock (a new group), or
  held by a group that has not ended (a join); the share's id never granted there before.
- **No stale write accepted**: a share's fenced write is accepted only if no exclusive holder
  was granted the lock after the share (shares beside each other write freely, as readers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from awsflock import shares
from awsflock.protocol import Attempt
from awsflock.records import LockRecord

if TYPE_CHECKING:
    from tests.simulation.checker import Checker, Key


class ShareChecks:
    """What the checker keeps of shares: each share's group, and the latest exclusive grant."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        #: A share's id -> the id of the group it was granted into.
        self.group: dict[str, str] = {}
        #: The latest exclusive grant per lock: (lease id, token).
        self.exclusive: dict[Key, tuple[str, int | None]] = {}
        self.grants = 0

    def forced(self, lease_id: str) -> bool:
        """Whether ``lease_id`` was force-released: itself, or the group it is a share of."""
        forced = self.checker.forced
        return lease_id in forced or self.group.get(lease_id, "") in forced

    def granted(self, key: Key, lease_id: str, record: LockRecord | None) -> None:
        """A take the store applied: a share (its group learnt) or an exclusive grant."""
        if shares.is_share_id(lease_id):
            self.grants += 1
            if record is not None:
                self.group[lease_id] = record.lease_id
        elif key[1] is None:
            self.exclusive[key] = (lease_id, record.fencing_token if record else None)

    def check_take(self, key: Key, attempt: Attempt, old: LockRecord | None, free: bool) -> None:
        """An applied share's take was allowed (``free``: the lock was free by its clock)."""
        lease_id = attempt.lease_id
        if old is not None and any(s.lease_id == lease_id for s in old.shares):
            self.checker.fail(f"share {lease_id[:8]} granted twice on {key}")
        if free:
            return
        if old is None or not old.shared or old.released:
            who = "nothing" if old is None else old.lease_id[:8]
            self.checker.fail(f"share {lease_id[:8]} joined {who} on {key}, not a live group")

    def stale(self, key: Key, lease_id: str, token: int) -> tuple[str, int | None] | None:
        """The exclusive grant made after share ``lease_id`` (of ``token``), if any."""
        latest = self.exclusive.get(key)
        if latest is None or latest[1] is None or latest[1] < token:
            return None
        return latest


def view(record: LockRecord | None, lease_id: str) -> LockRecord | None:
    """``record`` as the holder of ``lease_id`` sees it (a share's own view)."""
    return shares.share_view(record, lease_id) if shares.is_share_id(lease_id) else record


def held_shares(record: LockRecord | None) -> list[LockRecord]:
    """The shares ``record`` shows held (its group not ended)."""
    if record is None or not record.shared or record.released:
        return []
    return list(record.shares)
