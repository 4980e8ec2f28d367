"""Several lock names held together under one LEASE_ID: the set's ids, and its store steps.

A set is taken in one atomic step (``SetSteps.take_all``): every name is granted, or none is, so
no caller ever holds part of a set, and two callers naming the same locks in different orders
cannot deadlock (neither holds anything while it waits). Each name keeps its own record, lease
and fencing counter, exactly as a lock taken alone: the set's protocol is the plain lock's, with
the takes made together.

The ids. A set's LEASE_ID (``new_set_id``) is a random UUID of version 8 (RFC 9562's custom
version), so that ``renew`` and ``release`` tell it from a lock's own LEASE_ID (version 4) with
nothing else given; its last 32 bits are a digest of the set's names, so that a renew or
release naming only some of them (or others) is refused before it is sent (``names_fit``).
Each name of the set is held under its own lease id, the member id ``member_id(set_id,
name)``: a version-5 UUID of the name in the set id's namespace. So every
mechanism kept per lease (the done items, bars, audit records, histories) keeps working per
name unchanged, an operator's ``force-release NAME LEASE_ID`` with the id ``status`` shows
ends that name alone, and the holder derives every name's id from the one LEASE_ID it printed.

The steps, one request each where the store can make one:

- ``take_all``: each take's condition is ``LockStore.take``'s, and the step applies only if
  every one holds; then each name is written as ``take`` writes it. Refused, nothing is
  written, and each name's outcome shows its state (a name whose own condition held may show
  none: DynamoDB's cancelled transaction returns only the items that refused).
- ``renew_all``, ``release_all``: each name's renew or release as ``LockStore.renew`` or
  ``release`` would make it on its own, sent together; each outcome says whether its own was
  applied. Nothing is gained by making them all or nothing: a set that lost one name is lost
  (its holder stops), and ending the other names early is what its release does anyway.

Plain locks only: a pool's slot is not part of a set, and a fair waiter (``--fair``) takes one
name at a time; both are refused before any request (``check_names``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Protocol

from awsflock import errors
from awsflock.names import check_lock_id
from awsflock.protocol import Attempt, Outcome
from awsflock.shares import KIND_SET, custom_id, kind_of

#: The most names one set may have: on DynamoDB a set's take is one transaction of three items
#: per name (the lock's item, its fence record, its done item's check), and a transaction
#: holds at most 100. The same on every store, so that a script moves between stores.
MAX_NAMES = 32


def new_set_id(names: Sequence[str] = (), bits: int | None = None) -> str:
    """A fresh LEASE_ID for the set of ``names``: a random UUID of version 8 marked as a set's
    (``awsflock.shares.custom_id``), whose last 32 bits are a digest of the names
    (``names_fit``), leaving 86 random bits (``bits``: 128 random bits to make it of, for a
    simulation's seeded runs; default the system's)."""
    value = uuid.UUID(custom_id(KIND_SET, bits)).int
    if names:
        value = (value & ~0xFFFFFFFF) | _digest(names)
    return str(uuid.UUID(int=value))


def names_fit(set_id: str, names: Sequence[str]) -> bool:
    """Whether ``set_id`` was made for exactly ``names`` (in any order): so that a renew or a
    release naming only some of a set's locks, or others, is refused before it is sent."""
    return uuid.UUID(set_id).int & 0xFFFFFFFF == _digest(names)


def _digest(names: Sequence[str]) -> int:
    text = "\0".join(sorted(set(names))).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:4], "big")


def is_set_id(lease_id: str) -> bool:
    """Whether ``lease_id`` is a set's LEASE_ID (``new_set_id``'s form)."""
    return kind_of(lease_id) == KIND_SET


def member_id(set_id: str, name: str) -> str:
    """The lease id under which ``name`` is held as part of set ``set_id``."""
    return str(uuid.uuid5(uuid.UUID(set_id), name))


def check_names(names: Sequence[str]) -> tuple[str, ...]:
    """The names of a set as given (each checked as a LOCK_ID), or a UsageError naming what
    is wrong: a name given twice, or more than ``MAX_NAMES``."""
    checked = tuple(check_lock_id(name) for name in names)
    if len(set(checked)) != len(checked):
        twice = next(name for name in checked if checked.count(name) > 1)
        raise errors.UsageError(f"the lock {twice!r} is named twice", hint="name each lock once")
    if len(checked) > MAX_NAMES:
        raise errors.UsageError(
            f"{len(checked)} locks named; at most {MAX_NAMES} can be held together",
            hint="split the set, or lock a name that stands for the group",
        )
    return checked


def check_set_attempts(takes: Sequence[tuple[str, Attempt]]) -> None:
    """What a store's ``take_all`` checks before it sends anything: distinct names, plain
    locks, no place in a line, at most ``MAX_NAMES``. A ValueError: the library never sends
    such a step."""
    names = [name for name, _ in takes]
    if not names or len(set(names)) != len(names) or len(names) > MAX_NAMES:
        raise ValueError(f"a set's take needs 1 to {MAX_NAMES} distinct names, got {names!r}")
    for name, attempt in takes:
        if attempt.slot is not None or attempt.slots is not None or attempt.ticket is not None:
            raise ValueError(f"a set's take of {name!r} must be of a plain lock, without a ticket")


def no_sets(where: str) -> errors.ConfigurationError:
    """The error of a set's step on a store that cannot take one: ``where`` has no
    transactions (dynalite), or its kind holds no sets."""
    return errors.ConfigurationError(
        f"{where} cannot take several locks in one step (it has no transactions)",
        hint="take one lock at a time there, or use a store that runs transactions",
    )


class SetSteps(Protocol):
    """The steps of a store that holds sets (its kind's ``sets`` capability)."""

    def take_all(self, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        """Take every ``(lock_id, attempt)`` if each take's condition holds (see
        ``LockStore.take``), in one atomic step; otherwise write nothing. One outcome per take,
        in order, all applied or none."""
        ...

    def renew_all(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        keeper: str | None = None,
    ) -> tuple[Outcome, ...]:
        """``LockStore.renew`` of each ``(lock_id, lease_id)``, sent together; one outcome per
        lease, in order, each applied or not on its own."""
        ...

    def release_all(
        self, leases: Sequence[tuple[str, str]], *, now_ms: int, skew_ms: int
    ) -> tuple[Outcome, ...]:
        """``LockStore.release`` of each ``(lock_id, lease_id)``, sent together; one outcome
        per lease, in order, each applied or not on its own (a lease id an end finds nothing
        under is barred as a release bars it)."""
        ...


class AsyncSetSteps(Protocol):
    """``SetSteps`` as ``awsflock.aio`` awaits them."""

    async def take_all(self, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]: ...

    async def renew_all(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        keeper: str | None = None,
    ) -> tuple[Outcome, ...]: ...

    async def release_all(
        self, leases: Sequence[tuple[str, str]], *, now_ms: int, skew_ms: int
    ) -> tuple[Outcome, ...]: ...
