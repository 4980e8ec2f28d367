"""The DynamoDB store's state with the lease (``awsflock.state``): where it is kept, how a
renewal writes it, how it is read.

- **Where.** On the lock's fence record, which is never deleted: TTL, a 0.2.0 client's release
  and a later take leave it alone. Attributes ``state`` (``STATE_PREFIX`` and the bytes in
  base64: never an empty string, which some servers refuse), ``state_lease`` (the lease that
  wrote it) and ``state_ms`` (its stamp). On an endpoint without transactions (dynalite) there
  is no fence record: the state is on the lock's item, which is kept for good there.
- **A write** is one TransactWriteItems: the renewal's update of the lock's item, under the
  renewal's condition, and the fence record's update, under ``STATE_ORDER``. Its answer says
  nothing, so the lock's item is read after it (a second request, for state writes only).
  Without transactions, the renewal's UpdateItem sets the state too.
- **A write that would shorten the lease** (refused as a renewal alone, a longer one being in
  place) is sent again as ``KEEP``: the lock's item only checked (ours, not ended, live), the
  state written, the end left as it is.
- **A read** is one BatchGetItem, consistent, of the fence record and the lock's item: the
  fence record's state where it has one, else the item's.
"""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

from awsflock import errors
from awsflock.protocol import Outcome
from awsflock.state import NO_STATE, LockState, StateWrite
from awsflock.stores.dynamodb import expressions
from awsflock.stores.dynamodb.items import A_LOCK_ID, KIND_FENCE, fence_key
from awsflock.stores.dynamodb.writes import Writes, _request

#: How a stored state's text starts (then its bytes in base64).
STATE_PREFIX = "v1:"
#: A write of the lease that wrote the stored state needs a stamp no earlier than that one's.
STATE_ORDER = (
    "(attribute_not_exists(#state_lease) OR #state_lease <> :lease OR #state_ms <= :state_ms)"
)
STATE_SETS = "#state = :state_data, #state_lease = :lease, #state_ms = :state_ms"
#: The lock's item when a write keeps the lease's end: ours, not ended, live, a plain lock.
KEEP = (
    f"{expressions.owned()} AND {expressions.not_ended()} AND {expressions.live()}"
    f" AND {expressions.PLAIN_NOT_POOL} AND {expressions.NOT_GROUP}"
)
_ATTRIBUTES = ("state", "state_lease", "state_ms")


class StateWrites(Writes):
    """Renewals that write state, and reads of it."""

    def _renew_with_state(
        self,
        lock_id: str,
        renewal: tuple[str, str],
        values: dict[str, Any],
        state: StateWrite,
        keep: bool,
    ) -> Outcome:
        """One renewal with ``state`` (``renewal``: its update and condition), or, ``keep``,
        the state alone where the lease's end stays."""
        values = {
            **values,
            "state_data": STATE_PREFIX + base64.b64encode(state.data).decode("ascii"),
            "state_ms": state.stamp_ms,
            "fence_kind": KIND_FENCE,
        }
        update, condition = renewal
        if self._transactions:
            lock: dict[str, Any]
            if keep:
                lock = {"ConditionCheck": self._keyed(lock_id, KEEP, values)}
            else:
                lock = self._lock_write(lock_id, update, condition, values)
            fence_update = f"SET {STATE_SETS}, #kind = :fence_kind"
            fence = self._keyed(fence_key(lock_id), STATE_ORDER, values, fence_update)
            answer = self._transact("renew", [lock, {"Update": fence}])
            if answer is not None:
                return self._after_state(lock_id, answer)
            self._transactions = False
        if keep:
            update, condition = f"SET {STATE_SETS}", KEEP
        else:
            update = f"{update}, {STATE_SETS}" if update.startswith("SET ") else update
        return self._conditional_update(
            "renew", lock_id, update, f"{condition} AND {STATE_ORDER}", values, None
        )

    def _keyed(
        self, key: str, condition: str, values: dict[str, Any], update: str = ""
    ) -> dict[str, Any]:
        """A transaction's item on ``key`` under ``condition`` (its old item if refused)."""
        item: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": {A_LOCK_ID: {"S": key}},
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_request(*((update,) if update else ()), condition, values=values),
        }
        if update:
            item["UpdateExpression"] = update
        return item

    def _after_state(self, lock_id: str, answer: list[tuple[bool, dict[str, Any]]]) -> Outcome:
        """The outcome of a state write's transaction: the lock's item read after it (a
        transaction answers nothing), or as its refusal showed it."""
        in_doubt = self._in_doubt()
        if answer:
            (lock_refused, item), _ = answer
            if not lock_refused or not item:  # refused by the state's order, or not returned
                item = self._get_item(lock_id) or {}
            outcome = self._outcome(False, item or None, lock_id, None)
        else:
            self.applied()  # a failed read must not say that nothing was
            outcome = self._outcome(True, self._get_item(lock_id), lock_id, None)
        return dataclasses.replace(outcome, in_doubt=True) if in_doubt else outcome

    def read_state(self, lock_id: str) -> LockState:
        keys: list[Any] = [{A_LOCK_ID: {"S": fence_key(lock_id)}}, {A_LOCK_ID: {"S": lock_id}}]
        found: dict[str, dict[str, Any]] = {}
        for _ in range(5):
            request = {
                self.table_name: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": ", ".join(f"#{a}" for a in (A_LOCK_ID, *_ATTRIBUTES)),
                    "ExpressionAttributeNames": {f"#{a}": a for a in (A_LOCK_ID, *_ATTRIBUTES)},
                }
            }
            response = self._send(
                "get_state", lambda r=request: self.client.batch_get_item(RequestItems=r)
            )
            for item in response.get("Responses", {}).get(self.table_name, []):
                found[item[A_LOCK_ID]["S"]] = item
            unprocessed: Any = response.get("UnprocessedKeys") or {}
            keys = unprocessed.get(self.table_name, {}).get("Keys", [])
            if not keys:
                kept = _state_of(found.get(fence_key(lock_id), {}))
                return kept if kept.data is not None else _state_of(found.get(lock_id, {}))
        raise errors.Throttled(
            f"DynamoDB at {self._where()} left the read of {lock_id!r}'s state unprocessed",
            hint="try again; raise the table's read capacity if this persists",
        )


def _state_of(item: dict[str, Any]) -> LockState:
    """The state an item keeps (NO_STATE where it keeps none)."""
    text = item.get("state", {}).get("S")
    if not isinstance(text, str) or not text.startswith(STATE_PREFIX):
        return NO_STATE
    return LockState(
        base64.b64decode(text[len(STATE_PREFIX) :]),
        str(item.get("state_lease", {}).get("S", "")),
        int(item.get("state_ms", {}).get("N", "0")),
    )
