"""Known bugs of sets (``awsflock.sets``), put back on purpose: each breaks a rule the checker
holds a set's steps to (``checker_sets``), and the simulator must find it within its CI budget
with a share of the workers' operations on sets (``SETS_SHARE``)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from awsflock.lock.set_acquisition import SetAcquisition
from awsflock.protocol import Attempt, Outcome
from awsflock.stores.memory import MemoryStore
from awsflock.stores.memory_records import _Record
from awsflock.stores.memory_sets import MemorySets
from awsflock.stores.memory_takes import grant, may_take
from tests.simulation.patching import patched

#: The share of a worker's operations that take sets when these are looked for.
SETS_SHARE = 0.3


def one_at_a_time() -> contextlib.AbstractContextManager[None]:
    """W. A set's take grants its names one at a time, each name's take applied on its own:
    a name found held stops it, and the names taken before it stay held (answered refused)."""

    def take_all(self: MemoryStore, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        outcomes = []
        for name, attempt in takes:
            outcome = self.take(name, attempt)
            if not outcome.applied:
                return tuple(self._outcome(False, n, self._records.get(n), None) for n, _ in takes)
            outcomes.append(outcome)
        return tuple(outcomes)

    return patched((MemorySets, "take_all", take_all))


def one_condition_skipped() -> contextlib.AbstractContextManager[None]:
    """X. A set's take checks every name's condition but its last: a last name held by
    another is taken over (a double grant)."""

    def take_all(self: MemoryStore, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        with self._mutex:
            checked = takes[:-1]
            if not all(
                may_take(
                    self._records.get(n),
                    a,
                    ended_before=a.lease_id in self._done,
                    transactions=True,
                )
                for n, a in checked
            ):
                return tuple(self._outcome(False, n, self._records.get(n), None) for n, _ in takes)
            outcomes = []
            for name, attempt in takes:
                record = self._records.setdefault(name, _Record())
                grant(record, attempt, name, self._fences, transactions=True)
                outcomes.append(self._outcome(True, name, record, None))
            return tuple(outcomes)

    return patched((MemorySets, "take_all", take_all))


def one_member_cleaned_up() -> contextlib.AbstractContextManager[None]:
    """Y. An acquisition of a set settles an attempt whose answer was lost by releasing its
    first name only, and counts it settled: the attempt's other members stay held by a process
    that does not know it."""
    release = SetAcquisition._release

    def first_only(self: SetAcquisition, lease_id: str, slot: int | None) -> bool:
        members = self.members

        def first(set_id: str) -> list[tuple[str, str]]:
            return members(set_id)[:1]

        self.members = first  # type: ignore[method-assign]
        try:
            return release(self, lease_id, slot)
        finally:
            del self.members

    return patched((SetAcquisition, "_release", first_only))


MUTANTS_SETS = {
    "W set taken one name at a time": one_at_a_time,
    "X set take skips its last name's condition": one_condition_skipped,
    "Y set attempt cleaned up by its first name": one_member_cleaned_up,
}
