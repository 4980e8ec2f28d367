"""How the lease before a grant ended, on DynamoDB (``docs/contributing/design-remembering.md``).

A plain take is a transaction, which answers nothing: it learns how the lease it replaced ended
by *pinning* it, sending the take under conditions that hold only for one such ending (a
``Pin``):

- ``CLEAN``, without a view of the lock: its item is absent or released, and its fence record's
  last lease was released. One request in the usual case.
- ``seen(record)``: the item is the version the caller saw, free (ended, or run out).
- ``from_fence(item)``: the item is absent (deleted: TTL, an awsflock 0.2.0 release), and the
  fence record's last lease is the one a refusal showed, ended as it showed (``FIRST`` where
  there is no fence record: nothing was ever granted).

A refused take is sent again pinned to what its refusal showed. The fence record
keeps the last plain lease (``last_lease``, ``last_who``, set by its take) and how it ended
(``last_end`` and a force's ``last_fby``, ``last_fwhy``, ``last_fms``, set by its end), since
neither TTL nor 0.2.0 deletes it. The grant writes its previous into the lock's item
(``pv_*``; ``PV_UNKNOWN`` where no record says), so a later read shows it too; a pool slot's
take, and a take without transactions (whose items are never deleted), copy it from the item.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from awsflock.records import (
    ENDED_FORCED,
    ENDED_RELEASED,
    EXPIRED,
    FIRST,
    FORCED,
    RELEASED,
    Identity,
    LockRecord,
    Previous,
)
from awsflock.stores.dynamodb.expressions import FREE_PLAIN, RAN_OUT
from awsflock.stores.dynamodb.items import from_attr
from awsflock.stores.dynamodb.pv import PV_FROM, PV_UNKNOWN, previous_of_item

#: The item absent, or its lease released (a group's: with no share that was not, ``gl``).
_RELEASED_ITEM = (
    "(attribute_not_exists(#lock_id) OR (#ended = :released_mark AND attribute_not_exists(#gl)))"
)
_ABSENT = "attribute_not_exists(#lock_id)"
#: The item the caller saw, free: ended, or run out more than the skew window ago.
_SEEN_FREE = f"(#lease_id = :seen AND (attribute_exists(#ended) OR {RAN_OUT}))"
#: The fence record's update by a plain take: the lease it grants is the last, not ended.
LAST_SET = "#last_lease = :lease, #last_who = :last_who"
LAST_REMOVE = "#last_end, #last_fby, #last_fwhy, #last_fms"
#: A group's take marks its lease a group's (``last_sh``), which a plain take removes: the end
#: of a group's last share, which may not know the group's id, updates the record only then.
LAST_GROUP = "#last_sh = :one"
LAST_IS_A_GROUP = "#last_sh = :one"
#: An end's update of the fence record, where its last lease is the one ended.
LAST_END = "SET #last_end = :ended"
LAST_FORCED = ", #last_fby = :actor, #last_fwhy = :reason, #last_fms = :now_ms"
LAST_IS_IT = "#last_lease = :lease"


@dataclass(frozen=True)
class Pin:
    """A plain take's conditions on what it replaces (``item``, the free part of the item's
    condition; ``fence``, added to the fence record's), their ``values``, what the lease
    before was if it is applied (None: not known), and the item it pins (``seen``)."""

    item: str
    fence: str
    values: dict[str, Any] = field(default_factory=dict)
    previous: Previous | None = None
    record: LockRecord | None = field(default=None, compare=False)


CLEAN = Pin(
    _RELEASED_ITEM,
    "#last_end = :released_mark",
    {"released_mark": ENDED_RELEASED},
    Previous(RELEASED),
)
FIRST_PIN = Pin(_ABSENT, "attribute_not_exists(#lock_id)", {}, Previous(FIRST))


def seen(record: LockRecord) -> Pin:
    return Pin(_SEEN_FREE, "", {"seen": record.version}, Previous.of(record), record)


def first(record: LockRecord | None, now: float, skew: float) -> Pin:
    """A take's first pin: the record the caller saw, if free; else ``CLEAN``."""
    if record is not None and record.version and record.is_free(now, skew):
        return seen(record)
    return CLEAN


def from_fence(item: dict[str, Any]) -> Pin:
    """The pin for an absent item, as the fence record ``item`` (its attributes) stands."""
    v = {k: from_attr(a) for k, a in item.items()}
    if not v:
        return FIRST_PIN
    lease = v.get("last_lease")
    if not lease:
        # Made by a step that grants nothing (a bar: the end of a slot's lease never granted),
        # or by a group's join: no plain lease was ever granted here (the fence record is as
        # old as awsflock's grants on the lock: 0.2.0 never writes one).
        return Pin(_ABSENT, "attribute_not_exists(#last_lease)", {}, Previous(FIRST))
    end = str(v.get("last_end") or "")
    if end == ENDED_RELEASED:
        return CLEAN
    pinned = "#last_lease = :last_lease AND " + (
        "#last_end = :last_end" if end else "attribute_not_exists(#last_end)"
    )
    values = {"last_lease": lease, **({"last_end": end} if end else {})}
    who = _who(v.get("last_who"))
    previous = previous_of_item(
        {
            "pv_lease": lease,
            "pv_end": end,
            "pv_owner": who.owner,
            "pv_host": who.host,
            "pv_ci": who.ci_url,
            "pv_fby": v.get("last_fby"),
            "pv_fwhy": v.get("last_fwhy"),
            "pv_fms": v.get("last_fms"),
        }
    )  # no end for one that ran out: renewals do not write the fence record
    return Pin(_ABSENT, pinned, values, previous)


def kept(pin: Pin) -> tuple[str, bool]:
    """A take's free condition without transactions (its item kept for good: the lease before
    is the item's, copied by the take), and whether its lease before is given instead: a
    group's is (copied, it would be the group's own end, not its shares'), and an awsflock
    0.2.0 lease's (it has no ``lease`` to copy), so those are taken only as the version seen
    (``pin``'s; a refusal shows it)."""
    if pin.record is not None and (pin.record.shared or pin.record.legacy):
        return f"({FREE_PLAIN} AND #lease_id = :seen)", True
    return f"({FREE_PLAIN} AND {_COPIED})", False


#: An item whose lease before a take without transactions copies: none, or one of ours that
#: is not a group's.
_COPIED = (
    "(attribute_not_exists(#lock_id) OR (attribute_exists(#lease)"
    " AND attribute_not_exists(#shared)))"
)


def kept_again(pin: Pin, record: LockRecord | None) -> Pin:
    """A take without transactions, refused: pinned to the item it showed where that is one a
    take cannot copy (``kept``), else as it was."""
    if record is not None and (record.shared or record.legacy) and record.version:
        return seen(record)
    return pin


def accepts(pin: Pin, record: LockRecord) -> bool:
    """Whether ``pin``'s item condition holds for the lock's item ``record`` (free): so that
    a refusal of it was for something else (the line, a LEASE_ID used before)."""
    if "seen" in pin.values:
        return bool(record.version == pin.values["seen"])
    released = record.ended == ENDED_RELEASED and record.lapse is None
    return pin.item == _RELEASED_ITEM and released


def last_who(identity: Identity) -> str:
    """The fence record's ``last_who``: the holder's name, host and CI URL (JSON)."""
    who = {"owner": identity.owner, "host": identity.host, "ci_url": identity.ci_url}
    return json.dumps({k: v for k, v in who.items() if v}, separators=(",", ":"))


def _who(text: Any) -> Identity:
    try:
        who = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        who = {}
    if not isinstance(who, dict):
        who = {}
    return Identity(
        str(who.get("owner", "")), str(who.get("host", "")), ci_url=str(who.get("ci_url", ""))
    )


def pv_values(previous: Previous | None) -> dict[str, Any]:
    """The item's ``pv_*`` values for a grant whose lease before was ``previous``."""
    if previous is None:
        return {"pv_lease": None, "pv_end": PV_UNKNOWN, **dict.fromkeys(list(PV_FROM)[2:])}
    ended = {RELEASED: ENDED_RELEASED, FORCED: ENDED_FORCED}.get(previous.how)
    at = None if previous.ended_at is None else round(previous.ended_at * 1000)
    return {
        "pv_lease": previous.lease_id or None,
        "pv_end": ended,
        "pv_owner": previous.owner or None,
        "pv_host": previous.host or None,
        "pv_ci": previous.ci_url or None,
        "pv_exp": at if previous.how == EXPIRED else None,
        "pv_fby": previous.forced_by or None,
        "pv_fwhy": previous.forced_reason or None,
        "pv_fms": at if previous.how == FORCED else None,
    }
