"""The Redis store's answers: a lock's hash, as the step script returns it, as the library's
types, its times shifted into the caller's clock."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from awsflock.protocol import Outcome
from awsflock.records import Identity, Line, LockRecord, Pool, Waiter, holder_fields


def fields(flat: list[Any]) -> dict[str, str]:
    """A flat [field, value, ...] reply as a dict of text."""
    text = [x.decode() if isinstance(x, bytes) else str(x) for x in flat]
    return dict(zip(text[::2], text[1::2]))


def _identity(text: str | None) -> Identity:
    try:
        who = json.loads(text or "{}")
    except ValueError:
        who = {}
    if not isinstance(who, dict):
        return Identity(owner="")
    known = {f.name for f in dataclasses.fields(Identity)}
    return Identity(**{"owner": "", **{k: v for k, v in who.items() if k in known}})


def _ms(value: Any) -> int | None:
    return None if value in (None, "") else int(value)


def _seconds(ms: Any, shift: int) -> float | None:
    number = _ms(ms)
    return None if number is None else (number + shift) / 1000


def _record(lock_id: str, text: str | None, slots: int | None, shift: int) -> LockRecord:
    lease: dict[str, Any] = json.loads(text) if text else {}
    lease_id = str(lease.get("lease") or "")
    history = lease.get("hist") or []
    return LockRecord(
        lock_id=lock_id,
        lease_id=lease_id,
        # It only tells one write of a lease from the next (no awsflock 0.2.0 compares it here).
        version=f"{lease_id}/{lease.get('exp')}" if lease_id else "",
        **holder_fields(_identity(lease.get("who"))),
        acquired_at=_seconds(lease.get("acq"), shift),
        expires_at=_seconds(lease.get("exp"), shift) or 0.0,
        lease_duration=(_ms(lease.get("ms")) or 0) / 1000,
        fencing_token=_ms(lease.get("fence")),
        ended=str(lease.get("ended") or ""),
        history=tuple((str(h[0]), str(h[1])) for h in history if isinstance(h, list) and h),
        slots=slots,
        forced_by=str(lease.get("fby") or ""),
        forced_reason=str(lease.get("fwhy") or ""),
        forced_at=_seconds(lease.get("fms"), shift),
        keeper=str(lease.get("keeper") or ""),
        extra=lease,
    )


def _line(head: dict[str, str], shift: int) -> Line:
    """The lock's line; its places' times are the store's, shown shifted by ``shift``."""
    waiters = []
    for name, value in head.items():
        if not name.startswith("w:"):
            continue
        place = json.loads(value)
        waiters.append(
            Waiter(
                ticket=name[2:],
                number=int(place["n"]),
                identity=_identity(place.get("who")),
                since_ms=int(place["since"]),
                seen_ms=int(place["seen"]),
            )
        )
    waiters.sort(key=lambda w: w.number)
    polled = _ms(head.get("polled"))
    return Line(int(head.get("next") or 0), tuple(waiters), polled if waiters else None, shift)


def outcome(
    applied: bool,
    lock_id: str,
    head: dict[str, str],
    slot: int | None,
    shift: int,
    doubt: bool,
    barred: bool = False,
) -> Outcome:
    """The Outcome of a step whose answer showed the lock's hash ``head``."""
    if not head:
        return Outcome(applied, None, None, slot, doubt, barred=barred)
    size = _ms(head.get("slots"))
    line = _line(head, shift)
    lock = dataclasses.replace(_record(lock_id, head.get("p"), size, shift), line=line)
    if size is None:
        return Outcome(applied, lock, None, slot, doubt, line, barred=barred)
    slots = {
        int(name[2:]): _record(lock_id, value, size, shift)
        for name, value in sorted(head.items())
        if name.startswith("s:")
    }
    pool = Pool(lock_id, size, slots, line)
    return Outcome(applied, lock, pool, slot, doubt, line, barred=barred)
