"""Known bugs of lock-delay and max-hold, put back on purpose: each breaks the rule the checker
holds takes (``Checker._check_delay``) or takes and renewals (``Checker._check_cap``) to, and
the simulator must find it within its CI budget (tests/test_simulation_mutants.py)."""

from __future__ import annotations

import contextlib
from typing import Any

from awsflock.records import ENDED_RELEASED
from awsflock.stores import memory_records
from tests.simulation.patching import patched

#: The share of plain and pool takes with a lock-delay (a max-hold) when a mutant of it is
#: looked for.
DELAYS_SHARE = 0.5
CAPS_SHARE = 0.5


def delay_left_out_of_a_force() -> contextlib.AbstractContextManager[None]:
    """D1. A forced lease is free at once, its holder's lock-delay left out (a force's
    variant of the condition forgotten)."""
    real = memory_records._Lease.free

    def free(self: memory_records._Lease, cutoff_ms: int, *, legacy_too: bool) -> bool:
        if self.ended and self.ended != ENDED_RELEASED:
            return True
        return real(self, cutoff_ms, legacy_too=legacy_too)

    return patched((memory_records._Lease, "free", free))


def ttl_before_the_delay() -> contextlib.AbstractContextManager[None]:
    """D2. TTL may delete the record at the lease's end plus the skew, inside its lock-delay:
    the next take finds nothing to wait for (``expiration_time`` without ``delay_s``)."""
    from awsflock.stores import memory_takes

    real = memory_takes.grant

    def grant(record: Any, attempt: Any, *args: Any, **kw: Any) -> None:
        real(record, attempt, *args, **kw)
        lease = record.top if attempt.slot is None else record.pool.get(attempt.slot)
        if lease is not None and lease.expires_s is not None and attempt.slot is None:
            end = (attempt.now_ms + attempt.lease_ms + attempt.skew_ms) // 1000 + 1
            lease.expires_s = record.ttl(end)

    from awsflock.stores import memory

    return patched((memory, "grant", grant))


MUTANTS_DELAY = {
    "D1 the lock-delay left out of a force": delay_left_out_of_a_force,
    "D2 TTL inside the lock-delay": ttl_before_the_delay,
}


def renewal_past_the_cap() -> contextlib.AbstractContextManager[None]:
    """C1. A renewal ignores the hold's cap: keep-alive extends a capped lease for good."""
    real = memory_records._Lease.__init__

    def init(self: memory_records._Lease, *args: Any, **kw: Any) -> None:
        real(self, *args, **kw)
        if self.cap_ms is not None:  # the take's own end respects it; renewals forget it
            object.__setattr__(self, "cap_ms", None)

    return patched((memory_records._Lease, "__init__", init))


MUTANTS_CAPS = {
    "C1 a renewal past the cap": renewal_past_the_cap,
}


#: The share of plain takes that read and write the lock's state when a mutant of it is looked
#: for.
STATES_SHARE = 0.5


def state_by_lease_id_alone() -> contextlib.AbstractContextManager[None]:
    """S1. A state write is conditioned on the LEASE_ID alone: a holder whose lease was
    released, force-released or ran out (not yet taken over) still writes the state, though its
    renewal is refused."""
    from awsflock.state import LockState
    from awsflock.stores.memory import MemoryStore

    real = MemoryStore.renew

    def renew(self: MemoryStore, lock_id: str, lease_id: str, **kw: Any) -> Any:
        state = kw.get("state")
        if state is not None:
            with self._mutex:
                record = self._records.get(lock_id)
                if record is not None and record.top.lease == lease_id:
                    self._states[lock_id] = LockState(state.data, lease_id, state.stamp_ms)
        return real(self, lock_id, lease_id, **kw)

    return patched((MemoryStore, "renew", renew))


MUTANTS_STATES = {
    "S1 a state write conditioned on the lease id alone": state_by_lease_id_alone,
}
