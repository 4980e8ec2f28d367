"""The DynamoDB store's set steps (``awsflock.sets.SetSteps``), each one TransactWriteItems.

- ``take_all``: per name, the plain take's three items (the lock's item, its fence record,
  the check that its lease id has no done item), all in one transaction: every name is taken
  or none. Refused only because a token was too low or a lease the take may reclaim changed
  (what a plain take sends again for), it is sent again, twice at most.
- ``renew_all``, ``release_all``: each name's renew (its ``UpdateItem``) or release (its
  ``UpdateItem`` and done item) in one transaction. Refused, which means some lease was lost,
  renewed from a later reading, or never granted, each name is sent as its own step, which
  says why and does what that step does on its own (a bar, a renew from the later reading).

An endpoint without transactions (dynalite) cannot take a set: ``take_all`` raises
``sets.no_sets`` there, having changed nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from awsflock.protocol import DONE_MS, Attempt, Outcome
from awsflock.records import ENDED_RELEASED
from awsflock.sets import check_set_attempts, no_sets
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb.base import expiration_seconds
from awsflock.stores.dynamodb.ends import end_values
from awsflock.stores.dynamodb.forces import Forces
from awsflock.stores.dynamodb.items import (
    A_LOCK_ID,
    done_item,
    done_key,
)
from awsflock.stores.dynamodb.steps import Steps, renew_values
from awsflock.stores.dynamodb.takes import Takes, _granted_record


@dataclasses.dataclass
class _Member:
    """One name of a set's take, and what its next try sends."""

    lock_id: str
    attempt: Attempt
    update: str
    values: dict[str, Any]
    token: int
    pin: fates.Pin


class Sets(Takes, Forces, Steps):
    """``take_all``, ``renew_all`` and ``release_all`` of ``DynamoDBStore``."""

    def take_all(self, takes: Sequence[tuple[str, Attempt]]) -> tuple[Outcome, ...]:
        check_set_attempts(takes)
        if not self._transactions:
            raise no_sets(self.where())
        members = []
        for lock_id, attempt in takes:
            values, _line, _sets, sets, removes = self._take_values(attempt)
            token = max(attempt.now_ms * 1000, self._fences.get(lock_id, 0)) + 1
            update = expressions.acquire_update("", sets, removes, None)
            now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
            values["last_who"] = fates.last_who(attempt.identity)
            pin = fates.first(attempt.seen, now, skew)
            members.append(_Member(lock_id, attempt, update, values, token, pin))
        with self.step():
            outcomes: tuple[Outcome, ...] = ()
            for _ in range(3):
                answer = self._transact("acquire", [i for m in members for i in self._items(m)])
                if answer is None:
                    self._transactions = False
                    raise no_sets(self.where())
                in_doubt = self._in_doubt()
                if not answer:
                    return tuple(self._granted(m, in_doubt) for m in members)
                outcomes, again = self._refused(members, answer, in_doubt)
                if not again:
                    return outcomes
            return outcomes

    def _items(self, member: _Member) -> list[Any]:
        """A member's three items of the set's transaction, for its next try (pinned to how
        the lease it replaces ended, as a plain take is: ``fates``)."""
        pin, values = member.pin, member.values
        values.update(token=member.token, **pin.values, **fates.pv_values(pin.previous))
        condition = expressions.acquire_condition("", expressions.LINE_CLEAR, pin.item)
        return [
            self._lock_write(member.lock_id, member.update, condition, values),
            self._fence_write(member.lock_id, member.token, last=values, pinned=pin.fence),
            {
                "ConditionCheck": {
                    "TableName": self.table_name,
                    "Key": {A_LOCK_ID: {"S": done_key(member.attempt.lease_id)}},
                    "ConditionExpression": "attribute_not_exists(#lock_id)",
                    "ExpressionAttributeNames": {"#lock_id": A_LOCK_ID},
                }
            },
        ]

    def _granted(self, member: _Member, in_doubt: bool) -> Outcome:
        """A member's outcome of the set's applied take (a transaction answers nothing)."""
        self._learn_fence(member.lock_id, member.token)
        record = _granted_record(member.lock_id, member.attempt, member.values, member.pin)
        return Outcome(True, record, in_doubt=in_doubt)

    def _refused(
        self, members: list[_Member], answer: list[tuple[bool, dict[str, Any]]], in_doubt: bool
    ) -> tuple[tuple[Outcome, ...], bool]:
        """Each member's outcome of the refused take, and whether to send it again: only if
        no name is held and some try was refused for what a plain take sends again for (a
        token too low, the lock not as its pin says)."""
        outcomes, again, final = [], False, False
        for n, member in enumerate(members):
            (item_refused, item), (fence_refused, held), (ended_before, _) = answer[
                3 * n : 3 * n + 3
            ]
            fence = self._fence_token(member.lock_id, fence_refused, held)
            outcome = Outcome(False, None, in_doubt=in_doubt)
            if item_refused:
                outcome = self._after_update("acquire", False, item or None, member.lock_id, None)
                outcome = dataclasses.replace(outcome, in_doubt=outcome.in_doubt or in_doubt)
            outcomes.append(outcome)
            record = outcome.lock if outcome.pool is None else None
            now, skew = member.attempt.now_ms / 1000, member.attempt.skew_ms / 1000
            free_now = outcome.pool is None and (record is None or record.is_free(now, skew))
            high = max(fence or 0, (record.fencing_token or 0) if record else 0)
            self._learn_fence(member.lock_id, high)
            pin = member.pin
            if record is not None and not fates.accepts(pin, record):
                pin = fates.seen(record)
            elif not item_refused and fence_refused:
                pin = fates.from_fence(held or {})
            if ended_before or not free_now:
                final = True  # its lease id was used, or the name is held (or a pool)
            elif high >= member.token or pin != member.pin:
                member.token, member.pin, again = max(member.token, high + 1), pin, True
            elif item_refused:
                final = True  # refused as it stands (the line, a lease id seen before)
        return tuple(outcomes), again and not final

    def renew_all(
        self,
        leases: Sequence[tuple[str, str]],
        *,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        keeper: str | None = None,
    ) -> tuple[Outcome, ...]:
        items = []
        for lock_id, lease_id in leases:
            values = renew_values(lease_id, now_ms, lease_ms, skew_ms, None, keeper)
            update = expressions.renew_update("", keeper is not None)
            items.append(self._lock_write(lock_id, update, expressions.renew_condition(""), values))
        with self.step():
            if self._transactions and self._transact("renew", items) == []:
                in_doubt = self._in_doubt()
                return tuple(Outcome(True, None, in_doubt=in_doubt) for _ in leases)
            # Refused (or no transactions): each on its own says why, or renews from a later
            # reading (see ``Steps.renew``).
            return tuple(
                self.renew(n, i, now_ms=now_ms, lease_ms=lease_ms, skew_ms=skew_ms, keeper=keeper)
                for n, i in leases
            )

    def release_all(
        self, leases: Sequence[tuple[str, str]], *, now_ms: int, skew_ms: int
    ) -> tuple[Outcome, ...]:
        items: list[Any] = []
        for lock_id, lease_id in leases:
            values = end_values(lease_id, ENDED_RELEASED, now_ms, skew_ms)
            update, condition = expressions.release_update(""), expressions.release_condition("")
            done = done_item(
                lock_id, lease_id, ENDED_RELEASED, now_ms, expiration_seconds(now_ms + DONE_MS)
            )
            items.append(self._lock_write(lock_id, update, condition, values))
            items.append({"Put": {"TableName": self.table_name, "Item": done}})
            items.append(self._last_end(lock_id, values))
        with self.step():
            if self._transactions and self._transact("release", items) == []:
                in_doubt = self._in_doubt()
                return tuple(Outcome(True, None, in_doubt=in_doubt) for _ in leases)
            # Refused: each on its own says why (released already, lost), or bars an id never
            # granted, as a release does.
            return tuple(self.release(n, i, now_ms=now_ms, skew_ms=skew_ms) for n, i in leases)
