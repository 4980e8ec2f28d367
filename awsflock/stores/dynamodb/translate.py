"""DynamoDB's errors as awsflock's: every botocore exception and error code is turned into one
of ``awsflock.errors`` here, with the fix named, and nowhere else."""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Callable

from awsflock import errors
from awsflock.stores.dynamodb import strangers

if TYPE_CHECKING:
    import ssl

#: The IAM action each store call needs, for "access denied" messages and ``iam-policy``.
ACTIONS = {
    "acquire": "UpdateItem",
    "renew": "UpdateItem",
    "release": "UpdateItem",
    "get": "GetItem",
    "get_state": "BatchGetItem",  # a lock's state (``state_writes``)
    "scan": "Scan",
    "create_table": "CreateTable",
    "describe_table": "DescribeTable",
    "ttl": "UpdateTimeToLive",
    "describe_ttl": "DescribeTimeToLive",
    "force_release": "UpdateItem",
    "resize": "UpdateItem",
    "audit": "PutItem",
    "audit_moved": "UpdateItem",
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


@dataclasses.dataclass(frozen=True)
class _Call:
    """What the message of a failed call names: the operation and its IAM action, the table, the
    endpoint (``where``), the settings a fix would change; ``foreign`` names the table's own key
    after a refused key, ``signer`` the access key id and region requests are signed with."""

    operation: str
    table: str
    where: str
    profile: str | None
    region: str | None
    endpoint_url: str | None
    foreign: Callable[[str], errors.TableIncompatible | None]
    signer: Callable[[], str]

    @property
    def action(self) -> str:
        return "dynamodb:" + ACTIONS.get(self.operation, self.operation)


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

    call = _Call(operation, table, where, profile, region, endpoint_url, foreign, signer)
    try:
        yield
    except strangers.ForeignAnswer as exc:
        raise _foreign(exc, call) from exc
    except bx.ClientError as exc:
        raise _refused(exc, call) from exc
    except bx.BotoCoreError as exc:
        raise _network(exc, call) or _setup(exc, call) or _sdk(exc) from exc
    except ValueError as exc:
        if not str(exc).startswith("Invalid endpoint"):
            raise  # a bug, not a setting: let it be reported as one
        raise errors.ConfigurationError(
            f"invalid DynamoDB endpoint URL {endpoint_url!r}",
            hint="give a URL like http://127.0.0.1:8000 or "
            "https://dynamodb.eu-west-1.amazonaws.com (--endpoint-url, AWSFLOCK_ENDPOINT_URL)",
        ) from exc


def _foreign(exc: strangers.ForeignAnswer, call: _Call) -> errors.StoreError:
    """What an answer that is not DynamoDB's means: an empty success may have been applied (cut
    short, in doubt); anything else is a wrong --endpoint-url, or (without one) something between
    here and DynamoDB answering in its place, and nothing was applied."""
    from http import HTTPStatus

    if exc.empty and exc.status < 300:
        return errors.EndpointUnreachable(
            f"DynamoDB at {call.where} gave an empty answer (HTTP {exc.status})",
            hint="check --endpoint-url and the network",
        )
    try:
        said = f"HTTP {exc.status} {HTTPStatus(exc.status).phrase}"
    except ValueError:
        said = f"HTTP {exc.status}"
    if call.endpoint_url:
        return errors.StoreError(
            f"not a DynamoDB endpoint: {call.endpoint_url} (it answered {said})",
            hint="check --endpoint-url",
        )
    return errors.StoreError(
        f"{call.action} was answered by something other than DynamoDB ({said})",
        hint="check the proxy settings (HTTPS_PROXY) and the network",
    )


def _refused(exc: Any, call: _Call) -> errors.AwsflockError:
    """A botocore ``ClientError``: DynamoDB (or what stands in for it) answered with an error
    code."""
    code = exc.response.get("Error", {}).get("Code", "")
    message = exc.response.get("Error", {}).get("Message", "")
    if code == "ResourceNotFoundException":
        return _table_missing(call.table, call.endpoint_url, call.signer)
    if code == "AccessDeniedException":
        # A transaction is refused for the action of one of its items: AWS names it.
        named = re.search(r"perform: (dynamodb:\w+)", message)
        return errors.AccessDenied(
            f"access denied for {named.group(1) if named else call.action} on table {call.table!r}",
            hint="grant it to this identity (see `awsflock iam-policy`)",
        )
    if code in _CREDENTIAL_CODES:
        return errors.CredentialsError(
            f"AWS rejected the credentials ({code})",
            hint="check AWS_PROFILE / AWS_ACCESS_KEY_ID or refresh your session",
        )
    invalid = _invalid_item(exc.response) if code == "TransactionCanceledException" else None
    if invalid is not None:
        # An item of the transaction refused as invalid (too large, for one): nothing was
        # written, and the same request is refused again, so it is no conflict to wait out.
        return errors.StoreError(
            f"DynamoDB refused {call.action} ({invalid})",
            hint="nothing was written; the same request is refused again (a shorter --reason?)",
        )
    if code in _THROTTLE_CODES:
        return errors.Throttled(
            f"DynamoDB kept throttling {call.action} on {call.table!r} after retries",
            hint="retry later, or raise the table's capacity",
        )
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    if code in _UNAVAILABLE_CODES or status >= 500:
        # A server error (also a bare 5xx from a proxy or load balancer in front of the
        # endpoint) may come after the request was applied: transient, and in doubt.
        return errors.EndpointUnreachable(f"DynamoDB is unavailable ({code})", hint="retry later")
    if code == "ValidationException" and call.operation != "describe_table":
        # Never sent for a lock table's requests: most likely the table's key is not
        # lock_id. Only now is it worth one DescribeTable to name it.
        incompatible = call.foreign(message)
        if incompatible is not None:
            return incompatible
    detail = f"{code}: {message}" if message else code
    return errors.StoreError(f"DynamoDB refused {call.action} ({detail})")


def _invalid_item(response: dict[str, Any]) -> str | None:
    """What a cancelled transaction's item refused as invalid says (DynamoDB's
    ``ValidationError`` reason, e.g. an item over 400 KB); None if no item was."""
    for reason in response.get("CancellationReasons") or []:
        if reason.get("Code") == "ValidationError":
            return str(reason.get("Message") or "ValidationError")
    return None


def _network(exc: Exception, call: _Call) -> errors.AwsflockError | None:
    """botocore's errors of the connection: the endpoint unreachable, silent, or not DynamoDB.
    None for any other."""
    from botocore import exceptions as bx

    where, endpoint_url = call.where, call.endpoint_url
    if isinstance(exc, bx.EndpointConnectionError):
        return errors.EndpointUnreachable(
            f"cannot reach DynamoDB at {where}",
            hint="check --endpoint-url/--region and the network",
        )
    if isinstance(exc, bx.ConnectionClosedError):
        said = strangers.not_http(exc.kwargs.get("error"), endpoint_url)
        if said is not None:  # nothing there could have applied a request of ours
            return errors.StoreError(
                f"not a DynamoDB endpoint: {endpoint_url} ({said})", hint="check --endpoint-url"
            )
        return errors.EndpointUnreachable(
            f"DynamoDB at {where} closed the connection without an answer",
            hint="check that --endpoint-url is a DynamoDB endpoint, and the network"
            if endpoint_url
            else "check the network and retry",
        )
    if isinstance(exc, bx.SSLError):
        return _tls(exc, call)
    if isinstance(exc, (bx.ConnectTimeoutError, bx.ReadTimeoutError)):
        return errors.EndpointUnreachable(
            f"DynamoDB at {where} did not answer in time", hint="check the network and retry"
        )
    if isinstance(exc, bx.HTTPClientError):
        return errors.EndpointUnreachable(
            f"connection to DynamoDB at {where} failed: {_one_line(exc)}",
            hint="check the network and retry",
        )
    if isinstance(exc, bx.ConnectionError):  # TLS, proxy: the request did not get through
        return errors.EndpointUnreachable(
            f"connection to DynamoDB at {where} failed: {_one_line(exc)}",
            hint="check --endpoint-url, proxy and certificate settings, and the network",
        )
    return None


def _tls(exc: Exception, call: _Call) -> errors.StoreError:
    handshake = tls_handshake_error(exc)
    if handshake is not None and handshake.reason == "WRONG_VERSION_NUMBER" and call.endpoint_url:
        # What answered is no TLS server at all (a plain HTTP server, say).
        return errors.StoreError(
            f"not a DynamoDB endpoint: {call.endpoint_url} (it does not speak TLS)",
            hint="check --endpoint-url (http:// for a plain HTTP server)",
        )
    what = "TLS handshake with" if handshake is not None else "TLS connection to"
    return errors.EndpointUnreachable(
        f"{what} DynamoDB at {call.where} failed: {_one_line(handshake or exc)}",
        hint="check --endpoint-url, proxy and certificate settings, and the network",
    )


def _setup(exc: Exception, call: _Call) -> errors.AwsflockError | None:
    """botocore's errors of this machine's settings: credentials, profile, region, config file,
    a request it would not send. None for any other."""
    from botocore import exceptions as bx

    profile = call.profile
    if isinstance(exc, bx.NoCredentialsError):
        return errors.CredentialsError(
            "no AWS credentials found",
            hint="set AWS_PROFILE or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        )
    if isinstance(exc, bx.PartialCredentialsError):
        return errors.CredentialsError(
            f"incomplete AWS credentials: {_one_line(exc)}", hint="set both key id and secret"
        )
    if isinstance(exc, bx.NoRegionError):
        return errors.ConfigurationError(
            "no AWS region configured", hint="pass --region, or set AWS_REGION"
        )
    if isinstance(exc, bx.ProfileNotFound):
        return errors.ConfigurationError(
            f"AWS profile {profile or exc.kwargs.get('profile')!r} not found",
            hint="check --profile/AWS_PROFILE against ~/.aws/config",
        )
    if isinstance(exc, bx.ParamValidationError):
        return errors.UsageError(f"invalid request: {_one_line(exc)}")
    if isinstance(exc, (bx.SSOError, bx.TokenRetrievalError, bx.LoginError)):
        return _session(exc, profile)
    if isinstance(exc, bx.CredentialRetrievalError):
        return _credential_source(exc)
    if isinstance(exc, bx.ConfigParseError):
        return errors.ConfigurationError(
            f"cannot parse the AWS config file {exc.kwargs.get('path', '')}".rstrip(),
            hint="fix its syntax, or point AWS_CONFIG_FILE / AWS_SHARED_CREDENTIALS_FILE "
            "at a valid file",
        )
    if isinstance(exc, bx.InvalidRegionError):
        return errors.ConfigurationError(
            f"{call.region or exc.kwargs.get('region_name')!r} is not an AWS region",
            hint="pass --region like eu-west-1",
        )
    return None


def _session(exc: Exception, profile: str | None) -> errors.CredentialsError:
    """An SSO or ``aws login`` session that cannot be used."""
    from botocore import exceptions as bx

    if isinstance(exc, bx.LoginError):
        return errors.CredentialsError(
            f"the AWS login session cannot be used ({_one_line(exc)})",
            hint="run `aws login` and retry",
        )
    login = "aws sso login" + (f" --profile {profile}" if profile else "")
    return errors.CredentialsError(
        f"the AWS SSO session cannot be used ({_one_line(exc)})",
        hint=f"run `{login}` and retry",
    )


def _credential_source(exc: Any) -> errors.CredentialsError:
    """A credential source (a credential_process, a container's or instance's) that failed."""
    source = exc.kwargs.get("provider") or "their source"
    hint = "check the profile's credential source, or use another --profile"
    if source == "custom-process":
        source = "the profile's credential_process"
        hint = "run it by hand to see why and fix it, or use another --profile"
    detail = _one_line(str(exc.kwargs.get("error_msg", "")))
    return errors.CredentialsError(
        f"could not get AWS credentials from {source}"
        + (f": {detail}" if detail else " (it failed)"),
        hint=hint,
    )


def _sdk(exc: Exception) -> errors.ConfigurationError:
    return errors.ConfigurationError(
        f"the AWS SDK failed: {type(exc).__name__}: {_one_line(exc)}",
        hint="check --profile, --region, --endpoint-url and ~/.aws/config (AWS_CONFIG_FILE)",
    )


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
