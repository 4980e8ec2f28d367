"""The lock table's item layout, shared with awsflock 0.2.0, and its DynamoDB encoding.

One item per lock name, keyed by the name. ``lease_id``, ``owner``, ``lease_duration`` and
``expiration_time`` (epoch seconds, the table's TTL attribute) are the attributes awsflock 0.2.0
reads and writes; the others are ours, and a 0.2.0 client that overwrites an item drops them.

- ``lease``: the LEASE_ID of the current (or last) lease, stable across renewals.
- ``lease_id``: what 0.2.0 compares before it overwrites (reclaims, renews) or deletes
  (releases) a lease. We write a fresh random value there on every write, never the LEASE_ID,
  so a 0.2.0 client that read the item before any of our writes cannot then overwrite it (its
  condition no longer holds), and can never delete an item of ours. A pool's item has none.
- ``kept_until``: only on an endpoint without transactions; see ``A_KEPT_UNTIL``.
- ``ended``: how the current lease ended: ``released`` by its holder or ``forced:ID`` by an
  operator; absent while it runs (or after it expired).
- ``h0_lease``/``h0_end`` ... ``h2_*``: the last three leases and how each ended, shifted on
  every grant, so a release whose answer was lost and that is retried after up to three
  hand-offs is still recognised.

The line of fair waiters lives in the same item too: ``qn`` (the number the next waiter gets),
``qlen`` (how many places), ``qpoll`` (the latest poll of any waiter, epoch ms), and per waiter
``w_<ticket>`` (who it is, as compact JSON, written once), ``n_<ticket>`` (its number) and
``b_<ticket>`` (its last poll, epoch ms).

A pool of N slots lives in the same item: ``slots`` = N, and slot i's lease attributes are
prefixed ``s{i}_``. Because plain lock and pool share one item, holders that disagree on the
number of slots (1 against N included) meet in one conditional write and are refused.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from awsflock.protocol import ENDED_BARRED
from awsflock.records import (
    ENDED_RELEASED,
    RESERVED_PREFIX,
    Identity,
    Line,
    LockRecord,
    Pool,
    Waiter,
    kept_audit,
)
from awsflock.stores.dynamodb.pv import previous_of_item

# Attribute names. The first five are shared with awsflock 0.2.0 and must keep their meaning.
A_LOCK_ID = "lock_id"
A_LEASE_ID = "lease_id"
A_OWNER = "owner"
A_LEASE_DURATION = "lease_duration"
A_EXPIRATION_TIME = "expiration_time"  # epoch seconds (integer); the table's TTL attribute
A_LEASE = "lease"
A_ENDED = "ended"
A_EXPIRES_MS = "expires_ms"
A_ACQUIRED_MS = "acquired_ms"
A_FENCE = "fence"
A_RENEWED_MS = "renewed_ms"  # the clock reading of the lease's grant or latest renew
A_HOST = "host"
A_PID = "pid"
A_USER = "user"
A_CI_URL = "ci_url"
A_COMMAND = "command"
A_SLOTS = "slots"
#: A pool's resize marks (``resizes``): the last resize's id, a shrink in steps' target.
A_RESIZED_BY, A_RESIZING_TO = "resized_by", "resizing_to"
A_FORCED_BY = "forced_by"
A_FORCED_REASON = "forced_reason"
A_FORCED_MS = "forced_ms"
A_KIND = "kind"  # on awsflock's own items: "audit", "fence", "done"
KIND_FENCE = "fence"
KIND_DONE = "done"
#: On an endpoint without transactions (dynalite), where no fence record can be kept, a plain
#: lock's item is kept for good: its first take there sets ``expiration_time`` and this to
#: ``protocol.KEPT_UNTIL``, and every later write keeps that, so neither TTL nor an awsflock
#: 0.2.0 client (which would overwrite and delete the item, its counter with it) sees it expire.
A_KEPT_UNTIL = "kept_until"
A_KEEPER = "keeper"  # who keeps the lease alive (acquire --keep-alive): "host H, pid P, ..."
#: The holder's lock-delay (ms, and whole seconds for ``expiration_time``), and the end of the
#: lease plus it, written by every write that moves the end (``expressions.not_delayed``).
A_DELAY = "delay_ms"
A_DELAY_S = "delay_s"
A_FREE_AFTER = "free_after_ms"
#: The hold's cap (``Attempt.max_hold_ms``): no take or renewal sets ``expires_ms`` past it.
A_CAP = "cap_ms"
A_LINE_NEXT = "qn"
A_LINE_LEN = "qlen"
A_LINE_POLLED = "qpoll"
PLACE = "w_"  # + ticket: the waiter's number and identity (JSON)
POLLED = "b_"  # + ticket: the waiter's last poll (epoch ms)
NUMBER = "n_"  # + ticket: the waiter's number in line

#: A plain lock's fence record: an item of its own, under this prefix plus the lock's name, that
#: holds the highest fencing token ever granted on the lock. It has no TTL attribute and awsflock
#: 0.2.0 never writes it, so it outlives every deletion of the lock's item.
FENCE_PREFIX = RESERVED_PREFIX + "fence#"
#: A fence record's key where the prefix and the name would pass the key limit: this and the
#: name's SHA-256. No name gives it with ``FENCE_PREFIX`` (found by review 10: a lock named
#: ``sha256:`` and a long name's hash shared the long name's fence record, its tokens, last
#: lease and state).
FENCE_HASHED_PREFIX = RESERVED_PREFIX + "fence-sha256#"
#: A lease that ended by a release or force-release: an item of its own, under this prefix plus
#: its LEASE_ID, written in the same transaction as the end and kept ``protocol.DONE_MS`` (then
#: left to TTL). The lock's item remembers only the last few leases; this is how a release
#: retried after any number of hand-offs still learns that its first try ended the lease, and
#: how a take landing late under a LEASE_ID already used and ended is refused.
DONE_PREFIX = RESERVED_PREFIX + "done#"
A_DONE_LOCK = "lock"  # on a done item: the lock the lease was on
A_DONE_AT_MS = "at_ms"  # on a done item: when it ended (the caller's clock)
#: The key of a step's values that maps placeholders to attribute names (``writes._request``).
ALIASES = "_names"
#: DynamoDB's limit on a partition key, in UTF-8 bytes.
MAX_KEY_BYTES = 2048


def fence_key(lock_id: str) -> str:
    """The key of ``lock_id``'s fence record: the prefix and the name, or, where the two would
    exceed DynamoDB's key limit, another prefix and the name's SHA-256 (no name's key)."""
    key = FENCE_PREFIX + lock_id
    if len(key.encode()) <= MAX_KEY_BYTES:
        return key
    return FENCE_HASHED_PREFIX + hashlib.sha256(lock_id.encode()).hexdigest()


#: On a pool's item, a bar of a slot's LEASE_ID: ``xb_`` and the id's letters and digits (its
#: value: until when, epoch ms). A slot's take on a pool is one UpdateItem that checks it.
BAR_PREFIX = "xb_"


def bar_name(lease_id: str) -> str:
    """The pool item's attribute that bars ``lease_id`` (a name of word characters only)."""
    return BAR_PREFIX + re.sub(r"\W", "_", lease_id)


#: On a lock's item, where the endpoint has no transactions: the audit record of a force-release
#: that ended one of its leases, written by the force's own UpdateItem (``xa_`` and the id's
#: letters and digits; its value the record as JSON), until it is copied to its audit item; the
#: names of those attributes are in the string set ``unaudited``, which a scan filters on.
PENDING_AUDIT_PREFIX = "xa_"
A_UNAUDITED = "unaudited"


def pending_audit_name(lease_id: str) -> str:
    """The lock item's attribute that keeps the audit record of the force of ``lease_id``."""
    return PENDING_AUDIT_PREFIX + re.sub(r"\W", "_", lease_id)


def pending_audits(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The audit records a lock's item keeps (``PENDING_AUDIT_PREFIX``)."""
    return kept_audits({k: from_attr(a) for k, a in item.items()})


def kept_audits(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    """The audit records a lock's item keeps, from its attributes as read (a record's
    ``extra``; the string set ``unaudited`` stays as DynamoDB gives it)."""
    names = attributes.get(A_UNAUDITED)
    found = []
    for name in names.get("SS", []) if isinstance(names, dict) else []:
        text = attributes.get(name)
        if isinstance(text, str):
            found.append(json.loads(text))
    return found


def done_key(lease_id: str) -> str:
    """The key of the done item of ``lease_id`` (a LEASE_ID is short: no hashing needed)."""
    return DONE_PREFIX + lease_id


def done_item(
    lock_id: str, lease_id: str, ended: str, at_ms: int, expires_s: int
) -> dict[str, Any]:
    """The done item of ``lease_id``, ended as ``ended`` at ``at_ms``."""
    return {
        A_LOCK_ID: {"S": done_key(lease_id)},
        A_KIND: {"S": KIND_DONE},
        A_DONE_LOCK: {"S": lock_id},
        A_ENDED: {"S": ended},
        A_DONE_AT_MS: {"N": str(at_ms)},
        A_EXPIRATION_TIME: {"N": str(expires_s)},
    }


def done_ended(item: dict[str, Any] | None, lock_id: str) -> str | None:
    """How a done item says its lease ended on ``lock_id`` (None: no such item, or another
    lock's, or not a done item)."""
    if not item or from_attr(item.get(A_KIND, {"S": ""})) != KIND_DONE:
        return None
    if from_attr(item.get(A_DONE_LOCK, {"S": ""})) != lock_id:
        return None
    ended = str(from_attr(item.get(A_ENDED, {"S": ""})))
    return None if ended == ENDED_BARRED else ended  # a bar (see ``Steps._bar``): never granted


#: A ticket: 16 lowercase hex digits (it is part of attribute names).
TICKET = re.compile(r"[0-9a-f]{16}")

#: How many earlier leases an item remembers (h0 is the latest).
HISTORY = 3


def history_names(i: int) -> tuple[str, str]:
    return f"h{i}_lease", f"h{i}_end"


def to_attr(value: Any) -> dict[str, Any]:
    """A Python value as a DynamoDB attribute value."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, (int, float)):
        return {"N": str(value)}
    if isinstance(value, frozenset):
        return {"SS": sorted(value)}
    if isinstance(value, dict):
        return {"M": {k: to_attr(v) for k, v in value.items()}}
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


def slot_prefix(slot: int | None) -> str:
    """The prefix of a slot's attributes in a pool item ('' for a plain lock)."""
    return "" if slot is None else f"s{slot}_"


_SLOT_KEY = re.compile(r"s(\d+)_(.+)")


def slot_item(item: dict[str, Any], slot: int, lock_id: str) -> dict[str, Any]:
    """Slot ``slot`` of a pool item, shaped as a plain lock item."""
    prefix = slot_prefix(slot)
    sub = {k[len(prefix) :]: v for k, v in item.items() if k.startswith(prefix)}
    sub[A_LOCK_ID] = {"S": lock_id}
    if A_SLOTS in item:
        sub[A_SLOTS] = item[A_SLOTS]
    return sub


def _delay_end(v: dict[str, Any]) -> float | None:
    """``LockRecord.delay_end``: the item's ``free_after_ms``, for a lease with a delay that
    did not end released."""
    after = v.get(A_FREE_AFTER)
    if not v.get(A_DELAY) or v.get(A_ENDED) == ENDED_RELEASED or not isinstance(after, int):
        return None
    return after / 1000


def record_from_item(item: dict[str, Any]) -> LockRecord:
    """Read a lock item (or a pool slot shaped as one), ours or awsflock 0.2.0's."""
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
    forced_ms = v.get(A_FORCED_MS)
    ended = str(v.get(A_ENDED) or "")
    history = []
    for i in range(HISTORY):
        lease_name, end_name = history_names(i)
        if v.get(lease_name):
            history.append((str(v[lease_name]), str(v.get(end_name) or "")))
    legacy = A_FENCE not in v and A_EXPIRES_MS not in v
    return LockRecord(
        lock_id=str(v.get(A_LOCK_ID, "")),
        # An item last written by awsflock 0.2.0 has no `lease`: its lease is `lease_id`.
        lease_id=str(v.get(A_LEASE) or v.get(A_LEASE_ID) or ""),
        version=str(v.get(A_LEASE_ID) or ""),
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
        ended=ended,
        history=tuple(history),
        slots=int(slots) if isinstance(slots, (int, float)) else None,
        forced_by=str(v.get(A_FORCED_BY) or ""),
        forced_reason=str(v.get(A_FORCED_REASON) or ""),
        forced_at=forced_ms / 1000.0 if isinstance(forced_ms, (int, float)) else None,
        legacy=legacy,
        keeper=str(v.get(A_KEEPER) or ""),
        lock_delay=(v.get(A_DELAY) or 0) / 1000,
        capped_at=v[A_CAP] / 1000 if isinstance(v.get(A_CAP), int) else None,
        delay_end=_delay_end(v),
        previous=previous_of_item(v),
        extra=v,
    )


def pool_from_item(lock_id: str, item: dict[str, Any], line: Line | None = None) -> Pool:
    """A pool item's size and used slots."""
    size = from_attr(item[A_SLOTS]) if A_SLOTS in item else None
    used = set()
    for key in item:
        match = _SLOT_KEY.fullmatch(key)
        if match and match.group(2) == A_LEASE:
            used.add(int(match.group(1)))
    slots = {i: record_from_item(slot_item(item, i, lock_id)) for i in sorted(used)}
    size = int(size) if size is not None else None
    by, to = (from_attr(item[a]) if a in item else None for a in (A_RESIZED_BY, A_RESIZING_TO))
    return Pool(lock_id, size, slots, line or Line(), to and int(to), by and str(by))


def is_pool_item(item: dict[str, Any]) -> bool:
    return A_SLOTS in item


def place_entry(waiter: Waiter) -> str:
    """The ``w_<ticket>`` value: compact JSON, written once when the waiter joins."""
    who = waiter.identity
    data = {
        "o": who.owner,
        "h": who.host,
        "p": who.pid,
        "u": who.user,
        "c": who.ci_url,
        "t": waiter.since_ms,
    }
    return json.dumps({k: v for k, v in data.items() if v not in ("", None)}, separators=(",", ":"))


def line_from_item(item: dict[str, Any]) -> Line:
    """The item's line of fair waiters, in order of arrival."""
    waiters = []
    for key, attr in item.items():
        if not key.startswith(PLACE) or not TICKET.fullmatch(key[len(PLACE) :]):
            continue
        ticket = key[len(PLACE) :]
        try:
            data = json.loads(from_attr(attr))
            seen = from_attr(item[POLLED + ticket])
            waiter = Waiter(
                ticket=ticket,
                number=int(from_attr(item[NUMBER + ticket])),
                identity=Identity(
                    owner=str(data.get("o", "")),
                    host=str(data.get("h", "")),
                    pid=int(data.get("p", 0)),
                    user=str(data.get("u", "")),
                    ci_url=str(data.get("c", "")),
                ),
                since_ms=int(data.get("t", 0)),
                seen_ms=int(seen),
            )
        except (KeyError, TypeError, ValueError):
            continue  # not a place we wrote: ignored, as any foreign attribute is
        waiters.append(waiter)
    waiters.sort(key=lambda w: w.number)
    next_number = from_attr(item.get(A_LINE_NEXT, {"N": "0"}))
    polled = from_attr(item[A_LINE_POLLED]) if A_LINE_POLLED in item and waiters else None
    return Line(
        int(next_number) if isinstance(next_number, (int, float)) else 0,
        tuple(waiters),
        int(polled) if isinstance(polled, (int, float)) else None,
    )


def audit_item(key: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The item of audit record ``key`` (``entry``'s empty fields left out)."""
    item = {A_LOCK_ID: {"S": key}, A_KIND: {"S": "audit"}}
    item.update({k: to_attr(v) for k, v in kept_audit(entry).items()})
    return item
