"""Known bugs of shared holders (``awsflock.shares``), put back on purpose: each breaks a rule
the checker holds shares to (``checker_shares``), and the simulator must find it within its CI
budget with a share of the workers' operations on shares (``SHARES_SHARE``)."""

from __future__ import annotations

import contextlib
from typing import Any

from awsflock.protocol import Attempt
from awsflock.stores import memory, memory_shares
from awsflock.stores.memory_records import _Lease, _Record
from tests.simulation.patching import patched

#: The share of a worker's operations that take shares when these are looked for.
SHARES_SHARE = 0.4


def group_end_not_raised() -> contextlib.AbstractContextManager[None]:
    """Z. A share that joins a group, or renews, does not raise the group's end: the group ends
    with its first share, and an exclusive take is granted beside a later share still live."""
    grant = memory_shares.grant_share

    def keep_end(record: _Record, attempt: Attempt, *args: Any, **kw: Any) -> None:
        joins = record.shared and bool(record.top.lease)
        end = record.top.expires_ms, record.top.expires_s
        grant(record, attempt, *args, **kw)
        if joins and end[0] is not None:
            record.top.expires_ms, record.top.expires_s = end

    def raise_nothing(record: _Record, share: _Lease, skew_ms: int) -> None:
        pass

    return patched((memory, "grant_share", keep_end), (memory, "raise_group", raise_nothing))


def share_token_reused() -> contextlib.AbstractContextManager[None]:
    """Z1. A share that joins a group is given the group's latest token, not one above it."""
    grant = memory_shares.grant_share

    def same_token(record: _Record, attempt: Attempt, *args: Any, **kw: Any) -> None:
        joins = record.shared and bool(record.top.lease) and not record.top.ended
        latest = record.top.fence
        grant(record, attempt, *args, **kw)
        if joins and latest is not None:
            record.shares[attempt.lease_id].fence = latest
            record.top.fence = latest

    return patched((memory, "grant_share", same_token))


def group_ends_with_any_share() -> contextlib.AbstractContextManager[None]:
    """Z2. A share's release ends its group whatever other shares are live: an exclusive take is
    granted beside them."""
    end = memory_shares.MemoryShares._end_share

    def ends_group(self: Any, lock_id: str, record: _Record, *args: Any) -> Any:
        for other in record.shares.values():
            other.expires_ms = 0  # every other share counted as run out
        return end(self, lock_id, record, *args)

    return patched((memory_shares.MemoryShares, "_end_share", ends_group))


MUTANTS_SHARES = {
    "Z group end not raised by a later share": group_end_not_raised,
    "Z1 a joining share reuses the latest token": share_token_reused,
    "Z2 any share's release ends its group": group_ends_with_any_share,
}
