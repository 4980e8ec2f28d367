"""The DynamoDB store's force-release: the end step (``ends``), its audit record, and the
lock-delay of the lease it ends.

A lock-delay counts from when the lease ended: when it ran out, or when the force landed,
whichever came first. DynamoDB has no clock of its own, and a force may land long after its
caller read the time (``now_ms``), even after the lease ran out. Counted from that reading, the
delay would end too early, by as much as the lease had left. So a force of a lease with a delay
leaves the item's ``free_after_ms`` (the lease's end plus the delay, as its take or last
renewal wrote it) and its TTL as they are, and once its answer is in, one more write counts
the delay from the time of the answer: no earlier than the landing, so never too early, even
if that write lands late too. Had it never landed, the delay would count from the lease's end.

Which variant a force takes is pinned by its condition (``expressions.delay_is``). It is sent
first as if the lease had no delay, the common case; a refusal shows the lease's delay, and the
force is sent again for it: two requests more, for an operator's action on a lock with a
delay."""

from __future__ import annotations

import functools
import logging
from typing import Any

from awsflock import errors
from awsflock.protocol import Outcome, audit_key
from awsflock.records import ENDED_FORCED
from awsflock.stores.dynamodb import expressions
from awsflock.stores.dynamodb.base import expiration_seconds
from awsflock.stores.dynamodb.ends import Ends
from awsflock.stores.dynamodb.items import kept_audits, slot_prefix
from awsflock.text import iso_utc

log = logging.getLogger("awsflock.store")


class Forces(Ends):
    """Force-release."""

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
        """End ``lease_id`` whoever holds it, recording who, why, and this action's id; its
        audit record in the same transaction (where the endpoint has none, right after)."""
        ended = ENDED_FORCED + force_id
        started = self.clock.monotonic()
        delay_ms = 0
        for _ in range(2):
            outcome = self._end(
                "force_release",
                functools.partial(expressions.force_update, delayed=bool(delay_ms)),
                lock_id,
                lease_id,
                ended,
                now_ms=now_ms,
                skew_ms=skew_ms,
                slot=slot,
                audit=audit,
                also=functools.partial(expressions.delay_is, delayed=bool(delay_ms)),
                actor=actor,
                reason=reason,
                delay_ms=delay_ms,
            )
            if outcome.applied or delay_ms:
                break
            delay_ms = _delay_of(outcome, lease_id)
            if not delay_ms:
                break
        if outcome.applied and delay_ms:
            read_ms = now_ms + round((self.clock.monotonic() - started) * 1000)
            self._delay_from_the_force(lock_id, lease_id, ended, delay_ms, read_ms, skew_ms, slot)
        if outcome.applied and audit is not None and not self._transactions:
            self._move_kept_audits(outcome, lease_id, audit)
        return outcome

    def _delay_from_the_force(
        self,
        lock_id: str,
        lease_id: str,
        ended: str,
        delay_ms: int,
        read_ms: int,
        skew_ms: int,
        slot: int | None,
    ) -> None:
        """The forced lease's lock-delay, counted from now (the force's answer is in, so it
        landed before now) where that ends it sooner than its lease's end did. Now is never
        before ``read_ms``: the force's reading plus the monotonic time since, so that neither
        a step of the wall clock back meanwhile nor a store whose clock is not its callers'
        counts it from before the landing."""
        now_ms = max(round(self.clock.time() * 1000), read_ms)
        free_after_ms = now_ms + delay_ms
        p = slot_prefix(slot)
        values = {
            "lease": lease_id,
            "ended": ended,
            "answered_free_after_ms": free_after_ms,
            "ttl": expiration_seconds(now_ms + skew_ms),
            "zero": 0,
        }
        try:
            self._conditional_update(
                "force_release",
                lock_id,
                expressions.delay_from_the_force_update(p),
                expressions.delay_from_the_force(p),
                values,
                slot,
            )
        except errors.StoreError as exc:  # the force took effect: that is the answer
            log.warning(
                "%r was force-released, but its lock-delay could not be counted from now (%s):"
                " it counts from the end of the lease it forced, later than %s",
                lock_id,
                exc.one_line(),
                iso_utc(free_after_ms / 1000),
            )

    def _move_kept_audits(self, outcome: Outcome, lease_id: str, audit: dict[str, Any]) -> None:
        """The force's record rode in the lock's item (``_end``): it moves to its own item
        now, and so does any other the item keeps (of a force whose run died before moving
        it), so that the item does not keep growing."""
        kept = outcome.lock.extra if outcome.lock is not None else {}
        others = [e for e in kept_audits(kept) if e.get("lease_id") != lease_id]
        for entry in [audit, *others]:
            try:
                self.put_audit(audit_key(str(entry.get("lease_id"))), entry)
            except errors.StoreError as exc:  # the force took effect: that is the answer
                log.debug(
                    "the audit record of the force-release of lease %s stays in the lock's "
                    "item, where `awsflock audit` lists it (%s)",
                    entry.get("lease_id"),
                    exc.one_line(),
                )
                return


def _delay_of(outcome: Outcome, lease_id: str) -> int:
    """The lock-delay (ms) of ``lease_id``, where a refused force shows it current and not
    ended with one: refused for its delay, then. 0 otherwise."""
    record = outcome.lock if outcome.slot is None else outcome.record
    if record is None or record.lease_id != lease_id or record.ended or not record.lock_delay:
        return 0
    return round(record.lock_delay * 1000)
