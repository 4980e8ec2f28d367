"""Lock names, LEASE_IDs and pool sizes as the caller gives them: checked, with the fix named."""

from __future__ import annotations

import re

from awsflock import errors
from awsflock.records import RESERVED_PREFIX
from awsflock.text import unsafe

#: DynamoDB allows partition keys of up to 2048 bytes (UTF-8).
MAX_LOCK_ID_BYTES = 2048

# LEASE_IDs are UUID4 strings, the form awsflock 0.2.0 printed, so its leases stay usable;
# a pool slot's LEASE_ID adds ".SLOT", so renew and release need nothing else.
_LEASE_ID = re.compile(
    r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?:\.(\d{1,3}))?"
)
#: Most slots a pool may have (its item holds every slot; DynamoDB items stop at 400 KB).
MAX_SLOTS = 100


def check_lease_id(lease_id: str) -> str:
    text = lease_id.strip().lower()
    if not _LEASE_ID.fullmatch(text):
        raise errors.UsageError(
            f"{lease_id!r} is not a LEASE_ID",
            hint="pass the value `awsflock acquire` printed (a UUID like 1b4e28ba-2fa1-...)",
        )
    return text


def slot_of(lease_id: str) -> int | None:
    """The pool slot a LEASE_ID belongs to (None for a plain lock)."""
    match = _LEASE_ID.fullmatch(lease_id)
    return int(match.group(1)) if match and match.group(1) is not None else None


def check_slots(lock_id: str, slots: int | None) -> int | None:
    """The pool size to use: None for a plain lock (no --slots, or --slots 1)."""
    if slots is None:
        return None
    if not isinstance(slots, int) or isinstance(slots, bool) or not 1 <= slots <= MAX_SLOTS:
        raise errors.UsageError(
            f"--slots must be between 1 and {MAX_SLOTS}, got {slots!r}",
            hint="a pool of N resources takes --slots N",
        )
    return None if slots == 1 else slots


def check_lock_id(lock_id: str) -> str:
    if not lock_id or not lock_id.strip():
        raise errors.UsageError("LOCK_ID is empty", hint="name the lock, e.g. 'deploy-prod'")
    size = len(lock_id.encode("utf-8", "surrogatepass"))
    if size > MAX_LOCK_ID_BYTES:
        raise errors.UsageError(
            f"LOCK_ID is {size} bytes long; at most {MAX_LOCK_ID_BYTES} are allowed (DynamoDB's "
            "limit, the same on every store)",
            hint="use a shorter name",
        )
    try:
        lock_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.UsageError("LOCK_ID is not valid text", hint="use plain UTF-8") from exc
    # Printable ASCII (most names) has none: each character is looked at only in the others.
    plain = lock_id.isascii() and lock_id.isprintable()
    control = None if plain else next((c for c in lock_id if unsafe(c)), None)
    if control is not None:
        # A newline or a terminal escape in a name would break every line that shows it.
        raise errors.UsageError(
            f"LOCK_ID {lock_id!r} has a control character ({control!r})",
            hint="use printable characters only",
        )
    if lock_id.startswith(RESERVED_PREFIX):
        raise errors.UsageError(
            f"LOCK_ID may not start with {RESERVED_PREFIX!r}", hint="awsflock keeps it for itself"
        )
    return lock_id


def check_owner(owner: str) -> str:
    """An ``--owner`` that can be stored: text (a byte that is not UTF-8 cannot be). Control
    characters are kept, and shown escaped wherever the owner is shown (``text.printable``),
    as awsflock 0.2.0 and other clients may write them too."""
    try:
        owner.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise errors.UsageError("--owner is not valid text", hint="use plain UTF-8") from exc
    return owner
