"""The lock item's record of how the lease before its current one ended (``pv_*``; written by
a take: ``fates``), read back into a ``Previous``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    EXPIRED,
    FIRST,
    FORCED,
    RELEASED,
    LockRecord,
    Previous,
)

#: ``pv_end`` where nothing says how the lease before ended (a fence record older than that).
PV_UNKNOWN = "?"
#: The item's attributes of its previous, and the lease attribute each copies where it is
#: copied (a slot's, or a take without transactions).
PV_FROM = {
    "pv_lease": "lease",
    "pv_end": "ended",
    "pv_owner": "owner",
    "pv_host": "host",
    "pv_ci": "ci_url",
    "pv_exp": "expires_ms",
    "pv_fby": "forced_by",
    "pv_fwhy": "forced_reason",
    "pv_fms": "forced_ms",
}


def previous_of_item(v: dict[str, Any]) -> Previous | None:
    """An item's previous from its ``pv_*`` attributes (``v``: their values); None where it has
    none (granted before they were kept) or says it is not known."""
    if "pv_lease" not in v or v.get("pv_end") == PV_UNKNOWN:
        return None
    end, lease = str(v.get("pv_end") or ""), v.get("pv_lease")
    if end == ENDED_RELEASED or not lease:
        return Previous(RELEASED if end == ENDED_RELEASED else FIRST)
    owner, host, ci = (str(v.get(n) or "") for n in ("pv_owner", "pv_host", "pv_ci"))
    held = Previous(EXPIRED, str(lease), owner, host, ci, ended_at=_ms(v.get("pv_exp")))
    if not end.startswith(ENDED_FORCED):
        return held
    why = str(v.get("pv_fwhy") or "")
    return replace(
        held,
        how=FORCED,
        ended_at=_ms(v.get("pv_fms")),
        forced_reason=why,
        forced_by=str(v.get("pv_fby") or ""),
    )


def _ms(value: Any) -> float | None:
    return value / 1000 if isinstance(value, (int, float)) else None


#: A group's item attribute of its first share found ended without its holder's release
#: (``LockRecord.lapse``): one map, written with ``if_not_exists`` so the first stays: its
#: LEASE_ID (``i``), holder (``o``, ``h``, ``c``), end mark (``e``: "" ran out, ``forced:ID``),
#: its end (``x``) and a force's ``b``, ``y``, ``m`` (by, why, when).
A_LAPSE = "gl"


def lapse_value(share: LockRecord, ended: str = "", **forced: Any) -> dict[str, Any]:
    """The ``gl`` map for ``share`` (a share's record as a view shows it), ended so: "" (ran
    out) or ``forced:ID`` with the force's ``actor``, ``reason`` and ``now_ms``."""
    value: dict[str, Any] = {
        "i": share.lease_id,
        "o": share.owner,
        "h": share.host,
        "c": share.ci_url,
        "e": ended,
        "x": round(share.expires_at * 1000),
    }
    if forced:
        value.update(b=forced["actor"], y=forced["reason"], m=forced["now_ms"])
    return {k: v for k, v in value.items() if v not in ("", None)}


def lapse_of(value: Any) -> Previous | None:
    """A group's ``gl`` map (its values) as a ``Previous``; None where there is none."""
    if not isinstance(value, dict) or not value.get("i"):
        return None
    end = str(value.get("e") or "")
    return previous_of_item(
        {
            "pv_lease": value["i"],
            "pv_end": end,
            "pv_owner": value.get("o"),
            "pv_host": value.get("h"),
            "pv_ci": value.get("c"),
            "pv_exp": None if end else value.get("x"),
            "pv_fby": value.get("b"),
            "pv_fwhy": value.get("y"),
            "pv_fms": value.get("m"),
        }
    )
