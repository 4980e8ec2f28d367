"""One acquisition of a share of a lock (``awsflock.shares``), attempt by attempt: an
``Acquisition`` whose attempts send share ids, find their grant among the lock's shares, and
count the lock free while a share could join it. It never claims the lock: a claim is what a
waiting exclusive acquire makes to keep shares out."""

from __future__ import annotations

import dataclasses
from typing import Any

from awsflock import errors, shares
from awsflock.lock.acquisition_async import Acquisition
from awsflock.lock.grants import Grant
from awsflock.lock.terms import NO_TERMS, Terms
from awsflock.protocol import Outcome
from awsflock.protocol_async import AsyncLockStore
from awsflock.stores import kinds


def check_shared(store: Any, slots: int | None, fair: bool, terms: Terms = NO_TERMS) -> None:
    """Refuse a shared acquire the store cannot hold, or with what a share does not take: a
    pool's slots, a place in the line of fair waiters, a lock-delay or a max-hold (shares are
    the readers: ``Terms.check_shared``)."""
    if not kinds.of(store).shares:
        raise errors.ConfigurationError(
            f"{store.where()} does not hold shared locks yet",
            hint="take the lock without --shared (shared=) there",
        )
    if (slots or 1) != 1 or fair:
        raise errors.UsageError(
            "a shared lock is a plain lock, served as it comes",
            hint="drop --slots/--fair (slots=/fair=), or take the lock without --shared",
        )
    terms.check_shared()


async def share_renewed(
    store: AsyncLockStore, outcome: Outcome, lock_id: str, lease_id: str
) -> Outcome:
    """A renew's ``outcome`` as it is about ``lease_id`` (``shares.about``): a refused share
    that left its group is looked up in what the store remembers of it (its done item)."""
    outcome = shares.about(outcome, lease_id)
    record = outcome.lock
    if outcome.applied or not shares.is_share_id(lease_id) or record is None:
        return outcome
    if record.lease_id == lease_id or outcome.knows(lease_id):
        return outcome
    read = shares.about(await store.read(lock_id, lease_id), lease_id)
    return dataclasses.replace(read, in_doubt=outcome.in_doubt, barred=outcome.barred)


class ShareAcquisition(Acquisition):
    """The attempts of one shared ``acquire`` of a plain lock."""

    def fresh_id(self, slot: int | None) -> str:
        return shares.new_share_id()

    def free(self) -> bool:
        return shares.may_join(self.holder, self.clock.time(), self.skew)

    async def claim(self) -> None:
        """A share keeps no one out."""

    async def _look_plain(self, outcome: Outcome) -> Grant | None:
        record = outcome.lock
        if outcome.pool is None and record is not None and record.shared and not record.released:
            for share in record.shares:
                if share.lease_id in self.sent:
                    view = shares.share_view(record, share.lease_id)
                    assert view is not None
                    return await self._keep_or_give_up(view, share.lease_id, None, outcome.to_mono)
        return await super()._look_plain(outcome)
