"""The DynamoDB store's take: a plain lock's (one TransactWriteItems of the lock's item and its
fence record; the item alone, kept for good, on an endpoint without transactions) and a pool
slot's (one UpdateItem on a pool; a transaction where a plain lock becomes one)."""

from __future__ import annotations

import dataclasses
from typing import Any

from awsflock import errors
from awsflock.protocol import (
    KEPT_UNTIL,
    LINE_LAPSE_MS,
    Attempt,
    Outcome,
)
from awsflock.records import (
    ENDED_RELEASED,
    LockRecord,
    Pool,
    holder_fields,
)
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb.base import (
    _check_tickets,
    _drop_values,
    _seconds_number,
    expiration_seconds,
    new_version,
)
from awsflock.stores.dynamodb.items import (
    A_CAP,
    A_CI_URL,
    A_COMMAND,
    A_DELAY,
    A_DELAY_S,
    A_FENCE,
    A_FREE_AFTER,
    A_HOST,
    A_KIND,
    A_LOCK_ID,
    A_PID,
    A_USER,
    HISTORY,
    KIND_FENCE,
    bar_name,
    done_key,
    fence_key,
    from_attr,
    slot_prefix,
)
from awsflock.stores.dynamodb.writes import Writes


class Takes(Writes):
    """The take step (``take`` in ``DynamoDBStore``)."""

    def _take(self, lock_id: str, attempt: Attempt) -> Outcome:
        values, line, line_sets, sets, removes = self._take_values(attempt)
        p, slot = slot_prefix(attempt.slot), attempt.slot
        update = expressions.acquire_update(p, sets, removes, line_sets)
        if slot is None:
            kept = expressions.acquire_update(p, sets, removes, line_sets, kept=True)
            given = expressions.acquire_update(p, sets, removes, line_sets, kept=True, given=True)
            values["kept_until"] = KEPT_UNTIL
            return self._take_plain(lock_id, attempt, (update, kept, given), line, values)
        becomes = expressions.acquire_update(p, sets, removes, line_sets, plain_top=True)
        return self._take_slot(lock_id, attempt, (update, becomes), line, values, slot)

    @staticmethod
    def _take_values(
        attempt: Attempt,
    ) -> tuple[dict[str, Any], str, tuple[str, str] | None, list[str], list[str]]:
        """What a take's expressions are made of: their values, the line's condition, the
        line's update (None: no place to remove), the holder's fields set and removed."""
        identity, now_ms, skew_ms = attempt.identity, attempt.now_ms, attempt.skew_ms
        lease_ms, slots = attempt.lease_ms, attempt.slots
        expires_ms = now_ms + min(lease_ms, attempt.max_hold_ms or lease_ms)
        values: dict[str, Any] = {
            "lease": attempt.lease_id,
            "version": new_version(),
            "owner": identity.owner,
            "lease_duration": _seconds_number(lease_ms),
            # TTL must not delete the item before its end plus the skew and its lock-delay.
            "ttl": expiration_seconds(expires_ms + skew_ms + attempt.delay_ms),
            "released_mark": ENDED_RELEASED,
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "floor": now_ms * 1000,
            "one": 1,
            "null": None,
            "cutoff_ms": now_ms - skew_ms,
            "cutoff_s": (now_ms - skew_ms) // 1000,
            "token": None,  # a plain take's own (see _take_plain)
            "seen": None,
            "slots": slots,
            "zero": 0,
            "qcut": now_ms - LINE_LAPSE_MS - skew_ms,
        }
        line_sets = None
        if attempt.ticket is None:
            line = expressions.LINE_CLEAR
        else:
            _check_tickets(attempt.ticket, attempt.drop)
            line = expressions.in_line(attempt.ticket, attempt.drop, attempt.number)
            line_sets = expressions.leave_line([attempt.ticket, *(t for t, _ in attempt.drop)])
            values["gone"] = 1 + len(attempt.drop)
            values.update(_drop_values(attempt.drop))
            if attempt.number is not None:
                values["qplace"] = attempt.number
        sets, removes = [], []
        for name, value in _holder(attempt, expires_ms).items():
            if value in ("", 0, None):
                removes.append(name)
            else:
                sets.append(name)
                values[name] = value
        return values, line, line_sets, sets, removes

    def _take_slot(
        self,
        lock_id: str,
        attempt: Attempt,
        updates: tuple[str, str],
        line: str,
        values: dict[str, Any],
        slot: int,
    ) -> Outcome:
        """A pool slot's take, under a token of the caller's: above the slot's counter and the
        plain lock's token (a new slot starts above the plain lock's tokens), written as the
        slot's counter. Every try of one request carries the same token, so a try that lands
        late, after the lease was granted (and any number of hand-offs), is refused. On an item
        that is a pool already, one UpdateItem: a pool's item is never deleted. An item that
        is not a pool yet (absent, or a free plain lock) becomes one in a transaction that also
        checks the fence record: the plain lock's tokens may live only there (its item deleted
        by TTL or by an awsflock 0.2.0 release), and a take that lands late must not start
        below them. Refused as too low (a clock behind the last grant's), the take is sent
        again above what the refusal showed."""
        now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
        update, update_becomes = updates
        pooled, becomes = _slot_conditions(slot, line, attempt.lease_id)
        values["token"] = values["floor"] + 1
        outcome = self._conditional_update("acquire", lock_id, update, pooled, values, slot)
        fence: int | None = None  # the fence record's token, once a transaction showed it
        sent_token = None  # the token of the last transaction
        for _ in range(3):
            if outcome.applied:
                return outcome
            record = outcome.lock
            plain = record.fencing_token if record is not None else None
            if outcome.pool is not None:  # a pool: the slot busy, or a counter not below ours
                token = _above_slot(outcome.pool, slot, plain, values["token"], now, skew)
                if token is None:
                    return outcome
                values["token"] = token
                outcome = self._conditional_update("acquire", lock_id, update, pooled, values, slot)
                continue
            if record is not None and not record.is_free(now, skew):
                return outcome  # a plain lock, held
            # Not a pool (absent, or a free plain lock): it becomes one, above every token the
            # plain lock was granted, its item's and its fence record's.
            values["token"] = max(values["token"], (plain or 0) + 1, (fence or 0) + 1)
            if values["token"] == sent_token:
                return outcome  # refused as it stands (the line, a lease id seen before)
            values["plain_top"] = values["token"] - 1
            if not self._transactions:  # dynalite: the item's own token alone
                return self._conditional_update(
                    "acquire", lock_id, update_becomes, becomes, values, slot
                )
            answer = self._fenced_take(lock_id, update_becomes, becomes, values, slot=slot)
            if answer is None:  # the endpoint has no transactions
                self._transactions = False
                continue
            sent_token = values["token"]
            outcome, fence, _ = answer
            if outcome.applied:  # a transaction answers nothing: read what it made
                return self._read_granted(lock_id, slot, outcome.in_doubt)
        return outcome

    def _read_granted(self, lock_id: str, slot: int, in_doubt: bool) -> Outcome:
        """The outcome of a take a transaction applied: a read of what it made."""
        self.applied()  # a failed read must not say that nothing was
        return dataclasses.replace(
            self._outcome(True, self._get_item(lock_id), lock_id, slot), in_doubt=in_doubt
        )

    def _take_plain(
        self,
        lock_id: str,
        attempt: Attempt,
        updates: tuple[str, str, str],
        line: str,
        values: dict[str, Any],
    ) -> Outcome:
        """A plain lock's take: its token chosen here and checked against the lock's item and
        its fence record in one transaction (see ``expressions``), pinned to how the lease it
        replaces ended (``fates``). Two more requests at most: one when the last token granted
        is ahead of ours (a clock behind the last holder's), one when the refusal showed the
        lock other than the pin (a lease that ran out, or was forced; an item deleted).
        ``updates``: the take's, and the same keeping the item for good, for an endpoint without
        transactions (no fence record there: the item must outlive TTL and 0.2.0 clients),
        copying the lease before from the item or given it (``fates.kept``)."""
        now, skew = attempt.now_ms / 1000, attempt.skew_ms / 1000
        token = max(attempt.now_ms * 1000, self._fences.get(lock_id, 0)) + 1
        # A waiter whose last answer showed the lock free takes it pinned to that, at once.
        pin = fates.first(attempt.seen, now, skew)
        values["last_who"] = fates.last_who(attempt.identity)
        outcome = Outcome(False, None)
        for _ in range(3):
            values.update(token=token, **pin.values, **fates.pv_values(pin.previous))
            free, given = (pin.item, False) if self._transactions else fates.kept(pin)
            condition = expressions.acquire_condition("", line, free)
            sent = (updates[0], updates[2] if given else updates[1])
            answer = self._plain_try(lock_id, sent, condition, values, pin.fence)
            if answer is None:  # the endpoint has no transactions (dynalite)
                continue
            outcome, fence, fence_item = answer
            if outcome.applied:
                if outcome.lock is None:  # a transaction answers nothing: what it wrote
                    granted = _granted_record(lock_id, attempt, values, pin)
                    outcome = dataclasses.replace(outcome, lock=granted)
                self._learn_fence(lock_id, token)
                return outcome
            record = outcome.lock if outcome.pool is None else None
            high = max(fence or 0, (record.fencing_token or 0) if record else 0)
            self._learn_fence(lock_id, high)
            if outcome.pool is not None or (record is not None and not record.is_free(now, skew)):
                return outcome  # a pool, or held
            again = pin
            if not self._transactions:  # no pins but a group's and a 0.2.0 lease's
                again = fates.kept_again(pin, record)
            elif record is not None and not fates.accepts(pin, record):
                again = fates.seen(record)  # the lock is not as pinned: pinned to what it is
            elif record is None and fence_item is not None:
                again = fates.from_fence(fence_item)  # the fence record is not as pinned
            if high >= token or again != pin:
                token, pin = max(token, high + 1), again
                continue
            return outcome  # refused as it stands (the line, a LEASE_ID used before)
        return outcome

    def _plain_try(
        self,
        lock_id: str,
        updates: tuple[str, str],
        condition: str,
        values: dict[str, Any],
        pinned: str,
    ) -> tuple[Outcome, int | None, dict[str, Any] | None] | None:
        """One try of a plain take: the transaction with the fence record (``_fenced_take``,
        its condition and ``pinned``), or the item alone, kept for good, where the endpoint has
        no transactions. None if it answered that it has none (the take is then sent again
        without)."""
        update, kept = updates
        if not self._transactions:
            outcome = self._conditional_update("acquire", lock_id, kept, condition, values, None)
            return outcome, None, None
        answer = self._fenced_take(lock_id, update, condition, values, pinned=pinned)
        if answer is None:
            self._transactions = False
        return answer

    def _fenced_take(
        self,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None = None,
        pinned: str = "",
    ) -> tuple[Outcome, int | None, dict[str, Any] | None] | None:
        """One TransactWriteItems: the lock item's take, and the fence record's check that it
        holds no token from ``values["token"]`` up: raised to that token for a plain take,
        only checked for a pool slot's (``slot``; a pool's tokens are its slots'). The outcome
        (its ``lock`` None when applied: a transaction answers nothing) and the fence record's
        token when that refused it; None if the endpoint has no transactions."""

        items: list[Any] = [
            self._lock_write(lock_id, update, condition, values),
            self._fence_write(
                lock_id,
                values["token"],
                raise_it=slot is None,
                last=values if slot is None else None,
                pinned=pinned,
            ),
            # A LEASE_ID that was granted and ended (however many hand-offs ago) is never
            # granted again: a take that lands late under it takes nothing.
            {
                "ConditionCheck": {
                    "TableName": self.table_name,
                    "Key": {A_LOCK_ID: {"S": done_key(values["lease"])}},
                    "ConditionExpression": "attribute_not_exists(#lock_id)",
                    "ExpressionAttributeNames": {"#lock_id": A_LOCK_ID},
                }
            },
        ]
        answer = self._transact("acquire", items)
        if answer is None:
            return None
        in_doubt = self._in_doubt()
        if not answer:
            return Outcome(True, None, in_doubt=in_doubt), None, None
        (item_refused, item), (fence_refused, held), (ended_before, _) = answer
        fence = self._fence_token(lock_id, fence_refused, held)
        if ended_before and not item_refused:
            # Only its done item refused it: read what the lock is now (a take landing late
            # under a used LEASE_ID, the one case; nobody waits for its answer).
            item = self._get_item(lock_id) or {}
            item_refused = True
        if not item_refused:
            # Only the fence record refused: the lock's item would have taken it (not read).
            return Outcome(False, None, in_doubt=in_doubt), int(fence or 0), held
        outcome = self._after_update("acquire", False, item or None, lock_id, slot)
        outcome = dataclasses.replace(outcome, in_doubt=True) if in_doubt else outcome
        return outcome, fence, held if fence_refused else None

    @staticmethod
    def _fence_token(lock_id: str, refused: bool, held: dict[str, Any]) -> int | None:
        """The token a fence record that refused a take holds (None: it did not refuse, or
        holds none); a ConfigurationError if its key holds something else."""
        if refused and held and from_attr(held.get(A_KIND, {"S": ""})) != KIND_FENCE:
            raise errors.ConfigurationError(
                f"the key {fence_key(lock_id)!r}, which keeps the fencing counter of "
                f"{lock_id!r}, holds something else (an awsflock 0.2.0 lock of that "
                "name?): awsflock will not take the lock while it does",
                hint="release or delete that item (its name starts with awsflock's "
                "reserved prefix)",
            )
        return int(from_attr(held[A_FENCE])) if refused and A_FENCE in held else None

    def _learn_fence(self, lock_id: str, token: int) -> None:
        """Remember the highest token seen on a lock: this process's next take starts above it."""
        if token > self._fences.get(lock_id, 0):
            self._fences[lock_id] = token


def _slot_conditions(slot: int, line: str, lease_id: str) -> tuple[str, str]:
    """The conditions of a slot's take: on an item that is a pool, and on one that becomes a
    pool by it; each refuses a LEASE_ID barred on the lock (``items.bar_name``)."""
    p, bar = slot_prefix(slot), bar_name(lease_id)
    return (
        expressions.acquire_condition(p, line, pool=expressions.IS_POOL, bar=bar),
        expressions.acquire_condition(p, line, bar=bar),
    )


def _above_slot(
    pool: Pool, slot: int, plain: int | None, token: int, now: float, skew: float
) -> int | None:
    """The token a slot's take refused on a pool is sent again with: above the slot's counter
    and the plain lock's token, where either reaches ``token``. None where that cannot help:
    the slot is held, or the take was refused as it stands (the line, a lease id seen before)."""
    held = pool.slots.get(slot)
    if held is not None and not held.is_free(now, skew):
        return None
    high = max(plain or 0, (held.fencing_token or 0) if held is not None else 0)
    return None if high < token else high + 1


def _holder(attempt: Attempt, expires_ms: int) -> dict[str, Any]:
    """Who holds it, for waiters' messages, its lock-delay (``expressions.not_delayed``) and
    its cap: a take sets those given and removes the others, so a previous holder's never
    lingers."""
    identity, delay, hold = attempt.identity, attempt.delay_ms, attempt.max_hold_ms
    return {
        A_HOST: identity.host,
        A_PID: identity.pid,
        A_USER: identity.user,
        A_CI_URL: identity.ci_url,
        A_COMMAND: identity.command,
        A_DELAY: delay,
        A_DELAY_S: -(-delay // 1000),
        A_FREE_AFTER: expires_ms + delay if delay else 0,
        A_CAP: attempt.now_ms + hold if hold else 0,
    }


def _granted_record(
    lock_id: str, attempt: Attempt, values: dict[str, Any], pin: fates.Pin
) -> LockRecord:
    """The lock's record as a plain take that a transaction applied wrote it (a transaction
    answers nothing), with the lease before as ``pin`` made sure of. Its earlier leases are
    known only where it replaced the lease it saw."""
    seen = pin.record
    history = () if seen is None else ((seen.lease_id, seen.ended), *seen.history[: HISTORY - 1])
    return LockRecord(
        lock_id=lock_id,
        lease_id=attempt.lease_id,
        version=str(values["version"]),
        **holder_fields(attempt.identity),
        acquired_at=attempt.now_ms / 1000,
        expires_at=int(values["expires_ms"]) / 1000,
        lease_duration=attempt.lease_ms / 1000,
        fencing_token=int(values["token"]),
        history=history,
        lock_delay=attempt.delay_ms / 1000,
        capped_at=(attempt.now_ms + attempt.max_hold_ms) / 1000 if attempt.max_hold_ms else None,
        previous=pin.previous,
    )
