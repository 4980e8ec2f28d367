"""The lock operations in DynamoDB, one conditional request each. With ``tables`` (table
administration) this is the only code that talks to DynamoDB; ``items`` holds the item layout
and ``expressions`` the conditions (the protocol is described there).

All times are the caller's wall clock in milliseconds, written into the item. The fencing
counter only goes up while the item lives; when the item is recreated (deleted by TTL or by
hand, or overwritten by awsflock 0.2.0, which drops our attributes) it restarts from a floor
derived from the clock (``now_ms * 1000``), which exceeds every earlier token because the TTL
attribute is never earlier than the lease's end plus the skew window, and a lease is reclaimed
only after that window: the NTP assumption (see the README). A failed write learns the item's
state from the same request (``ReturnValuesOnConditionCheckFailure=ALL_OLD``), or from one
consistent read where the endpoint ignores that parameter.
"""

from __future__ import annotations

import contextlib
import math
import random
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from awsflock import errors, expressions
from awsflock.clock import Clock, SystemClock
from awsflock.items import (
    A_CI_URL,
    A_COMMAND,
    A_HOST,
    A_KIND,
    A_LOCK_ID,
    A_PID,
    A_USER,
    ENDED_FORCED,
    ENDED_RELEASED,
    Pool,
    from_attr,
    is_pool_item,
    record_from_item,
    slot_prefix,
    to_attr,
)
from awsflock.records import RESERVED_PREFIX, Identity, LockRecord

if TYPE_CHECKING:
    from botocore.session import Session
    from mypy_boto3_dynamodb.client import DynamoDBClient

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
    "audit_void": "UpdateItem",
}

#: An audit record's status once the action it describes turned out not to take effect.
AUDIT_VOID = "not_applied"
#: The default time one request may take, retries included, unless the caller's wait is longer.
DEFAULT_REQUEST_TIMEOUT = 5.0
#: No try is started with less time than this left.
MIN_TRY = 0.25
#: A try whose answer has not fully arrived this long after its timeout is given up.
TRY_GRACE = 0.25
BACKOFF_BASE = 0.05
BACKOFF_CAP = 1.0
_RNG = random.Random()
_T = TypeVar("_T")

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
#: How DynamoDB and local servers refuse a request whose key does not fit the table's.
_KEY_REFUSAL = re.compile(
    r"required keys was not given|key element does not match the schema|Missing the key"
    r"|Type mismatch for key",
    re.IGNORECASE,
)

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
#: The access key (and secret) for a loopback endpoint when botocore finds no credentials.
#: Letters and digits only: DynamoDB Local refuses any other access key id.
LOCAL_ACCESS_KEY = "awsflocklocal"


def _request(*expressions: str, values: dict[str, Any]) -> dict[str, Any]:
    """ExpressionAttributeNames/Values holding exactly what the expressions use.

    DynamoDB rejects unused names or values, so they are derived from the expressions; a
    placeholder ``#x`` always names the attribute ``x``.
    """
    text = " ".join(expressions)
    used_names = sorted(set(_NAME.findall(text)))
    used_values = sorted(set(_VALUE.findall(text)))
    return {
        "ExpressionAttributeNames": {f"#{n}": n for n in used_names},
        "ExpressionAttributeValues": {f":{k}": to_attr(values[k]) for k in used_values},
    }


def expiration_seconds(ms: int) -> int:
    """Whole epoch seconds at or after ``ms`` (the TTL attribute is never early)."""
    return math.ceil(ms / 1000)


@dataclass(frozen=True)
class Outcome:
    """What one conditional write did, and the item's state: after it if ``applied``, else as
    it was when the condition failed.

    ``lock`` is the item read as a plain lock (None: no item); ``pool`` the item read as a pool
    (None: the item is not a pool); ``slot`` the slot the write was about."""

    applied: bool
    lock: LockRecord | None
    pool: Pool | None = None
    slot: int | None = None

    @property
    def record(self) -> LockRecord | None:
        """The lease the write was about: the plain lock's, or the slot's."""
        if self.slot is None:
            return None if self.pool is not None else self.lock
        return self.pool.slots.get(self.slot) if self.pool is not None else None


def new_version() -> str:
    """A fresh value for ``lease_id``: awsflock 0.2.0's compare-and-swap changes with it."""
    return str(uuid.uuid4())


def is_loopback(endpoint_url: str | None) -> bool:
    if not endpoint_url:
        return False
    from urllib.parse import urlsplit

    host = urlsplit(endpoint_url).hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


_KEY_TYPES = {"S": "a string", "N": "a number", "B": "binary"}
_TABLE_HINT = (
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
        hint=_TABLE_HINT,
    )


def _skip_instance_metadata(session: Session) -> None:
    """Take the EC2 instance metadata service out of ``session``'s credential chain.

    Only for loopback endpoints, which do not check that a key is real. botocore asks that
    service last, when nothing else gave credentials: on a host where 169.254.169.254 does not
    answer (not EC2, packets dropped) that costs two one-second timeouts (token, then role) on
    every command. The container provider stays: it asks nothing unless its environment
    variable (set by ECS, CodeBuild) is.
    """
    session.get_component("credential_provider").remove("iam-role")


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
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        if not table_name:
            raise errors.UsageError("table name is empty", hint="pass --tablename NAME")
        self.table_name = table_name
        self.region = region
        self.profile = profile
        self.endpoint_url = endpoint_url
        self.request_timeout = request_timeout
        self.clock: Clock = clock or SystemClock()
        self._client = client
        self._local = threading.local()  # this thread's budget and per-try timeout
        # None until we learn whether a failed conditional write returns the old item.
        self._ccf_returns_item: bool | None = None

    # -- client -------------------------------------------------------------------------------

    @property
    def client(self) -> DynamoDBClient:
        if self._client is None:
            # Building the client reads the AWS config and resolves credentials: its errors
            # (a bad endpoint URL, an unparsable config file, a failing credential_process)
            # are translated like every request's.
            with self.translate_errors("connect"):
                client = self._make_client()
            # Each try's read timeout is what is left of the caller's budget (botocore reads
            # it from the request context; versions without that use the client's default).
            client.meta.events.register("before-call.dynamodb", self._set_try_timeout)
            self._client = client
        return self._client

    def _set_try_timeout(self, context: dict[str, Any], **_: Any) -> None:
        timeout = getattr(self._local, "try_timeout", None)
        if timeout is not None:
            context["read_timeout"] = timeout

    def _make_client(self) -> DynamoDBClient:
        # botocore directly: importing boto3 on top of it only adds start-up time.
        import botocore.session
        from botocore.config import Config

        session = botocore.session.Session(profile=self.profile)
        region = self.region or session.get_config_variable("region")
        kwargs: dict[str, Any] = {}
        if is_loopback(self.endpoint_url):
            # A local server (dev-server, moto, dynalite, DynamoDB Local) needs no real account:
            # harmless defaults, used only when the user set nothing and the endpoint is this
            # machine. Credentials the user has (env, AWS_PROFILE, credentials file, SSO...) win:
            # DynamoDB Local keeps one set of tables per access key, so awsflock must sign with
            # the key the user's other tools use.
            region = region or "us-east-1"
            _skip_instance_metadata(session)
            if session.get_credentials() is None:
                kwargs["aws_access_key_id"] = LOCAL_ACCESS_KEY
                kwargs["aws_secret_access_key"] = LOCAL_ACCESS_KEY
        if not region:
            raise errors.ConfigurationError(
                "no AWS region configured",
                hint="pass --region, or set AWS_REGION (or AWS_DEFAULT_REGION)",
            )
        config = Config(
            # One try per call: awsflock retries itself (``_send``), within the caller's budget.
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=min(3.0, self.request_timeout),
            read_timeout=self.request_timeout,
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

    # -- requests ------------------------------------------------------------------------------

    @contextlib.contextmanager
    def budget(self, end: float) -> Iterator[None]:
        """Calls made inside end (with their retries) by ``end`` on the store clock's monotonic
        time (an outer, earlier end wins)."""
        outer = getattr(self._local, "end", None)
        self._local.end = end if outer is None else min(outer, end)
        try:
            yield
        finally:
            self._local.end = outer

    def _send(self, operation: str, call: Callable[[], _T]) -> _T:
        """Make one call, retrying throttling and transient failures with jittered backoff
        while the budget lasts (default: one request timeout). A final failure is raised
        translated, with ``maybe_applied`` set if any try may have reached DynamoDB."""
        start = self.clock.monotonic()
        end = getattr(self._local, "end", None)
        if end is None:
            end = start + self.request_timeout
        tries = 0
        self._local.earlier_try_may_have_applied = False
        while True:
            tries += 1
            left = end - self.clock.monotonic()
            timeout = max(MIN_TRY, min(self.request_timeout, left))
            try:
                with self.translate_errors(operation):
                    return self._try(call, timeout)
            except (errors.Throttled, errors.EndpointUnreachable) as err:
                # Even if a later try is answered, this one may still be applied (late).
                if _may_have_applied(err.__cause__):
                    self._local.earlier_try_may_have_applied = True
                pause = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (tries - 1)) * _RNG.uniform(0.5, 1)
                if self.clock.monotonic() + pause + MIN_TRY > end:
                    err.maybe_applied = self.earlier_try_may_have_applied()
                    took = self.clock.monotonic() - start
                    err.message += f" ({tries} {'try' if tries == 1 else 'tries'} in " + (
                        f"{took:.1f}s)"
                    )
                    raise
                self.clock.sleep(pause)

    def earlier_try_may_have_applied(self) -> bool:
        """Whether the last call made by this thread had a failed try that may have reached
        DynamoDB (it may land even after a later try was answered)."""
        return bool(getattr(self._local, "earlier_try_may_have_applied", False))

    def _try(self, call: Callable[[], _T], timeout: float) -> _T:
        """One try, in a worker thread given ``timeout`` (plus a grace) of real time: botocore's
        timeouts bound each socket operation, not an answer that trickles in byte by byte or a
        connect that hangs. A try still running then is given up (it may yet land)."""
        box: dict[str, Any] = {}

        def work() -> None:
            self._local.try_timeout = timeout
            try:
                box["value"] = call()
            except BaseException as exc:  # handed to the caller's thread as is
                box["error"] = exc

        worker = threading.Thread(target=work, name="awsflock-request", daemon=True)
        worker.start()
        worker.join(timeout + TRY_GRACE)
        if worker.is_alive():
            raise errors.EndpointUnreachable(
                f"DynamoDB at {self._where()} did not answer in time",
                hint="check the network and retry",
            )
        if "error" in box:
            raise box["error"]
        value: _T = box["value"]
        return value

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
            if code == "ValidationException" and operation != "describe_table":
                # Never sent for a lock table's requests: most likely the table's key is not
                # lock_id. Only now is it worth one DescribeTable to name it.
                foreign = self._foreign_table(message)
                if foreign is not None:
                    raise foreign from exc
            detail = f"{code}: {message}" if message else code
            raise errors.StoreError(f"DynamoDB refused {action} ({detail})") from exc
        except bx.NoCredentialsError as exc:
            raise errors.CredentialsError(
                "no AWS credentials found",
                hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
            ) from exc
        except bx.PartialCredentialsError as exc:
            raise errors.CredentialsError(
                f"incomplete AWS credentials: {_one_line(exc)}", hint="set both key id and secret"
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
                f"connection to DynamoDB at {self._where()} failed: {_one_line(exc)}",
                hint="check the network and retry",
            ) from exc
        except bx.ProfileNotFound as exc:
            raise errors.ConfigurationError(
                f"AWS profile {self.profile or exc.kwargs.get('profile')!r} not found",
                hint="check --profile/AWS_PROFILE against ~/.aws/config",
            ) from exc
        except bx.ParamValidationError as exc:
            raise errors.UsageError(f"invalid request: {_one_line(exc)}") from exc
        except (bx.SSOError, bx.TokenRetrievalError) as exc:
            login = "aws sso login" + (f" --profile {self.profile}" if self.profile else "")
            raise errors.CredentialsError(
                f"the AWS SSO session cannot be used ({_one_line(exc)})",
                hint=f"run `{login}` and retry",
            ) from exc
        except bx.LoginError as exc:
            raise errors.CredentialsError(
                f"the AWS login session cannot be used ({_one_line(exc)})",
                hint="run `aws login` and retry",
            ) from exc
        except bx.CredentialRetrievalError as exc:
            source = exc.kwargs.get("provider") or "their source"
            hint = "check the profile's credential source, or use another --profile"
            if source == "custom-process":
                source = "the profile's credential_process"
                hint = "run it by hand to see why and fix it, or use another --profile"
            detail = _one_line(str(exc.kwargs.get("error_msg", "")))
            raise errors.CredentialsError(
                f"could not get AWS credentials from {source}"
                + (f": {detail}" if detail else " (it failed)"),
                hint=hint,
            ) from exc
        except bx.ConfigParseError as exc:
            raise errors.ConfigurationError(
                f"cannot parse the AWS config file {exc.kwargs.get('path', '')}".rstrip(),
                hint="fix its syntax, or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE "
                "at a valid file",
            ) from exc
        except bx.InvalidRegionError as exc:
            raise errors.ConfigurationError(
                f"{self.region or exc.kwargs.get('region_name')!r} is not an AWS region",
                hint="pass --region like eu-west-1",
            ) from exc
        except bx.ConnectionError as exc:  # TLS, proxy: the request did not get through
            raise errors.EndpointUnreachable(
                f"connection to DynamoDB at {self._where()} failed: {_one_line(exc)}",
                hint="check --endpoint-url, proxy and certificate settings, and the network",
            ) from exc
        except bx.BotoCoreError as exc:
            raise errors.ConfigurationError(
                f"the AWS SDK failed: {type(exc).__name__}: {_one_line(exc)}",
                hint="check --profile, --region, --endpoint-url and ~/.aws/config "
                "(AWS_CONFIG_FILE)",
            ) from exc
        except ValueError as exc:
            if not str(exc).startswith("Invalid endpoint"):
                raise  # a bug, not a setting: let it be reported as one
            raise errors.ConfigurationError(
                f"invalid DynamoDB endpoint URL {self.endpoint_url!r}",
                hint="give a URL like http://127.0.0.1:8000 or "
                "https://dynamodb.eu-west-1.amazonaws.com (--endpoint-url, AWSFLOCK_ENDPOINT_URL)",
            ) from exc

    def where(self) -> str:
        """The endpoint, for messages."""
        return self._where()

    def _where(self) -> str:
        if self.endpoint_url:
            return self.endpoint_url
        return f"region {self.region}" if self.region else "the default endpoint"

    def _foreign_table(self, refusal: str = "") -> errors.TableIncompatible | None:
        """After DynamoDB refused a request's key: the error naming the table's own key if it
        is not awsflock's, else None. One DescribeTable."""
        try:
            table = self.client.describe_table(TableName=self.table_name)["Table"]
        except Exception:  # denied or failing: judge by the refusal alone
            if not _KEY_REFUSAL.search(refusal):
                return None
            return errors.TableIncompatible(
                f"table {self.table_name!r} is not an awsflock table: its key is not "
                f"{A_LOCK_ID}, a string ({refusal})",
                hint=_TABLE_HINT,
            )
        key = key_problem(dict(table))
        return None if key is None else not_awsflock_table(self.table_name, key)

    def check_table(self) -> None:
        """One DescribeTable: raise TableMissing, or TableIncompatible if the table's key is
        not awsflock's. Skipped where DescribeTable is denied (scans then check the items)."""
        try:
            table = self._send(
                "describe_table",
                lambda: self.client.describe_table(TableName=self.table_name)["Table"],
            )
        except errors.AccessDenied:
            return
        key = key_problem(dict(table))
        if key is not None:
            raise not_awsflock_table(self.table_name, key)

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
    ) -> Outcome:
        """Take the lock (or slot ``slot`` of a pool of ``slots``) if it is free."""
        expires_ms = now_ms + lease_ms
        values: dict[str, Any] = {
            "lease": lease_id,
            "version": new_version(),
            "owner": identity.owner,
            "lease_duration": _seconds_number(lease_ms),
            "ttl": expiration_seconds(expires_ms + skew_ms),
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "floor": now_ms * 1000,
            "one": 1,
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
                removes.append(name)
            else:
                sets.append(name)
                values[name] = value
        p = slot_prefix(slot)
        return self._conditional_update(
            "acquire",
            lock_id,
            expressions.acquire_update(p, sets, removes),
            expressions.acquire_condition(p),
            values,
            slot,
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
    ) -> Outcome:
        """Extend our lease from ``now_ms``, if it is ours, not ended and not run out."""
        expires_ms = now_ms + lease_ms
        values = {
            "lease": lease_id,
            "version": new_version(),
            "lease_duration": _seconds_number(lease_ms),
            "ttl": expiration_seconds(expires_ms + skew_ms),
            "expires_ms": expires_ms,
            "now_ms": now_ms,
            "now_s": now_ms // 1000,
            "slot": slot,
        }
        p = slot_prefix(slot)
        return self._conditional_update(
            "renew",
            lock_id,
            expressions.renew_update(p),
            expressions.renew_condition(p),
            values,
            slot,
        )

    def release(
        self, lock_id: str, lease_id: str, *, now_ms: int, skew_ms: int, slot: int | None = None
    ) -> Outcome:
        """End our lease, keeping the item (and its fencing counter)."""
        return self._end(
            "release",
            expressions.release_update,
            lock_id,
            lease_id,
            ENDED_RELEASED,
            now_ms=now_ms,
            skew_ms=skew_ms,
            slot=slot,
        )

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
    ) -> Outcome:
        """End ``lease_id`` whoever holds it, recording who, why, and this action's id."""
        return self._end(
            "force_release",
            expressions.force_update,
            lock_id,
            lease_id,
            ENDED_FORCED + force_id,
            now_ms=now_ms,
            skew_ms=skew_ms,
            slot=slot,
            actor=actor,
            reason=reason,
        )

    def _end(
        self,
        operation: str,
        update: Callable[[str], str],
        lock_id: str,
        lease_id: str,
        ended: str,
        *,
        now_ms: int,
        skew_ms: int,
        slot: int | None,
        **extra: Any,
    ) -> Outcome:
        """Release and force-release: one write ending the lease, marked ``ended``."""
        values = {
            "lease": lease_id,
            "version": new_version(),
            "ended": ended,
            "now_ms": now_ms,
            "ttl": expiration_seconds(now_ms + skew_ms),
            **extra,
        }
        p = slot_prefix(slot)
        return self._conditional_update(
            operation, lock_id, update(p), expressions.release_condition(p), values, slot
        )

    def resize_pool(
        self, lock_id: str, old: int | None, new: int, *, now_ms: int, skew_ms: int
    ) -> bool:
        """Set a pool's size, only if it is still ``old`` and every slot that goes away is free."""
        condition = expressions.resize_condition(old, new)
        values = {
            "old": old,
            "new": new,
            "cutoff_ms": now_ms - skew_ms,
        }
        outcome = self._conditional_update(
            "resize", lock_id, expressions.RESIZE_UPDATE, condition, values, None
        )
        return outcome.applied

    def put_audit(self, key: str, fields: dict[str, Any], *, replace: bool = True) -> None:
        """Write one audit record under ``key``: replacing one of that key, or (``replace`` is
        False) only if there is none."""
        from botocore.exceptions import ClientError

        item = {A_LOCK_ID: {"S": key}, A_KIND: {"S": "audit"}}
        item.update({k: to_attr(v) for k, v in fields.items() if v not in (None, "")})
        extra: dict[str, Any] = {}
        if not replace:
            extra = {
                "ConditionExpression": "attribute_not_exists(#k)",
                "ExpressionAttributeNames": {"#k": A_LOCK_ID},
            }

        def call() -> None:
            try:
                self.client.put_item(TableName=self.table_name, Item=item, **extra)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self._send("audit", call)

    def void_audit(self, key: str, action_id: str | None) -> None:
        """Mark the audit record ``key`` as describing an action that did not take effect (only
        if written by ``action_id``, when given). UpdateItem, so no DeleteItem is needed."""
        from botocore.exceptions import ClientError

        condition = "attribute_exists(#k)" + ("" if action_id is None else " AND #a = :a")
        values: dict[str, Any] = {":v": {"S": AUDIT_VOID}}
        names = {"#k": A_LOCK_ID, "#s": "status"}
        if action_id is not None:
            names["#a"] = "action_id"
            values[":a"] = {"S": action_id}

        def call() -> None:
            try:
                self.client.update_item(
                    TableName=self.table_name,
                    Key={A_LOCK_ID: {"S": key}},
                    UpdateExpression="SET #s = :v",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                )
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
                    raise

        self._send("audit_void", call)

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

    def read(self, lock_id: str) -> Outcome:
        """One strongly consistent read of a lock's item (plain or pool)."""
        return self._outcome(False, self._get_item(lock_id), lock_id, None)

    def get(self, lock_id: str) -> LockRecord | None:
        """A plain lock's state (None if there is no item, or it is a pool)."""
        return self.read(lock_id).record

    def get_pool(self, lock_id: str) -> Pool | None:
        """A pool's state (None if there is no item, or it is a plain lock)."""
        return self.read(lock_id).pool

    def _get_item(self, key: str) -> dict[str, Any] | None:
        response = self._send(
            "get",
            lambda: self.client.get_item(
                TableName=self.table_name,
                Key={A_LOCK_ID: {"S": key}},
                ConsistentRead=True,
            ),
        )
        item: dict[str, Any] | None = response.get("Item")
        return item

    @staticmethod
    def _outcome(
        applied: bool, item: dict[str, Any] | None, lock_id: str, slot: int | None
    ) -> Outcome:
        if not item:
            return Outcome(applied, None, None, slot)
        pool = Pool.from_item(lock_id, item) if is_pool_item(item) else None
        return Outcome(applied, record_from_item(item), pool, slot)

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
        in_transit = self.earlier_try_may_have_applied()
        try:
            return self._after_update(operation, applied, item, lock_id, slot)
        finally:
            self._local.earlier_try_may_have_applied = in_transit

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

    # -- table ---------------------------------------------------------------------------------

    def scan_locks(self, prefix: str = "", page_size: int = 500) -> Iterator[LockRecord | Pool]:
        """Every plain lock and pool (not awsflock's other items), page by page."""
        for item in self._scan(prefix, page_size):
            key = item.get(A_LOCK_ID, {}).get("S")
            if key is None:  # only reachable where DescribeTable is denied (see check_table)
                raise errors.TableIncompatible(
                    f"table {self.table_name!r} is not an awsflock table: its items have no "
                    f"{A_LOCK_ID} string",
                    hint=_TABLE_HINT,
                )
            if key.startswith(RESERVED_PREFIX):
                continue
            if is_pool_item(item):
                yield Pool.from_item(key, item)
            else:
                yield record_from_item(item)

    def _scan(self, prefix: str, page_size: int, **extra: Any) -> Iterator[dict[str, Any]]:
        # A scan of a table keyed otherwise would list nothing (or foreign items), and a prefix
        # filter on lock_id hides them all: check the key first. Scans are not a hot path.
        self.check_table()
        kwargs: dict[str, Any] = {"TableName": self.table_name, "Limit": page_size, **extra}
        if prefix:
            kwargs["FilterExpression"] = "begins_with(#lock_id, :prefix)"
            kwargs["ExpressionAttributeNames"] = {"#lock_id": A_LOCK_ID}
            kwargs["ExpressionAttributeValues"] = {":prefix": {"S": prefix}}
        while True:
            page = self._send("scan", lambda: self.client.scan(**kwargs))
            yield from page.get("Items", [])
            last = page.get("LastEvaluatedKey")
            if not last:
                return
            kwargs["ExclusiveStartKey"] = last


def _may_have_applied(cause: BaseException | None) -> bool:
    """Whether a failed try may have reached DynamoDB and been applied there: a timeout or a
    connection lost after sending, or a server error. Not: a refused connection, a connect
    timeout, throttling."""
    from botocore import exceptions as bx

    if isinstance(cause, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
        return False
    if isinstance(cause, bx.ClientError):
        code = cause.response.get("Error", {}).get("Code", "")
        return code not in _THROTTLE_CODES
    return True


def _one_line(exc: BaseException | str) -> str:
    """botocore's message on one line (a credential_process may print several)."""
    return " ".join(str(exc).split())


def _seconds_number(ms: int) -> int | float:
    """Lease duration in seconds as 0.2.0 wrote it (an integer when whole)."""
    return ms // 1000 if ms % 1000 == 0 else ms / 1000
