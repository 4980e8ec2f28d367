"""The DynamoDB store's end steps: release and force-release, each one transaction of the
lock's item and the lease's done item (the item alone where the endpoint has no transactions),
and the bar put on a LEASE_ID that an end found never granted, so that its take, landing late,
takes nothing."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any, Callable

from awsflock.protocol import (
    BAR_KEEP_MS,
    DONE_MS,
    ENDED_BARRED,
    KEPT_UNTIL,
    Outcome,
    audit_key,
)
from awsflock.records import ENDED_RELEASED, kept_audit
from awsflock.shares import is_share_id
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb.base import expiration_seconds, new_version
from awsflock.stores.dynamodb.items import (
    A_LOCK_ID,
    A_UNAUDITED,
    BAR_PREFIX,
    audit_item,
    bar_name,
    done_item,
    fence_key,
    pending_audit_name,
    slot_prefix,
)
from awsflock.stores.dynamodb.share_items import share_name
from awsflock.stores.dynamodb.writes import Writes, _request

log = logging.getLogger("awsflock.store")

#: At most this many bars that ran out are dropped by one bar's write (expressions stay small).
MAX_STALE_BARS = 20
#: A pool's bar is kept an hour (``protocol.DONE_MS``), not a day: it lives in the pool's item,
#: whose every read pays for its size; an hour is far longer than a request lands late.
POOL_BAR_KEEP_MS = DONE_MS


def end_values(
    lease_id: str, ended: str, now_ms: int, skew_ms: int, **extra: Any
) -> dict[str, Any]:
    """The values of an end's expressions (``expressions.release_update``, ``force_update``)."""
    return {
        "lease": lease_id,
        "version": new_version(),
        "ended": ended,
        "now_ms": now_ms,
        "ttl": expiration_seconds(now_ms + skew_ms),
        "zero": 0,
        **extra,
    }


class Ends(Writes):
    """Release, and the end step of a force-release (``forces``)."""

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        """End our lease, keeping the item (and its fencing counter)."""
        return self._end(
            "release",
            expressions.release_update,
            lock_id,
            lease_id,
            ENDED_RELEASED,
            now_ms=now_ms,
            skew_ms=skew_ms,
            slot=slot,
        )

    def _end(
        self,
        operation: str,
        update: Callable[..., str],
        lock_id: str,
        lease_id: str,
        ended: str,
        *,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
        audit: dict[str, Any] | None = None,
        also: Callable[[str], str] | None = None,
        **extra: Any,
    ) -> Outcome:
        """Release and force-release: one write ending the lease, marked ``ended`` (with a
        force's ``audit`` record, where the endpoint has transactions); ``also``: more of its
        condition, given the slot's prefix."""
        values = end_values(lease_id, ended, now_ms, skew_ms, **extra)
        p = slot_prefix(slot)
        condition = expressions.release_condition(p, group_ok=operation == "force_release")
        condition += f" AND {also(p)}" if also is not None else ""
        alone = update(p)  # the lock's item alone (no transactions)
        if audit is not None:
            # With no transaction to put the force's audit record beside its end, the end's
            # own write keeps it in the lock's item (``PENDING_AUDIT_PREFIX``): it exists iff
            # the force took effect, even if this run dies before copying it to its own item.
            # That item is kept for good from now on, as a take there keeps it: an awsflock
            # 0.2.0 client would otherwise overwrite an item its lease ran out on (PutItem),
            # the record with it.
            name = pending_audit_name(lease_id)
            alone = update(p, kept=True) + f", #{name} = :pending ADD #{A_UNAUDITED} :unaudited"
            values["pending"] = json.dumps(kept_audit(audit), sort_keys=True)
            values["unaudited"] = frozenset({name})
            values["kept_until"] = KEPT_UNTIL
        outcome = Outcome(False, None)
        for _ in range(3):
            recorded = None
            if self._transactions:
                recorded = self._end_recorded(
                    operation, lock_id, update(p), condition, values, slot, audit
                )
            # No transactions (dynalite): the lock's item alone.
            outcome = recorded or self._conditional_update(
                operation, lock_id, alone, condition, values, slot
            )
            if outcome.applied:
                return outcome
            outcome = self._remembering(outcome, lock_id, lease_id)
            if not self._transactions or outcome.knows(lease_id):
                return outcome
            barred = self._bar(lock_id, lease_id, outcome, now_ms, skew_ms, slot)
            if barred is not None:
                return barred
            # The lock changed under the bar: the take under this LEASE_ID landed. End it.
        return outcome

    def _bar(
        self,
        lock_id: str,
        lease_id: str,
        outcome: Outcome,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
    ) -> Outcome | None:
        """An end step found nothing ever granted under ``lease_id`` (an acquire's attempt
        that may still be on its way): bar it, so that its take, landing later, takes nothing. A
        plain take checks the LEASE_ID's done item in its transaction: one is put, marked
        barred, only while the lock does not hold that lease. A slot's take on a pool is one
        UpdateItem: the pool's item gets an attribute that bars the id (``items.bar_name``),
        checked by that take. A slot's id on a lock that is not a pool yet: its take still on
        the wire is that UpdateItem, which lands on the pool if another client makes one first,
        so the lock's fence record is raised too, to the highest token a take sent before this
        release can carry (this reading plus the skew window, x1000): the pool made later starts
        its slots, and its plain token, above it, and that take is refused as too low.
        ``outcome`` barred; unchanged if barred already; None if the lease became the lock's
        meanwhile."""
        if outcome.pool is not None:
            if slot is None:  # a plain take on a pool is refused whatever its id
                return dataclasses.replace(outcome, barred=True)
            return self._bar_slot(lock_id, lease_id, outcome, now_ms, slot)
        items = self._bar_items(lock_id, lease_id, outcome, now_ms, skew_ms, slot)
        answer = self._transact("release", items)
        if answer is None:
            self._transactions = False
            return outcome
        if answer and len(answer) == 3 and answer[2][0] and not (answer[0][0] or answer[1][0]):
            # Only the fence record refused: its token is that high already (or its key holds
            # something else, which every take refuses too). The bar alone, then.
            answer = self._transact("release", items[:2])
            if answer is None:
                self._transactions = False
                return outcome
        if not answer:
            return dataclasses.replace(outcome, barred=True)
        (_, _), (exists, _) = answer[:2]
        if exists:  # barred already (or ended meanwhile: its done item says how)
            return self._remembering(outcome, lock_id, lease_id)
        return None

    def _bar_items(
        self,
        lock_id: str,
        lease_id: str,
        outcome: Outcome,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
    ) -> list[Any]:
        """The transaction of ``_bar`` on a lock that is not a pool: that the lock does not
        hold ``lease_id`` (a slot's id on a plain lock: its item gets the slot's bar too), the
        done item marked barred, and for a slot's id the fence record's raise."""
        not_held = (
            "attribute_not_exists(#slots) AND (attribute_not_exists(#lease) OR #lease <> :lease)"
        )
        if is_share_id(lease_id):  # nor as a share
            not_held += f" AND attribute_not_exists(#{share_name(lease_id)})"
        if slot is not None and outcome.lock is not None:
            # The lock's item gets the slot's bar too: a pool made of it keeps it, and its
            # slot's take checks it (a take sent later than the fence record's raise allows).
            name = bar_name(lease_id)
            update = f"SET #{name} = :until"
            check = f"attribute_exists(#lock_id) AND {not_held}"
            values = {"lease": lease_id, "until": now_ms + POOL_BAR_KEEP_MS}
            first = self._lock_write(lock_id, update, check, values)
        else:
            check = f"attribute_not_exists(#lock_id) OR ({not_held})"
            first = {
                "ConditionCheck": {
                    "TableName": self.table_name,
                    "Key": {A_LOCK_ID: {"S": lock_id}},
                    "ConditionExpression": check,
                    **_request(check, values={"lease": lease_id}),
                }
            }
        done = done_item(
            lock_id, lease_id, ENDED_BARRED, now_ms, expiration_seconds(now_ms + BAR_KEEP_MS)
        )
        items: list[Any] = [
            first,
            {
                "Put": {
                    "TableName": self.table_name,
                    "Item": done,
                    "ConditionExpression": "attribute_not_exists(#lock_id)",
                    "ExpressionAttributeNames": {"#lock_id": A_LOCK_ID},
                }
            },
        ]
        if slot is not None:
            items.append(self._fence_write(lock_id, (now_ms + skew_ms) * 1000 + 1))
        return items

    def _bar_slot(
        self, lock_id: str, lease_id: str, outcome: Outcome, now_ms: int, slot: int
    ) -> Outcome | None:
        """``_bar`` of a slot's LEASE_ID on a pool: its bar attribute, set only while the slot
        does not hold that lease; bars seen to have run out are dropped by the same write."""
        p = slot_prefix(slot)
        name = bar_name(lease_id)
        raw = outcome.lock.extra if outcome.lock is not None else {}
        stale = sorted(
            key
            for key, until in raw.items()
            if key.startswith(BAR_PREFIX)
            and key != name
            and isinstance(until, int)
            and until < now_ms
        )[:MAX_STALE_BARS]
        update = f"SET #{name} = :until" + (
            " REMOVE " + ", ".join(f"#{key}" for key in stale) if stale else ""
        )
        condition = (
            f"attribute_exists(#slots) AND (attribute_not_exists(#{name}) OR #{name} < :now_ms)"
            f" AND (attribute_not_exists(#{p}lease) OR #{p}lease <> :lease)"
        )
        values = {"until": now_ms + POOL_BAR_KEEP_MS, "lease": lease_id, "now_ms": now_ms}
        answered = self._conditional_update("release", lock_id, update, condition, values, slot)
        if answered.applied:
            return dataclasses.replace(outcome, barred=True)
        if answered.lock is not None and name in answered.lock.extra:
            return outcome  # barred already (and still)
        return None

    def _last_end(self, lock_id: str, values: dict[str, Any]) -> dict[str, Any]:
        """An end's update of the lock's fence record: its last lease ended so (and by whom, if
        forced), if it is the lease ended."""
        update = fates.LAST_END + (fates.LAST_FORCED if "actor" in values else "")
        return self._fence_update(lock_id, update, fates.LAST_IS_IT, values)

    def _fence_update(
        self, lock_id: str, update: str, condition: str, values: dict[str, Any]
    ) -> dict[str, Any]:
        """A transaction's conditional update of the lock's fence record."""
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {A_LOCK_ID: {"S": fence_key(lock_id)}},
                "UpdateExpression": update,
                "ConditionExpression": condition,
                **_request(update, condition, values=values),
            }
        }

    def _end_recorded(
        self,
        operation: str,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None,
        audit: dict[str, Any] | None = None,
        last: dict[str, Any] | None = None,
    ) -> Outcome | None:
        """An end step as one transaction with the lease's done item (see ``DONE_PREFIX``):
        a retry of it after any number of hand-offs still finds that it ended the lease; and
        a force's ``audit`` record, which so exists iff the force took effect; and the fence
        record's last lease ended with it (``last``: a group's end's, else a plain lease's).
        None if the endpoint has no transactions. Applied, it answers nothing: its record is
        None."""
        lease_id, now_ms = str(values["lease"]), int(values["now_ms"])
        done = done_item(
            lock_id, lease_id, str(values["ended"]), now_ms, expiration_seconds(now_ms + DONE_MS)
        )
        items: list[Any] = [
            self._lock_write(lock_id, update, condition, values),
            {"Put": {"TableName": self.table_name, "Item": done}},
        ]
        if audit is not None:
            item = audit_item(audit_key(lease_id), audit)
            items.append({"Put": {"TableName": self.table_name, "Item": item}})
        if last is None and slot is None and not is_share_id(lease_id):
            last = self._last_end(lock_id, values)  # the fence record's last lease ends too
        if last is not None:
            items.append(last)
        answer = self._transact(operation, items)
        if answer and last and answer[-1][0] and not any(r for r, _ in answer[:-1]):
            # Only the fence record refused: its last lease is another (0.2.0's lease, ended
            # by us; a fence record older than ``last_lease``). The end alone, then.
            answer = self._transact(operation, items[:-1])
        if answer is None:
            self._transactions = False
            return None
        in_doubt = self._in_doubt()
        if not answer:
            return Outcome(True, None, None, slot, in_doubt=in_doubt)
        outcome = self._after_update(operation, False, answer[0][1] or None, lock_id, slot)
        return dataclasses.replace(outcome, in_doubt=True) if in_doubt else outcome
