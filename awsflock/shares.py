"""Shared holders: any number of them on one lock at once, or one exclusive holder.

A lock held shared keeps, in its own record, a *group*: a lease like any other at the top of
the record (its LEASE_ID the group's id, its end the latest end of any share, its token the
latest given), marked shared, and one *share* per holder beside it, each with its own LEASE_ID,
end and fencing token. Everything that protects a plain lease protects the group: an exclusive
take waits until it ended or ran out more than the skew window ago; awsflock 0.2.0 sees a lock
held until the group's end (its ``lease_id`` changes with every write, its ``expiration_time``
covers every share); DynamoDB's TTL deletes nothing a live share needs. So an exclusive holder
is never beside a shared one, by the same condition that keeps two exclusive holders apart.

The steps, each one atomic step of the store on the lock's record:

- a take with a share's id (``new_share_id``) *joins* a live group, or starts a new one where an
  exclusive take would be granted (the lock free, or ended, or run out more than the skew
  window ago): a new group's id is ``group_of(share id)``, and its predecessor goes to the
  history as a take's would. Either way the share's token is one more than the record's latest
  (so an exclusive grant after it is above every share's), and the group's end becomes the
  share's end if that is later. Refused while a writer's claim is live (below), while the
  group has ``MAX_SHARES`` shares, while the line of fair waiters is not clear, or under an id
  granted before.
- a renew or release with a share's id applies to that share as ``LockStore.renew`` and
  ``release`` do to a lease: a renew needs the share live (not run out by the renewer's
  clock) and the group not ended, and raises the group's end if the share's is later; a
  release removes the share, and a group left with no share still live (none, or only shares
  that ran out more than the skew window ago) ends, released, in the same step: an exclusive
  waiter takes the lock at once. A share that dies without a release frees its place when its
  lease ends; the group, whose end it raised, ends when its last share is released or when the
  latest end given runs out.
- ``force-release NAME SHARE_ID`` ends that share (audited as a lease); ``force-release NAME
  GROUP_ID`` (the LEASE_ID ``status`` shows for the lock) ends the group and every share with
  it. A plain renew or release never applies to a group: nobody holds its id.
- ``claim`` (writer preference): an exclusive acquire refused by a live group marks the record
  *claimed* until a time ``CLAIM_MS`` ahead (never past its wait's end), by its own clock,
  renewed while it waits; no share
  is granted while a claim is live. So a stream of shared holders cannot starve a waiting
  exclusive one: the shares held finish, none joins, and the exclusive take is granted when
  the last is released or runs out. The exclusive grant clears the claim. A claim only delays
  shares: it can grant nothing, so a claim of a waiter that died lapses by itself.

What a share's fencing token means: every share is given its own, above every token given on
the lock before it, so an exclusive holder's token is above every share's before it and every
share's is above the exclusive holder's before it. Shares held at the same time have different
tokens, and a resource must not use them to turn shares away from each other: what a share's
token proves is that no exclusive holder came after it was granted.

The ids. A share's LEASE_ID is a random UUID of version 8, marked as a share (``is_share_id``),
so that ``renew``, ``release`` and ``force-release`` route it to the share's step with nothing
else given; a group's id is marked as a group.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import replace
from typing import Protocol

from awsflock import errors
from awsflock.protocol import Outcome
from awsflock.records import LockRecord

#: The most shares one lock may have at once (a share takes up to about 2 KB of DynamoDB's
#: 400 KB item with its holder's details). The same on every store.
MAX_SHARES = 100
#: How long a waiting exclusive acquire's claim keeps shares out, from the poll that made it
#: (three poll periods, as a place in the line of fair waiters lapses).
CLAIM_MS = 3000

#: The kind of a version-8 LEASE_ID, in the four bits after its version: a set's, a share's,
#: or a group's.
KIND_SET, KIND_SHARE, KIND_GROUP = 1, 2, 3


def custom_id(kind: int, bits: int | None = None) -> str:
    """A version-8 UUID of ``kind``, the rest random (``bits``: 128 bits to make it of)."""
    value = int.from_bytes(secrets.token_bytes(16), "big") if bits is None else bits
    value &= ~(0xFF00 << 64)
    value |= (0x8000 | kind << 8) << 64  # version 8, then the kind
    value &= ~(0xC000 << 48)
    value |= 0x8000 << 48  # RFC 9562 variant
    return str(uuid.UUID(int=value))


def kind_of(lease_id: str) -> int | None:
    """The kind of a version-8 LEASE_ID (None: not one)."""
    try:
        value = uuid.UUID(lease_id)
    except ValueError:
        return None
    return (value.int >> 72) & 0xF if value.version == 8 else None


def new_share_id(bits: int | None = None) -> str:
    """A fresh LEASE_ID for a shared holder."""
    return custom_id(KIND_SHARE, bits)


def is_share_id(lease_id: str) -> bool:
    return kind_of(lease_id) == KIND_SHARE


def is_group_id(lease_id: str) -> bool:
    return kind_of(lease_id) == KIND_GROUP


def group_of(share_id: str) -> str:
    """The id of the group a share starts (the same for every try of its take)."""
    digest = hashlib.sha256(b"awsflock group " + share_id.encode()).digest()
    return custom_id(KIND_GROUP, int.from_bytes(digest[:16], "big"))


def key_of(lease_id: str) -> str:
    """A share's id as a key of letters and digits (for a store's field names)."""
    return lease_id.replace("-", "")


def share_view(record: LockRecord | None, lease_id: str) -> LockRecord | None:
    """What ``record`` (a lock's) says of the share ``lease_id``, as a plain lease's record
    would say it of its lease: the share's own record, ended as its group if the group ended,
    with the group's history; the group's record if the share is not in it (ended, or never
    there: its history says how, where it knows)."""
    if record is None:
        return None
    share = next((s for s in record.shares if s.lease_id == lease_id), None)
    if share is None or not record.shared:
        return record
    ended = record.ended
    return replace(
        share,
        ended=ended,
        history=record.history,
        shared=True,
        shares=record.shares,
        line=record.line,
        forced_by=record.forced_by if ended else "",
        forced_reason=record.forced_reason if ended else "",
        forced_at=record.forced_at if ended else None,
    )


def about(outcome: Outcome, lease_id: str) -> Outcome:
    """``outcome`` with its record as ``share_view`` shows it to the holder of ``lease_id``
    (unchanged unless that is a share's id)."""
    if not is_share_id(lease_id) or outcome.lock is None or outcome.pool is not None:
        return outcome
    return replace(outcome, lock=share_view(outcome.lock, lease_id))


def may_join(record: LockRecord | None, now: float, skew: float) -> bool:
    """Whether a share's take at ``now`` could be granted as ``record`` stands: the lock free
    to take, or held by a live group with room and no live claim."""
    if record is None:
        return True
    if record.claimed_until is not None and record.claimed_until > now:
        return False
    if record.is_free(now, skew):
        return True
    return record.shared and not record.released and len(live(record, now, skew)) < MAX_SHARES


def live(record: LockRecord, now: float, skew: float) -> list[LockRecord]:
    """The shares of ``record`` not run out more than ``skew`` before ``now``."""
    return [s for s in record.shares if s.expires_at >= now - skew]


def wants_claim(record: LockRecord | None, now: float, skew: float) -> bool:
    """Whether an exclusive acquire refused as ``record`` stands should claim the lock: held by
    a live group, and no claim live for at least half of ``CLAIM_MS`` more."""
    if record is None or not record.shared or record.is_free(now, skew):
        return False
    return record.claimed_until is None or record.claimed_until < now + CLAIM_MS / 2000


def claim_ms(record: LockRecord | None, now: float, skew: float, left: float | None) -> int:
    """How long (ms) a waiting exclusive acquire refused as ``record`` stands claims the lock:
    ``CLAIM_MS`` where it should (``wants_claim``), never past the ``left`` seconds of its wait
    (None: no end); 0: no claim."""
    if not wants_claim(record, now, skew):
        return 0
    return CLAIM_MS if left is None else max(0, min(CLAIM_MS, int(left * 1000)))


def check_plain(lease_id: str) -> None:
    """Refuse a renew or release of a group's id: no holder has it (only ``force-release``)."""
    if is_group_id(lease_id):
        raise errors.UsageError(
            "that LEASE_ID is the group of a lock's shared holders, which nobody holds",
            hint="renew or release a share with its own LEASE_ID; end them all with "
            "`awsflock force-release NAME LEASE_ID`",
        )


class ShareSteps(Protocol):
    """The step a store that holds shares (its kind's ``shares`` capability) has beyond
    ``LockStore``'s (whose take, renew, release and force-release route a share's id)."""

    def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome:
        """Mark the lock claimed by a waiting exclusive acquire until ``until_ms`` (by the
        caller's clock), if it is held by a group that has not ended and ``until_ms`` is later
        than its claim. No share is granted while a claim is later than the taker's ``now``."""
        ...


class AsyncShareSteps(Protocol):
    """``ShareSteps`` as ``awsflock.aio`` awaits them."""

    async def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome: ...
