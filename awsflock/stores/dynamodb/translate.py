"""DynamoDB's errors as awsflock's: every botocore exception and error code is turned into one
of ``awsflock.errors`` here, with the fix named, and nowhere else."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.stores.dynamodb import strangers
from awsflock.stores.dynamodb.items import A_LOCK_ID

if TYPE_CHECKING:
    import ssl

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
    # the line of fair waiters
    "join": "UpdateItem",
    "beat": "UpdateItem",
    "leave": "UpdateItem",
}

_THROTTLE_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    # A transaction (a plain acquire) and another write met on one item: nothing was applied,
    # and the step is tried again (a take that met a conflict reaches here; one refused by its
    # condition is answered as such by the store).
    "TransactionConflictException",
    "TransactionCanceledException",
    "TransactionInProgressException",
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


class ForeignAnswer(Exception):
    """An HTTP answer that is not DynamoDB's (``check_answer``): ``status``, and whether it
    came back empty (which DynamoDB's never do: an answer cut short, in doubt)."""

    def __init__(self, status: int, *, empty: bool = False) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status
        self.empty = empty


#: 5xx answers that say the request was not taken up (not implemented, HTTP version not
#: supported, network sign-in needed). Any other 5xx may come from a proxy or load balancer that
#: forwarded the request to DynamoDB first: in doubt, whoever answered.
_NOT_TAKEN_UP = (501, 505, 511)


def check_answer(response_dict: dict[str, Any], **_: Any) -> None:
    """A botocore ``before-parse`` handler: raise ForeignAnswer for an answer that cannot be
    DynamoDB's, before botocore reads it as one (an empty 200 would pass for a granted
    transaction). DynamoDB's answers, and those of the servers that stand in for it, carry a
    request id, or at least a JSON object; a 5xx that may come after a forward is left alone."""
    headers = response_dict.get("headers") or {}
    if "x-amzn-requestid" in headers:
        return
    status = int(response_dict.get("status_code") or 0)
    if status >= 500 and status not in _NOT_TAKEN_UP:
        return
    body = response_dict.get("body") or b""
    if not body:
        raise ForeignAnswer(status, empty=True)
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ForeignAnswer(status)


def tls_handshake_error(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error behind ``exc`` if it came in the handshake: the connection failed before
    any request was sent on it. None if it came later (or was not TLS's)."""
    import ssl
    import traceback

    seen: set[int] = set()
    todo: list[Any] = [exc]
    while todo:
        err = todo.pop()
        if not isinstance(err, BaseException) or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ssl.SSLError):
            frames = traceback.extract_tb(err.__traceback__)
            return err if any(f.name == "do_handshake" for f in frames) else None
        kwargs = getattr(err, "kwargs", None)
        todo += [err.__cause__, err.__context__, *err.args]
        if isinstance(kwargs, dict):
            todo.append(kwargs.get("error"))
    return None


def _foreign(exc: ForeignAnswer, action: str, endpoint_url: str | None) -> errors.StoreError:
    """What a foreign answer means: a wrong --endpoint-url, or (without one) something between
    here and DynamoDB answering in its place. Nothing was applied."""
    from http import HTTPStatus

    try:
        said = f"HTTP {exc.status} {HTTPStatus(exc.status).phrase}"
    except ValueError:
        said = f"HTTP {exc.status}"
    if endpoint_url:
        return errors.StoreError(
            f"not a DynamoDB endpoint: {endpoint_url} (it answered {said})",
            hint="check --endpoint-url",
        )
    return errors.StoreError(
        f"{action} was answered by something other than DynamoDB ({said})",
        hint="check the proxy settings (HTTPS_PROXY) and the network",
    )


def _table_missing(
    table: str, endpoint_url: str | None, signer: Callable[[], str]
) -> errors.TableMissing:
    """The table is missing; at an --endpoint-url (DynamoDB Local, which keeps a set of tables
    per access key id and region) also with whose tables were looked at."""
    create = f"run `awsflock table-create --tablename {table}`"
    if not endpoint_url:
        return errors.TableMissing(f"table {table!r} does not exist", hint=create)
    signed = signer()
    return errors.TableMissing(
        f"table {table!r} does not exist at {endpoint_url}" + (f" for {signed}" if signed else ""),
        hint="DynamoDB Local keeps tables per access key id and region: use the "
        f"AWS_ACCESS_KEY_ID and region the table was created with, or {create}",
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


@contextlib.contextmanager
def translate_errors(
    operation: str,
    *,
    table: str,
    where: str,
    profile: str | None = None,
    region: str | None = None,
    endpoint_url: str | None = None,
    foreign: Callable[[str], errors.TableIncompatible | None] = lambda _refusal: None,
    signer: Callable[[], str] = lambda: "",
) -> Iterator[None]:
    """Turn botocore's exceptions into awsflock's, naming the fix. The one place that does.

    ``where`` names the endpoint; ``foreign`` names the table's own key after a refused key;
    ``signer`` the access key id and region requests are signed with ("" if unknown).
    """
    from botocore import exceptions as bx

    action = "dynamodb:" + ACTIONS.get(operation, operation)
    try:
        yield
    except ForeignAnswer as exc:
        if exc.empty and exc.status < 300:
            # An empty success: cut short, or not DynamoDB's. The request may have been applied.
            raise errors.EndpointUnreachable(
                f"DynamoDB at {where} gave an empty answer (HTTP {exc.status})",
                hint="check --endpoint-url and the network",
            ) from exc
        raise _foreign(exc, action, endpoint_url) from exc
    except bx.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code", "")
        message = exc.response.get("Error", {}).get("Message", "")
        if code == "ResourceNotFoundException":
            raise _table_missing(table, endpoint_url, signer) from exc
        if code == "AccessDeniedException":
            # A transaction is refused for the action of one of its items: AWS names it.
            named = re.search(r"perform: (dynamodb:\w+)", message)
            raise errors.AccessDenied(
                f"access denied for {named.group(1) if named else action} on table {table!r}",
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
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code in _UNAVAILABLE_CODES or status >= 500:
            # A server error (also a bare 5xx from a proxy or load balancer in front of the
            # endpoint) may come after the request was applied: transient, and in doubt.
            raise errors.EndpointUnreachable(
                f"DynamoDB is unavailable ({code})", hint="retry later"
            ) from exc
        if code == "ValidationException" and operation != "describe_table":
            # Never sent for a lock table's requests: most likely the table's key is not
            # lock_id. Only now is it worth one DescribeTable to name it.
            incompatible = foreign(message)
            if incompatible is not None:
                raise incompatible from exc
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
    except bx.EndpointConnectionError as exc:
        raise errors.EndpointUnreachable(
            f"cannot reach DynamoDB at {where}",
            hint="check --endpoint-url/--region and the network",
        ) from exc
    except bx.ConnectionClosedError as exc:
        said = strangers.not_http(exc.kwargs.get("error"), endpoint_url)
        if said is not None:  # nothing there could have applied a request of ours
            raise errors.StoreError(
                f"not a DynamoDB endpoint: {endpoint_url} ({said})", hint="check --endpoint-url"
            ) from exc
        raise errors.EndpointUnreachable(
            f"DynamoDB at {where} closed the connection without an answer",
            hint="check that --endpoint-url is a DynamoDB endpoint, and the network"
            if endpoint_url
            else "check the network and retry",
        ) from exc
    except bx.SSLError as exc:
        handshake = tls_handshake_error(exc)
        if handshake is not None and handshake.reason == "WRONG_VERSION_NUMBER" and endpoint_url:
            # What answered is no TLS server at all (a plain HTTP server, say).
            raise errors.StoreError(
                f"not a DynamoDB endpoint: {endpoint_url} (it does not speak TLS)",
                hint="check --endpoint-url (http:// for a plain HTTP server)",
            ) from exc
        what = "TLS handshake with" if handshake is not None else "TLS connection to"
        raise errors.EndpointUnreachable(
            f"{what} DynamoDB at {where} failed: {_one_line(handshake or exc)}",
            hint="check --endpoint-url, proxy and certificate settings, and the network",
        ) from exc
    except (bx.ConnectTimeoutError, bx.ReadTimeoutError) as exc:
        raise errors.EndpointUnreachable(
            f"DynamoDB at {where} did not answer in time",
            hint="check the network and retry",
        ) from exc
    except bx.HTTPClientError as exc:
        raise errors.EndpointUnreachable(
            f"connection to DynamoDB at {where} failed: {_one_line(exc)}",
            hint="check the network and retry",
        ) from exc
    except bx.ProfileNotFound as exc:
        raise errors.ConfigurationError(
            f"AWS profile {profile or exc.kwargs.get('profile')!r} not found",
            hint="check --profile/AWS_PROFILE against ~/.aws/config",
        ) from exc
    except bx.ParamValidationError as exc:
        raise errors.UsageError(f"invalid request: {_one_line(exc)}") from exc
    except (bx.SSOError, bx.TokenRetrievalError) as exc:
        login = "aws sso login" + (f" --profile {profile}" if profile else "")
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
            f"{region or exc.kwargs.get('region_name')!r} is not an AWS region",
            hint="pass --region like eu-west-1",
        ) from exc
    except bx.ConnectionError as exc:  # TLS, proxy: the request did not get through
        raise errors.EndpointUnreachable(
            f"connection to DynamoDB at {where} failed: {_one_line(exc)}",
            hint="check --endpoint-url, proxy and certificate settings, and the network",
        ) from exc
    except bx.BotoCoreError as exc:
        raise errors.ConfigurationError(
            f"the AWS SDK failed: {type(exc).__name__}: {_one_line(exc)}",
            hint="check --profile, --region, --endpoint-url and ~/.aws/config (AWS_CONFIG_FILE)",
        ) from exc
    except ValueError as exc:
        if not str(exc).startswith("Invalid endpoint"):
            raise  # a bug, not a setting: let it be reported as one
        raise errors.ConfigurationError(
            f"invalid DynamoDB endpoint URL {endpoint_url!r}",
            hint="give a URL like http://127.0.0.1:8000 or "
            "https://dynamodb.eu-west-1.amazonaws.com (--endpoint-url, AWSFLOCK_ENDPOINT_URL)",
        ) from exc


def may_have_applied(cause: BaseException | None) -> bool:
    """Whether a failed try may have reached DynamoDB and been applied there: a timeout or a
    connection lost after sending, or a server error. Not: a refused connection, a connect
    timeout, a failed TLS handshake, throttling."""
    from botocore import exceptions as bx

    if isinstance(cause, (bx.EndpointConnectionError, bx.ConnectTimeoutError)):
        return False
    if isinstance(cause, bx.SSLError) and tls_handshake_error(cause) is not None:
        return False
    if isinstance(cause, bx.ClientError):
        code = cause.response.get("Error", {}).get("Code", "")
        return code not in _THROTTLE_CODES
    return True


def _one_line(exc: BaseException | str) -> str:
    """botocore's message on one line (a credential_process may print several)."""
    return " ".join(str(exc).split())
