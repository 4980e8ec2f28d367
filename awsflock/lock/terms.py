"""What a holder records with its lease beyond its length: its lock-delay and its max-hold;
and whether it reads the lock's state at the grant.

One place reads them from the caller (``terms``), refuses what a kind of acquire cannot take,
and turns them into the fields of each ``Attempt``; the layers between (a table's ``acquire``,
its attempts, a set's, a hold's) pass the one ``Terms`` along."""

from __future__ import annotations

from dataclasses import dataclass

from awsflock import errors
from awsflock.durations import delay_seconds, hold_seconds


@dataclass(frozen=True)
class Terms:
    """``delay_s``: the lock-delay after an unreleased end (0: none); ``max_hold_s``: the cap
    on the hold from its grant (None: none)."""

    delay_s: float = 0.0
    max_hold_s: float | None = None
    #: Read the lock's state at the grant (``awsflock.state``): plain locks only.
    state: bool = False

    @property
    def delay_ms(self) -> int:
        """``Attempt.delay_ms``."""
        return round(self.delay_s * 1000)

    @property
    def max_hold_ms(self) -> int:
        """``Attempt.max_hold_ms`` (0: none)."""
        return 0 if self.max_hold_s is None else round(self.max_hold_s * 1000)

    def granted(self, lease_s: float) -> float:
        """How long a grant for ``lease_s`` runs: the lease, or the max-hold if shorter."""
        return lease_s if self.max_hold_s is None else min(lease_s, self.max_hold_s)

    def check_plain(self, what: str) -> None:
        """State is kept with a plain lock only: not with ``what`` (a pool, a set, a share)."""
        if self.state:
            raise errors.UsageError(
                f"state is kept with a plain lock, not with {what}",
                hint="drop --state-file (state=), or keep the state under a plain lock",
            )

    def check_shared(self) -> None:
        """A shared holder takes neither: it is a reader."""
        self.check_plain("a shared holder")
        if self.delay_s:
            raise errors.UsageError(
                "a shared holder takes no lock-delay: it writes nothing a delay would wait for",
                hint="drop --lock-delay (lock_delay=), or take the lock without --shared",
            )
        if self.max_hold_s is not None:
            raise errors.UsageError(
                "a shared holder takes no max-hold",
                hint="drop --max-hold (max_hold=), or take the lock without --shared",
            )


#: No lock-delay, no max-hold: a lease as before either.
NO_TERMS = Terms()


def terms(
    lock_delay: float | str = 0, max_hold: float | str | None = None, state: bool = False
) -> Terms:
    """The terms a caller gives (``lock_delay='15s'``, ``max_hold='2h'``, ``state=True``),
    checked."""
    hold = None if max_hold is None else hold_seconds(max_hold)
    return Terms(delay_seconds(lock_delay), hold, bool(state))
