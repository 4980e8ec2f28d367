"""The renewal policy: how often a held lease is renewed, how long before its end a lease
with no successful renewal counts as lost, and how much of that time ``awsflock run`` may give
its command to stop. The heartbeat (``hold()``), ``run``, ``acquire --keep-alive`` and the help
texts all read it here, so a different rule changes this one place."""

from __future__ import annotations

import math
from dataclasses import dataclass

from awsflock import errors
from awsflock.durations import format_seconds


@dataclass(frozen=True)
class RenewalPolicy:
    """Renew every ``1/per_lease`` of the lease; declare a lease lost ``margin`` before its
    end (at least ``min_margin``, ``lease * margin_share``); ``run``'s command gets TERM then
    and KILL ``kill_after`` later, dead ``guard`` before the end."""

    per_lease: int = 3
    #: Said in help texts: how often, in words.
    said: str = "every third of it"
    min_margin: float = 1.0
    margin_share: float = 1 / 6
    #: ``run --kill-after`` by default: 10 s, or a fifth of a lease shorter than 50 s.
    kill_after: float = 10.0
    kill_after_share: float = 1 / 5
    #: The command is dead this long before its lease ends: 1 s, or a tenth of a short lease.
    guard: float = 1.0
    guard_share: float = 1 / 10

    def interval(self, lease: float) -> float:
        """How long between renewals of a ``lease``-second lease."""
        return lease / self.per_lease

    def margin(self, lease: float) -> float:
        """How long before expiry a lease with no successful renewal counts as lost."""
        return max(self.min_margin, lease * self.margin_share)

    def check(self, lease: float, margin: float, interval: float) -> None:
        """A UsageError unless a loss declared ``margin`` before the end leaves time to renew
        every ``interval``."""
        if margin >= lease - interval:
            raise errors.UsageError(
                f"safety margin {format_seconds(margin)} leaves no time to renew a "
                f"{format_seconds(lease)} lease every {format_seconds(interval)}",
                hint="use a longer lease or a shorter margin",
            )

    def kill_guard(self, lease: float) -> float:
        return min(self.guard, lease * self.guard_share)

    def default_kill_after(self, lease: float) -> float:
        return min(self.kill_after, lease * self.kill_after_share)

    def kill_timing(
        self, lease: float, kill_after: float | None = None, capped: bool = False
    ) -> tuple[float, float]:
        """(kill_after, safety margin) for ``run``; None picks the default kill-after.
        ``lease``: how long a grant runs (``capped``: its --max-hold, shorter than the lease).

        Loss is declared ``margin`` = kill_after + guard before expiry: TERM then, KILL
        kill_after later, so the command is dead ``guard`` before its lease ends, and the skew
        window more before another host may take the lock. The margin must leave time for a
        renewal (``interval``); the default always fits, an explicit value that does not is
        refused."""
        guard = self.kill_guard(lease)
        if kill_after is None:
            kill_after = self.default_kill_after(lease)
        if kill_after < 0:
            raise errors.UsageError(
                f"--kill-after must not be negative, got {format_seconds(kill_after)}",
                hint="give e.g. '5s', or 0 to KILL right after TERM",
            )
        limit = lease - self.interval(lease) - guard
        if kill_after >= limit:
            step = 1.0 if limit > 10 else 0.1  # what format_seconds shows, rounded down
            longest = max(0.0, math.floor(limit / step - 1e-6) * step)
            what, flag = ("max-hold", "--max-hold") if capped else ("lease", "--lease-duration")
            raise errors.UsageError(
                f"--kill-after {format_seconds(kill_after)} is too long for a "
                f"{format_seconds(lease)} {what}",
                hint=f"use at most {format_seconds(longest)} (or leave it out), or a longer "
                f"{flag}, so the command is dead before another host can take the lock",
            )
        return kill_after, kill_after + guard

    def run_timing(
        self, lease: float, max_hold: float | None, kill_after: float | None
    ) -> tuple[float, float]:
        """``kill_timing`` for ``run``, timed from how long a grant runs: its lease, or its
        --max-hold where that is shorter (so the command is dead before the cap ends it)."""
        if max_hold is not None and max_hold < lease:
            return self.kill_timing(max_hold, kill_after, capped=True)
        return self.kill_timing(lease, kill_after)

    def shortest_lease(self) -> float:
        """The shortest lease whose default margin leaves time to renew it (with room to
        spare: twice the bound)."""
        return round(2 * self.min_margin * self.per_lease / (self.per_lease - 1), 3)


#: The policy every holder uses.
POLICY = RenewalPolicy()
