"""Known bugs of ``previous`` (how the lease before a grant ended), put back on purpose: each
breaks the rule ``checker_previous`` holds grants to, and the simulator must find it within its
CI budget (tests/test_simulation_mutants.py)."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any

from awsflock.records import EXPIRED, RELEASED, Previous
from awsflock.stores import memory, memory_shares, memory_takes
from tests.simulation.patching import patched


def reclaim_said_released() -> contextlib.AbstractContextManager[None]:
    """R. A grant that reclaimed a lease that ran out says it was released."""
    real = memory_takes.previous

    def said_released(*args: Any) -> Previous:
        said = real(*args)
        return dataclasses.replace(said, how=RELEASED) if said.how == EXPIRED else said

    return patched((memory_takes, "previous", said_released))


def last_lease_not_kept() -> contextlib.AbstractContextManager[None]:
    """R1. The fence record keeps no last lease: after the record's deletion (TTL, awsflock
    0.2.0's release), the next grant says it is the first."""

    def forgets(*args: Any, **kw: Any) -> None:
        kw["lasts"] = None
        grant(*args, **kw)

    grant = memory_takes.grant
    return patched((memory, "grant", forgets))


def end_not_kept() -> contextlib.AbstractContextManager[None]:
    """R2. A release or force-release does not mark the fence record's last lease: after the
    record's deletion, a released lease is said to have run out."""
    return patched((memory.MemoryStore, "_end_last", lambda *args: None))


def share_lapse_not_kept() -> contextlib.AbstractContextManager[None]:
    """R3. A group of shared holders does not keep the share that ran out (dropped by a join,
    or left when the group ended): the group is said released once its last share is."""
    return patched((memory_shares, "_lapse", lambda *args: None))


MUTANTS_PREVIOUS = {
    "R a reclaim said released": reclaim_said_released,
    "R1 the last lease not kept beside the token": last_lease_not_kept,
    "R2 an end not kept beside the token": end_not_kept,
    "R3 a share that ran out not kept by its group": share_lapse_not_kept,
}

#: The mutants of ``previous`` for shared holders: looked for with a share of shares.
SHARES_PREVIOUS = {"R3 a share that ran out not kept by its group"}
