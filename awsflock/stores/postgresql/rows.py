"""The PostgreSQL store's answers: rows of the step function as the library's types, their
times shifted into the caller's clock."""

from __future__ import annotations

import dataclasses
from typing import Any

from awsflock.protocol import (
    Outcome,
)
from awsflock.records import (
    Identity,
    Line,
    LockRecord,
    Pool,
    Waiter,
    holder_fields,
)

# -- answers ---------------------------------------------------------------------------------


def _identity(who: Any) -> Identity:
    if not isinstance(who, dict):
        return Identity(owner="")
    fields = {f.name for f in dataclasses.fields(Identity)}
    return Identity(**{k: v for k, v in who.items() if k in fields})


def _seconds(ms: Any, shift: int) -> float | None:
    return None if ms is None else (int(ms) + shift) / 1000


def _record(lock_id: str, row: dict[str, Any], slots: int | None, shift: int) -> LockRecord:
    who = _identity(row.get("who"))
    lease_id = row.get("lease_id") or ""
    return LockRecord(
        lock_id=lock_id,
        lease_id=lease_id,
        # No awsflock 0.2.0 compares it here: it only tells one write of a lease from the next.
        version=f"{lease_id}/{row.get('expires_ms')}" if lease_id else "",
        **holder_fields(who),
        acquired_at=_seconds(row.get("acquired_ms"), shift),
        expires_at=_seconds(row.get("expires_ms"), shift) or 0.0,
        lease_duration=(row.get("lease_ms") or 0) / 1000,
        fencing_token=row.get("fence"),
        ended=row.get("ended") or "",
        history=tuple((str(h[0]), str(h[1])) for h in row.get("history") or () if h),
        slots=slots,
        forced_by=row.get("forced_by") or "",
        forced_reason=row.get("forced_reason") or "",
        forced_at=_seconds(row.get("forced_ms"), shift),
        keeper=row.get("keeper") or "",
        extra=row,
    )


def _line(head: dict[str, Any], shift: int) -> Line:
    """The lock's line; its places' times are the server's, shown shifted by ``shift``."""
    places = head.get("line") or {}
    waiters = sorted(
        (
            Waiter(
                ticket=ticket,
                number=int(place["n"]),
                identity=_identity(place.get("who")),
                since_ms=int(place["since"]),
                seen_ms=int(place["seen"]),
            )
            for ticket, place in places.items()
        ),
        key=lambda w: w.number,
    )
    polled = head.get("polled_ms")
    return Line(
        int(head.get("next_number") or 0),
        tuple(waiters),
        int(polled) if waiters and polled is not None else None,
        shift,
    )


def _outcome(
    applied: bool,
    lock_id: str,
    rows: list[dict[str, Any]],
    slot: int | None,
    shift: int,
    in_doubt: bool,
    barred: bool = False,
) -> Outcome:
    head = next((r for r in rows if r["slot"] == -1), None)
    if head is not None and len(rows) == 1 and _empty(head):
        head = None  # a row of barred ids only (an end step's) is no lock
    if head is None:
        return Outcome(applied, None, None, slot, in_doubt, barred=barred)
    size = head.get("slots")
    line = _line(head, shift)
    lock = dataclasses.replace(_record(lock_id, head, size, shift), line=line)
    if size is None:
        return Outcome(applied, lock, None, slot, in_doubt, line, barred=barred)
    slots = {int(r["slot"]): _record(lock_id, r, size, shift) for r in rows if r["slot"] >= 0}
    pool = Pool(lock_id, size, slots, line)
    return Outcome(applied, lock, pool, slot, in_doubt, line, barred=barred)


def _empty(head: dict[str, Any]) -> bool:
    """A lock's row that never held a lease, is no pool and has nobody in line."""
    return head.get("lease_id") is None and head.get("slots") is None and not head.get("line")
