"""The DynamoDB store's shared holders (``awsflock.shares``; the layout in ``share_items``).

- **take** of a share: one TransactWriteItems, as a plain take's: the lock's item (a new group
  where a plain take would be granted, or a join of the live group), the fence record raised to
  the share's token, and the check that the share's id has no done item. Refused because the
  token was too low, the lock changed since it was seen, or the group's end is later than the
  share's (its end is raised only where it is earlier), it is sent again, three times at most.
- **renew** of a share: one UpdateItem (sent once more where the group's end is later than
  the share's).
- **release** and **force-release** of a share: one transaction of the item and the share's
  done item (and a force's audit record), as a plain end's. Where the other shares, as the
  store last saw them, all ran out more than the skew window ago, the same write ends the
  group and removes them (each asserted unchanged, so the group ends only if they are exactly
  those); otherwise it removes the share and counts one less. A refusal shows the item: sent
  again from that.
- **claim**: one UpdateItem, raised only.

An endpoint without transactions (dynalite) takes shares as it takes plain locks there: the
item alone, kept for good.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from awsflock.protocol import KEPT_UNTIL, Attempt, Outcome
from awsflock.records import ENDED_FORCED, ENDED_RELEASED, LockRecord, kept_audit
from awsflock.shares import MAX_SHARES, group_of, is_share_id, live
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb import share_items as layout
from awsflock.stores.dynamodb.base import expiration_seconds, new_version
from awsflock.stores.dynamodb.ends import end_values
from awsflock.stores.dynamodb.items import A_LOCK_ID, A_UNAUDITED, done_key, pending_audit_name
from awsflock.stores.dynamodb.sets import Sets
from awsflock.stores.dynamodb.steps import renew_values
from awsflock.stores.dynamodb.takes import _variant

#: How many locks' last seen groups a store remembers (which end step a release sends).
VIEWS = 1024


class Shares(Sets):
    """The share steps of ``DynamoDBStore``."""

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

    # -- take --------------------------------------------------------------------------------

    def _take_share(self, lock_id: str, attempt: Attempt) -> Outcome:
        if attempt.slot is not None or attempt.ticket is not None:
            raise ValueError("a share's take is of a plain lock, without a ticket")
        values, line, _, sets, removes = self._take_values(attempt)
        share, name = attempt.lease_id, layout.share_name(attempt.lease_id)
        end_ms = attempt.now_ms + attempt.lease_ms
        values.update(max=MAX_SHARES, kept_until=KEPT_UNTIL)
        token = max(attempt.now_ms * 1000, self._fences.get(lock_id, 0)) + 1
        # A first try knows the group only as this store last saw it (else a join costs one
        # refused try, whose answer shows it).
        seen = attempt.seen or self._seen_group(lock_id)
        outcome = Outcome(False, None)
        for _ in range(4):
            joins = _joinable(seen, attempt)
            values["token"] = token
            values["entry"] = layout.entry(
                attempt.identity, _group(seen, share, joins), now_ms=attempt.now_ms,
                end_ms=end_ms, token=token,
            )  # fmt: skip
            values.update(self._share_names(name, seen, attempt, joins))
            if joins:
                assert seen is not None
                raise_end = seen.expires_at * 1000 <= end_ms
                lapsed, stale = values["lapsed"], values["stale"]
                condition = f"{layout.join_condition(raise_end, lapsed)} AND {line}"
                update = layout.join_update(raise_end, lapsed, stale)
            else:
                free = _variant(seen, attempt.now_ms / 1000, attempt.skew_ms / 1000)
                free = free if self._transactions else expressions.FREE_PLAIN
                values["lease"], values["seen"] = group_of(share), seen.version if seen else None
                condition = expressions.acquire_condition("", line, free) + " AND "
                condition += layout.NO_CLAIM
                plain = expressions.acquire_update("", sets, removes, kept=not self._transactions)
                values.update(fates.pv_values(None))  # a group's lease before: not said yet
                update = layout.with_new_group(plain, values["stale"])
            answer = self._share_try(lock_id, share, update, condition, values)
            if answer is None:  # no transactions after all (dynalite): made again without
                continue
            outcome, fence = answer
            if outcome.applied:
                self._learn_fence(lock_id, token)
                granted = layout.granted(lock_id, attempt, values, seen if joins else None)
                self._seen_group(lock_id, granted)
                return dataclasses.replace(outcome, lock=granted)
            record = outcome.lock if outcome.pool is None else None
            if outcome.pool is not None:
                return outcome
            high = max(fence or 0, (record.fencing_token or 0) if record else 0)
            self._learn_fence(lock_id, high)
            if high >= token and _could_take(record, attempt):
                token, seen = high + 1, record or seen
                continue
            if record is not None and _could_take(record, attempt) and _changed(seen, record):
                seen = record
                continue
            return outcome
        return outcome

    @staticmethod
    def _share_names(
        name: str, seen: LockRecord | None, attempt: Attempt, joins: bool
    ) -> dict[str, Any]:
        """What a share's take names besides its own attribute: joining, the group it saw
        (``:group``) and its shares that ran out, which leave (``:room``, ``:delta``); either
        way the attributes left over from earlier groups (a new group: every share of the one
        it replaces too), removed."""
        cutoff = attempt.now_ms - attempt.skew_ms
        lapsed = layout.ends(seen, name, cutoff) if joins and seen is not None else []
        stale = layout.stale_shares(seen, keep=name)
        if not joins:
            stale = sorted({*stale, *(n for n in layout.all_shares(seen) if n != name)})
        values = layout.aliases(name, lapsed, stale)
        values.update(
            lapsed=len(lapsed),
            stale=len(stale),
            room=MAX_SHARES + len(lapsed),
            delta=1 - len(lapsed),
            group=seen.lease_id if joins and seen is not None else None,
        )
        return values

    def _share_try(
        self, lock_id: str, share: str, update: str, condition: str, values: dict[str, Any]
    ) -> tuple[Outcome, int | None] | None:
        """One try of a share's take: the transaction of the lock's item, its fence record and
        the share's done item's check; the item alone, kept, without transactions. None if
        the endpoint answered that it has none (the take is then made again without)."""
        if not self._transactions:
            return self._conditional_update(
                "acquire", lock_id, update, condition, values, None
            ), None
        items: list[Any] = [
            self._lock_write(lock_id, update, condition, values),
            self._fence_write(lock_id, values["token"]),
            {
                "ConditionCheck": {
                    "TableName": self.table_name,
                    "Key": {A_LOCK_ID: {"S": done_key(share)}},
                    "ConditionExpression": "attribute_not_exists(#lock_id)",
                    "ExpressionAttributeNames": {"#lock_id": A_LOCK_ID},
                }
            },
        ]
        answer = self._transact("acquire", items)
        if answer is None:
            self._transactions = False
            return None
        in_doubt = self._in_doubt()
        if not answer:
            return Outcome(True, None, in_doubt=in_doubt), None
        (item_refused, item), (fence_refused, held), (ended_before, _) = answer
        fence = self._fence_token(lock_id, fence_refused, held)
        if ended_before or not item_refused:
            item = self._get_item(lock_id) or {}  # the item did not say: read it
        outcome = self._after_update("acquire", False, item or None, lock_id, None)
        return dataclasses.replace(outcome, in_doubt=in_doubt or outcome.in_doubt), fence

    # -- renew, end, claim -------------------------------------------------------------------

    def renew(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        keeper: str | None = None,
    ) -> Outcome:
        if not is_share_id(lease_id):
            return super().renew(
                lock_id, lease_id, now_ms=now_ms, lease_ms=lease_ms, skew_ms=skew_ms, slot=slot,
                keeper=keeper,
            )  # fmt: skip
        with self.step():
            return self._renew_share(lock_id, lease_id, now_ms, lease_ms, skew_ms, keeper)

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        if not is_share_id(lease_id):
            return super().release(lock_id, lease_id, now_ms=now_ms, skew_ms=skew_ms, slot=slot)
        values = share_end_values(lease_id, ENDED_RELEASED, now_ms, skew_ms)
        with self.step():
            return self._end_share("release", lock_id, lease_id, values, None)

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        force_id: str,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
        audit: dict[str, Any] | None = None,
    ) -> Outcome:
        if not is_share_id(lease_id):
            return super().force_release(
                lock_id, lease_id, force_id=force_id, now_ms=now_ms, skew_ms=skew_ms,
                actor=actor, reason=reason, slot=slot, audit=audit,
            )  # fmt: skip
        ended = ENDED_FORCED + force_id
        values = share_end_values(lease_id, ended, now_ms, skew_ms, actor=actor, reason=reason)
        with self.step():
            outcome = self._end_share("force_release", lock_id, lease_id, values, audit)
        if outcome.applied and audit is not None and not self._transactions:
            self._move_kept_audits(outcome, lease_id, audit)
        return outcome

    def _renew_share(
        self, lock_id: str, lease_id: str, now_ms: int, lease_ms: int, skew_ms: int, keeper: Any
    ) -> Outcome:
        values = {**renew_values(lease_id, now_ms, lease_ms, skew_ms, None, keeper), "one": 1}
        values.update(layout.aliases(layout.share_name(lease_id), [], []))
        outcome = Outcome(False, None)
        # First as the last view of the group says: does this renew raise the group's end?
        seen = self._seen_group(lock_id)
        below = seen is not None and seen.expires_at * 1000 > now_ms + lease_ms
        for raise_end in (False, True) if below else (True, False):
            update = layout.renew_update(raise_end, keeper is not None)
            condition = layout.renew_condition(raise_end)
            outcome = self._conditional_update("renew", lock_id, update, condition, values, None)
            self._seen_group(lock_id, outcome.lock)
            record = outcome.lock
            later = record is not None and record.expires_at * 1000 > now_ms + lease_ms
            if outcome.applied or record is None or raise_end != later:
                return outcome  # renewed, or refused whatever the group's end
        return outcome

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
            kind, others = layout.end_plan(seen, name, now_ms, skew_ms, exact=tries < 4)
            values.update(layout.aliases(name, others, []))
            values["count"] = 1 + len(others)
            group_end = max((ms for _, ms in others), default=now_ms)
            values.update(group_end=group_end, group_ttl=expiration_seconds(group_end + skew_ms))
            update = layout.end_update(kind, len(others), forced)
            condition = layout.end_condition(kind, len(others))
            recorded = None
            if self._transactions:
                recorded = self._end_recorded(
                    operation, lock_id, update, condition, values, None, audit
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

    def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome:
        """Claim the lock for a waiting exclusive acquire (``awsflock.shares``)."""
        values = {"until": until_ms, "version": new_version(), "one": 1}
        with self.step():
            return self._conditional_update(
                "claim", lock_id, layout.CLAIM_UPDATE, layout.CLAIM_CONDITION, values, None
            )


def share_end_values(
    lease_id: str, ended: str, now_ms: int, skew_ms: int, **extra: Any
) -> dict[str, Any]:
    """The values of a share's end step (``Shares._end_share``)."""
    return {**end_values(lease_id, ended, now_ms, skew_ms, **extra), "skew_ms": skew_ms}


def _joinable(record: LockRecord | None, attempt: Attempt) -> bool:
    """Whether ``record`` shows a live group a share would join."""
    return (
        record is not None
        and record.shared
        and not record.released
        and record.expires_at * 1000 >= attempt.now_ms - attempt.skew_ms
    )


def _could_take(record: LockRecord | None, attempt: Attempt) -> bool:
    """Whether a share's take could be granted as ``record`` shows the lock (its refusal was
    for a token or a variant, not for a holder, a claim, a full group or the line)."""
    now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
    if record is None or record.is_free(now, skew):
        return record is None or record.claimed_until is None or record.claimed_until <= now
    if not _joinable(record, attempt) or len(live(record, now, skew)) >= MAX_SHARES:
        return False
    return record.claimed_until is None or record.claimed_until <= now


def _in_group(record: LockRecord | None, lease_id: str) -> bool:
    live = record is not None and record.shared and not record.released
    return live and any(s.lease_id == lease_id for s in record.shares)  # type: ignore[union-attr]


def _changed(seen: LockRecord | None, record: LockRecord) -> bool:
    return seen is None or seen.version != record.version or seen.expires_at != record.expires_at


def _group(seen: LockRecord | None, share: str, joins: bool) -> str:
    """The id of the group the share is taken into."""
    return seen.lease_id if joins and seen is not None else group_of(share)


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
