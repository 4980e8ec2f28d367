"""State with the lease: a small value kept with a lock across its grants.

A lock's state is a few bytes (at most ``MAX_STATE``, on every store) that every new holder
may read and only the current holder may write, while its lease is live: a resumable job
checkpoints there what it has done, and the next holder, after a crash, resumes from it.

The store's half (``LockStore.renew`` with ``state``, ``LockStore.read_state``):

- **A write is a renewal.** ``renew(..., state=StateWrite(data, stamp_ms))`` writes the state in
  the same atomic step as the renewal, under the renewal's condition: the lease is the lock's
  current one, not ended, and not run out (at the renewer's ``now_ms`` on a store timed by its
  callers, by the server's clock on the others). A holder that lost its lease, was released
  or force-released, or was taken over is refused, as its renewal is: a stale holder's write
  is never accepted.
- **A write never shortens the lease.** Where the renewal alone would be refused only because
  it moves the end earlier (a longer renewal made later is in place), the write applies and
  the end stays.
- **Writes of one lease are ordered by their stamps.** The holder stamps its writes with its
  clock's reading, strictly increasing (``next_stamp``); a write of the lease that wrote the
  stored state with an earlier stamp is refused, so a write that lands late never undoes a
  later one. The same stamp again (a retry of the same write) applies again: it writes the
  same bytes. A new holder's first write needs no order with the last holder's.
- **The state outlives the lease record.** It is kept where the lock's fencing counter is
  (DynamoDB's fence record, Redis's fence hash; PostgreSQL's row and the in-memory store's
  record are never removed), so TTL, a record removed after its retention, or an awsflock
  0.2.0 client's release does not lose it. Without transactions (dynalite), DynamoDB keeps it
  on the lock's item, which is then kept for good.
- **Reading.** ``read_state`` is one consistent read. A holder's read is exact: since its
  grant nobody else can write. Only plain locks keep state: not a pool's slots, shared
  holders or sets of names.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from awsflock import errors

#: The most bytes of state a lock keeps, on every store.
MAX_STATE = 4096


@dataclass(frozen=True)
class StateWrite:
    """State a renewal writes: ``data``, stamped ``stamp_ms`` (the holder's reading)."""

    data: bytes
    stamp_ms: int


@dataclass(frozen=True)
class LockState:
    """A lock's state as stored: ``data`` (None: never written), the lease that wrote it and
    its stamp."""

    data: bytes | None = None
    lease_id: str = ""
    stamp_ms: int = 0


#: A lock with no state written.
NO_STATE = LockState()


def check(data: Any) -> bytes:
    """``data`` as the bytes a state write sends; UsageError if it is not bytes or too big."""
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise errors.UsageError(
            f"a lock's state is bytes, not {type(data).__name__}",
            hint="encode it first (text: .encode(); a dict: json.dumps(...).encode())",
        )
    if len(data) > MAX_STATE:
        raise errors.UsageError(
            f"a lock's state is at most {MAX_STATE} bytes; this is {len(data)}",
            hint="keep a pointer (a key, a path) to larger state, not the state itself",
        )
    return data


def check_plain(slot: int | None, share: bool) -> None:
    """UsageError unless the lease is a plain lock's (state is kept for those only): not a pool
    ``slot``'s, not a ``share``."""
    if slot is not None or share:
        what = "a pool's slot" if slot is not None else "a shared holder"
        raise errors.UsageError(
            f"state is kept with a plain lock, not with {what}",
            hint="keep the state under a plain lock of its own",
        )


def next_stamp(now_ms: int, last: int) -> int:
    """The stamp of a holder's next write: its reading, after ``last`` (its previous write's)."""
    return max(now_ms, last + 1)


def to_wire(data: bytes) -> str:
    """State as a JSON string (the network stores' step parameters and answers)."""
    return base64.b64encode(data).decode("ascii")


def from_wire(found: Any) -> LockState:
    """A network store's answer's state (``{"data", "lease", "ms"}``, or None: none written)."""
    if not isinstance(found, dict) or found.get("data") is None:
        return NO_STATE
    return LockState(
        base64.b64decode(str(found["data"])),
        str(found.get("lease") or ""),
        int(found.get("ms") or 0),
    )


def json_fields(data: bytes | None) -> dict[str, Any]:
    """State as ``--json`` prints it: ``state``, the text (None: none written, or not UTF-8),
    and ``state_base64``, the bytes (None: none written)."""
    if data is None:
        return {"state": None, "state_base64": None}
    try:
        text: str | None = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {"state": text, "state_base64": to_wire(data)}


def write_params(state: StateWrite | None) -> dict[str, Any]:
    """A renewal's step parameters for ``state`` (none without one)."""
    if state is None:
        return {}
    return {"state": to_wire(check(state.data)), "state_ms": state.stamp_ms}
