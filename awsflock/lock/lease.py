"""The library's entry point: ``LockTable`` (acquire, renew, release, lock, read) and ``Lease``.

It speaks to any ``LockStore`` (``awsflock.protocol``). Its steps are ``awsflock.lock.table``'s
(made from its asynchronous source, as ``awsflock.aio``'s are); this module adds what only the
synchronous API has: building the DynamoDB store from its settings, holding with a heartbeat
thread (``awsflock.lock.heartbeat``), listing, and creating the table. One acquire attempt and
its clean-up live in ``awsflock.lock.acquisition``, the wait loop around them in
``awsflock.lock.waiting``; what a refused renew or release means is ``awsflock.lock.verdict``'s
to say; ``Lease`` is in ``awsflock.lock.held``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from awsflock import errors
from awsflock.clock import Clock, SystemClock
from awsflock.lock import table
from awsflock.lock.grants import new_lease_id
from awsflock.lock.heartbeat import Hold, LostCallback
from awsflock.lock.held import Lease
from awsflock.lock.table import DEFAULT_LEASE, DEFAULT_SKEW, DEFAULT_WAIT, WAIT_FOREVER
from awsflock.protocol import DEFAULT_REQUEST_TIMEOUT, LockStore
from awsflock.records import Identity, LockRecord, Pool
from awsflock.stores import kinds

#: A botocore DynamoDB client (``LockTable(client=...)``), typed loosely here: the lock logic
#: does not import a backend, not even for a type.
DynamoDBClient = Any

__all__ = [
    "DEFAULT_LEASE",
    "DEFAULT_SKEW",
    "DEFAULT_WAIT",
    "WAIT_FOREVER",
    "Lease",
    "LockTable",
    "new_lease_id",
]


class LockTable(table.LockTable):
    """Locks in one store. ``LockTable(store=...)`` runs on any ``LockStore``;
    ``LockTable("name", region=..., endpoint_url=...)`` (or ``LockTable.dynamodb(...)``) builds
    the DynamoDB store. Cheap to make: no AWS client until the first request.

    The clock, the random source and the identity written into records are injectable, so
    tests of waiting and expiry need no sleeping. A store and its table share one clock: given
    a store, the table uses the store's clock unless ``clock`` is passed too.
    """

    def __init__(
        self,
        table_name: str = "awsflock",
        *,
        store: LockStore | None = None,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        skew: float | str = DEFAULT_SKEW,
        owner: str | None = None,
        identity: Identity | None = None,
        request_timeout: float | None = None,
    ) -> None:
        clock = clock or (store.clock if store is not None else SystemClock())
        store = kinds.for_table(
            store,
            table_name,
            request_timeout,
            {"region": region, "profile": profile, "endpoint_url": endpoint_url},
            clock=clock,
            client=client,
        )
        super().__init__(
            store=store, clock=clock, rng=rng, skew=skew, owner=owner, identity=identity
        )

    @classmethod
    def dynamodb(
        cls,
        table_name: str = "awsflock",
        *,
        client: DynamoDBClient | None = None,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        **options: Any,
    ) -> LockTable:
        """A table on the DynamoDB store (what ``LockTable(table_name, ...)`` does)."""
        return cls(
            table_name,
            client=client,
            region=region,
            profile=profile,
            endpoint_url=endpoint_url,
            request_timeout=request_timeout,
            **options,
        )

    # -- acquire ---------------------------------------------------------------------------

    def lock(
        self,
        lock_id: str | Sequence[str],
        *,
        lease: float | str = 60.0,
        wait: float | str | None = DEFAULT_WAIT,
        renew_every: float | None = None,
        margin: float | None = None,
        on_lost: LostCallback | None = None,
        identity: Identity | None = None,
        slots: int | None = None,
        cancel: threading.Event | None = None,
        fair: bool = False,
        shared: bool = False,
        lock_delay: float | str = 0,
        max_hold: float | str | None = None,
        state: bool = False,
    ) -> Hold:
        """The lock held while you work, renewed in the background (every lease/3).

        ``with table.lock("x", lease="60s", wait="5m") as held: ... held.check()``: acquires on
        entry (waiting up to ``wait``), releases on exit, after the body, and raises LeaseLost
        on exit if the lease was lost. ``held.lost`` is set, and ``on_lost(held, error)``
        called, once a renewal is refused or none succeeded by the lease's end less
        ``margin``, or the hold reaches ``max_hold`` (then ``HoldCapped``, a LeaseLost).
        ``state=True``: read the lock's state at the grant (``held.state``); write it with
        ``held.save_state(data)``, in one renewal (``awsflock.state``).
        Asking again for a lock this thread holds so raises UsageError at once.
        """
        return Hold(
            self,
            lock_id,
            lease=lease,
            wait=wait,
            renew_every=renew_every,
            margin=margin,
            on_lost=on_lost,
            identity=identity,
            slots=slots,
            cancel=cancel,
            fair=fair,
            shared=shared,
            lock_delay=lock_delay,
            max_hold=max_hold,
            state=state,
        )

    def hold(self, lock_id: str | Sequence[str], **options: Any) -> Hold:
        """``lock()``'s earlier name, kept for the code that calls it."""
        return self.lock(lock_id, **options)

    # -- reading and administration ----------------------------------------------------------

    def close(self) -> None:
        """Close the store's connections (a later call opens new ones). Release the locks you
        hold first: a lock still held stays held, and its renewals connect again."""
        close = getattr(self.store, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> LockTable:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def locks(self, prefix: str = "") -> Iterator[LockRecord | Pool]:
        """Every lock and pool whose name starts with ``prefix``, streamed in the store's order."""
        return self.store.locks(prefix)

    def create(self, *, progress: Callable[[str], None] | None = None, **options: Any) -> bool:
        """Make the store ready (``table-create``); True if created now. ``options`` are the
        store's own (the DynamoDB store's ``billing_mode`` and ``capacity``)."""
        import inspect

        known = inspect.signature(self.store.create).parameters
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise errors.UsageError(
                f"{self.store.where()} has no {', '.join(unknown)} to set",
                hint="drop those options for this store",
            )
        return self.store.create(progress=progress or (lambda _message: None), **options)
