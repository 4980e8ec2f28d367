"""Operator actions: force-release with an audit trail, the audit log, the IAM policy."""

from __future__ import annotations

import json
import logging
import secrets
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.records import RESERVED_PREFIX, LockRecord, iso_utc

if TYPE_CHECKING:
    from awsflock.lease import LockTable

log = logging.getLogger("awsflock.admin")

AUDIT_PREFIX = RESERVED_PREFIX + "audit#"


def audit_prefix(lock_id: str = "") -> str:
    return AUDIT_PREFIX + (f"{lock_id}#" if lock_id else "")


def default_actor(table: LockTable) -> str:
    """Who is acting: the AWS caller identity where it can be learned, else user@host."""
    arn = table.store.caller_identity()
    if arn:
        return arn
    ident = table.identity
    return f"{ident.user or 'unknown'}@{ident.host or 'unknown'}"


def force_release(
    table: LockTable,
    lock_id: str,
    *,
    reason: str,
    lease_id: str | None = None,
    actor: str | None = None,
    confirm: Callable[[LockRecord], bool] | None = None,
) -> dict[str, Any]:
    """End the current lease of ``lock_id`` whoever holds it, after naming it.

    The lease is named by ``lease_id`` or shown to ``confirm`` (which must return True). The
    write is conditional on exactly that lease, so a new holder that acquired in between is
    never affected. Returns the audit record written.
    """
    from awsflock.lease import check_lease_id, check_lock_id

    check_lock_id(lock_id)
    if not reason or not reason.strip():
        raise errors.UsageError("--reason is required", hint="say why, e.g. --reason 'runner died'")
    if lease_id is None and confirm is None:
        raise errors.UsageError(
            "force-release needs the lease named",
            hint="pass --lease-id ID, or --yes, or run it at a terminal to confirm",
        )
    record = table.store.get(lock_id)
    now = table.clock.time()
    if record is None or record.released:
        raise errors.NotHeld(f"lock {lock_id!r} is not held", hint="nothing to force-release")
    if lease_id is not None:
        lease_id = check_lease_id(lease_id)
        if record.lease_id != lease_id:
            raise errors.NotHeld(
                f"lease {lease_id} no longer holds {lock_id!r} (now {record.describe(now)})",
                hint="check `awsflock status` and name the current lease",
            )
    if confirm is not None and not confirm(record):
        raise errors.UsageError("force-release not confirmed", hint="nothing was changed")
    who = actor or default_actor(table)
    done, current = table.store.force_release(
        lock_id,
        record.lease_id,
        now_ms=round(now * 1000),
        skew_ms=round(table.skew * 1000),
        actor=who,
        reason=reason,
    )
    if not done:
        raise errors.NotHeld(
            f"lock {lock_id!r} changed hands before the force-release "
            + (f"(now {current.describe(now)})" if current and not current.released else ""),
            hint="nothing was changed; check `awsflock status` again",
        )
    entry = {
        "action": "force-release",
        "target": lock_id,
        "lease_id": record.lease_id,
        "holder": record.owner,
        "holder_host": record.host,
        "fencing_token": record.fencing_token,
        "actor": who,
        "reason": reason,
        "at_ms": round(now * 1000),
    }
    key = f"{audit_prefix(lock_id)}{round(now * 1000):013d}#{secrets.token_hex(4)}"
    log.info(
        "force-released %r (held by %s) for %s: %s",
        lock_id,
        record.owner,
        who,
        reason,
        extra={
            "event": "force_released",
            "lock_id": lock_id,
            "owner": record.owner,
            "fencing_token": record.fencing_token,
            "actor": who,
            "reason": reason,
        },
    )
    try:
        table.store.put_audit(key, entry)
    except errors.AwsflockError as exc:
        # The lock item itself records who and why (forced_by, forced_reason).
        log.warning(
            "the audit record was not written (%s); the lock item records the force-release",
            exc.one_line(),
        )
    return audit_view(entry)


def audit_view(entry: dict[str, Any]) -> dict[str, Any]:
    """An audit record as ``audit --json`` prints it (stable field names)."""
    at_ms = entry.get("at_ms")
    return {
        "at": iso_utc(at_ms / 1000) if isinstance(at_ms, (int, float)) else None,
        "action": entry.get("action"),
        "lock_id": entry.get("target"),
        "lease_id": entry.get("lease_id"),
        "holder": entry.get("holder"),
        "holder_host": entry.get("holder_host"),
        "fencing_token": entry.get("fencing_token"),
        "actor": entry.get("actor"),
        "reason": entry.get("reason"),
    }


def audit_records(table: LockTable, lock_id: str = "") -> list[dict[str, Any]]:
    """Audit records, oldest first (one scan of the table, filtered to audit items)."""
    entries = [audit_view(e) for e in table.store.scan_items(audit_prefix(lock_id))]
    return sorted(entries, key=lambda e: e["at"] or "")


# -- IAM ----------------------------------------------------------------------------------------

#: What each command needs on the table.
COMMAND_ACTIONS = {
    "table-create": ["CreateTable", "DescribeTable", "DescribeTimeToLive", "UpdateTimeToLive"],
    "acquire": ["UpdateItem", "GetItem"],
    "renew": ["UpdateItem"],
    "release": ["UpdateItem", "GetItem"],
    "run": ["UpdateItem", "GetItem"],
    "status": ["GetItem"],
    "list": ["Scan"],
    "force-release": ["GetItem", "UpdateItem", "PutItem"],
    "audit": ["Scan"],
}
READ_ONLY = ("status", "list", "audit")


def iam_policy(
    table: str, *, read_only: bool = False, region: str = "*", account: str = "*"
) -> str:
    """The least-privilege IAM policy document for the table, as JSON."""
    arn = f"arn:aws:dynamodb:{region}:{account}:table/{table}"

    def statement(sid: str, commands: tuple[str, ...]) -> dict[str, Any]:
        actions = sorted({f"dynamodb:{a}" for c in commands for a in COMMAND_ACTIONS[c]})
        return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": arn}

    if read_only:
        statements = [statement("AwsflockReadOnly", READ_ONLY)]
    else:
        statements = [
            statement("AwsflockLocks", tuple(c for c in COMMAND_ACTIONS if c != "table-create")),
            # Only for whoever runs `awsflock table-create` once; drop it for everyone else.
            statement("AwsflockTableSetup", ("table-create",)),
        ]
    return json.dumps({"Version": "2012-10-17", "Statement": statements}, indent=2)
