"""The lock operations in DynamoDB, one conditional request each. With ``tables`` (table
administration) this is the only code that talks to DynamoDB; ``items`` holds the item layout.

Protocol (all times are the caller's wall clock, in milliseconds, written into the item):

- **acquire** is one ``UpdateItem`` guarded by ``COND_FREE``: the item is absent, released, or
  its lease ended more than the skew window ago. It sets a fresh lease and bumps the fencing
  counter with ``if_not_exists(fence, floor) + 1``, where ``floor`` is ``now_ms * 1000``. The
  counter only goes up while the item lives; when the item is recreated (deleted by TTL or by
  hand, or overwritten by awsflock 0.2.0, which drops our attributes) it restarts from a floor
  derived from the clock, which exceeds every earlier token because recreation only happens after
  the old lease ended plus the skew window (the NTP assumption; see the README). A failed acquire
  learns the holder from the same request (``ReturnValuesOnConditionCheckFailure=ALL_OLD``), or
  from one consistent read where the endpoint ignores that parameter.
- **renew** is one ``UpdateItem`` guarded by ``COND_RENEW``: still our lease, not released.
- **release** is one ``UpdateItem`` guarded by ``COND_RELEASE`` that marks the item released and
  keeps it (so the fencing counter survives); the TTL attribute is set ``skew`` seconds ahead
  so DynamoDB's TTL cleanup cannot recreate the item too early for the clock floor.
- Every acquisition remembers the lease it replaced (``prev_lease_id``/``prev_released``), so a
  release whose response was lost and that is retried after someone else acquired is still
  recognised as done.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from awsflock import errors
from awsflock.items import (
    A_CI_URL,
    A_COMMAND,
    A_HOST,
    A_KIND,
    A_LEASE_ID,
    A_LOCK_ID,
    A_PID,
    A_SLOTS,
    A_USER,
    POOL_PREFIX,
    Pool,
    from_attr,
    pool_key,
    record_from_item,
    slot_item,
    slot_names,
    to_attr,
)
from awsflock.records import RESERVED_PREFIX, Identity, LockRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.client import DynamoDBClient

#: An acquire may take the item: it is absent, released, or expired by more than the skew window.
#: Items written by awsflock 0.2.0 have no ``expires_ms``; their ``expiration_time`` decides.
COND_FREE = (
    "attribute_not_exists(#lock_id) OR #released = :true"
    " OR (attribute_exists(#expires_ms) AND #expires_ms < :cutoff_ms)"
    " OR (attribute_not_exists(#expires_ms) AND #expiration_time < :cutoff_s)"
)
#: A renew may extend the lease: it is still ours and was not released (or force-released).
COND_RENEW = "#lease_id = :lease_id AND (attribute_not_exists(#released) OR #released = :false)"
#: A release may end the lease: it is still ours. Releasing twice is harmless, hence no flag test.
COND_RELEASE = "#lease_id = :lease_id"

UPD_ACQUIRE = (
    "SET #lease_id = :lease_id, #owner = :owner, #lease_duration = :lease_duration,"
    " #expiration_time = :expiration_time, #expires_ms = :expires_ms, #acquired_ms = :now_ms,"
    " #fence = if_not_exists(#fence, :floor) + :one, #released = :false,"
    " #prev_lease_id = if_not_exists(#lease_id, :null),"
    " #prev_released = if_not_exists(#released, :false)"
)
UPD_RENEW = (
    "SET #lease_duration = :lease_duration, #expiration_time = :expiration_time,"
    " #expires_ms = :expires_ms"
)
UPD_RELEASE = "SET #released = :true, #expires_ms = :now_ms, #expiration_time = :expiration_time"
#: An operator may end exactly the lease they were shown, and only while it is still current.
COND_FORCE = COND_RENEW
UPD_FORCE = UPD_RELEASE + ", #forced_by = :actor, #forced_reason = :reason, #forced_ms = :now_ms"

_NAME = re.compile(r"#(\w+)")
_VALUE = re.compile(r":(\w+)")

#: The IAM action each store call needs, for "access denied" messages and ``iam-policy``.
ACTIONS = {
    "acquire": "UpdateItem",
    "renew": "UpdateItem",
    "release": "UpdateItem",
    "get": "GetItem",
    "scan": "Scan",
    "create_table": "CreateTable",
    "describe_table": "DescribeTable",
    "ttl": "UpdateTimeToLive",
    "describe_ttl": "DescribeTimeToLive",
    "force_release": "UpdateItem",
    "resize": "UpdateItem",
    "audit": "PutItem",
}

_THROTTLE_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
}
_CREDENTIAL_CODES = {
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "ExpiredTokenException",
    "ExpiredToken",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "IncompleteSignature",
    "InvalidClientTokenId",
}
_UNAVAILABLE_CODES = {"InternalServerError", "ServiceUnavailable", "InternalFailure"}

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


#: A pool acquire also checks that every holder agrees on the pool's size.
COND_SLOTS = "attribute_not_exists(#slots) OR #slots = :slots"


def _request(
    *expressions: str, names: dict[str, str] | None = None, values: dict[str, Any]
) -> dict[str, Any]:
    """ExpressionAttributeNames/Values holding exactly what the expressions use.

    DynamoDB rejects unused names or values, so they are derived from the expressions.
    """
    text = " ".join(expressions)
    used_names = sorted(set(_NAME.findall(text)))
    used_values = sorted(set(_VALUE.findall(text)))
    names = names or {}
    return {
        "ExpressionAttributeNames": {f"#{n}": names.get(n, n) for n in used_names},
        "ExpressionAttributeValues": {f":{k}": to_attr(values[k]) for k in used_values},
    }


def expiration_seconds(expires_ms: int) -> int:
    """The integer TTL/0.2.0 expiry for a lease ending at ``expires_ms`` (rounded up)."""
    return math.ceil(expires_ms / 1000)


@dataclass(frozen=True)
class Attempt:
    """What one acquire request found: granted (``record`` is the new state) or not (the holder).

    For a pool, ``pool`` is every slot's state as the request saw it (None if unknown)."""

    granted: bool
    record: LockRecord | None
    pool: Pool | None = None


def is_loopback(endpoint_url: str | None) -> bool:
    if not endpoint_url:
        return False
    from urllib.parse import urlsplit

    host = urlsplit(endpoint_url).hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class Store:
    """A lock table in DynamoDB. Builds its botocore client on first use, once."""

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        *,
        region: str | None = None,
        profile: str | None = None,
        endpoint_url: str | None = None,
        max_attempts: int = 4,
    ) -> None:
        if not table_name:
            raise errors.UsageError("table name is empty", hint="pass --tablename NAME")
        self.table_name = table_name
        self.region = region
        self.profile = profile
        self.endpoint_url = endpoint_url
        self.max_attempts = max_attempts
        self._client = client
        # None until we learn whether a failed conditional write returns the old item.
        self._ccf_returns_item: bool | None = None

    # -- client -------------------------------------------------------------------------------

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> DynamoDBClient:
        # botocore directly: importing boto3 on top of it only adds start-up time.
        import botocore.session
        from botocore.config import Config

        session = botocore.session.Session(profile=self.profile)
        region = self.region or session.get_config_variable("region")
        kwargs: dict[str, Any] = {}
        if is_loopback(self.endpoint_url):
            # A local server (dev-server, moto, dynalite) needs no real account: harmless
            # defaults, used only when the user set nothing and the endpoint is this machine.
            region = region or "us-east-1"
            if not self.profile and not self._has_env_creds():
                kwargs["aws_access_key_id"] = "awsflock-local"
                kwargs["aws_secret_access_key"] = "awsflock-local"
        if not region:
            raise errors.ConfigurationError(
                "no AWS region configured",
                hint="pass --region, or set AWS_REGION (or AWS_DEFAULT_REGION)",
            )
        config = Config(
            retries={"mode": "standard", "max_attempts": self.max_attempts},
            connect_timeout=3,
            read_timeout=5,
        )
        client: DynamoDBClient = session.create_client(  # type: ignore[assignment]
            # botocore types every client as BaseClient; this one is DynamoDB's. Naming the
            # API version spares botocore a scan of every service it knows at start-up.
            "dynamodb",
            region_name=region,
            endpoint_url=self.endpoint_url,
            config=config,
            api_version="2012-08-10",
            **kwargs,
        )
        return client

    @staticmethod
    def _has_env_creds() -> bool:
        import os

        return bool(os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"))

    # -- errors -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def translate_errors(self, operation: str) -> Iterator[None]:
        """Turn botocore's exceptions into awsflock's, naming the fix. The one place that does."""
        from botocore import exceptions as bx

        action = "dynamodb:" + ACTIONS.get(operation, operation)
        table = self.table_name
        try:
            yield
        except bx.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            message = exc.response.get("Error", {}).get("Message", "")
            if code == "ResourceNotFoundException":
                raise errors.TableMissing(
                    f"table {table!r} does not exist",
                    hint=f"run `awsflock table-create --tablename {table}`",
                ) from exc
            if code == "AccessDeniedException":
                raise errors.AccessDenied(
                    f"access denied for {action} on table {table!r}",
                    hint="grant it to this identity (see `awsflock iam-policy`)",
                ) from exc
            if code in _CREDENTIAL_CODES:
                raise errors.CredentialsError(
                    f"AWS rejected the credentials ({code})",
                    hint="check AWS_PROFILE / AWS_ACCESS_KEY_ID or refresh your session",
                ) from exc
            if code in _THROTTLE_CODES:
                raise errors.Throttled(
                    f"DynamoDB kept throttling {action} on {table!r} after retries",
                    hint="retry later, or raise the table's capacity",
                ) from exc
            if code in _UNAVAILABLE_CODES:
                raise errors.EndpointUnreachable(
                    f"DynamoDB is unavailable ({code})", hint="retry later"
                ) from exc
            detail = f"{code}: {message}" if message else code
            raise errors.StoreError(f"DynamoDB refused {action} ({detail})") from exc
        except bx.NoCredentialsError as exc:
            raise errors.CredentialsError(
                "no AWS credentials found",
                hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            ) from exc
        except bx.PartialCredentialsError as exc:
            raise errors.CredentialsError(
                f"incomplete AWS credentials: {exc}", hint="set both key id and secret"
            ) from exc
        except bx.NoRegionError as exc:
            raise errors.ConfigurationError(
                "no AWS region configured", hint="pass --region, or set AWS_REGION"
            ) from exc
        except (bx.EndpointConnectionError, bx.ConnectionClosedError) as exc:
            raise errors.EndpointUnreachable(
                f"cannot reach DynamoDB at {self._where()}",
                hint="check --endpoint-url/--region and the network",
            ) from exc
        except (bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
            raise errors.EndpointUnreachable(
                f"DynamoDB at {self._where()} did not answer in time",
                hint="check the network and retry",
            ) from exc
        except bx.HTTPClientError as exc:
            raise errors.EndpointUnreachable(
                f"connection to DynamoDB at {self._where()} failed: {exc}",
                hint="check the network and retry",
            ) from exc
        except bx.ProfileNotFound as exc:
            raise errors.ConfigurationError(
                f"AWS profile {self.profile or exc.kwargs.get('profile')!r} not found",
                hint="check --profile/AWS_PROFILE against ~/.aws/config",
            ) from exc
        except bx.ParamValidationError as exc:
            raise errors.UsageError(f"invalid request: {exc}") from exc

    def _where(self) -> str:
        if self.endpoint_url:
            return self.endpoint_url
        return f"region {self.region}" if self.region else "the default endpoint"

    # -- lock operations ----------------------------------------------------------------------

    def try_acquire(
        self,
        lock_id: str,
        *,
        lease_id: str,
        identity: Identity,
        now_ms: int,
        lease_ms: int,
        skew_ms: int,
        slot: int | None = None,
        slots: int | None = None,
    ) -> Attempt:
        """One conditional write that takes the lock (or slot ``slot`` of a pool of ``slots``)
        if it is free."""
        expires_ms = now_ms + lease_ms
        values: dict[str, Any] = {
            "lease_id": lease_id,
            "owner": identity.owner,
            "lease_duration": _seconds_number(lease_ms),
            "expiration_time": expiration_seconds(expires_ms),
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "floor": now_ms * 1000,
            "one": 1,
            "true": True,
            "false": False,
            "null": None,
            "cutoff_ms": now_ms - skew_ms,
            "cutoff_s": (now_ms - skew_ms) // 1000,
            "slots": slots,
        }
        # Who holds it, for waiters' messages; absent fields are removed so that a previous
        # holder's value never lingers.
        holder = {
            A_HOST: identity.host,
            A_PID: identity.pid,
            A_USER: identity.user,
            A_CI_URL: identity.ci_url,
            A_COMMAND: identity.command,
        }
        sets, removes = [], []
        for name, value in holder.items():
            if value in ("", 0, None):
                removes.append(f"#{name}")
            else:
                sets.append(f"#{name} = :{name}")
                values[name] = value
        condition = COND_FREE
        if slot is not None:
            sets.append("#slots = :slots")
            condition = f"({COND_FREE}) AND ({COND_SLOTS})"
        update = UPD_ACQUIRE + "".join(", " + s for s in sets)
        if removes:
            update += " REMOVE " + ", ".join(removes)
        applied, item = self._conditional_update(
            "acquire", lock_id, update, condition, values, slot
        )
        record = self._record(item, lock_id, slot)
        pool = Pool.from_item(lock_id, item) if slot is not None and item else None
        return Attempt(applied, record, pool)

    def renew(
        self, lock_id: str, lease_id: str, *, now_ms: int, lease_ms: int, slot: int | None = None
    ) -> LockRecord | None:
        """Extend our lease. The new state, or None if the lease is not ours any more."""
        expires_ms = now_ms + lease_ms
        values = {
            "lease_id": lease_id,
            "lease_duration": _seconds_number(lease_ms),
            "expiration_time": expiration_seconds(expires_ms),
            "expires_ms": expires_ms,
            "false": False,
        }
        applied, item = self._conditional_update(
            "renew", lock_id, UPD_RENEW, COND_RENEW, values, slot
        )
        return self._record(item, lock_id, slot) if applied else None

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> tuple[bool, LockRecord | None]:
        """End our lease, keeping the item. (released, what the item said if we did not)."""
        values = {
            "lease_id": lease_id,
            "true": True,
            "now_ms": now_ms,
            "expiration_time": expiration_seconds(now_ms + skew_ms),
        }
        applied, item = self._conditional_update(
            "release", lock_id, UPD_RELEASE, COND_RELEASE, values, slot
        )
        record = self._record(item, lock_id, slot)
        # A retried release whose first try went through, then someone else acquired:
        # the item remembers the lease it replaced and whether that one was released.
        if (
            not applied
            and record is not None
            and record.prev_lease_id == lease_id
            and record.prev_released
        ):
            return True, record
        return applied, record

    def force_release(
        self,
        lock_id: str,
        lease_id: str,
        *,
        now_ms: int,
        skew_ms: int,
        actor: str,
        reason: str,
        slot: int | None = None,
    ) -> tuple[bool, LockRecord | None]:
        """End ``lease_id`` whoever holds it, recording who and why on the item."""
        values = {
            "lease_id": lease_id,
            "true": True,
            "false": False,
            "now_ms": now_ms,
            "expiration_time": expiration_seconds(now_ms + skew_ms),
            "actor": actor,
            "reason": reason,
        }
        applied, item = self._conditional_update(
            "force_release", lock_id, UPD_FORCE, COND_FORCE, values, slot
        )
        return applied, self._record(item, lock_id, slot)

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        """Set a pool's size, only if it is still ``old`` and every slot that goes away is free."""
        parts = ["attribute_not_exists(#slots)" if old is None else "#slots = :old"]
        names = {"slots": A_SLOTS}
        for slot in range(new, old or 0):
            free = COND_FREE
            for short, attribute in slot_names(slot).items():
                free = free.replace(f"#{short}", f"#s{slot}_{short}")
                names[f"s{slot}_{short}"] = attribute
            parts.append(f"({free})")
        condition = " AND ".join(parts)
        values = {
            "old": old,
            "new": new,
            "true": True,
            "cutoff_ms": now_ms - skew_ms,
            "cutoff_s": (now_ms - skew_ms) // 1000,
        }
        request = _request("SET #slots = :new", condition, names=names, values=values)
        from botocore.exceptions import ClientError

        try:
            with self.translate_errors("resize"):
                try:
                    self.client.update_item(
                        TableName=self.table_name,
                        Key={A_LOCK_ID: {"S": pool_key(lock_id)}},
                        UpdateExpression="SET #slots = :new",
                        ConditionExpression=condition,
                        **request,
                    )
                except ClientError as exc:
                    if (
                        exc.response.get("Error", {}).get("Code")
                        == "ConditionalCheckFailedException"
                    ):
                        raise _ConditionFailed() from None
                    raise
        except _ConditionFailed:
            return False
        return True

    @staticmethod
    def _record(item: dict[str, Any] | None, lock_id: str, slot: int | None) -> LockRecord | None:
        if not item:
            return None
        if slot is None:
            return record_from_item(item)
        if f"s{slot}_{A_LEASE_ID}" not in item:
            return None
        return record_from_item(slot_item(item, slot, lock_id))

    def put_audit(self, key: str, fields: dict[str, Any]) -> None:
        """Write one audit record (never overwriting another)."""
        item = {A_LOCK_ID: {"S": key}, A_KIND: {"S": "audit"}}
        item.update({k: to_attr(v) for k, v in fields.items() if v not in (None, "")})
        with self.translate_errors("audit"):
            self.client.put_item(
                TableName=self.table_name,
                Item=item,
                ConditionExpression="attribute_not_exists(#k)",
                ExpressionAttributeNames={"#k": A_LOCK_ID},
            )

    def scan_items(self, prefix: str = "", page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Every item as plain values, page by page."""
        for item in self._scan(prefix, page_size):
            yield {k: from_attr(a) for k, a in item.items()}

    def caller_identity(self) -> str | None:
        """The AWS caller's ARN, or None where it cannot be learned (local endpoints, errors)."""
        if is_loopback(self.endpoint_url):
            return None
        try:
            import botocore.session
            from botocore.config import Config

            session = botocore.session.Session(profile=self.profile)
            sts = session.create_client(
                "sts",
                region_name=self.region or session.get_config_variable("region") or "us-east-1",
                config=Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 2}),
            )
            return str(sts.get_caller_identity()["Arn"])  # type: ignore[attr-defined]
        except Exception:  # any failure only means "unknown": the caller falls back to user@host
            return None

    def get(self, lock_id: str) -> LockRecord | None:
        """One strongly consistent read of a plain lock's item."""
        item = self._get_item(lock_id)
        return record_from_item(item) if item else None

    def get_pool(self, lock_id: str) -> Pool | None:
        """One strongly consistent read of a pool's item."""
        item = self._get_item(pool_key(lock_id))
        return Pool.from_item(lock_id, item) if item else None

    def _get_item(self, key: str) -> dict[str, Any] | None:
        with self.translate_errors("get"):
            response = self.client.get_item(
                TableName=self.table_name,
                Key={A_LOCK_ID: {"S": key}},
                ConsistentRead=True,
            )
        item: dict[str, Any] | None = response.get("Item")
        return item

    def _conditional_update(
        self,
        operation: str,
        lock_id: str,
        update: str,
        condition: str,
        values: dict[str, Any],
        slot: int | None,
    ) -> tuple[bool, dict[str, Any] | None]:
        """Run one conditional UpdateItem on a lock's item, or on slot ``slot`` of a pool's.

        (True, the new item) if it applied, else (False, the item that failed the condition,
        or None if there is no item)."""
        from botocore.exceptions import ClientError

        key = lock_id if slot is None else pool_key(lock_id)
        request = _request(update, condition, names=slot_names(slot), values=values)
        try:
            with self.translate_errors(operation):
                try:
                    response = self.client.update_item(
                        TableName=self.table_name,
                        Key={A_LOCK_ID: {"S": key}},
                        UpdateExpression=update,
                        ConditionExpression=condition,
                        ReturnValues="ALL_NEW",
                        ReturnValuesOnConditionCheckFailure="ALL_OLD",
                        **request,
                    )
                except ClientError as exc:
                    if (
                        exc.response.get("Error", {}).get("Code")
                        != "ConditionalCheckFailedException"
                    ):
                        raise
                    item: Any = exc.response.get("Item")
                    if item:
                        self._ccf_returns_item = True
                        return False, item
                    raise _ConditionFailed() from None
        except _ConditionFailed:
            # No old item in the answer: either there is no item, or the endpoint ignores
            # ReturnValuesOnConditionCheckFailure (dynalite 4 does). Only then read it.
            if self._ccf_returns_item and operation != "acquire":
                return False, None
            if operation == "acquire":
                # COND_FREE passes on a missing item, so the item exists: the endpoint
                # does not return it on failure, and every later failure needs the read.
                self._ccf_returns_item = False
            return False, self._get_item(key)
        return True, dict(response.get("Attributes", {}))

    # -- table ---------------------------------------------------------------------------------

    def scan_locks(self, prefix: str = "", page_size: int = 500) -> Iterator[LockRecord | Pool]:
        """Every plain lock and pool (not awsflock's other items), page by page."""
        kwargs: dict[str, Any] = {}
        if prefix:
            kwargs = {
                "FilterExpression": "begins_with(#k, :plain) OR begins_with(#k, :pool)",
                "ExpressionAttributeNames": {"#k": A_LOCK_ID},
                "ExpressionAttributeValues": {
                    ":plain": {"S": prefix},
                    ":pool": {"S": pool_key(prefix)},
                },
            }
        for item in self._scan("", page_size, **kwargs):
            key = item[A_LOCK_ID]["S"]
            if key.startswith(POOL_PREFIX):
                yield Pool.from_item(key[len(POOL_PREFIX) :], item)
            elif not key.startswith(RESERVED_PREFIX):
                yield record_from_item(item)

    def _scan(self, prefix: str, page_size: int, **extra: Any) -> Iterator[dict[str, Any]]:
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Limit": page_size, **extra}
        if prefix:
            kwargs["FilterExpression"] = "begins_with(#lock_id, :prefix)"
            kwargs["ExpressionAttributeNames"] = {"#lock_id": A_LOCK_ID}
            kwargs["ExpressionAttributeValues"] = {":prefix": {"S": prefix}}
        while True:
            with self.translate_errors("scan"):
                page = self.client.scan(**kwargs)
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


class _ConditionFailed(Exception):
    pass


def _seconds_number(ms: int) -> int | float:
    """Lease duration in seconds as 0.2.0 wrote it (an integer when whole)."""
    return ms // 1000 if ms % 1000 == 0 else ms / 1000
