"""A step's answer in the shared form, read into the library's records and outcomes, its times
shifted into the caller's clock.

The shared form (each step program turns its server's reply into it):

- ``Answer``: ``applied``; ``now_ms``, the server's clock when the step ran; ``barred`` (the
  lease id was barred); ``ended`` (how the step's lease ended, where the record no longer
  remembers it); ``head``: the lock's record, or None where there is none.
- a head: a dict with ``lease`` (the lock's lease, or None), ``slots`` (a pool's size, or
  None), ``next_number`` and ``polled_ms`` (its line), ``line`` ({ticket: place}) and, for a
  pool, ``slot_leases`` ({slot: lease}).
- a lease: a dict with ``lease_id``, ``expires_ms``, ``acquired_ms``, ``lease_ms``, ``fence``,
  ``ended``, ``history`` ([[lease_id, ended], ...]), ``forced_by``, ``forced_reason``,
  ``forced_ms``, ``keeper``, ``who`` (a dict of ``records.Identity``'s fields), ``prev`` (the
  lease its grant replaced, as the step copied it: a dict of the same fields but ``history``,
  ``keeper``, ``prev`` and ``delay_ms``; {} where there was none; None where the grant
  predates ``prev``; a group's also with ``shared``, ``shares`` and ``lapse`` as they stood),
  ``lapse`` (a group's first share found ended without its holder's release, in ``prev``'s
  form; absent: none), ``delay_ms`` (its holder's lock-delay, recorded by its take: the
  record's ``lock_delay``; absent, None or 0: none), ``cap_ms`` (its max-hold's cap: the
  record's ``capped_at``; absent or None: none) and ``raw`` (the server's own form, kept as
  the record's ``extra``).
- a state (the answer to ``state``, a read of it; ``awsflock.state``): a dict with ``data``
  (base64; None: none written), ``lease`` (the lease that wrote it) and ``ms`` (its stamp).
- a place: a dict with ``n``, ``who``, ``since`` and ``seen`` (milliseconds).
- a lock held shared (``awsflock.shares``): the head's ``shared`` (true), ``shares`` ({share's
  LEASE_ID: {``e`` end, ``r`` reading, ``a`` grant, ``f`` token, ``d`` length (ms), ``who``,
  ``k`` keeper}}) and ``claim_ms`` (a waiting exclusive acquire's claim; None: none).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from awsflock.protocol import Outcome
from awsflock.records import (
    NO_LINE,
    Identity,
    Line,
    LockRecord,
    Pool,
    Previous,
    Waiter,
    holder_fields,
)


@dataclass(frozen=True)
class Answer:
    """One step's answer, in the shared form (see the module's docstring)."""

    applied: bool
    now_ms: int
    head: dict[str, Any] | None
    barred: bool = False
    ended: str | None = None
    #: The lock's state (``awsflock.state.from_wire``'s form), in a read of it only.
    state: Any = None


#: Identity's fields: the ones an identity read from a server may set.
_KNOWN = frozenset(f.name for f in dataclasses.fields(Identity))


def identity(who: Any) -> Identity:
    """``who`` (a dict, or anything else) as an Identity; unknown fields are left out."""
    if not isinstance(who, dict):
        return Identity(owner="")
    return Identity(**{"owner": "", **{k: v for k, v in who.items() if k in _KNOWN}})


#: A record's holder fields where the lease names nobody (``holder_fields`` of an empty
#: Identity).
_NOBODY = holder_fields(Identity(owner=""))


def _holder(who: Any) -> dict[str, Any]:
    """``holder_fields(identity(who))``, without making the Identity (read with every step)."""
    if not isinstance(who, dict) or not who:
        return _NOBODY
    return {name: who.get(name, empty) for name, empty in _NOBODY.items()}


def _seconds(ms: Any, shift: int) -> float | None:
    return None if ms is None or ms == "" else (int(ms) + shift) / 1000


def record(
    lock_id: str,
    lease: dict[str, Any] | None,
    slots: int | None,
    shift: int,
    waiting: Line = NO_LINE,
) -> LockRecord:
    """A lease of the shared form as a LockRecord (an empty one where ``lease`` is None), with
    the lock's line ``waiting``."""
    if not lease:
        return LockRecord(lock_id=lock_id, slots=slots, extra={}, line=waiting)
    get = lease.get
    lease_id = str(get("lease_id") or "")
    fence = get("fence")
    return LockRecord(
        lock_id=lock_id,
        lease_id=lease_id,
        # No awsflock 0.2.0 compares it here: it only tells one write of a lease from the next.
        version=f"{lease_id}/{get('expires_ms')}" if lease_id else "",
        **_holder(get("who")),
        acquired_at=_seconds(get("acquired_ms"), shift),
        expires_at=_seconds(get("expires_ms"), shift) or 0.0,
        lease_duration=int(get("lease_ms") or 0) / 1000,
        fencing_token=None if fence is None or fence == "" else int(fence),
        ended=str(get("ended") or ""),
        history=_history(get("history")),
        slots=slots,
        forced_by=str(get("forced_by") or ""),
        forced_reason=str(get("forced_reason") or ""),
        forced_at=_seconds(get("forced_ms"), shift),
        keeper=str(get("keeper") or ""),
        lock_delay=int(get("delay_ms") or 0) / 1000,
        capped_at=_seconds(get("cap_ms"), shift),
        previous=_previous(lock_id, get("prev"), shift),
        lapse=_previous(lock_id, get("lapse"), shift) if get("lapse") else None,
        extra=get("raw", lease),
        line=waiting,
    )


def _previous(lock_id: str, prev: Any, shift: int) -> Previous | None:
    """How the lease a grant replaced ended, from what the step copied of it (``prev``)."""
    if not isinstance(prev, dict):
        return None
    if not prev:
        return Previous.of(None)
    # Without its end where only what its grant and end wrote remains (its record gone).
    replaced = record(lock_id, {**prev, "prev": None}, None, shift)
    if prev.get("shared"):  # a group of shared holders: with the shares it still had
        replaced = _with_shares(replaced, prev, shift)
    return Previous.of(replaced, end_known=prev.get("expires_ms") is not None)


def _history(kept: Any) -> tuple[tuple[str, str], ...]:
    """A lease's history as the record's: (lease id, how it ended) pairs. (A list, then a
    tuple: a hot lock's record on Redis remembers up to 32, read with every step.)"""
    if not kept:
        return ()
    return tuple([(str(h[0]), str(h[1])) for h in kept if isinstance(h, list) and h])


def line(head: dict[str, Any], shift: int) -> Line:
    """The lock's line; its places' times are the server's, shown shifted by ``shift``."""
    places = head.get("line")
    next_number = int(head.get("next_number") or 0)
    if not places:
        return Line(next_number, (), None, shift)
    waiters = sorted(
        (
            Waiter(
                ticket=ticket,
                number=int(place["n"]),
                identity=identity(place.get("who")),
                since_ms=int(place["since"]),
                seen_ms=int(place["seen"]),
            )
            for ticket, place in places.items()
        ),
        key=lambda w: w.number,
    )
    polled = head.get("polled_ms")
    return Line(
        next_number,
        tuple(waiters),
        int(polled) if waiters and polled not in (None, "") else None,
        shift,
    )


def outcome(
    answer: Answer,
    lock_id: str,
    slot: int | None,
    shift: int,
    in_doubt: bool,
    to_mono: float | None = None,
) -> Outcome:
    """The Outcome of a step whose answer is ``answer``, times shifted by ``shift`` (and turned
    into the caller's monotonic time by ``to_mono``, if given: ``Outcome.to_mono``)."""
    applied, head, barred = answer.applied, answer.head, answer.barred
    if head is None:
        return Outcome(applied, None, None, slot, in_doubt, to_mono=to_mono, barred=barred)
    size = None if head.get("slots") in (None, "") else int(head["slots"])
    waiting = line(head, shift)
    lock = record(lock_id, head.get("lease"), size, shift, waiting)
    if head.get("shared") or head.get("claim_ms") is not None:
        lock = _with_shares(lock, head, shift)
    if size is None:
        return Outcome(applied, lock, None, slot, in_doubt, waiting, to_mono, barred)
    leases = head.get("slot_leases") or {}
    slots = {int(n): record(lock_id, lease, size, shift) for n, lease in sorted(leases.items())}
    pool = Pool(lock_id, size, slots, waiting)
    return Outcome(applied, lock, pool, slot, in_doubt, waiting, to_mono, barred)


def _with_shares(lock: LockRecord, head: dict[str, Any], shift: int) -> LockRecord:
    """``lock`` with its group's shares (oldest token first) and its claim."""
    found = []
    if head.get("shared"):
        for lease_id, share in (head.get("shares") or {}).items():
            found.append(
                LockRecord(
                    lock_id=lock.lock_id,
                    lease_id=str(lease_id),
                    **_holder(share.get("who")),
                    acquired_at=_seconds(share.get("a"), shift),
                    expires_at=_seconds(share.get("e"), shift) or 0.0,
                    lease_duration=int(share.get("d") or 0) / 1000,
                    fencing_token=int(share["f"]),
                    keeper=str(share.get("k") or ""),
                    extra={"renewed_ms": share.get("r"), "expires_ms": share.get("e")},
                )
            )
    found.sort(key=lambda s: s.fencing_token or 0)
    claim = head.get("claim_ms")
    return dataclasses.replace(
        lock,
        shared=bool(head.get("shared")),
        shares=tuple(found),
        claimed_until=_seconds(claim, shift),
    )
