"""Table administration for ``awsflock table-create``: create the lock table (or accept a
compatible one), wait until it is ACTIVE, enable TTL. Kept apart from the lock steps; it speaks
DynamoDB through the store's client and error translation (``DynamoDBStore.create``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.stores.dynamodb.items import A_EXPIRATION_TIME, A_LOCK_ID
from awsflock.stores.dynamodb.translate import key_problem, not_awsflock_table

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: Turns botocore's errors inside into awsflock's, for the operation named.
Translate = Callable[[str], AbstractContextManager[None]]


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
