"""Shared holders (``awsflock.shares``) in a lock's item: the layout, and the expressions of the
share steps.

A lock held shared is a *group*: the item's plain lease attributes are the group's lease (its
``lease`` the group's id, its ``expires_ms`` and ``expiration_time`` the latest end of any share,
its ``fence`` the latest token given), and ``shared`` is 1. Each share is one map attribute,
``r_`` and its LEASE_ID's hex digits, holding the id of its group (``g``), its end (``e``), the
reading it was granted or last renewed with (``r``), when it was granted (``a``), its token
(``f``), its length in seconds (``d``), who holds it (``w``, compact JSON) and its keeper
(``k``). ``hn`` counts the group's shares. A share whose ``g`` is not the item's ``lease`` is
left over from an earlier group (ended by force, or run out and taken over): it holds nothing,
is not read as a share, and the next take that sees it removes it. ``claim`` is a waiting
exclusive acquire's claim (epoch ms, by its clock).

Every condition of a share's step names its own attribute and compares its ``g`` with the
item's ``lease`` (DynamoDB compares two attributes in one condition), so no write of a share
applies to a group it is not in.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from awsflock.records import Identity, LockRecord
from awsflock.shares import MAX_SHARES
from awsflock.stores.dynamodb.items import from_attr, record_from_item

A_SHARED = "shared"
A_SHARES = "hn"
A_CLAIM = "claim"
SHARE_PREFIX = "r_"
#: Each of a share's holder fields is kept to this many characters: ``MAX_SHARES`` shares with
#: every field that long take about 200 KB of an item's 400 KB.
FIELD = 300

#: The item is a group of shares, not ended, not a pool.
GROUP = "#shared = :one AND attribute_not_exists(#ended) AND attribute_not_exists(#slots)"
#: No waiting exclusive acquire's claim is live.
NO_CLAIM = "(attribute_not_exists(#claim) OR #claim <= :now_ms)"
#: What every exclusive take and every new group removes: the marks of a group.
UNSHARE = ("#shared", "#hn", "#claim")


def share_name(lease_id: str) -> str:
    """The attribute of share ``lease_id``."""
    return SHARE_PREFIX + uuid.UUID(lease_id).hex


def entry(identity: Identity, group: str, *, now_ms: int, end_ms: int, token: int) -> Any:
    """A new share's map attribute (as ``items.to_attr`` writes a dict)."""
    who = {
        "o": identity.owner,
        "h": identity.host,
        "p": identity.pid,
        "u": identity.user,
        "c": identity.ci_url,
        "m": identity.command,
    }
    return {
        "g": group,
        "e": end_ms,
        "r": now_ms,
        "a": now_ms,
        "f": token,
        "d": (end_ms - now_ms) / 1000,
        "w": json.dumps(
            {k: v[:FIELD] if isinstance(v, str) else v for k, v in who.items() if v not in ("", 0)},
            separators=(",", ":"),
        ),
    }


def lock_record(item: dict[str, Any]) -> LockRecord:
    """A lock's item read as its record (``items.record_from_item``), with its group of shares
    and its claim."""
    record = record_from_item(item)
    if A_SHARED not in item and A_CLAIM not in item:
        return record
    shares, _ = shares_of(item, record.lock_id)
    claim = record.extra.get(A_CLAIM)
    return replace(
        record,
        shared=A_SHARED in item,
        shares=shares,
        claimed_until=claim / 1000 if isinstance(claim, int) else None,
    )


def stale_shares(record: LockRecord | None, keep: str = "") -> list[str]:
    """The share attributes ``record``'s item holds that are not its group's (all of them but
    ``keep`` where the group itself is left behind): what a take removes."""
    if record is None:
        return []
    live = {share_name(s.lease_id) for s in record.shares} if record.shared else set()
    names = [k for k in record.extra if k.startswith(SHARE_PREFIX) and k not in live]
    return sorted(n for n in names if n != keep)[:MAX_SHARES]


def shares_of(item: dict[str, Any], lock_id: str) -> tuple[tuple[LockRecord, ...], list[str]]:
    """The group's shares in ``item`` (in order of grant), and the names of the share
    attributes left over from earlier groups."""
    group = from_attr(item.get("lease", {"S": ""}))
    shared = A_SHARED in item
    found, stale = [], []
    for name, attr in item.items():
        if not name.startswith(SHARE_PREFIX) or "M" not in attr:
            continue
        fields = {k: from_attr(v) for k, v in attr["M"].items()}
        if not shared or fields.get("g") != group:
            stale.append(name)
            continue
        try:
            found.append(_share(lock_id, name, fields))
        except (KeyError, TypeError, ValueError):
            stale.append(name)  # not a share we wrote
    found.sort(key=lambda s: s.fencing_token or 0)
    return tuple(found), sorted(stale)[:MAX_SHARES]


def _share(lock_id: str, name: str, fields: dict[str, Any]) -> LockRecord:
    who = json.loads(str(fields.get("w") or "{}"))
    return LockRecord(
        lock_id=lock_id,
        lease_id=str(uuid.UUID(name[len(SHARE_PREFIX) :])),
        owner=str(who.get("o", "")),
        host=str(who.get("h", "")),
        pid=int(who.get("p", 0)),
        user=str(who.get("u", "")),
        ci_url=str(who.get("c", "")),
        command=str(who.get("m", "")),
        acquired_at=int(fields["a"]) / 1000,
        expires_at=int(fields["e"]) / 1000,
        lease_duration=float(fields.get("d") or 0),
        fencing_token=int(fields["f"]),
        keeper=str(fields.get("k") or ""),
        extra={"renewed_ms": int(fields["r"]), "expires_ms": int(fields["e"])},
    )


def join_condition(name: str, raise_end: bool) -> str:
    """A share joins the live group: the group not ended and not run out more than the skew
    window ago, room for one more, no claim, the line clear, the token above the counter;
    ``raise_end``: the share ends after the group (its end is raised), else not."""
    end = "#expires_ms <= :expires_ms" if raise_end else "#expires_ms > :expires_ms"
    return (
        f"{GROUP} AND #expires_ms >= :cutoff_ms AND #hn < :max AND attribute_not_exists(#{name})"
        f" AND (attribute_not_exists(#fence) OR #fence < :token) AND {NO_CLAIM} AND {end}"
    )


def join_update(name: str, raise_end: bool, stale: list[str]) -> str:
    update = f"SET #{name} = :entry, #hn = #hn + :one, #fence = :token, #lease_id = :version"
    if raise_end:
        update += ", #expires_ms = :expires_ms, #expiration_time = if_not_exists(#kept_until, :ttl)"
    return update + (" REMOVE " + ", ".join(f"#{s}" for s in stale) if stale else "")


def with_new_group(update: str, name: str, stale: list[str]) -> str:
    """A plain take's update (``expressions.acquire_update`` of the group's lease) that also
    makes the group: marked shared, with this share alone, and no claim or old share left."""
    sets, removes = update.split(" REMOVE ")
    sets += f", #shared = :one, #hn = :one, #{name} = :entry"
    dropped = [r for r in removes.split(", ") if r not in UNSHARE and r not in ("#hn",)]
    dropped += ["#claim", *(f"#{s}" for s in stale if s != name)]
    return f"{sets} REMOVE {', '.join(dropped)}"


def renew_condition(name: str, raise_end: bool) -> str:
    """The share is in the live group, not run out at ``:now_ms``, its reading no older than
    its last (a renew landing late changes nothing), and it moves its end back only from a
    reading a whole skew window later (``expressions.NO_EARLIER``)."""
    end = "#expires_ms <= :expires_ms" if raise_end else "#expires_ms > :expires_ms"
    return (
        f"{GROUP} AND attribute_exists(#{name}) AND #{name}.#g = #lease"
        f" AND #{name}.#e > :now_ms AND #{name}.#r <= :now_ms"
        f" AND (#{name}.#e <= :expires_ms OR #{name}.#r <= :order_ms) AND {end}"
    )


def renew_update(name: str, raise_end: bool, keeper: bool) -> str:
    update = (
        f"SET #{name}.#e = :expires_ms, #{name}.#r = :now_ms, #{name}.#d = :lease_duration,"
        " #lease_id = :version"
    )
    if keeper:
        update += f", #{name}.#k = :keeper"
    if raise_end:
        update += ", #expires_ms = :expires_ms, #expiration_time = if_not_exists(#kept_until, :ttl)"
    return update


def end_condition(name: str, last: list[tuple[str, int]] | None) -> str:
    """A share's end: it is in the group, not ended. ``last``: the group ends with it, for
    the other shares are exactly these (name, end), each run out (asserted unchanged); None:
    others are left (at least one more share)."""
    base = f"{GROUP} AND attribute_exists(#{name}) AND #{name}.#g = #lease"
    if last is None:
        return base + " AND #hn > :one"
    checks = "".join(f" AND #{other}.#e = :e{i}" for i, (other, _) in enumerate(last))
    return base + " AND #hn = :count" + checks


def end_update(name: str, last: list[tuple[str, int]] | None, forced: bool) -> str:
    """Remove the share; ``last``: the group ends too (marked as the share's end), and the run
    out shares with it."""
    if last is None:
        return f"SET #hn = #hn - :one, #lease_id = :version REMOVE #{name}"
    update = (
        "SET #ended = :ended, #expires_ms = :now_ms, #hn = :zero, #lease_id = :version,"
        " #expiration_time = if_not_exists(#kept_until, :ttl)"
    )
    if forced:
        update += ", #forced_by = :actor, #forced_reason = :reason, #forced_ms = :now_ms"
    removes = [f"#{name}", *(f"#{other}" for other, _ in last)]
    return update + " REMOVE " + ", ".join(removes)


#: A waiting exclusive acquire's claim, raised only (a claim landing late never shortens one).
CLAIM_CONDITION = f"{GROUP} AND (attribute_not_exists(#claim) OR #claim < :until)"
CLAIM_UPDATE = "SET #claim = :until, #lease_id = :version"
