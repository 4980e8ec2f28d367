"""awsflock 0.2.0's three requests on a DynamoDB table, for simulations on the DynamoDB store:
the same ``legacy_*`` methods the in-memory store has, made of 0.2.0's own requests (GetItem,
PutItem conditioned on the ``lease_id`` it read or on there being no item, DeleteItem
conditioned on its ``lease_id``), each sent as the store sends its own (its retries, as
0.2.0 relied on botocore's, and its error translation)."""

from __future__ import annotations

import dataclasses
from typing import Any

from awsflock.records import LockRecord
from awsflock.stores import kinds
from awsflock.stores.dynamodb.items import record_from_item


class DynamoDBStoreWith020:
    """A DynamoDB store (opened through the store registry), plus awsflock 0.2.0's requests on
    its table; everything else is the store's own."""

    def __init__(self, table_name: str, client: Any, clock: Any = None) -> None:
        settings = kinds.Settings(table_name, 5.0, clock=clock, extra={"client": client})
        self.store: Any = kinds.get("dynamodb").open(kinds.default(), settings)
        self.client = client
        self.table_name = table_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def legacy_read(self, lock_id: str) -> LockRecord | None:
        item = self.store._send(
            "legacy_read",
            lambda: self.client.get_item(
                TableName=self.table_name, Key={"lock_id": {"S": lock_id}}, ConsistentRead=True
            ),
        ).get("Item")
        if item is None or "lease_id" not in item or "expiration_time" not in item:
            return None  # a pool: 0.2.0 cannot read it
        record = record_from_item(item)
        return dataclasses.replace(
            record,
            lease_id=item["lease_id"]["S"],
            expires_at=float(item["expiration_time"]["N"]),
        )

    def legacy_put(
        self, lock_id: str, lease_id: str, owner: str, expires_s: int, *, expect: str | None
    ) -> bool:
        condition: dict[str, Any] = (
            {
                "ConditionExpression": "NOT(attribute_exists(#pk))",
                "ExpressionAttributeNames": {"#pk": "lock_id"},
            }
            if expect is None
            else {
                "ConditionExpression": "attribute_exists(#lock_id) AND #lease_id = :existing",
                "ExpressionAttributeNames": {"#lock_id": "lock_id", "#lease_id": "lease_id"},
                "ExpressionAttributeValues": {":existing": {"S": expect}},
            }
        )
        item = {
            "lock_id": {"S": lock_id},
            "lease_id": {"S": lease_id},
            "owner": {"S": owner},
            "lease_duration": {"N": "10"},
            "expiration_time": {"N": str(expires_s)},
        }
        return self._conditional(
            "legacy_put",
            lambda: self.client.put_item(TableName=self.table_name, Item=item, **condition),
        )

    def legacy_delete(self, lock_id: str, expect: str) -> bool:
        return self._conditional(
            "legacy_delete",
            lambda: self.client.delete_item(
                TableName=self.table_name,
                Key={"lock_id": {"S": lock_id}},
                ConditionExpression="attribute_exists(#lock_id) AND #lease_id = :existing",
                ExpressionAttributeNames={"#lock_id": "lock_id", "#lease_id": "lease_id"},
                ExpressionAttributeValues={":existing": {"S": expect}},
            ),
        )

    def _conditional(self, operation: str, call: Any) -> bool:
        from botocore.exceptions import ClientError

        def conditional() -> bool:
            try:
                call()
            except ClientError as exc:
                if exc.response["Error"]["Code"] != "ConditionalCheckFailedException":
                    raise
                return False
            return True

        done: bool = self.store._send(operation, conditional)
        return done

    def expire_records(self, now: float, *, legacy_after: float = 0.0) -> list[str]:
        """What DynamoDB's TTL may do by ``now``: delete every item whose ``expiration_time``
        (whole seconds) is past (an item awsflock 0.2.0 wrote, whose expiry time is its lease's
        end, only ``legacy_after`` seconds after it). The names of the locks removed (not
        awsflock's own items: done items, audit records)."""
        from awsflock.records import RESERVED_PREFIX

        gone = []
        pages = self.client.get_paginator("scan").paginate(TableName=self.table_name)
        for item in (i for page in pages for i in page.get("Items", ())):
            expiry = item.get("expiration_time")
            if expiry is None:
                continue
            legacy = "fence" not in item and "expires_ms" not in item
            if float(expiry["N"]) + (legacy_after if legacy else 0) >= now:
                continue
            key = item["lock_id"]["S"]
            self.client.delete_item(TableName=self.table_name, Key={"lock_id": {"S": key}})
            if not key.startswith(RESERVED_PREFIX):
                gone.append(key)
        return gone
