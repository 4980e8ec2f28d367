"""What the asynchronous API adds to the invariants: the bodies run under its locks.

A *body* is the block of an ``async with table.lock(...)`` or an election's ``lead(term)``: the
work a lease protects. ``awsflock.aio`` promises that a lost lease cancels the body, waits for
it to stop, and only then releases. Checked at every step the store applies:

- **Work stopped before release**: no release of a lease is applied while a body under it
  still runs (however long its clean-up after the cancellation takes).
- **Work told to stop before another's starts**: no other holder is granted a lock (a plain
  lock, or the same slot of a pool, or a lock of a pool's name) while a body under it runs
  that has not been told to stop (its cancellation, or ``LeaseLost`` from ``check()``,
  reached it). Not counted: a body whose lease an operator force-released (a share's, when
  its group was: ``force-release`` of a shared lock ends every share; it hears at its
  next renewal, and fencing protects meanwhile), whose process was killed, or whose process
  was paused at some moment since its hold's deadline passed (a frozen process runs nothing,
  its loop's timers included: what fencing is for). A body's clean-up after it was told may
  outlast the lease: that is the body's own doing.
- **No two bodies at once**: a body starts only when no other body of its lock (slot) runs
  that has not been told to stop (the same exceptions): for elections, no two ``lead`` bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.simulation.world import EPOCH, Proc

if TYPE_CHECKING:
    from tests.simulation.checker import Checker

Key = tuple[str, "int | None"]


@dataclass
class Body:
    proc: Proc
    key: Key
    lease_id: str
    hold: Any  # its hold: its deadline
    told: bool = False  # its cancellation (or LeaseLost) reached it
    shared: bool = False  # under a share (``awsflock.shares``): beside other shares' bodies

    def excused(self, checker: Checker) -> bool:
        """Running beside another's grant, for a reason outside the library's reach."""
        if self.told or self.proc.killed or checker.shares.forced(self.lease_id):
            return True
        # Its deadline, in true time (a process's monotonic clock is true time moved).
        deadline = self.hold.mono_deadline() - 1000.0 + EPOCH
        return self.proc.paused_since(deadline)


class Bodies:
    """The bodies running now, by lease id."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        self.running: dict[str, Body] = {}
        #: Bodies started, and those told to stop (the rules' reach).
        self.started = 0
        self.told = 0

    def start(self, proc: Proc, key: Key, lease_id: str, hold: Any, shared: bool = False) -> None:
        for other in self._beside(key, lease_id, shared):
            self.checker.fail(
                f"{proc.name}'s body under {lease_id[:8]} started on {key} while "
                f"{other.proc.name}'s under {other.lease_id[:8]} still runs, not told to stop"
            )
        self.running[lease_id] = Body(proc, key, lease_id, hold, shared=shared)
        self.started += 1

    def tell(self, lease_id: str) -> None:
        body = self.running.get(lease_id)
        if body is not None and not body.told:
            body.told = True
            self.told += 1

    def stop(self, lease_id: str) -> None:
        self.running.pop(lease_id, None)

    # -- what the store applied ------------------------------------------------------------

    def released(self, lease_id: str, key: Key) -> None:
        body = self.running.get(lease_id)
        if body is not None and not body.proc.killed:
            self.checker.fail(
                f"release of {lease_id[:8]} on {key} applied while {body.proc.name}'s body "
                f"under it still runs{' (told to stop)' if body.told else ''}"
            )

    def granted(self, key: Key, lease_id: str, shared: bool = False) -> None:
        for other in self._beside(key, lease_id, shared):
            self.checker.fail(
                f"{key} granted to {lease_id[:8]} while {other.proc.name}'s body under "
                f"{other.lease_id[:8]} on {other.key} still runs, not told to stop"
            )

    def _beside(self, key: Key, lease_id: str, shared: bool) -> list[Body]:
        """The running bodies a holder of ``key`` would work beside, not excused (a share's
        beside other shares' is no fault)."""
        name, slot = key
        return [
            body
            for body in self.running.values()
            if body.key[0] == name
            and body.lease_id != lease_id
            and (slot is None or body.key[1] is None or body.key[1] == slot)
            and not (shared and body.shared)
            and not body.excused(self.checker)
        ]
