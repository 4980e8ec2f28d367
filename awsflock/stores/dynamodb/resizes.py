"""The DynamoDB store's pool-resize: one conditional UpdateItem of the pool's item, or a shrink
in steps where its condition would pass the 4 KB DynamoDB takes.

A resize's condition names every slot that goes away (each must be free), so a shrink by many
slots goes in steps from the top (``resize_steps``), each conditional on the size the one
before set. Two attributes of the pool's item keep a resize whole:

- ``resized_by``: the id of the resize that last set the size, a new one per resize. Given the
  pool as the caller read it (``seen``), a resize needs it unchanged: a resize whose request
  lands late, after another one, changes nothing.
- ``resizing_to``: the size a shrink in steps goes to, set by its first step and removed by its
  last. While it is there no slot is taken (``expressions.IS_POOL``), so the sizes in between
  are nobody's, not even a holder's that happens to use one of them. Every later step needs
  ``resized_by`` still its own and the mark there: a step of a shrink that another resize
  replaced, or one that lands after the shrink ended, changes nothing. A later step refused
  for a slot taken before the first step (a holder of the old size, between pool-resize's read
  and the first step) sets the old size back, so a shrink is done whole or not at all. Every
  other resize removes the mark: one stopped part-way (its operator killed) ends by resizing
  again.

A request left unanswered may land after pool-resize has ended. So a first step that failed
in doubt is barred (``resized_by`` changed from what was read, if it still is that), and a
later step that failed sets the old size back; where even that fails, the error keeps its
doubt (``maybe_applied``), and pool-resize says the pool may be left part-way.
"""

from __future__ import annotations

import uuid
from typing import Any

from awsflock import errors
from awsflock.protocol import Outcome, barred_resize
from awsflock.records import ENDED_RELEASED, Pool
from awsflock.stores.dynamodb.expressions import FREE_PLAIN, free_slot, not_delayed
from awsflock.stores.dynamodb.writes import Writes

#: The longest condition expression DynamoDB takes (bytes).
MAX_EXPRESSION = 4096

#: A first (or only) step given the pool as read: no other resize since that read.
UNCHANGED = "#resized_by = :seen"
NEVER_RESIZED = "attribute_not_exists(#resized_by)"
#: A later step, and the step back: the shrink is ours and under way.
STILL_OURS = "#resized_by = :rid AND attribute_exists(#resizing_to)"

#: A pool's item never expires by TTL and gives awsflock 0.2.0 nothing to take (as a pool
#: acquire leaves it).
_CLEAR = "#expiration_time, #lease_id"
ONLY = f"SET #slots = :new, #resized_by = :rid REMOVE {_CLEAR}, #resizing_to"
FIRST = f"SET #slots = :new, #resized_by = :rid, #resizing_to = :to REMOVE {_CLEAR}"
MIDDLE = "SET #slots = :new"
LAST = "SET #slots = :new REMOVE #resizing_to"
#: A first step that may still land is barred: its mark no longer holds.
BAR = "SET #resized_by = :void"


def resize_condition(old: int | None, new: int, mark: str = "") -> str:
    """A pool may be resized while its size is still ``old`` and the slots that go away are
    free; ``mark``: one of the marks above. Sizing a record that is not a pool (``old`` None)
    needs its plain lock free, as a pool acquire does, its lock-delay included. (A slot cut off
    inside its delay keeps its lease's attributes, which a take of it after a grow still
    checks.)"""
    plain = f"attribute_not_exists(#slots) AND {FREE_PLAIN} AND {not_delayed()}"
    parts = [plain if old is None else "#slots = :old"]
    parts += [mark] if mark else []
    parts += [free_slot(f"s{slot}_") for slot in range(new, old or 0)]
    return " AND ".join(parts)


def resize_steps(old: int | None, new: int) -> list[tuple[int | None, int]]:
    """The (from, to) sizes of a resize's steps: one, unless its condition would be longer
    than DynamoDB takes; then shrinks from the top, each as large as fits."""
    steps: list[tuple[int | None, int]] = []
    top = old
    while not steps or (top is not None and top > new):
        low = new
        while top is not None and len(resize_condition(top, low, STILL_OURS)) > MAX_EXPRESSION:
            low += 1
        steps.append((top, low))
        top = low
    return steps


class Resizes(Writes):
    """pool-resize, in one step or several."""

    def resize_pool(
        self,
        lock_id: str,
        old: int | None,
        new: int,
        *,
        now_ms: int,
        skew_ms: int,
        seen: Pool | None = None,
        resize_id: str = "",
    ) -> bool:
        """Set a pool's size, only if it is still ``old`` (and, given ``seen``, nobody resized
        it since that read) and every slot that goes away is free; its mark ``resize_id`` (or
        a new one). True if done."""
        cutoff_ms = now_ms - skew_ms
        values: dict[str, Any] = {
            **{"cutoff_ms": cutoff_ms, "cutoff_s": cutoff_ms // 1000, "zero": 0},
            **{"released_mark": ENDED_RELEASED, "rid": resize_id or uuid.uuid4().hex, "to": new},
            "seen": None if seen is None else seen.resized_by,
        }
        steps = resize_steps(old, new)
        (top, low), last = steps[0], len(steps) == 1
        values.update(old=top, new=low)
        mark = "" if seen is None else first_mark(seen)
        condition = resize_condition(top, low, mark)
        if not self._first_step(lock_id, ONLY if last else FIRST, condition, values, seen, last):
            return False
        try:
            for n, (top, low) in enumerate(steps[1:], 1):
                values.update(old=top, new=low)
                last = n == len(steps) - 1
                condition = resize_condition(top, low, STILL_OURS)
                update = LAST if last else MIDDLE
                outcome = self._conditional_update(
                    "resize", lock_id, update, condition, values, None
                )
                # Refused as applied already: a try of this step whose answer was lost landed.
                if not outcome.applied and not _ours(outcome, values["rid"], low, last):
                    # Refused for a slot taken before the first step: back to the old size.
                    self._step_back(lock_id, values, old)
                    return False
        except errors.StoreError as err:
            # The first step is in, a later one failed (it may yet land): back to the old size,
            # which also bars every step on its way (review 48).
            fate = self._stepped_back(lock_id, values, old, new)
            if fate is True:
                return True  # refused: the last step had landed, the shrink is done
            err.maybe_applied = fate is None  # unknown: the pool may be left part-way
            raise
        return True

    def _step_back(self, lock_id: str, values: dict[str, Any], old: int | None) -> Outcome:
        """A shrink in steps stopped part-way goes back to its old size, if still ours."""
        back = {**values, "new": old}
        return self._conditional_update("resize", lock_id, LAST, STILL_OURS, back, None)

    def _stepped_back(
        self, lock_id: str, values: dict[str, Any], old: int | None, new: int
    ) -> bool | None:
        """``_step_back`` after an error: False if it went back (nothing of the shrink can
        land now); True if it was refused because the shrink had ended (its last step landed
        unanswered); None if the step back failed, or another resize came (review 49: a
        refused step back was taken for one that went back)."""
        try:
            outcome = self._step_back(lock_id, values, old)
        except errors.StoreError:
            return None
        if outcome.applied:
            return False
        return True if _ours(outcome, values["rid"], new, True) else None

    def _first_step(
        self,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        seen: Pool | None,
        last: bool,
    ) -> bool:
        """The first (or only) step: whether it is done. Given ``seen``, one that failed while
        a try of it may still land (unanswered, or refused only on a retry) is barred first:
        ``resized_by`` is changed from what was read, if it still is that, so no copy of the
        step lands later (review 47: one landed 10 s after pool-resize had given up, and
        marked the pool with nobody left to end the shrink). Where the bar fails, or another
        resize came first, the error keeps its doubt (review 48)."""
        try:
            outcome = self._conditional_update("resize", lock_id, update, condition, values, None)
        except errors.StoreError as err:
            if seen is None or not err.maybe_applied:
                raise
            fate = self._bar_step(lock_id, values, seen, last)
            if fate is True:
                return True  # it had landed
            err.maybe_applied = fate is False  # None: barred, it changes nothing now or later
            raise
        if outcome.applied or _ours(outcome, values["rid"], values["new"], last):
            return True
        if seen is None or not outcome.in_doubt:
            return False
        return self._bar_step(lock_id, values, seen, last) is True

    def _bar_step(
        self, lock_id: str, values: dict[str, Any], seen: Pool, last: bool
    ) -> bool | None:
        """Bars the first step (see ``_first_step``): None if barred; True if the step had
        landed; False if another resize changed the pool (the step may have landed before
        it). A bar that fails raises, its doubt kept: the step may still land."""
        bar = {**values, "void": barred_resize(values["rid"])}
        try:
            outcome = self._conditional_update("resize", lock_id, BAR, first_mark(seen), bar, None)
        except errors.StoreError as err:
            err.maybe_applied = True
            raise
        pool = outcome.pool
        if outcome.applied or (pool is not None and pool.resized_by == bar["void"]):
            return None  # barred (a retry whose first try landed unanswered is refused so)
        return _ours(outcome, values["rid"], values["new"], last)


def first_mark(seen: Pool) -> str:
    """The first step's mark: the pool's ``resized_by`` still what the caller read."""
    return NEVER_RESIZED if seen.resized_by is None else UNCHANGED


def _ours(outcome: Outcome, rid: str, size: int, last: bool) -> bool:
    """The refused step's pool shows it done: ours, of its size, marked unless the last."""
    pool = outcome.pool
    return (
        pool is not None
        and pool.resized_by == rid
        and pool.size == size
        and (pool.resizing_to is None) == last
    )
