"""An acquire interrupted (Ctrl-C: KeyboardInterrupt) between a step that landed and its
answer holds nothing afterwards: a place in line it may have taken is left, and a grant whose
clean-up is interrupted is given back. (The asynchronous twin: tests/test_async_core.py, with
a cancellation at every await point.)"""

from __future__ import annotations

from typing import Any

import pytest

from awsflock import errors
from awsflock.clock import FakeClock
from awsflock.lock.lease import LockTable
from awsflock.stores.memory import MemoryStore


class Interrupting(MemoryStore):
    """Raises KeyboardInterrupt once, right after its ``step`` was applied; ``lose_first``:
    the first take fails as if its answer was lost (not applied)."""

    def __init__(self, step: str, lose_first: bool = False) -> None:
        super().__init__("t", clock=FakeClock())
        self.step = step
        self.lose_first = lose_first

    def _after(self, name: str, answer: Any) -> Any:
        if name == self.step:
            self.step = ""
            raise KeyboardInterrupt
        return answer

    def take(self, lock_id: str, attempt: Any) -> Any:
        if self.lose_first:
            self.lose_first = False
            lost = errors.EndpointUnreachable("no answer")
            lost.maybe_applied = True
            raise lost
        return self._after("take", super().take(lock_id, attempt))

    def join(self, lock_id: str, waiter: Any) -> Any:
        return self._after("join", super().join(lock_id, waiter))

    def release(self, lock_id: str, lease_id: str, **step: Any) -> Any:
        return self._after("release", super().release(lock_id, lease_id, **step))


def test_an_interrupt_after_a_join_landed_leaves_the_line():
    store = Interrupting("join")
    LockTable(store=store, owner="holder").acquire("x", lease=600, wait=0)
    with pytest.raises(KeyboardInterrupt):
        LockTable(store=store, owner="waiter").acquire("x", wait=60, fair=True)
    assert store.read("x").line.waiters == ()


def test_an_interrupt_while_a_grant_is_settled_gives_it_back():
    # The first take's answer is lost; the second is granted; releasing the first (the
    # grant's clean-up) is interrupted: the grant is released too.
    store = Interrupting("release", lose_first=True)
    with pytest.raises(KeyboardInterrupt):
        LockTable(store=store, owner="a").acquire("x", wait=60)
    record = store.read("x").lock
    assert record is not None and record.released
    LockTable(store=store, owner="b").acquire("x", wait=0)
