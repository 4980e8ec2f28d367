"""Table administration for ``awsflock table-create``: create the lock table (or accept a
compatible one), wait until it is ACTIVE, enable TTL. Kept apart from the lock steps; it speaks
DynamoDB through the store's client and error translation (``DynamoDBStore.create``). And what
makes a table awsflock's (its key), which the store checks before a scan and after a refusal.
"""

from __future__ import annotations

import re
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.stores.dynamodb.items import A_EXPIRATION_TIME, A_LOCK_ID

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: Turns botocore's errors inside into awsflock's, for the operation named.
Translate = Callable[[str], AbstractContextManager[None]]

#: How DynamoDB and local servers refuse a request whose key does not fit the table's.
KEY_REFUSAL = re.compile(
    r"required keys was not given|key element does not match the schema|Missing the key"
    r"|Type mismatch for key",
    re.IGNORECASE,
)

_KEY_TYPES = {"S": "a string", "N": "a number", "B": "binary"}
TABLE_HINT = (
    "name the lock table with --tablename (or AWSFLOCK_TABLE), or create one with "
    "`awsflock table-create --tablename NEW`"
)


def key_problem(table: dict[str, Any]) -> str | None:
    """How a DescribeTable answer's key differs from awsflock's (``lock_id``, a string, no sort
    key), e.g. "'pk', a string"; None if it is awsflock's."""
    types = {a["AttributeName"]: a["AttributeType"] for a in table.get("AttributeDefinitions", [])}
    keys = [(k["AttributeName"], k["KeyType"]) for k in table.get("KeySchema", [])]
    if keys == [(A_LOCK_ID, "HASH")] and types.get(A_LOCK_ID) == "S":
        return None
    parts = []
    for name, kind in keys:
        what = f"{name!r}, {_KEY_TYPES.get(types.get(name, ''), 'of unknown type')}"
        parts.append(what if kind == "HASH" else f"sort key {what}")
    return " with ".join(parts) or "unknown"


def not_awsflock_table(table_name: str, key: str) -> errors.TableIncompatible:
    return errors.TableIncompatible(
        f"table {table_name!r} is not an awsflock table: its key is {key} "
        f"(want {A_LOCK_ID}, a string)",
        hint=TABLE_HINT,
    )


def create_table(
    client: DynamoDBClient,
    name: str,
    translate: Translate,
    *,
    billing_mode: str = "PAY_PER_REQUEST",
    capacity: tuple[int, int] = (5, 5),
    progress: Callable[[str], None] = lambda _msg: None,
    sleep: Callable[[float], None] | None = None,
    timeout: float = 300.0,
) -> bool:
    """Create the table (or accept a compatible one), wait for ACTIVE, enable TTL.

    Returns True if it was created now, False if it already existed.
    """
    import time as _time

    sleep = sleep or _time.sleep
    kwargs: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [{"AttributeName": A_LOCK_ID, "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": A_LOCK_ID, "AttributeType": "S"}],
        "BillingMode": billing_mode,
    }
    if billing_mode == "PROVISIONED":
        kwargs["ProvisionedThroughput"] = {
            "ReadCapacityUnits": capacity[0],
            "WriteCapacityUnits": capacity[1],
        }
    from botocore.exceptions import ClientError

    created = True
    try:
        with translate("create_table"):
            try:
                client.create_table(**kwargs)
                progress(f"creating table {name!r}")
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ResourceInUseException":
                    raise
                raise _TableExists() from None
    except _TableExists:
        created = False
        progress(f"table {name!r} already exists; checking it")
    _wait_active(client, name, translate, progress, sleep, timeout)
    _ensure_ttl(client, name, translate, progress)
    return created


def _wait_active(
    client: DynamoDBClient,
    name: str,
    translate: Translate,
    progress: Callable[[str], None],
    sleep: Callable[[float], None],
    timeout: float,
) -> None:
    waited = 0.0
    while True:
        with translate("describe_table"):
            table = client.describe_table(TableName=name)["Table"]
        key = key_problem(dict(table))
        if key is not None:
            raise not_awsflock_table(name, key)
        status = table.get("TableStatus", "")
        if status == "ACTIVE":
            progress(f"table {name!r} is ACTIVE")
            return
        if waited >= timeout:
            raise errors.StoreError(
                f"table {name!r} still {status} after {int(timeout)}s",
                hint="check it in the AWS console and run table-create again",
            )
        progress(f"table {name!r} is {status}; waiting")
        sleep(0.5)
        waited += 0.5


def _ensure_ttl(
    client: DynamoDBClient, name: str, translate: Translate, progress: Callable[[str], None]
) -> None:
    from botocore.exceptions import ClientError

    try:
        with translate("describe_ttl"):
            desc: Any
            try:
                desc = client.describe_time_to_live(TableName=name)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") in ("UnknownOperationException",):
                    desc = {}
                else:
                    raise
        ttl = desc.get("TimeToLiveDescription", {})
        if ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING"):
            if ttl.get("AttributeName") != A_EXPIRATION_TIME:
                progress(
                    f"warning: TTL is on attribute {ttl.get('AttributeName')!r}, not "
                    f"{A_EXPIRATION_TIME!r}; old lock items will not be cleaned up"
                )
            else:
                progress(f"TTL on {A_EXPIRATION_TIME!r} is enabled")
            return
        with translate("ttl"):
            client.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": A_EXPIRATION_TIME},
            )
        progress(f"TTL enabled on {A_EXPIRATION_TIME!r}")
    except errors.StoreError as exc:
        if isinstance(exc, (errors.EndpointUnreachable, errors.CredentialsError)):
            raise
        # TTL is cleanup only; the table works without it (dynalite has no TTL at all).
        progress(f"warning: could not enable TTL ({exc.message}); the table works without it")


class _TableExists(Exception):
    pass
