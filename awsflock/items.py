"""The lock table's item layout, shared with awsflock 0.2.0, and its DynamoDB encoding.

One item per plain lock, keyed by its name. ``lease_id``, ``owner``, ``lease_duration`` and
``expiration_time`` (epoch seconds, the table's TTL attribute) mean the same to 0.2.0; the other
attributes are ours, and a 0.2.0 client that overwrites an item drops them. A pool is one item
keyed ``#awsflock#pool#NAME`` holding every slot's attributes, prefixed ``s{i}_``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from awsflock.records import RESERVED_PREFIX, LockRecord

# Attribute names. The first four are shared with awsflock 0.2.0 and must keep their meaning.
A_LOCK_ID = "lock_id"
A_LEASE_ID = "lease_id"
A_OWNER = "owner"
A_LEASE_DURATION = "lease_duration"
A_EXPIRATION_TIME = "expiration_time"  # epoch seconds (integer); the table's TTL attribute
A_EXPIRES_MS = "expires_ms"
A_ACQUIRED_MS = "acquired_ms"
A_FENCE = "fence"
A_RELEASED = "released"
A_PREV_LEASE_ID = "prev_lease_id"
A_PREV_RELEASED = "prev_released"
A_HOST = "host"
A_PID = "pid"
A_USER = "user"
A_CI_URL = "ci_url"
A_COMMAND = "command"
A_SLOTS = "slots"
A_FORCED_BY = "forced_by"
A_FORCED_REASON = "forced_reason"
A_FORCED_MS = "forced_ms"
A_KIND = "kind"  # on awsflock's own items: "audit", "slot"


def to_attr(value: Any) -> dict[str, Any]:
    """A Python value as a DynamoDB attribute value."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float)):
        return {"N": str(value)}
    return {"S": str(value)}


def from_attr(attr: dict[str, Any]) -> Any:
    """A DynamoDB attribute value as a Python value (numbers as int when integral)."""
    if "S" in attr:
        return attr["S"]
    if "N" in attr:
        text = attr["N"]
        number = float(text)
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        return number
    if "BOOL" in attr:
        return bool(attr["BOOL"])
    if "NULL" in attr:
        return None
    return attr  # types we never write; kept as is


#: A pool of N slots is one item under this key prefix plus the pool's name; slot i's
#: attributes are the lock attributes prefixed "s{i}_" (``slot_names``), so every slot has its
#: own lease and fencing counter while one conditional write sees the pool's size.
POOL_PREFIX = RESERVED_PREFIX + "pool#"
#: The attributes that exist once per slot in a pool item.
SLOT_ATTRIBUTES = (
    # A pool item has no table-level TTL attribute: it is never deleted, so its slots'
    # counters live on; each slot's expiration_time is just a slot attribute.
    A_LEASE_ID,
    A_OWNER,
    A_LEASE_DURATION,
    A_EXPIRATION_TIME,
    A_EXPIRES_MS,
    A_ACQUIRED_MS,
    A_FENCE,
    A_RELEASED,
    A_PREV_LEASE_ID,
    A_PREV_RELEASED,
    A_HOST,
    A_PID,
    A_USER,
    A_CI_URL,
    A_COMMAND,
    A_FORCED_BY,
    A_FORCED_REASON,
    A_FORCED_MS,
)


def pool_key(lock_id: str) -> str:
    return POOL_PREFIX + lock_id


def slot_names(slot: int | None) -> dict[str, str]:
    """Expression attribute names for a plain lock (None) or for one slot of a pool."""
    if slot is None:
        return {}
    names = {a: f"s{slot}_{a}" for a in SLOT_ATTRIBUTES}
    # "The slot is unused" plays the part of "the item does not exist" for a plain lock.
    names[A_LOCK_ID] = f"s{slot}_{A_LEASE_ID}"
    return names


def slot_item(item: dict[str, Any], slot: int, lock_id: str) -> dict[str, Any]:
    """Slot ``slot`` of a pool item, shaped as a plain lock item."""
    prefix = f"s{slot}_"
    sub = {k[len(prefix) :]: v for k, v in item.items() if k.startswith(prefix)}
    sub[A_LOCK_ID] = {"S": lock_id}
    if A_SLOTS in item:
        sub[A_SLOTS] = item[A_SLOTS]
    return sub


def record_from_item(item: dict[str, Any]) -> LockRecord:
    """Read a lock item, ours or awsflock 0.2.0's."""
    v = {k: from_attr(a) for k, a in item.items()}
    expires_ms = v.get(A_EXPIRES_MS)
    if isinstance(expires_ms, (int, float)):
        expires_at = expires_ms / 1000.0
    else:
        exp = v.get(A_EXPIRATION_TIME)
        expires_at = float(exp) if isinstance(exp, (int, float)) else 0.0
    acquired_ms = v.get(A_ACQUIRED_MS)
    fence = v.get(A_FENCE)
    pid = v.get(A_PID)
    slots = v.get(A_SLOTS)
    return LockRecord(
        lock_id=str(v.get(A_LOCK_ID, "")),
        lease_id=str(v.get(A_LEASE_ID) or ""),
        owner=str(v.get(A_OWNER) or ""),
        host=str(v.get(A_HOST) or ""),
        pid=int(pid) if isinstance(pid, (int, float)) else 0,
        user=str(v.get(A_USER) or ""),
        ci_url=str(v.get(A_CI_URL) or ""),
        command=str(v.get(A_COMMAND) or ""),
        acquired_at=acquired_ms / 1000.0 if isinstance(acquired_ms, (int, float)) else None,
        expires_at=expires_at,
        lease_duration=float(v.get(A_LEASE_DURATION) or 0),
        fencing_token=int(fence) if isinstance(fence, (int, float)) else None,
        released=bool(v.get(A_RELEASED, False)),
        prev_lease_id=str(v.get(A_PREV_LEASE_ID) or ""),
        prev_released=bool(v.get(A_PREV_RELEASED, False)),
        slots=int(slots) if isinstance(slots, (int, float)) else None,
        forced_by=str(v.get(A_FORCED_BY) or ""),
        forced_reason=str(v.get(A_FORCED_REASON) or ""),
        legacy=A_FENCE not in v and A_EXPIRES_MS not in v,
        extra=v,
    )


@dataclass(frozen=True)
class Pool:
    """A pool's state: its size and each slot's record (None for a never-used slot)."""

    lock_id: str
    size: int | None
    slots: dict[int, LockRecord]

    def free_slots(self, size: int, now: float, skew: float) -> list[int]:
        """Slots an acquire could take now."""
        return [i for i in range(size) if i not in self.slots or self.slots[i].is_free(now, skew)]

    @classmethod
    def from_item(cls, lock_id: str, item: dict[str, Any]) -> Pool:
        size = from_attr(item[A_SLOTS]) if A_SLOTS in item else None
        used = sorted({int(k[1:].split("_", 1)[0]) for k in item if re.match(r"s\d+_", k)})
        slots = {i: record_from_item(slot_item(item, i, lock_id)) for i in used}
        return cls(lock_id, int(size) if size is not None else None, slots)
