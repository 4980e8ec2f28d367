"""What a simulated worker does with sets (``awsflock.sets``): several names taken together
through the real library, ``table.acquire([...])`` (waiting or not) and ``table.lock([...])``
(held with its heartbeat), renewed and released as one; orders that differ between workers,
and a set with the name that may become a pool (``CONVERTS``); a fenced write per name while
the set's lease is valid by the holder's clock. Mixed into ``clients.Client``.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from awsflock import errors

if TYPE_CHECKING:
    from awsflock.lock.set_table import LeaseSet
    from tests.simulation.checker import Checker
    from tests.simulation.world import Proc

#: The sets the workers take: the same names in both orders, and with C, which a pool acquire
#: now and then turns into a pool (a set's take of it is then refused, before it or by it).
SETS = (("L0", "L1"), ("L1", "L0"), ("L0", "C"), ("C", "L1"), ("L1", "C", "L0"))


class SetWork:
    """A worker's set operations (``Client`` supplies what is declared here)."""

    proc: Proc
    checker: Checker
    rng: Any
    table: Any

    if TYPE_CHECKING:

        def count(self) -> bool: ...

        def pause(self, low: float, high: float) -> None: ...

    def set_work(self) -> None:
        """A set acquired (waiting or not), worked under, renewed, released or walked away."""
        if not self.count():
            return
        names = list(self.rng.choice(SETS))
        wait = self.rng.choice((0.0, 0.0, 5.0, 20.0, 60.0))
        lease_s = self.rng.choice((5.0, 10.0, 20.0, 40.0))
        try:
            held = self.table.acquire(names, lease=lease_s, wait=wait)
        except errors.AwsflockError:
            for name in names:
                self.checker.no_phantom(self.proc, name)
            raise
        self._told_acquired(held.leases, lease_s)
        self._believe(held)
        self._write_all(held)
        for _ in range(self.rng.randrange(1, 6)):
            self.pause(0.0, lease_s / 2)
            if not self.count():
                break
            if held.remaining() < lease_s / 2 and not self._renew(held):
                return
            self._write_all(held)
        if self.rng.random() < 0.9 and self.count():
            self._release(held)
        else:
            for lease in held.leases:
                self.checker.drop(lease.lease_id)

    def set_hold_work(self) -> None:
        """``table.lock([...])``: held with its heartbeat, a fenced write per name after each
        ``check()``."""
        if not self.count():
            return
        names = list(self.rng.choice(SETS))
        lease_s = self.rng.choice((6.0, 15.0, 30.0))
        held = self.table.lock(names, lease=lease_s, wait=self.rng.choice((0.0, 30.0)))
        try:
            held.start()
        except errors.AwsflockError:
            for name in names:
                self.checker.no_phantom(self.proc, name)
            return
        leases = held.lease.leases
        self._told_acquired(leases, lease_s)
        ids = [(lease.lock_id, lease.lease_id) for lease in leases]

        def believe() -> None:
            tokens, deadline = held.fencing_tokens, held.deadline()
            for name, lease_id in ids:
                self.checker.hold(self.proc, (name, None), lease_id, tokens[name], deadline)

        believe()
        try:
            for _ in range(self.rng.randrange(1, 8)):
                self.pause(0.0, lease_s)
                if not self.count():
                    break
                held.check()
                believe()
                for _, lease_id in ids:
                    belief = self.checker.beliefs.get(lease_id)
                    if belief is not None:
                        self.checker.write(self.proc, belief)
        except errors.LeaseLost:
            pass
        finally:
            for _, lease_id in ids:
                self.checker.drop(lease_id)
            with contextlib.suppress(errors.AwsflockError):
                held.stop()

    # -- what the worker was told ---------------------------------------------------------------

    def _told_acquired(self, leases: Any, lease_s: float) -> None:
        for lease in leases:
            self.checker.told_acquired(self.proc, (lease.lock_id, None), lease, lease_s)

    def _believe(self, held: LeaseSet) -> None:
        for lease in held.leases:
            key = (lease.lock_id, None)
            self.checker.hold(self.proc, key, lease.lease_id, lease.fencing_token, held.expires_at)

    def _write_all(self, held: LeaseSet) -> None:
        if held.remaining() <= 0:
            return
        for lease in held.leases:
            belief = self.checker.beliefs.get(lease.lease_id)
            if belief is not None:
                self.checker.write(self.proc, belief)

    def _renew(self, held: LeaseSet) -> bool:
        try:
            held.renew()
        except errors.NotHeld as exc:
            return self._set_not_renewed(exc, held)
        except errors.AwsflockError:
            return True  # unanswered: the set may still be ours, by its old ends
        return self._set_renewed(held)

    def _set_not_renewed(self, exc: errors.NotHeld, held: Any) -> bool:
        """A set's renew refused: told so of the lock its error names, and relied on no more."""
        self._told_set_not_held(exc, held, renewing=True)
        for lease in held.leases:
            self.checker.drop(lease.lease_id)
        return False

    def _told_set_not_held(self, exc: errors.NotHeld, held: Any, renewing: bool) -> None:
        named = _named(exc, held)
        if named is not None:
            key = (named.lock_id, None)
            self.checker.told_not_held(self.proc, key, named.lease_id, renewing=renewing)

    def _set_renewed(self, held: Any) -> bool:
        """A set's renew answered: every name told held, by its new ends."""
        over = held.expires_mono <= self.proc.clock.monotonic()
        for lease in held.leases:
            key = (lease.lock_id, None)
            self.checker.told_held(
                self.proc, key, lease.lease_id, lease.fencing_token, "renewed", over=over
            )
        self._believe(held)
        return True

    def _release(self, held: LeaseSet) -> None:
        for lease in held.leases:  # from the moment it asks, it no longer relies on them
            self.checker.drop(lease.lease_id)
        for attempt in range(3):
            try:
                held.release()
            except errors.NotHeld as exc:
                self._told_set_not_held(exc, held, renewing=False)
                return
            except errors.AwsflockError as exc:
                if not exc.maybe_applied or attempt == 2:
                    return
                self.pause(0.5, 15.0)  # as a script does: release again a little later
                continue
            for lease in held.leases:
                self.checker.told_released(self.proc, (lease.lock_id, None), lease.lease_id)
            return


def _named(exc: errors.NotHeld, held: LeaseSet) -> Any:
    """The member lease a set's NotHeld names (its message names the lock), or None."""
    found = [(exc.message.find(repr(lease.lock_id)), lease) for lease in held.leases]
    found = [(at, lease) for at, lease in found if at >= 0]
    return min(found, key=lambda pair: pair[0])[1] if found else None
