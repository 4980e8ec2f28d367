"""The audit log: its records as ``awsflock audit`` lists them, and the record of a hold that
reached its max-hold (``run --max-hold``). The force-releases' own records are written by the
force's step (``admin.force_release``)."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from awsflock import errors
from awsflock.protocol import AUDIT_APPLIED, AUDIT_VOID, audit_key
from awsflock.text import format_seconds, iso_utc

if TYPE_CHECKING:
    from awsflock.lock.heartbeat import Hold
    from awsflock.lock.lease import LockTable

log = logging.getLogger("awsflock.run")

#: The action of a hold that reached its max-hold, in the audit log.
CAPPED = "max-hold"


def audit_view(entry: dict[str, Any]) -> dict[str, Any]:
    """An audit record as ``audit --json`` prints it (stable field names)."""
    at_ms = entry.get("at_ms")
    return {
        "at": iso_utc(at_ms / 1000) if isinstance(at_ms, (int, float)) else None,
        "action": entry.get("action"),
        "lock_id": entry.get("target"),
        "slot": entry.get("slot"),
        "lease_id": entry.get("lease_id"),
        "holder": entry.get("holder"),
        "holder_host": entry.get("holder_host"),
        "fencing_token": entry.get("fencing_token"),
        "actor": entry.get("actor"),
        "reason": entry.get("reason"),
    }


def audit_records(table: LockTable, lock_id: str = "") -> list[dict[str, Any]]:
    """Audit records, oldest first (one scan of the table, filtered to audit items)."""
    entries = [
        audit_view(e)
        for e in table.store.audit_entries()
        if (not lock_id or e.get("target") == lock_id) and e.get("status") != AUDIT_VOID
    ]
    return sorted(entries, key=lambda e: e["at"] or "")


def record_capped(table: LockTable, hold: Hold, max_hold: float) -> None:
    """Write the audit record of ``hold``, which reached its max-hold (``max_hold`` seconds)
    and whose work was stopped there: who held which lock, since when. A record of what
    happened, not of a step: if it cannot be written, ``run`` says so and goes on."""
    lease = hold.lease
    for lock_id in hold.lock_ids:
        entry = {
            "action_id": uuid.uuid4().hex[:16],
            "action": CAPPED,
            "target": lock_id,
            "slot": lease.slot,
            "lease_id": lease.lease_id,
            "holder": lease.owner,
            "holder_host": table.identity.host,
            "fencing_token": hold.fencing_tokens.get(lock_id),
            "actor": "awsflock run",
            "reason": f"held since {iso_utc(lease.acquired_at)}, for its --max-hold of "
            f"{format_seconds(max_hold)}: the command was stopped",
            "at_ms": round(table.clock.time() * 1000),
            "status": AUDIT_APPLIED,
        }
        try:
            table.store.put_audit(audit_key(f"{lease.lease_id}.{CAPPED}.{lock_id}"), entry)
        except errors.AwsflockError as exc:
            log.warning(
                "the hold of %r reached its max-hold, but its audit record was not written: %s",
                lock_id,
                exc.one_line(),
            )
