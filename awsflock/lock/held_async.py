"""A lease the caller holds (``Lease``): what an acquire returns, renewed and released through
its ``LockTable``."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from awsflock import errors
from awsflock.clock_async import AsyncClock
from awsflock.lock.finishing import finish  # async only
from awsflock.records import LockRecord, Previous
from awsflock.state import json_fields
from awsflock.text import iso_utc

log = logging.getLogger("awsflock.lease")


class Table(Protocol):
    """What a lease needs of its ``LockTable`` (``awsflock.lock.lease``)."""

    clock: AsyncClock

    async def renew(self, held: Lease, *, lease: float | str | None = None) -> Lease: ...

    async def release(self, held: Lease) -> None: ...

    async def save_state(self, held: Lease, data: bytes) -> Lease: ...


@dataclass(repr=False)
class Lease:
    """A lease we hold (or held) on one lock. ``fencing_token`` only ever goes up per lock.

    Its repr names the lock, token and expiry but not the lease id, which is the secret that
    renews and releases it (a repr ends up in logs and tracebacks)."""

    table: Table
    lock_id: str
    lease_id: str
    fencing_token: int | None
    expires_at: float
    lease_duration: float
    owner: str
    acquired_at: float
    waited: float = 0.0
    reclaimed: LockRecord | None = field(default=None, repr=False)
    #: How the lease before this one ended (None where the store does not say).
    previous: Previous | None = field(default=None, repr=False)
    released: bool = False
    #: The pool slot this lease holds (None for a plain lock).
    slot: int | None = None
    #: ``expires_at`` on the table clock's monotonic time, taken when the store answered: what
    #: the holder's own deadlines go by, so that a step of its wall clock (an NTP step, a
    #: restored VM) cannot stretch its lease (0: not known).
    expires_mono: float = 0.0
    #: What turned the record's times into monotonic time for ``expires_mono`` (see
    #: ``of_record``).
    to_mono: float = 0.0
    #: The hold's cap (``max_hold=``; None: none): no renewal moves ``expires_at`` past it.
    capped_at: float | None = None
    #: The lock's state as read at the grant and written since (``state``), whether it was
    #: read, and the stamp of this holder's last write of it (``awsflock.state``).
    _state: bytes | None = field(default=None, repr=False)
    state_read: bool = field(default=False, repr=False)
    state_stamp: int = field(default=0, repr=False)

    @property
    def state(self) -> bytes | None:
        """The lock's state (None: never written), as read at the grant (``state=True``) and
        written by this holder since (``save_state``)."""
        if not self.state_read:
            raise errors.UsageError(
                f"the state of {self.lock_id!r} was not read",
                hint="acquire with state=True to read it at the grant",
            )
        return self._state

    def kept_state(self, data: bytes | None) -> None:
        """The lock's state is ``data`` now: read at the grant, or written by this holder."""
        self._state, self.state_read = data, True

    async def save_state(self, data: bytes) -> Lease:
        """Write ``data`` (bytes, at most 4 KiB) as the lock's state, in one renewal of this
        lease: read by every later holder. Raises NotHeld if the lease is not held any more
        (the state is then not written), StateRefused if a later write of it is stored."""
        return await self.table.save_state(self, data)

    @property
    def capped(self) -> bool:
        """Whether the lease now ends at its cap: no renewal extends it."""
        return self.capped_at is not None and self.expires_at >= self.capped_at

    @classmethod
    def of_record(
        cls,
        table: Table,
        record: LockRecord,
        lock_id: str,
        lease_id: str,
        to_mono: float | None,
        **extra: Any,
    ) -> Lease:
        """A Lease as the record (just written) describes it. ``to_mono`` turns the record's
        times into the table clock's monotonic time: the pair of clock readings the lease's
        times were written from (the caller's ``now_ms``, or the store's when it sent), so that
        a step of the wall clock while the request was on its way cannot stretch the lease."""
        mono, wall = table.clock.monotonic(), table.clock.time()
        if to_mono is None:
            to_mono = mono - wall
        return cls(
            table=table,
            lock_id=lock_id,
            lease_id=lease_id,
            fencing_token=record.fencing_token,
            expires_at=record.expires_at,
            lease_duration=record.lease_duration,
            owner=record.owner,
            acquired_at=record.acquired_at or wall,
            expires_mono=record.expires_at + to_mono,
            to_mono=to_mono,
            capped_at=record.capped_at,
            **{"previous": record.previous, **extra},
        )

    def renewed_by(self, fresh: Lease, *, wall_clock_ends: bool) -> None:
        """Take on the end and length of ``fresh``, this lease as a renewal just wrote it.
        ``wall_clock_ends``: the store writes ends from this host's wall clock."""
        to_mono = fresh.to_mono
        if wall_clock_ends and self.to_mono:
            # A step of the wall clock back since the lease began makes others see the renewed
            # end earlier by the step: never count on the end as this host's stepped clock
            # wrote it (found by an adversarial review).
            to_mono = min(to_mono, self.to_mono)
        self.to_mono = to_mono
        self.expires_at = fresh.expires_at
        self.expires_mono = fresh.expires_at + to_mono
        self.lease_duration = fresh.lease_duration
        if fresh.capped_at is not None:  # a renewer that adopted the lease learns its cap
            self.capped_at = fresh.capped_at

    async def renew(self, lease: float | str | None = None) -> Lease:
        """Extend the lease by ``lease`` (default: its current duration) from now."""
        return await self.table.renew(self, lease=lease)

    async def release(self) -> None:
        """End the lease. Raises NotHeld if it was lost in the meantime."""
        await self.table.release(self)

    def __repr__(self) -> str:
        slot = "" if self.slot is None else f", slot={self.slot}"
        state = ", released" if self.released else ""
        return (
            f"Lease(lock_id={self.lock_id!r}{slot}, fencing_token={self.fencing_token}, "
            f"owner={self.owner!r}, expires_at={iso_utc(self.expires_at)}, "
            f"lease_id=<redacted>{state})"
        )

    def remaining(self) -> float:
        return self.expires_at - self.table.clock.time()

    def as_dict(self) -> dict[str, Any]:
        """The public fields, as ``acquire --json`` prints them (lease id included)."""
        return {
            "lock_id": self.lock_id,
            "lease_id": self.lease_id,
            "fencing_token": self.fencing_token,
            "owner": self.owner,
            "acquired_at": round(self.acquired_at, 3),
            "expires_at": round(self.expires_at, 3),
            "lease_duration": self.lease_duration,
            **({} if self.slot is None else {"slot": self.slot}),
            **({} if self.previous is None else {"previous": self.previous.as_dict()}),
            **({} if self.capped_at is None else {"capped_at": round(self.capped_at, 3)}),
            **(json_fields(self._state) if self.state_read else {}),
        }

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await release_on_exit(self, exc[0])


async def release_on_exit(held: Lease | Any, raised: object) -> None:
    """A ``with`` block of ``held`` (a ``Lease`` or a ``LeaseSet``) is over: release it. Never
    swallow the caller's exception (``raised``): a failed release is then logged, not raised
    over it."""
    # A release after a cancellation is not cut short by another.  # async only
    if held.released:
        return
    try:
        await finish(held.release)  # sync: held.release()
    except errors.AwsflockError as err:
        if raised is None:
            raise
        log.warning("release of %r failed: %s", held.lock_id, err.one_line())
