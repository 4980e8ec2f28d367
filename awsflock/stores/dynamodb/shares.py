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
from typing import Any

from awsflock.protocol import KEPT_UNTIL, Attempt, Outcome
from awsflock.records import ENDED_FORCED, ENDED_RELEASED, LockRecord
from awsflock.shares import MAX_SHARES, group_of, is_share_id, live
from awsflock.state import StateWrite
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb import share_items as layout
from awsflock.stores.dynamodb.base import new_version
from awsflock.stores.dynamodb.items import A_LOCK_ID, done_key
from awsflock.stores.dynamodb.pv import lapse_value
from awsflock.stores.dynamodb.share_ends import ShareEnds, share_end_values
from awsflock.stores.dynamodb.steps import renew_values


class Shares(ShareEnds):
    """The share steps of ``DynamoDBStore``."""

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
        now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
        values["last_who"] = fates.last_who(attempt.identity)
        pin: fates.Pin | None = None  # a new group's, as ``seen`` shows the lock unless set
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
            else:  # a new group, pinned to how the lease it replaces ended, as a plain take
                pin = pin or fates.first(seen, now, skew)
                values["lease"] = group_of(share)
                condition, update = self._new_group(values, line, sets, removes, pin)
            answer = self._share_try(lock_id, share, update, condition, values, pin, joins)
            if answer is None:  # no transactions after all (dynalite): made again without
                continue
            outcome, fence, fence_item = answer
            if outcome.applied:
                self._learn_fence(lock_id, token)
                granted = layout.granted(lock_id, attempt, values, seen if joins else None)
                if not joins and pin is not None:  # as pinned, or as the item says (kept)
                    said = outcome.lock.previous if outcome.lock is not None else pin.previous
                    granted = dataclasses.replace(granted, previous=said)
                self._seen_group(lock_id, granted)
                return dataclasses.replace(outcome, lock=granted)
            if outcome.pool is not None:
                return outcome
            high = max(fence or 0, (outcome.lock.fencing_token or 0) if outcome.lock else 0)
            self._learn_fence(lock_id, high)
            again = _again(attempt, outcome.lock, (high, token), seen, pin, fence_item, joins)
            if again is None:
                return outcome
            token, seen, pin = again
        return outcome

    def _new_group(
        self,
        values: dict[str, Any],
        line: str,
        sets: list[str],
        removes: list[str],
        pin: fates.Pin,
    ) -> tuple[str, str]:
        """The condition and update of a share's take that makes a new group, as ``pin``
        says the lease it replaces ended (``values`` gains the pin's)."""
        values.update(pin.values, **fates.pv_values(pin.previous))
        free, given = (pin.item, False) if self._transactions else fates.kept(pin)
        condition = expressions.acquire_condition("", line, free) + " AND " + layout.NO_CLAIM
        kept = not self._transactions
        plain = expressions.acquire_update("", sets, removes, kept=kept, given=given)
        return condition, layout.with_new_group(plain, values["stale"])

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
        if lapsed and seen is not None:  # they leave: the first that did not end released
            gone = {n for n, _ in lapsed}
            last = max(
                (s for s in seen.shares if layout.share_name(s.lease_id) in gone),
                key=lambda s: s.expires_at,
            )
            values["gl"] = lapse_value(last)
        values.update(
            lapsed=len(lapsed),
            stale=len(stale),
            room=MAX_SHARES + len(lapsed),
            delta=1 - len(lapsed),
            group=seen.lease_id if joins and seen is not None else None,
        )
        return values

    def _share_try(
        self,
        lock_id: str,
        share: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        pin: fates.Pin | None,
        joins: bool,
    ) -> tuple[Outcome, int | None, dict[str, Any] | None] | None:
        """One try of a share's take: the transaction of the lock's item, its fence record (a
        new group's as its last lease, if ``pin`` holds) and the share's done item's check;
        the item alone, kept, without transactions. With the token the fence record holds and
        its item where it refused. None if the endpoint answered that it has none (the take
        is then made again without)."""
        if not self._transactions:
            return (
                self._conditional_update("acquire", lock_id, update, condition, values, None),
                None,
                None,
            )
        new_group = not joins and pin is not None
        fence_write = self._fence_write(
            lock_id,
            values["token"],
            last=values if new_group else None,
            pinned=pin.fence if new_group and pin is not None else "",
            group=True,
        )
        items: list[Any] = [
            self._lock_write(lock_id, update, condition, values),
            fence_write,
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
            return Outcome(True, None, in_doubt=in_doubt), None, None
        (item_refused, item), (fence_refused, held), (ended_before, _) = answer
        fence = self._fence_token(lock_id, fence_refused, held)
        if ended_before and not item_refused:
            item = self._get_item(lock_id) or {}  # the item did not say: read it
        elif not item_refused:  # only the fence record refused: the item would have taken it
            return Outcome(False, None, in_doubt=in_doubt), fence, held
        outcome = self._after_update("acquire", False, item or None, lock_id, None)
        outcome = dataclasses.replace(outcome, in_doubt=in_doubt or outcome.in_doubt)
        return outcome, fence, held if fence_refused else None

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
        state: StateWrite | None = None,
    ) -> Outcome:
        if not is_share_id(lease_id) or state is not None:
            return super().renew(
                lock_id, lease_id, now_ms=now_ms, lease_ms=lease_ms, skew_ms=skew_ms, slot=slot,
                keeper=keeper, state=state,
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

    def claim(self, lock_id: str, *, now_ms: int, until_ms: int) -> Outcome:
        """Claim the lock for a waiting exclusive acquire (``awsflock.shares``)."""
        values = {"until": until_ms, "version": new_version(), "one": 1}
        with self.step():
            return self._conditional_update(
                "claim", lock_id, layout.CLAIM_UPDATE, layout.CLAIM_CONDITION, values, None
            )


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


def _again(
    attempt: Attempt,
    record: LockRecord | None,
    tokens: tuple[int, int],
    seen: LockRecord | None,
    pin: fates.Pin | None,
    fence_item: dict[str, Any] | None,
    joins: bool,
) -> tuple[int, LockRecord | None, fates.Pin | None] | None:
    """After a refused try of a share's take (with ``token``) that showed ``record`` (None: no
    item) and the highest token it learnt, ``high``: the token, view and pin to send it again
    with, or None where it was refused as the lock stands (a holder, a claim, a full group,
    the line). ``fence_item``: the fence record, where it refused (never without
    transactions)."""
    high, token = tokens
    if not _could_take(record, attempt):
        return None
    again = _repin(pin, record, fence_item, joins)
    if high >= token:
        return high + 1, record or seen, again
    if record is not None and _changed(seen, record):
        return token, record, None
    return (token, seen, again) if again != pin else None


def _repin(
    pin: fates.Pin | None,
    record: LockRecord | None,
    fence_item: dict[str, Any] | None,
    joins: bool,
) -> fates.Pin | None:
    """A new group's pin after a refusal showed ``record`` (None: no item) and the fence
    record ``fence_item`` (None: it did not refuse): as ``takes._take_plain`` sends it again
    (without transactions, only a group's, as ``fates.kept``)."""
    if joins or pin is None:
        return pin
    if record is not None and not fates.accepts(pin, record):
        return fates.seen(record)
    if record is None and fence_item is not None:
        return fates.from_fence(fence_item)
    return pin


def _changed(seen: LockRecord | None, record: LockRecord) -> bool:
    return seen is None or seen.version != record.version or seen.expires_at != record.expires_at


def _group(seen: LockRecord | None, share: str, joins: bool) -> str:
    """The id of the group the share is taken into."""
    return seen.lease_id if joins and seen is not None else group_of(share)
