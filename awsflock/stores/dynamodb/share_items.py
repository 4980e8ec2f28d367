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

import dataclasses
import json
import uuid
from dataclasses import replace
from typing import Any

from awsflock.protocol import Attempt
from awsflock.records import Identity, LockRecord, holder_fields
from awsflock.shares import MAX_SHARES, group_of
from awsflock.stores.dynamodb.items import ALIASES, from_attr, record_from_item
from awsflock.stores.dynamodb.pv import A_LAPSE, lapse_of

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
    lapse = item.get(A_LAPSE, {}).get("M")
    return replace(
        record,
        shared=A_SHARED in item,
        shares=shares,
        claimed_until=claim / 1000 if isinstance(claim, int) else None,
        lapse=lapse_of({k: from_attr(v) for k, v in lapse.items()}) if lapse else None,
    )


def stale_shares(record: LockRecord | None, keep: str = "") -> list[str]:
    """The share attributes ``record``'s item holds that are not its group's (all of them but
    ``keep`` where the group itself is left behind): what a take removes."""
    if record is None:
        return []
    live = {share_name(s.lease_id) for s in record.shares} if record.shared else set()
    names = [k for k in record.extra if k.startswith(SHARE_PREFIX) and k not in live]
    return sorted(n for n in names if n != keep)[: 2 * MAX_SHARES]


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


def aliases(mine: str, lapsed: list[tuple[str, int]], stale: list[str]) -> dict[str, Any]:
    """The values that name a share step's attributes (``writes.ALIASES``): the share's own
    (``#sh``), the shares that ran out it removes, each asserted unchanged (``#o0``..., their
    ends ``:oe0``...), and the attributes left over from earlier groups it removes (``#x0``...).
    Short placeholders keep the expressions within DynamoDB's 4 KB however many there are."""
    names = {"sh": mine}
    names.update({f"o{i}": name for i, (name, _) in enumerate(lapsed)})
    names.update({f"x{i}": name for i, name in enumerate(stale)})
    values: dict[str, Any] = {ALIASES: names}
    values.update({f"oe{i}": end for i, (_, end) in enumerate(lapsed)})
    return values


def _unchanged(count: int) -> str:
    return "".join(f" AND #o{i}.#e = :oe{i}" for i in range(count))


def _removed(lapsed: int, stale: int) -> list[str]:
    return [f"#o{i}" for i in range(lapsed)] + [f"#x{i}" for i in range(stale)]


def join_condition(raise_end: bool, lapsed: int) -> str:
    """A share joins the live group it saw (``:group``): not ended and not run out more than
    the skew window ago, room for one more once the ``lapsed`` shares that ran out leave
    (``:room``), no claim, the token above the counter; ``raise_end``: the share ends after
    the group (its end is raised), else not."""
    end = "#expires_ms <= :expires_ms" if raise_end else "#expires_ms > :expires_ms"
    return (
        f"{GROUP} AND #lease = :group AND #expires_ms >= :cutoff_ms AND #hn < :room"
        " AND attribute_not_exists(#sh)"
        f" AND (attribute_not_exists(#fence) OR #fence < :token) AND {NO_CLAIM} AND {end}"
        + _unchanged(lapsed)
    )


def join_update(raise_end: bool, lapsed: int, stale: int) -> str:
    """The share joins (``:delta``: one less the shares that ran out it removes)."""
    update = "SET #sh = :entry, #hn = #hn + :delta, #fence = :token, #lease_id = :version"
    if lapsed:  # the first share that did not end released, if none before (``:gl``)
        update += ", #gl = if_not_exists(#gl, :gl)"
    if raise_end:
        update += ", #expires_ms = :expires_ms, #expiration_time = if_not_exists(#kept_until, :ttl)"
    removed = _removed(lapsed, stale)
    return update + (" REMOVE " + ", ".join(removed) if removed else "")


def with_new_group(update: str, stale: int) -> str:
    """A plain take's update (``expressions.acquire_update`` of the group's lease) that also
    makes the group: marked shared, with this share alone, and no claim or old share left."""
    sets, removes = update.split(" REMOVE ")
    sets += ", #shared = :one, #hn = :one, #sh = :entry"
    dropped = [r for r in removes.split(", ") if r not in UNSHARE]
    dropped += ["#claim", *_removed(0, stale)]
    return f"{sets} REMOVE {', '.join(dropped)}"


def renew_condition(raise_end: bool) -> str:
    """The share is in the live group, not run out at ``:now_ms``, its reading no older than
    its last (a renew landing late changes nothing), and it moves its end back only from a
    reading a whole skew window later (``expressions.NO_EARLIER``)."""
    end = "#expires_ms <= :expires_ms" if raise_end else "#expires_ms > :expires_ms"
    return (
        f"{GROUP} AND attribute_exists(#sh) AND #sh.#g = #lease"
        " AND #sh.#e > :now_ms AND #sh.#r <= :now_ms"
        f" AND (#sh.#e <= :expires_ms OR #sh.#r <= :order_ms) AND {end}"
    )


def renew_update(raise_end: bool, keeper: bool) -> str:
    update = (
        "SET #sh.#e = :expires_ms, #sh.#r = :now_ms, #sh.#d = :lease_duration, #lease_id = :version"
    )
    if keeper:
        update += ", #sh.#k = :keeper"
    if raise_end:
        update += ", #expires_ms = :expires_ms, #expiration_time = if_not_exists(#kept_until, :ttl)"
    return update


#: How a share's end leaves its group: the group ends with it (``LAST``: every other share ran
#: out); its end comes down to the latest of the others' (``LOWER``); or it is left as it is
#: (``MORE``: sent when the others keep changing).
LAST, LOWER, MORE = "last", "lower", "more"


def end_condition(kind: str, others: int) -> str:
    """A share's end: it is in the group, not ended; for ``LAST`` and ``LOWER``, the other
    shares are exactly ``others``, each unchanged (``:count`` in all); for ``MORE``, at least
    one more is there."""
    base = f"{GROUP} AND attribute_exists(#sh) AND #sh.#g = #lease"
    if kind == MORE:
        return base + " AND #hn > :one"
    return base + " AND #hn = :count" + _unchanged(others)


def end_update(kind: str, others: int, forced: bool, lapse: bool = False) -> str:
    """Remove the share; ``LAST``: the group ends too (marked as the share's end), and the
    shares that ran out with it; ``LOWER``: the group's end becomes the latest of the others'
    (``:group_end``), so a waiting exclusive acquire waits only for the shares that are left.
    ``lapse``: the group keeps ``:gl`` as its first share that did not end released, if it
    has none (``pv.A_LAPSE``)."""
    kept = ", #gl = if_not_exists(#gl, :gl)" if lapse else ""
    if kind == MORE:
        return f"SET #hn = #hn - :one, #lease_id = :version{kept} REMOVE #sh"
    if kind == LOWER:
        return (
            f"SET #hn = #hn - :one, #lease_id = :version, #expires_ms = :group_end{kept},"
            " #expiration_time = if_not_exists(#kept_until, :group_ttl) REMOVE #sh"
        )
    update = (
        "SET #ended = :ended, #expires_ms = :now_ms, #hn = :zero, #lease_id = :version,"
        f" #expiration_time = if_not_exists(#kept_until, :ttl){kept}"
    )
    if forced:
        update += ", #forced_by = :actor, #forced_reason = :reason, #forced_ms = :now_ms"
    return update + " REMOVE " + ", ".join(["#sh", *_removed(others, 0)])


#: A waiting exclusive acquire's claim, raised only (a claim landing late never shortens one).
CLAIM_CONDITION = f"{GROUP} AND (attribute_not_exists(#claim) OR #claim < :until)"
CLAIM_UPDATE = "SET #claim = :until, #lease_id = :version"


def all_shares(record: LockRecord | None) -> list[str]:
    """Every share attribute of ``record``'s group (a new group replaces them)."""
    return [share_name(s.lease_id) for s in record.shares] if record is not None else []


def granted(
    lock_id: str, attempt: Attempt, values: dict[str, Any], joined: LockRecord | None
) -> LockRecord:
    """The group as a share's take that a transaction applied left it (it answers nothing):
    the share, in the group it joined or in its new one."""
    end_ms, token = attempt.now_ms + attempt.lease_ms, int(values["token"])
    share = LockRecord(
        lock_id=lock_id,
        lease_id=attempt.lease_id,
        **holder_fields(attempt.identity),
        acquired_at=attempt.now_ms / 1000,
        expires_at=end_ms / 1000,
        lease_duration=attempt.lease_ms / 1000,
        fencing_token=token,
        shared=True,
        extra={"renewed_ms": attempt.now_ms, "expires_ms": end_ms},
    )
    if joined is not None:
        cutoff = (attempt.now_ms - attempt.skew_ms) / 1000
        kept = tuple(s for s in joined.shares if s.expires_at >= cutoff)  # the others it removed
        return dataclasses.replace(
            joined,
            version=str(values["version"]),
            expires_at=max(joined.expires_at, end_ms / 1000),
            fencing_token=token,
            shares=(*kept, share),
        )
    return dataclasses.replace(
        share, lease_id=group_of(attempt.lease_id), version=str(values["version"]), shares=(share,)
    )


def ends(record: LockRecord, name: str, cutoff_ms: int) -> list[tuple[str, int]]:
    """The shares of ``record`` but ``name`` that ran out before ``cutoff_ms``: (attribute,
    end), each removed only if its end is still that one."""
    ends = [(share_name(s.lease_id), int(s.extra.get("expires_ms", 0))) for s in record.shares]
    return [(n, ms) for n, ms in ends if n != name and ms < cutoff_ms]


def end_plan(
    seen: LockRecord | None, name: str, now_ms: int, skew_ms: int, *, exact: bool
) -> tuple[str, list[tuple[str, int]]]:
    """How a share's end leaves its group as ``seen`` shows it (``share_items.LAST``, ``LOWER``
    or ``MORE``) and the other shares it asserts unchanged: every other share ran out more than
    the skew window ago (or none is seen: unseen, it is sent as the last share, and a refusal
    shows what there is), the group ends; else, ``exact``, its end comes down to theirs; else
    it is left."""
    if seen is None:
        return LAST, []
    others = [s for s in seen.shares if share_name(s.lease_id) != name]
    ends = [(share_name(s.lease_id), int(s.extra.get("expires_ms", 0))) for s in others]
    if all(ms < now_ms - skew_ms for _, ms in ends):
        return LAST, ends
    return (LOWER, ends) if exact else (MORE, [])
