"""The checker's view of sets (``awsflock.sets``): several names taken, renewed or released in
one step of the store (``take_all``, ``renew_all``, ``release_all``).

A set's step is fanned out to the per-name checks (``Checker.applied`` of a ``take``, ``renew``
or ``release`` of each name whose own step the store applied): tokens strictly up per name
across single and set grants, never two holders per name, each take's condition kept (the
name free by the taker's clock, its member id never granted there, the line of fair waiters
not jumped), truthful answers. Besides, a set's own invariant:

- **No partial hold ever visible**: a set's take is all or none. Its answer grants every name
  or none; once the store applied it, every name holds its member lease (``member_id`` of the
  set id); once the store refused it, none of its names holds a member of that set id, unless
  an earlier try of the same take was applied (its answer lost: the refusal is of the retry).
  A member later force-released or expired alone is no violation: only the state right after
  the step is judged.

The layers beneath each store show a set's step as a tuple of outcomes, one per name of the
step in order (``None``: a name this request did not write, as DynamoDB's one-name fallback of a
refused renew or release writes one name at a time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awsflock.protocol import Outcome

if TYPE_CHECKING:
    from tests.simulation.checker import Checker

#: A set's steps, and the one-name step each fans out to.
SET_STEPS = {"take_all": "take", "renew_all": "renew", "release_all": "release"}


class SetChecks:
    """What the checker keeps of sets: each member id's set id, and the set ids taken."""

    def __init__(self, checker: Checker) -> None:
        self.checker = checker
        #: A member's lease id -> its set's LEASE_ID (every member a take of a set sent).
        self.set_of: dict[str, str] = {}
        #: Set ids whose take the store applied (a refusal after one is its retry's).
        self.taken: set[str] = set()
        #: Set ids issued whose take the store has not yet been seen applying.
        self.pending: list[str] = []
        #: Set takes applied and refused (the invariant's reach).
        self.grants = 0
        self.refusals = 0

    def issued(self, set_id: str) -> str:
        """A fresh set id, as ``awsflock.sets.new_set_id`` made it (the run's ids are seeded)."""
        self.pending.append(set_id)
        return set_id

    def before(self, operation: str, args: tuple[Any, ...]) -> dict[str, Any]:
        if operation == "take_all":
            self._learn(args[0])
        return {name: self.checker.inner.read(name) for name, _ in args[0]}

    def _learn(self, takes: list[tuple[str, Any]]) -> None:
        """Which issued set id the take's members are of (a member id names no set)."""
        from awsflock.sets import member_id

        first, attempt = takes[0]
        if attempt.lease_id in self.set_of:
            return
        for set_id in reversed(self.pending):
            if member_id(set_id, first) == attempt.lease_id:
                self.pending.remove(set_id)
                for name, _ in takes:
                    self.set_of[member_id(set_id, name)] = set_id
                return

    def applied(
        self,
        operation: str,
        args: tuple[Any, ...],
        result: Any,
        before: dict[str, Any],
        made: float,
    ) -> None:
        pairs: list[tuple[str, Any]] = list(args[0])
        outcomes: tuple[Outcome | None, ...] = tuple(result)
        if len(outcomes) != len(pairs):
            self.checker.fail(f"{operation} of {len(pairs)} names answered {len(outcomes)}")
        if operation == "take_all":
            self._take_all(pairs, outcomes, before, made)
            return
        kw = dict(args[1]) if len(args) > 1 else {}
        single = SET_STEPS[operation]
        for (name, lease_id), outcome in zip(pairs, outcomes):
            if outcome is None:
                continue
            self.checker.applied(
                single, (name, lease_id, {**kw, "slot": None}), outcome, before[name], made
            )

    def _take_all(
        self,
        takes: list[tuple[str, Any]],
        outcomes: tuple[Outcome | None, ...],
        before: dict[str, Any],
        made: float,
    ) -> None:
        from awsflock.sets import is_set_id

        checker = self.checker
        members = [attempt.lease_id for _, attempt in takes]
        set_id = self.set_of.get(members[0], "")
        names = [name for name, _ in takes]
        shown = [o for o in outcomes if o is not None]
        granted = [o.applied for o in shown]
        who = f"take of the set {set_id[:8]} ({', '.join(names)})"
        if any(granted) and not all(granted):
            held = [n for (n, _), o in zip(takes, outcomes) if o is not None and o.applied]
            checker.fail(f"{who} answered a partial grant: {', '.join(held)} alone")
        if not set_id or not is_set_id(set_id):
            checker.fail(f"{who}: a take of names together under no set's LEASE_ID")
        applied = bool(shown) and all(granted)
        for (name, attempt), outcome in zip(takes, outcomes):
            if applied and outcome is not None:
                checker.applied("take", (name, attempt), outcome, before[name], made)
            elif applied:
                checker.previous.lost(name)
        # The state right after the step: every member held, or none (unless a try of this
        # same take was applied before: then this refusal is of its retry).
        after = {name: checker._current((name, None)) for name in names}
        mine = {
            name
            for (name, attempt) in takes
            if (record := after[name]) is not None
            and record.lease_id == attempt.lease_id
            and not record.released
        }
        if applied:
            self.grants += 1
            self.taken.add(set_id)
            if len(mine) != len(names):
                missing = ", ".join(n for n in names if n not in mine)
                checker.fail(f"{who} applied, but {missing} does not hold its member lease")
        else:
            self.refusals += 1
            if mine and set_id not in self.taken:
                checker.fail(
                    f"{who} refused, but {', '.join(sorted(mine))} holds its member lease: "
                    "part of a set held"
                )
