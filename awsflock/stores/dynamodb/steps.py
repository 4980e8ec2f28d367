"""The DynamoDB store's other steps: the line (join, beat, leave), renew, pool-resize and the
audit records, each one conditional UpdateItem (or PutItem); and the list of locks (a scan).
Release and force-release are in ``ends``, the take in ``takes``."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, Callable

from awsflock import errors
from awsflock.protocol import (
    AUDIT_APPLIED,
    AUDIT_PREFIX,
    Drops,
    Outcome,
    audit_key,
)
from awsflock.records import (
    RESERVED_PREFIX,
    LockRecord,
    Pool,
    Waiter,
)
from awsflock.shares import is_share_id
from awsflock.state import StateWrite
from awsflock.state import check as check_state
from awsflock.state import check_plain as check_state_plain
from awsflock.stores.dynamodb import expressions
from awsflock.stores.dynamodb.base import (
    _check_tickets,
    _drop_values,
    _seconds_number,
    expiration_seconds,
    new_version,
)
from awsflock.stores.dynamodb.items import (
    A_KIND,
    A_LOCK_ID,
    A_RENEWED_MS,
    A_UNAUDITED,
    from_attr,
    is_pool_item,
    line_from_item,
    pending_audits,
    place_entry,
    pool_from_item,
    slot_prefix,
)
from awsflock.stores.dynamodb.resizes import Resizes
from awsflock.stores.dynamodb.share_items import lock_record
from awsflock.stores.dynamodb.state_writes import StateWrites
from awsflock.stores.dynamodb.tables import TABLE_HINT
from awsflock.stores.dynamodb.writes import _request


class Steps(StateWrites, Resizes):
    """Every step but the take and the ends: the line, renew, pool-resize (``resizes``), the
    audit records, the list of locks."""

    def join(self, lock_id: str, waiter: Waiter) -> Outcome:
        """Take a place in the lock's line under the next number (see ``LockStore.join``)."""
        _check_tickets(waiter.ticket, ())
        values = {"entry": place_entry(waiter), "now_ms": waiter.seen_ms, "zero": 0, "one": 1}
        return self._raising_polled(
            lock_id,
            waiter.seen_ms,
            lambda raise_polled: self._conditional_update(
                "join",
                lock_id,
                expressions.join_update(waiter.ticket, raise_polled),
                expressions.join_condition(waiter.ticket, raise_polled),
                values,
                None,
            ),
            # Refused though the record is there and we have no place: only the poll was later.
            lambda out: out.lock is not None and out.line.find(waiter.ticket) is None,
        )

    def beat(self, lock_id: str, ticket: str, *, now_ms: int, drop: Drops = ()) -> Outcome:
        """A waiter's poll: its place's last poll is now (see ``LockStore.beat``)."""
        _check_tickets(ticket, drop)
        values: dict[str, Any] = {"now_ms": now_ms, "zero": 0, "gone": len(drop)}
        values.update(_drop_values(drop))

        def only_polled(out: Outcome) -> bool:
            """Refused though our place has an earlier poll and the drops are unchanged."""
            mine = out.line.find(ticket)
            return (
                mine is not None
                and mine.seen_ms < now_ms
                and all(_seen(out, t) == seen for t, seen in drop)
            )

        return self._raising_polled(
            lock_id,
            now_ms,
            lambda raise_polled: self._conditional_update(
                "beat",
                lock_id,
                expressions.beat_update(ticket, drop, raise_polled),
                expressions.beat_condition(ticket, drop, raise_polled),
                values,
                None,
            ),
            only_polled,
        )

    def _raising_polled(
        self,
        lock_id: str,
        now_ms: int,
        send: Callable[[bool], Outcome],
        only_polled: Callable[[Outcome], bool],
    ) -> Outcome:
        """A join or beat that raises the line's latest poll (``qpoll``) to ``now_ms`` and never
        lowers it: sent with ``qpoll < :now_ms`` unless the poll is known to be later already
        (another waiter's clock is ahead of ours), and sent again without when that alone
        (``only_polled``) refused it. So a join or beat that lands late cannot make a live
        line look idle."""

        def sent(raise_polled: bool) -> Outcome:
            outcome = send(raise_polled)
            if outcome.line.polled_ms is not None:
                self._polled[lock_id] = outcome.line.polled_ms
            return outcome

        known = self._polled.get(lock_id)
        if known is not None and known >= now_ms:
            return sent(False)
        outcome = sent(True)
        if not outcome.applied and only_polled(outcome):
            return sent(False)
        return outcome

    def leave(self, lock_id: str, ticket: str) -> Outcome:
        """Remove the ticket's place from the line."""
        _check_tickets(ticket, ())
        sets, removes = expressions.leave_line([ticket])
        return self._conditional_update(
            "leave",
            lock_id,
            f"SET {sets} REMOVE {removes}",
            expressions.in_line(ticket, ()),
            {"zero": 0, "gone": 1},
            None,
        )

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
        """Extend our lease from ``now_ms``, if it is ours, not ended and not run out; with
        ``state``, write it too (``state_writes``)."""
        if state is not None:
            check_state_plain(slot, is_share_id(lease_id))
            check_state(state.data)
        values = renew_values(lease_id, now_ms, lease_ms, skew_ms, slot, keeper)
        p = slot_prefix(slot)
        renewal = (expressions.renew_update(p, keeper is not None), expressions.renew_condition(p))

        def send(keep: bool = False) -> Outcome:
            if state is not None:
                return self._renew_with_state(lock_id, renewal, values, state, keep)
            return self._conditional_update("renew", lock_id, *renewal, values, slot)

        outcome = send()
        for _ in range(2):
            later = _later_reading(outcome, lease_id, now_ms, lease_ms)
            if later is not None:
                # Refused only because the lease was granted or renewed with a later reading
                # than ours (another host's renew, or our clock stepped back): sent once more
                # from that reading, which only lengthens the lease (a renew that lands late
                # after it is refused again).
                now_ms = later
                values.update(now_ms=later, now_s=later // 1000, order_ms=later - skew_ms)
            cap = _cap(outcome, lease_id, now_ms, now_ms + lease_ms)
            if later is None and cap is None:
                if state is not None and _held_longer(outcome, lease_id, values["expires_ms"]):
                    return send(keep=True)  # the state written, the end kept
                return outcome
            # Refused for the hold's cap, which the renewer did not know: sent for the cap.
            expires_ms = now_ms + lease_ms if cap is None else min(cap, now_ms + lease_ms)
            values.update(expires_ms=expires_ms, ttl=expiration_seconds(expires_ms + skew_ms))
            outcome = send()
        return outcome

    def audit_entries(self, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Every audit record's fields, page by page: the audit items, and the records that
        locks' items keep (a force's, without transactions, not yet moved to its own item);
        one per key, one whose action took effect first. Two scans, the kept records first: a
        record is dropped from its lock's item only once its own item holds it, so one that
        moves meanwhile is found by the second (one scan can pass the audit item's place
        before the move and reach the lock's item after it, and see neither)."""
        kept: dict[str, dict[str, Any]] = {}
        for item in self._scan("", page_size, where=f"attribute_exists(#{A_UNAUDITED})"):
            for entry in pending_audits(item):
                kept[audit_key(str(entry.get("lease_id")))] = entry
        applied: set[str] = set()
        others: list[tuple[str, dict[str, Any]]] = []
        for item in self._scan(AUDIT_PREFIX, page_size):
            key = item[A_LOCK_ID]["S"]
            # The key and the kind are this store's layout, not the entry's fields.
            entry = {k: from_attr(a) for k, a in item.items() if k not in (A_LOCK_ID, A_KIND)}
            if entry.get("status") == AUDIT_APPLIED:
                applied.add(key)
                yield entry
            else:
                others.append((key, entry))
        for key, entry in kept.items():
            if key not in applied:
                applied.add(key)
                yield entry
        yield from (entry for key, entry in others if key not in applied)

    # -- table ---------------------------------------------------------------------------------

    def locks(self, prefix: str = "", page_size: int = 500) -> Iterator[LockRecord | Pool]:
        """Every plain lock and pool (not awsflock's other items), page by page."""
        for item in self._scan(prefix, page_size):
            key = item.get(A_LOCK_ID, {}).get("S")
            if key is None:  # only reachable where DescribeTable is denied (see check_table)
                raise errors.TableIncompatible(
                    f"table {self.table_name!r} is not an awsflock table: its items have no "
                    f"{A_LOCK_ID} string",
                    hint=TABLE_HINT,
                )
            if key.startswith(RESERVED_PREFIX):
                continue
            line = line_from_item(item)
            if is_pool_item(item):
                yield pool_from_item(key, item, line)
            else:
                yield dataclasses.replace(lock_record(item), line=line)

    def _scan(self, prefix: str, page_size: int, where: str = "") -> Iterator[dict[str, Any]]:
        """The items whose key starts with ``prefix`` (no prefix: that match the filter
        ``where``, or every item)."""
        # A scan of a table keyed otherwise would list nothing (or foreign items), and a prefix
        # filter on lock_id hides them all: check the key first. Scans are not a hot path.
        self.check_table()
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Limit": page_size}
        condition = "begins_with(#lock_id, :prefix)" if prefix else where
        if condition:
            kwargs["FilterExpression"] = condition
            # DynamoDB refuses an empty map of values (a filter that uses none).
            request = _request(condition, values={"prefix": prefix})
            kwargs.update({k: v for k, v in request.items() if v})
        while True:
            page = self._send("scan", lambda: self.client.scan(**kwargs))
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


def renew_values(
    lease_id: str, now_ms: int, lease_ms: int, skew_ms: int, slot: int | None, keeper: str | None
) -> dict[str, Any]:
    """The values of a renew's expressions (``expressions.renew_update``, ``renew_condition``)."""
    expires_ms = now_ms + lease_ms
    return {
        "lease": lease_id,
        "version": new_version(),
        "lease_duration": _seconds_number(lease_ms),
        "ttl": expiration_seconds(expires_ms + skew_ms),
        "expires_ms": expires_ms,
        "now_ms": now_ms,
        "now_s": now_ms // 1000,
        "order_ms": now_ms - skew_ms,
        "slot": slot,
        "keeper": keeper,
        "zero": 0,
    }


def _held_longer(outcome: Outcome, lease_id: str, expires_ms: int) -> bool:
    """A refused renewal's record shows the lease ours, not ended, ending no earlier than it
    asked: it was refused only for moving the end earlier."""
    record = outcome.lock if outcome.pool is None else None
    return (
        not outcome.applied
        and record is not None
        and record.lease_id == lease_id
        and not record.ended
        and record.expires_at * 1000 >= expires_ms
    )


def _later_reading(outcome: Outcome, lease_id: str, now_ms: int, lease_ms: int) -> int | None:
    """The reading a refused renew should be sent again with: the record's ``renewed_ms``, when
    only that refused it (the lease is ``lease_id``'s, not ended, live at ``now_ms``) and the
    renew from it moves the end no earlier; else None."""
    record = outcome.record
    if outcome.applied or record is None or record.lease_id != lease_id or record.released:
        return None
    renewed = record.extra.get(A_RENEWED_MS)
    if not isinstance(renewed, int) or renewed <= now_ms or record.expires_at * 1000 <= now_ms:
        return None
    return renewed if renewed + lease_ms >= record.expires_at * 1000 else None


def _cap(outcome: Outcome, lease_id: str, now_ms: int, expires_ms: int) -> int | None:
    """The cap (ms) a refused renew of ``lease_id``, live at ``now_ms``, should be sent again
    for, when its end ``expires_ms`` passes the cap the record shows; else None."""
    record = outcome.record
    if outcome.applied or record is None or record.lease_id != lease_id or record.ended:
        return None
    if record.capped_at is None or record.expires_at * 1000 <= now_ms:
        return None
    cap = round(record.capped_at * 1000)
    return cap if now_ms < cap < expires_ms else None


def _seen(outcome: Outcome, ticket: str) -> int | None:
    waiter = outcome.line.find(ticket)
    return None if waiter is None else waiter.seen_ms
