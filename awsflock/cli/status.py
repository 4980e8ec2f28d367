"""What operators see: the state of a lock (``status``), every lock (``list``), audit records.

The JSON field names here are a stable interface (documented in docs/reference/output.md): add
fields, never rename them.
"""

from __future__ import annotations

from typing import Any

from awsflock.records import Line, LockRecord, Pool
from awsflock.shares import is_share_id
from awsflock.state import LockState, json_fields
from awsflock.text import format_seconds, iso_utc, printable

HELD, EXPIRED, FREE = "held", "expired", "free"

#: A lease held longer than this is flagged as long-held in ``status`` and ``list``.
LONG_HELD = 24 * 3600.0


def state_of(record: LockRecord | None, now: float) -> str:
    """held: an unexpired lease; expired: the lease ended but nobody reclaimed it; free."""
    if record is None or record.released:
        return FREE
    return HELD if record.expires_at > now else EXPIRED


def view(
    lock_id: str, record: LockRecord | None, now: float, skew: float, show_lease_id: bool = False
) -> dict[str, Any]:
    """The JSON object of ``status --json`` and ``list --json``."""
    state = state_of(record, now)
    data: dict[str, Any] = {"lock_id": lock_id, "state": state}
    if record is None:
        return data
    if record.line.waiters:
        data["line"] = line_view(record.line, now, skew)
    data["fencing_token"] = record.fencing_token
    if record.previous is not None:  # how the lease before this one ended
        data["previous"] = record.previous.as_dict()
    _with_terms(data, record, now, skew)
    if record.released:
        if record.forced_by:
            data["force_released_by"] = record.forced_by
            data["force_reason"] = record.forced_reason
        data["released_at"] = iso_utc(record.expires_at)
        return data
    data.update(
        {
            "owner": record.owner,
            "host": record.host or None,
            "pid": record.pid or None,
            "user": record.user or None,
            "ci_url": record.ci_url or None,
            "command": record.command or None,
            "acquired_at": iso_utc(record.acquired_at) if record.acquired_at else None,
            "expires_at": iso_utc(record.expires_at),
            "expires_in_s": round(record.expires_at - now, 3),
            "held_for_s": round(now - record.acquired_at, 3) if record.acquired_at else None,
            "lease_duration_s": record.lease_duration,
            "legacy_client": record.legacy,
            "kept_alive_by": record.keeper or None,
            "long_held": bool(record.acquired_at and now - record.acquired_at > LONG_HELD),
        }
    )
    if state == EXPIRED:
        free_at = max(record.expires_at, record.free_after() or 0.0) + skew
        data["reclaimable_in_s"] = round(max(0.0, free_at - now), 3)
    if show_lease_id:
        data["lease_id"] = record.lease_id
    if record.shared and not is_share_id(record.lease_id):  # a group, not a share's view
        _with_shares(data, record, now, skew, show_lease_id)
    return data


def _with_terms(data: dict[str, Any], record: LockRecord, now: float, skew: float) -> None:
    """The hold's cap while it lasts; the lease's lock-delay, and, while it keeps the lock
    after an unreleased end, until when (the skew window added, as a taker's clock needs
    it)."""
    if record.capped_at is not None and not record.ended:  # the hold's cap (--max-hold)
        data["capped_at"] = iso_utc(record.capped_at)
        data["capped_in_s"] = round(record.capped_at - now, 3)
    if not record.lock_delay:
        return
    data["lock_delay_s"] = record.lock_delay
    after = record.free_after()
    ended = record.released or record.expires_at < now
    if after is not None and ended and after + skew > now:
        data["free_after"] = iso_utc(after + skew)
        data["free_in_s"] = round(after + skew - now, 3)


def _with_shares(
    data: dict[str, Any], record: LockRecord, now: float, skew: float, show_lease_id: bool
) -> None:
    """A lock held shared: its group's lease is the top; every share, oldest first, each with
    its own end and token; whether a waiting exclusive acquire keeps new shares out."""
    shares = []
    for share in record.shares:
        entry = view(record.lock_id, share, now, skew, show_lease_id)
        del entry["lock_id"]
        shares.append(entry)
    data["shared"] = True
    data["shares"] = shares
    data["exclusive_waiting"] = bool(record.claimed_until and record.claimed_until > now)


def line_view(line: Line, now: float, skew: float) -> list[dict[str, Any]]:
    """The line of fair waiters, in order (``status --json``'s ``line``), its times by our
    clock. A place whose waiter has not polled for the lapse bound plus the skew window, by our
    clock, is ``lapsed``."""
    places = []
    for place, waiter in enumerate(line.waiters, start=1):
        who = waiter.identity
        polled = now - line.at(waiter.seen_ms)
        since = line.at(waiter.since_ms)
        places.append(
            {
                "place": place,
                "owner": who.owner,
                "host": who.host or None,
                "pid": who.pid or None,
                "user": who.user or None,
                "ci_url": who.ci_url or None,
                "waiting_since": iso_utc(since),
                "waiting_for_s": round(now - since, 3),
                "last_poll_s_ago": round(polled, 3),
                "lapsed": line.lapsed(waiter, now, skew),
            }
        )
    return places


def render_line(places: list[dict[str, Any]]) -> list[str]:
    """One row per place in line, for ``status``."""
    rows = []
    for entry in places:
        details = [entry[k] for k in ("host", "ci_url") if entry.get(k)]
        if entry.get("pid"):
            details.insert(1 if entry.get("host") else 0, f"pid {entry['pid']}")
        who = entry["owner"] + (f" ({', '.join(str(d) for d in details)})" if details else "")
        since = f"waiting since {entry['waiting_since']} ({format_seconds(entry['waiting_for_s'])})"
        lapsed = "  (LAPSED: not polling)" if entry["lapsed"] else ""
        rows.append(printable(f"{entry['place']}. {who}, {since}{lapsed}"))
    return rows


def _with_line(text: str, data: dict[str, Any]) -> str:
    places = data.get("line")
    if not places:
        return text
    head = f"in line:  {len(places)} waiting (--fair), served in this order"
    return "\n".join([text, head, *("  " + row for row in render_line(places))])


def render_status(data: dict[str, Any], label: str = "lock") -> str:
    """``status`` for people: a few aligned lines, then the line of waiters, if any."""
    if "shares" in data and data["state"] != FREE:
        return _with_line(_render_shared(data), data)
    return _with_line(_render_status(data, label), data)


def _render_shared(data: dict[str, Any]) -> str:
    """A lock held shared: the group, then each share as ``status`` shows a lease."""
    shares = data["shares"]
    head = f"{printable(data['lock_id'])}: {data['state']}, shared by {len(shares)}"
    left = data["expires_in_s"]
    head += f"; until {data['expires_at']} (in {format_seconds(left)})" if left >= 0 else ""
    lines = [head]
    if data.get("exclusive_waiting"):
        lines.append("  an exclusive acquire waits: no share is added until it is served")
    if data.get("lease_id"):
        lines.append(f"  group lease id: {data['lease_id']} (force-release it to end every share)")
    for number, entry in enumerate(shares, start=1):
        text = _render_status({"lock_id": str(number), **entry}, label="share")
        lines.append("  " + text.replace("\n", "\n  "))
    return "\n".join(lines)


def _render_status(data: dict[str, Any], label: str) -> str:
    lock = printable(data["lock_id"])
    state = data["state"]
    if state == FREE and "owner" not in data:
        return _free_line(data, lock)
    rows = [(label, lock)]
    if state == HELD:
        rows.append(("state", "held" + ("  (LONG-HELD)" if data.get("long_held") else "")))
    else:
        rows.append(
            (
                "state",
                "EXPIRED, not yet reclaimed (reclaimable "
                + (
                    f"in {format_seconds(data['reclaimable_in_s'])})"
                    if data["reclaimable_in_s"] > 0
                    else "now)"
                ),
            )
        )
    rows.append(
        (
            "owner",
            data["owner"] + ("  (awsflock 0.2.0 client)" if data.get("legacy_client") else ""),
        )
    )
    for key in ("host", "pid", "user", "ci_url", "command"):
        if data.get(key):
            rows.append((key.replace("_", " "), str(data[key])))
    if data.get("acquired_at"):
        rows.append(
            ("acquired", f"{data['acquired_at']} ({format_seconds(data['held_for_s'])} ago)")
        )
    left = data["expires_in_s"]
    when = f"in {format_seconds(left)}" if left >= 0 else f"{format_seconds(-left)} ago"
    rows.append(("expires", f"{data['expires_at']} ({when})"))
    if data.get("lease_duration_s"):
        rows.append(("lease", format_seconds(data["lease_duration_s"])))
    if data.get("kept_alive_by"):
        rows.append(("kept alive", f"by {data['kept_alive_by']} (acquire --keep-alive)"))
    if data.get("capped_at"):
        left = data["capped_in_s"]
        when = f"in {format_seconds(left)}" if left >= 0 else f"{format_seconds(-left)} ago"
        rows.append(("max-hold", f"until {data['capped_at']} ({when}): no renewal passes it"))
    if data.get("lock_delay_s"):
        rows.append(("lock-delay", _delay(data)))
    if data.get("previous"):
        rows.append(("lease before", _before(data["previous"])))
    if "state_kept" in data:
        rows.append(("state kept", _kept(data["state_kept"])))
    if data.get("fencing_token") is not None:
        rows.append(("fencing token", str(data["fencing_token"])))
    if data.get("lease_id"):
        rows.append(("lease id", data["lease_id"]))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k + ':':<{width + 1}} {printable(v)}" for k, v in rows)


def kept_view(kept: LockState, now: float) -> dict[str, Any] | None:
    """The state kept with a lock, for ``status --state`` (None: none written)."""
    if kept.data is None:
        return None
    return {
        "bytes": len(kept.data),
        **json_fields(kept.data),
        "written_at": iso_utc(kept.stamp_ms / 1000),
        "written_s_ago": round(now - kept.stamp_ms / 1000, 3),
    }


def _kept(kept: dict[str, Any] | None) -> str:
    if kept is None:
        return "none written"
    text = kept["state"]
    shown = "" if text is None else ": " + (text if len(text) <= 60 else text[:57] + "...")
    ago = format_seconds(max(0.0, kept["written_s_ago"]))
    return f"{kept['bytes']} bytes, written {kept['written_at']} ({ago} ago){shown}"


def _free_line(data: dict[str, Any], lock: str) -> str:
    """``status`` of a lock that is free: how its last lease ended, and any lock-delay left."""
    line = f"{lock}: free"
    if data.get("force_released_by"):
        line += (
            f" (force-released by {printable(data['force_released_by'])} at "
            f"{data['released_at']}: {printable(data['force_reason'])})"
        )
    elif data.get("released_at"):
        line += f" (released at {data['released_at']})"
    if data.get("free_in_s"):
        line += (
            f"; its lock-delay keeps it until {data['free_after']} "
            f"(in {format_seconds(data['free_in_s'])})"
        )
    if data.get("fencing_token"):
        line += f"; last fencing token {data['fencing_token']}"
    if "state_kept" in data:
        line += f"\nstate kept: {printable(_kept(data['state_kept']))}"
    return line


def _delay(data: dict[str, Any]) -> str:
    """The lease's lock-delay, for ``status``, and until when it keeps the lock."""
    delay = f"{format_seconds(data['lock_delay_s'])} after an end without a release"
    if data.get("free_in_s"):
        delay += f": keeps the lock until {data['free_after']}"
    return delay


def _before(previous: dict[str, Any]) -> str:
    """How the lease before ended, for ``status``: "released", or who did not release it."""
    how = previous["how"]
    if how not in ("expired", "forced"):
        return str(how)
    when = f" at {iso_utc(previous['ended_at'])}" if "ended_at" in previous else ""
    who = previous.get("owner") or "unknown owner"
    if how == "forced":
        return f"force-released{when} by {previous.get('forced_by', 'an operator')} (held by {who})"
    return f"ran out{when}, not released by {who}"


def pool_view(state: Pool, now: float, skew: float, show_lease_id: bool = False) -> dict[str, Any]:
    """The JSON object of ``status --json`` and ``list --json`` for a pool."""
    size = state.size or (max(state.slots) + 1 if state.slots else 0)
    slots = []
    for number in range(size):
        entry = view(state.lock_id, state.slots.get(number), now, skew, show_lease_id)
        del entry["lock_id"]
        slots.append({"slot": number, **entry})
    held = sum(1 for e in slots if e["state"] == HELD)
    data = {
        "lock_id": state.lock_id,
        "state": HELD if held else FREE,
        "slots": size,
        "held_slots": held,
        "slot_states": slots,
    }
    if state.resizing_to is not None:
        data["resizing_to"] = state.resizing_to
    if state.line.waiters:
        data["line"] = line_view(state.line, now, skew)
    return data


def render_pool(data: dict[str, Any]) -> str:
    head = f"{printable(data['lock_id'])}: pool of {data['slots']} slots, {data['held_slots']} held"
    if "resizing_to" in data:
        head += (
            f"; being resized to {data['resizing_to']} slots, no slot is taken until that ends "
            "(if no pool-resize is running, one stopped part-way: run it again)"
        )
    lines = [head]
    for entry in data["slot_states"]:
        text = render_status({"lock_id": str(entry["slot"]), **entry}, label="slot")
        lines.append("  " + text.replace("\n", "\n  "))
    return _with_line("\n".join(lines), data)


LIST_HEADER = f"{'STATE':<8} {'EXPIRES':<14} {'HELD FOR':<9} {'OWNER':<24} {'WAITING':<7} LOCK_ID"


def render_list_row(data: dict[str, Any]) -> str:
    """One aligned row; LOCK_ID is last so rows stay aligned without knowing every width."""
    if "slot_states" in data:
        busy = [e for e in data["slot_states"] if e["state"] == HELD]
        soonest = min((e["expires_in_s"] for e in busy), default=None)
        until = "-" if soonest is None else f"in {format_seconds(soonest)}"
        summary = f"pool {len(busy)}/{data['slots']} held"
        summary += f", resizing to {data['resizing_to']}" if "resizing_to" in data else ""
        waiting = _waiting(data)
        return f"{data['state']:<8} {until:<14} {'-':<9} {summary:<24} {waiting:<7} " + printable(
            data["lock_id"]
        )
    state = data["state"]
    expires = held = owner = "-"
    if state != FREE:
        left = data["expires_in_s"]
        expires = f"in {format_seconds(left)}" if left >= 0 else f"{format_seconds(-left)} ago"
        held = format_seconds(data["held_for_s"]) if data.get("held_for_s") is not None else "?"
        owner = printable(data["owner"]) or "?"
        if data.get("shares"):
            owner = f"shared by {len(data['shares'])}"
        if data.get("long_held"):
            state = "LONG"
    if len(owner) > 24:
        owner = owner[:23] + "…"
    lock = printable(data["lock_id"])
    return f"{state:<8} {expires:<14} {held:<9} {owner:<24} {_waiting(data):<7} {lock}"


def _waiting(data: dict[str, Any]) -> str:
    """How many live waiters are in line ('-': none)."""
    live = sum(1 for place in data.get("line", ()) if not place["lapsed"])
    return str(live) if live else "-"
