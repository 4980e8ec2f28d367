"""The invariants of state with the lease (``awsflock.state``): only the current holder, while
its lease is live, writes a lock's state, and every new holder reads the last accepted write.

The checker keeps each lock's last accepted write, from the renewals with state the store
applied (``written``), and refuses:

- an applied write of a lease that was not the lock's current, live lease where it landed (the
  renewal's own check, ``Checker.applied``, holds the rest of the step to that);
- an applied write of a lease whose stored state, written by the same lease, has a later stamp
  (a write that landed late undid a later one);
- a refused write that changed the state, and an applied one that did not write it;
- a holder that read, at its grant, anything but the last accepted write (``read``).

Nothing else may change the state: not TTL, not an awsflock 0.2.0 client (on DynamoDB without
transactions the state is on the lock's item, which is kept for good there, so 0.2.0 never
takes it over).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awsflock.protocol import Outcome
from awsflock.state import NO_STATE, LockState

if TYPE_CHECKING:
    from tests.simulation.checker import Checker
    from tests.simulation.world import Proc


class StateChecks:
    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        #: Each lock's last accepted write.
        self.states: dict[str, LockState] = {}
        #: How many writes were applied, and grants whose read was checked.
        self.writes = 0
        self.reads = 0

    def renewed(self, args: tuple[Any, ...], result: Outcome, before: Any) -> None:
        """A renewal that carries state (``args[2]["state"]``) landed: applied or refused."""
        name, lease_id, write = args[0], args[1], args[2]["state"]
        last = self.states.get(name, NO_STATE)
        now = self.checker.inner.read_state(name)
        if not result.applied:
            if now != last:
                self.checker.fail(
                    f"a refused state write of {lease_id[:8]} changed the state of {name!r}"
                )
            return
        old = before.lock if before is not None else None
        if old is None or old.lease_id != lease_id or old.ended:
            self.checker.fail(
                f"a state write of {lease_id[:8]} on {name!r} was accepted, but its lease was "
                f"not the lock's current one, or had ended"
            )
        if last.lease_id == lease_id and last.stamp_ms > write.stamp_ms:
            self.checker.fail(
                f"a state write of {lease_id[:8]} on {name!r} landed after a later one of its "
                "lease, and undid it"
            )
        if now != LockState(write.data, lease_id, write.stamp_ms):
            self.checker.fail(f"an applied state write of {lease_id[:8]} did not write it")
        self.states[name] = now
        self.writes += 1

    def read(self, proc: Proc, name: str, lease: Any) -> None:
        """``proc`` was granted ``name`` with its state read (``acquire(state=True)``)."""
        expected = self.states.get(name, NO_STATE).data
        if lease.state != expected:
            self.checker.fail(
                f"{proc.name} read the state of {name!r} as {lease.state!r} at its grant; the "
                f"last accepted write was {expected!r}"
            )
        self.reads += 1
