"""The DynamoDB store's writes, which every step is made of: one conditional UpdateItem of a
lock's item (``_conditional_update``), and one TransactWriteItems of a lock's item with its fence
record or a lease's done item (``_transact``, its items made by ``_lock_write`` and
``_fence_write``). Each returns the item as it was where a condition refused it, or reads it
where the endpoint does not. ``takes``, ``steps`` and ``ends`` build the lock steps on them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from awsflock import errors
from awsflock.protocol import AUDIT_APPLIED, AUDIT_VOID, Outcome
from awsflock.stores.dynamodb import expressions, fates
from awsflock.stores.dynamodb.base import TableBase
from awsflock.stores.dynamodb.items import (
    A_LOCK_ID,
    A_UNAUDITED,
    ALIASES,
    KIND_FENCE,
    audit_item,
    fence_key,
    pending_audit_name,
    to_attr,
)

_NAME = re.compile(r"#(\w+)")
_VALUE = re.compile(r":(\w+)")


def _request(*expressions: str, values: dict[str, Any]) -> dict[str, Any]:
    """ExpressionAttributeNames/Values holding exactly what the expressions use.

    DynamoDB rejects unused names or values, so they are derived from the expressions; a
    placeholder ``#x`` names the attribute ``x``, unless ``values[ALIASES]`` maps it to another
    (a share's long attribute names, kept short so that expressions stay within 4 KB).
    """
    text = " ".join(expressions)
    used_names = sorted(set(_NAME.findall(text)))
    used_values = sorted(set(_VALUE.findall(text)) - {ALIASES})
    aliases = values.get(ALIASES, {})
    return {
        "ExpressionAttributeNames": {f"#{n}": aliases.get(n, n) for n in used_names},
        "ExpressionAttributeValues": {f":{k}": to_attr(values[k]) for k in used_values},
    }


class Writes(TableBase):
    """The conditional writes of a lock table."""

    def _conditional_update(
        self,
        operation: str,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None,
    ) -> Outcome:
        """Run one conditional UpdateItem on a lock's item; the item as it is afterwards, or as
        it was when the condition failed."""
        from botocore.exceptions import ClientError

        request = _request(update, condition, values=values)

        def call() -> tuple[bool, dict[str, Any] | None]:
            try:
                response = self.client.update_item(
                    TableName=self.table_name,
                    Key={A_LOCK_ID: {"S": lock_id}},
                    UpdateExpression=update,
                    ConditionExpression=condition,
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **request,
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise
                return False, exc.response.get("Item")  # type: ignore[return-value]
            item = dict(response.get("Attributes", {}))
            if A_LOCK_ID not in item:
                # ALL_NEW always holds the key: an answer cut short, or not DynamoDB's. The
                # write may have been applied.
                raise errors.EndpointUnreachable(
                    f"DynamoDB at {self._where()} gave an incomplete answer",
                    hint="check --endpoint-url and the network",
                )
            return True, item

        applied, item = self._send(operation, call)
        in_doubt = self._in_doubt()
        outcome = self._after_update(operation, applied, item, lock_id, slot)
        return dataclasses.replace(outcome, in_doubt=in_doubt) if in_doubt else outcome

    def _lock_write(
        self, lock_id: str, update: str, condition: str, values: dict[str, Any]
    ) -> dict[str, Any]:
        """A transaction's item: the conditional update of a lock's item (its old item returned
        if the condition refuses it)."""
        return {
            "Update": {
                "TableName": self.table_name,
                "Key": {A_LOCK_ID: {"S": lock_id}},
                "UpdateExpression": update,
                "ConditionExpression": condition,
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                **_request(update, condition, values=values),
            }
        }

    def _fence_write(
        self,
        lock_id: str,
        token: int,
        *,
        raise_it: bool = True,
        last: dict[str, Any] | None = None,
        pinned: str = "",
        group: bool = False,
    ) -> dict[str, Any]:
        """A transaction's item on the lock's fence record: that it holds no token from
        ``token`` up, and (``raise_it``) raised to ``token``; its item returned if refused.
        ``last``: a plain take's values, whose lease becomes the record's last (``fates``), if
        ``pinned`` (the take's condition on how the last one ended) holds; ``group``: it is a
        new group's, marked so (``fates.LAST_GROUP``)."""
        values = {"token": token, "fence_kind": KIND_FENCE, **(last or {})}
        condition = expressions.FENCE_RECORD_ABOVE + (f" AND {pinned}" if pinned else "")
        update = expressions.FENCE_UPDATE
        if last is not None and group:
            update += f", {fates.LAST_SET}, {fates.LAST_GROUP} REMOVE {fates.LAST_REMOVE}"
        elif last is not None:
            update += f", {fates.LAST_SET} REMOVE {fates.LAST_REMOVE}, #last_sh"
        item: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": {A_LOCK_ID: {"S": fence_key(lock_id)}},
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **_request(*((update,) if raise_it else ()), condition, values=values),
        }
        if raise_it:
            item["UpdateExpression"] = update
            return {"Update": item}
        return {"ConditionCheck": item}

    def _transact(
        self, operation: str, items: list[Any]
    ) -> list[tuple[bool, dict[str, Any]]] | None:
        """One TransactWriteItems of conditional ``items``: [] if applied; if a condition
        refused it, each item's (refused, the item as it was where its request asked for it);
        None if the endpoint has no transactions (dynalite). A conflict with another write, or
        worse, is raised (translated, retried)."""
        from botocore.exceptions import ClientError

        def call() -> list[tuple[bool, dict[str, Any]]] | None:
            try:
                self.client.transact_write_items(TransactItems=items)
            except ClientError as exc:
                response: Any = exc.response
                code = response.get("Error", {}).get("Code")
                if code == "UnknownOperationException":
                    return None
                if code == "ValidationException":
                    # Some servers (moto) refuse a transaction on a table keyed otherwise without
                    # saying why; a read of the first item's key says it (translated as such),
                    # and costs a request only on this error.
                    key = next(iter(items[0].values()))["Key"]
                    self.client.get_item(TableName=self.table_name, Key=key)
                    raise
                reasons: list[Any] = response.get("CancellationReasons") or []
                codes = [r.get("Code") for r in reasons]
                if (
                    code != "TransactionCanceledException"
                    or len(reasons) != len(items)
                    or any(c not in ("ConditionalCheckFailed", "None") for c in codes)
                ):
                    raise
                return [
                    (c == "ConditionalCheckFailed", dict(r.get("Item") or {}))
                    for c, r in zip(codes, reasons)
                ]
            return []

        answer: list[tuple[bool, dict[str, Any]]] | None = self._send(operation, call)
        return answer

    def _after_update(
        self,
        operation: str,
        applied: bool,
        item: dict[str, Any] | None,
        lock_id: str,
        slot: int | None,
    ) -> Outcome:
        if applied:
            return self._outcome(True, item, lock_id, slot)
        if item:
            self._ccf_returns_item = True
            return self._outcome(False, item, lock_id, slot)
        # No old item in the answer: either there is no item, or the endpoint ignores
        # ReturnValuesOnConditionCheckFailure (dynalite 4 does). Only then read it.
        if self._ccf_returns_item:
            return Outcome(False, None, None, slot)
        if operation == "acquire":
            # An acquire fails only on an existing item: this endpoint does not return it on
            # failure, and every later failure needs the read.
            self._ccf_returns_item = False
        return self._outcome(False, self._get_item(lock_id), lock_id, slot)

    # -- audit records -----------------------------------------------------------------------

    def put_audit(self, key: str, entry: dict[str, Any]) -> None:
        """Write one audit record under ``key``, one PutItem conditional on the record there:
        one whose action took effect stays, a void one gives way only to one that took effect
        (``LockStore.put_audit``). A force's record kept in its lock's item (``ends``: where the
        endpoint has no transactions) is dropped from it once its own item holds one applied.
        (A store with transactions puts no applied record but on rare retries: the drop is
        tried whatever this store knows of the endpoint yet.)"""
        self._put_audit(key, entry)
        lock_id, lease_id = entry.get("target"), entry.get("lease_id")
        if entry.get("status") == AUDIT_APPLIED and lock_id and lease_id:
            self._drop_pending_audit(str(lock_id), str(lease_id))

    def _drop_pending_audit(self, lock_id: str, lease_id: str) -> None:
        """Drop the audit record of the force of ``lease_id`` from ``lock_id``'s item (one
        UpdateItem; refused, harmlessly, where the item keeps none)."""
        name = pending_audit_name(lease_id)
        update = f"REMOVE #{name} DELETE #{A_UNAUDITED} :unaudited"
        condition = f"attribute_exists(#{name})"
        self._unless_refused(
            "audit_moved",
            "update_item",
            TableName=self.table_name,
            Key={A_LOCK_ID: {"S": lock_id}},
            UpdateExpression=update,
            ConditionExpression=condition,
            **_request(update, condition, values={"unaudited": frozenset({name})}),
        )

    def _unless_refused(self, operation: str, method: str, **request: Any) -> None:
        """One conditional write whose refusal is an answer, not an error (nothing to do)."""
        from botocore.exceptions import ClientError

        def call() -> None:
            try:
                getattr(self.client, method)(**request)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self._send(operation, call)

    def _put_audit(self, key: str, entry: dict[str, Any]) -> None:
        values = {":applied": {"S": AUDIT_APPLIED}}
        if entry.get("status") == AUDIT_APPLIED:
            condition = "attribute_not_exists(#s) OR #s <> :applied"
        else:
            condition = "attribute_not_exists(#s) OR NOT (#s IN (:applied, :void))"
            values[":void"] = {"S": AUDIT_VOID}
        # Refused: the record there stays, as it should.
        self._unless_refused(
            "audit",
            "put_item",
            TableName=self.table_name,
            Item=audit_item(key, entry),
            ConditionExpression=condition,
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues=values,
        )
