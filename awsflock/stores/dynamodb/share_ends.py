"""The DynamoDB store's end of a shared holder (``awsflock.shares``; the layout in
``share_items``): a release or force-release of one share, sent from the store's last view of
its group, and what the end leaves of that view.

A share's end is one transaction of the item and the share's done item (and a force's audit
record), as a plain end's. Where the other shares, as the view shows them, all ran out more
than the skew window ago, the same write ends the group and removes them (each asserted
unchanged, so the group ends only if they are exactly those); otherwise it removes the share
and counts one less. A refusal shows the item: sent again from that.

How the group ended (``docs/contributing/design-remembering.md``): a force of one share, or
the shares that ran out and leave with the group's end, make the group's ``gl`` (the first
share that did not end released; ``pv.A_LAPSE``), if it has none. The end that ends the group
also ends the fence record's last lease (the group's, ``fates.LAST_IS_A_GROUP``): released, or,
where the group has a ``gl``, that share as it ended, so a grant after the item is deleted
still names it. That end is pinned to the ``gl`` its view shows.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from awsflock.protocol import Outcome
from awsflock.records import ENDED_FORCED, FORCED, Identity, LockRecord, Previous, kept_audit
from awsflock.stores.dynamodb import fates
from awsflock.stores.dynamodb import share_items as layout
from awsflock.stores.dynamodb.base import expiration_seconds
from awsflock.stores.dynamodb.ends import end_values
from awsflock.stores.dynamodb.items import A_UNAUDITED, pending_audit_name
from awsflock.stores.dynamodb.pv import lapse_of, lapse_value
from awsflock.stores.dynamodb.sets import Sets

#: How many locks' last seen groups a store remembers (which end step a release sends).
VIEWS = 1024


class ShareEnds(Sets):
    """A share's end, and the views of groups it is sent from, of ``DynamoDBStore``."""

    def _seen_group(self, lock_id: str, record: LockRecord | None = None) -> LockRecord | None:
        """The lock's group as an answer last showed it (``record``: a new answer's). A step
        sent from it is only as good as it is: its condition asserts what it relies on, and a
        refusal shows the item, from which it is sent again."""
        views: dict[str, LockRecord] = self.__dict__.setdefault("_groups", {})
        if record is not None and record.shared:
            if len(views) >= VIEWS:
                views.clear()
            views[lock_id] = record
        return views.get(lock_id)

    def _ended_share(self, lock_id: str, lease_id: str, group_ended: bool) -> None:
        """The view of the lock's group after an end of ``lease_id`` was applied (a
        transaction answers nothing): without that share, its end the latest of the others'
        (as the end wrote it), or none once the group ended."""
        views: dict[str, LockRecord] = self.__dict__.setdefault("_groups", {})
        seen = views.pop(lock_id, None)
        left = () if seen is None else tuple(s for s in seen.shares if s.lease_id != lease_id)
        if seen is not None and left and not group_ended:
            end = max(s.expires_at for s in left)
            views[lock_id] = dataclasses.replace(seen, shares=left, expires_at=end)

    def _end_share(
        self,
        operation: str,
        lock_id: str,
        lease_id: str,
        values: dict[str, Any],
        audit: dict[str, Any] | None,
    ) -> Outcome:
        name, now_ms = layout.share_name(lease_id), int(values["now_ms"])
        skew_ms = int(values.pop("skew_ms"))
        values.update(one=1, zero=0)
        forced = "actor" in values
        seen = self._seen_group(lock_id)
        outcome = Outcome(False, None)
        for tries in range(6):
            if forced and _share(seen, lease_id) is None:
                seen = self._read_group(lock_id)  # its holder, for the group's ``gl``
            kind, others = layout.end_plan(seen, name, now_ms, skew_ms, exact=tries < 4)
            values.update(layout.aliases(name, others, []))
            values["count"] = 1 + len(others)
            group_end = max((ms for _, ms in others), default=now_ms)
            values.update(group_end=group_end, group_ttl=expiration_seconds(group_end + skew_ms))
            lapse = _lapse(seen, lease_id, others if kind == layout.LAST else [], values)
            update = layout.end_update(kind, len(others), forced, lapse=lapse is not None)
            condition = layout.end_condition(kind, len(others))
            last = None
            if kind == layout.LAST:  # pinned to the group's gl as seen: the fence record says it
                condition += _pin_lapse(seen, values)
                kept = seen.lapse if seen is not None and seen.lapse is not None else lapse
                last = self._group_last_end(lock_id, values, kept)
            recorded = None
            if self._transactions:
                recorded = self._end_recorded(
                    operation, lock_id, update, condition, values, None, audit, last
                )
            outcome = recorded or self._conditional_update(
                operation, lock_id, _alone(update, lease_id, values, audit), condition, values, None
            )
            if outcome.applied:
                self._ended_share(lock_id, lease_id, kind == layout.LAST)
                return outcome
            record = outcome.lock
            self._seen_group(lock_id, record)
            if _in_group(record, lease_id):
                seen = record  # in the group still: what it showed was not what was sent for
                continue
            outcome = self._remembering(outcome, lock_id, lease_id)
            if not self._transactions or outcome.knows(lease_id):
                return outcome
            barred = self._bar(lock_id, lease_id, outcome, now_ms, skew_ms, None)
            if barred is not None:
                return barred
            seen = None  # the take under this id landed meanwhile: end it
        return outcome

    def _read_group(self, lock_id: str) -> LockRecord | None:
        item = self._get_item(lock_id)
        return self._seen_group(lock_id, layout.lock_record(item) if item else None)

    def _group_last_end(
        self, lock_id: str, values: dict[str, Any], lapse: Previous | None
    ) -> dict[str, Any]:
        """The fence record's update by the end that ends a group (its last lease, marked a
        group's): released; or, where a share did not end released (``lapse``), that share
        as it ended becomes the last lease."""
        if lapse is None:
            update, last = "SET #last_end = :ended", {"ended": values["ended"], "one": 1}
        else:
            who = Identity(lapse.owner, lapse.host, ci_url=lapse.ci_url)
            last = {"one": 1, "fl": lapse.lease_id, "flw": fates.last_who(who)}
            update = "SET #last_lease = :fl, #last_who = :flw"
            removes = ["#last_sh"]
            if lapse.how == FORCED:
                at = None if lapse.ended_at is None else round(lapse.ended_at * 1000)
                update += ", #last_end = :fle, #last_fby = :flb, #last_fwhy = :fly"
                update += ", #last_fms = :flm"
                last.update(
                    fle=ENDED_FORCED + lapse.lease_id,
                    flb=lapse.forced_by or None,
                    fly=lapse.forced_reason or None,
                    flm=at,
                )
            else:
                removes += ["#last_end", "#last_fby", "#last_fwhy", "#last_fms"]
            update += " REMOVE " + ", ".join(removes)
        return self._fence_update(lock_id, update, fates.LAST_IS_A_GROUP, last)


def _share(seen: LockRecord | None, lease_id: str) -> LockRecord | None:
    return next((s for s in seen.shares if s.lease_id == lease_id), None) if seen else None


def _lapse(
    seen: LockRecord | None, lease_id: str, others: list[tuple[str, int]], values: dict[str, Any]
) -> Previous | None:
    """What a share's end makes the group's ``gl`` (``:gl``) if it has none: the share, forced;
    else the latest of ``others``, the shares that ran out and leave with the group (an end
    that ends it). None where there is none (``:gl`` unset)."""
    values.pop("gl", None)
    share = _share(seen, lease_id)
    if "actor" in values and share is not None:
        forced = {k: values[k] for k in ("actor", "reason", "now_ms")}
        values["gl"] = lapse_value(share, str(values["ended"]), **forced)
    elif others and seen is not None:
        gone = {n for n, _ in others}
        left = [s for s in seen.shares if layout.share_name(s.lease_id) in gone]
        values["gl"] = lapse_value(max(left, key=lambda s: s.expires_at))
    return lapse_of(values["gl"]) if "gl" in values else None


def _pin_lapse(seen: LockRecord | None, values: dict[str, Any]) -> str:
    """The condition that the group's ``gl`` is as ``seen`` shows it (none, or that share)."""
    if seen is None or seen.lapse is None:
        return " AND attribute_not_exists(#gl)"
    values["gli"] = seen.lapse.lease_id
    return " AND #gl.#i = :gli"


def share_end_values(
    lease_id: str, ended: str, now_ms: int, skew_ms: int, **extra: Any
) -> dict[str, Any]:
    """The values of a share's end step (``Shares._end_share``)."""
    return {**end_values(lease_id, ended, now_ms, skew_ms, **extra), "skew_ms": skew_ms}


def _in_group(record: LockRecord | None, lease_id: str) -> bool:
    live = record is not None and record.shared and not record.released
    return live and any(s.lease_id == lease_id for s in record.shares)  # type: ignore[union-attr]


def _alone(update: str, lease_id: str, values: dict[str, Any], audit: dict[str, Any] | None) -> str:
    """A share's end as the item's write alone (no transactions): a force's audit record
    rides in the item, as a plain force's does (``ends``)."""
    if audit is None:
        return update
    name = pending_audit_name(lease_id)
    values["pending"] = json.dumps(kept_audit(audit), sort_keys=True)
    values["unaudited"] = frozenset({name})
    sets, _, removes = update.partition(" REMOVE ")
    sets += f", #{name} = :pending"
    return (
        f"{sets} REMOVE {removes} ADD #{A_UNAUDITED} :unaudited"
        if removes
        else (f"{sets} ADD #{A_UNAUDITED} :unaudited")
    )
