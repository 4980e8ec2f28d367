"""The botocore client a DynamoDB store uses: built on first use (importing botocore is most
of a command's start-up), one try per call, and harmless defaults for loopback endpoints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from awsflock import errors

if TYPE_CHECKING:
    from botocore.session import Session

    # Re-exported for the type of LockTable(client=...).
    from mypy_boto3_dynamodb.client import DynamoDBClient as DynamoDBClient

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")
#: The access key (and secret) for a loopback endpoint when botocore finds no credentials.
#: Letters and digits only: DynamoDB Local refuses any other access key id.
LOCAL_ACCESS_KEY = "awsflocklocal"


def is_loopback(endpoint_url: str | None) -> bool:
    if not endpoint_url:
        return False
    from urllib.parse import urlsplit

    host = urlsplit(endpoint_url).hostname or ""
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def check_endpoint_url(endpoint_url: str | None) -> None:
    """Refuse an endpoint URL without a scheme (``127.0.0.1:8000``): botocore would take it
    for no endpoint, and the failure would name the region instead. Refuse one that botocore
    cannot send to (another scheme, no host, a port that is not a number, a broken IPv6
    address): it would fail only when signing the first request, or be retried as a fault of
    the network."""
    if not endpoint_url:
        return
    if "://" not in endpoint_url:
        scheme = "http" if is_loopback(f"http://{endpoint_url}") else "https"
        raise errors.UsageError(f"the endpoint URL needs a scheme: {scheme}://{endpoint_url}")
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(endpoint_url)
        parts.port  # noqa: B018 (raises ValueError for a port that is not a number)
    except ValueError as exc:
        why = str(exc)
    else:
        why = "" if parts.hostname else "it names no host"
        if parts.scheme not in ("http", "https"):
            why = f"its scheme is {parts.scheme!r}"
    if why:
        raise errors.UsageError(
            f"the endpoint URL {endpoint_url!r} is not one DynamoDB can be reached at ({why})",
            hint="give an http:// or https:// URL, e.g. http://127.0.0.1:8000",
        )


def _skip_instance_metadata(session: Session) -> None:
    """Take the EC2 instance metadata service out of ``session``'s credential chain, unless
    the user named its endpoint (``AWS_EC2_METADATA_SERVICE_ENDPOINT`` or
    ``ec2_metadata_service_endpoint`` in the config): they asked for it then.

    Only for loopback endpoints, which do not check that a key is real. botocore asks that
    service last, when nothing else gave credentials: on a host where 169.254.169.254 does not
    answer (not EC2, packets dropped) that costs two one-second timeouts (token, then role) on
    every command. The container provider stays: it asks nothing unless its environment
    variable (set by ECS, CodeBuild, EKS Pod Identity) is.
    """
    if session.get_config_variable("ec2_metadata_service_endpoint"):
        return
    session.get_component("credential_provider").remove("iam-role")


def _import_urllib3() -> None:
    """Import urllib3 (under botocore) without ``importlib.metadata``, about 13 ms of a
    command's start-up: urllib3 2's ``http2`` package imports that module's ``version`` at its
    top, for a check made only when HTTP/2 is turned on, which botocore never does. While
    urllib3 is imported, ``importlib.metadata`` is a stand-in whose ``version`` (and anything
    else asked of it) imports the real module when used; then it is gone, and any later import
    gets the real one. A no-op once either module is loaded."""
    import sys
    import types

    name = "importlib.metadata"
    if "urllib3" in sys.modules or name in sys.modules:
        return

    def real() -> types.ModuleType:
        import importlib

        if sys.modules.get(name) is stand_in:
            del sys.modules[name]
        return importlib.import_module(name)

    def version(distribution: str) -> str:
        found: str = real().version(distribution)
        return found

    def __getattr__(attribute: str) -> Any:  # a module's own hook (PEP 562)
        if attribute.startswith("__"):  # the import system's questions (``__path__``)
            raise AttributeError(attribute)
        return getattr(real(), attribute)

    stand_in = types.ModuleType(name)
    stand_in.version = version  # type: ignore[attr-defined]
    stand_in.__getattr__ = __getattr__  # type: ignore[method-assign]
    sys.modules[name] = stand_in
    try:
        import urllib3  # noqa: F401
    except ImportError:
        pass  # botocore's own import says what is missing
    finally:
        if sys.modules.get(name) is stand_in:
            del sys.modules[name]


def make_client(
    *,
    profile: str | None,
    region: str | None,
    endpoint_url: str | None,
    request_timeout: float,
) -> DynamoDBClient:
    """A DynamoDB client making one try per call (awsflock retries itself), with loopback
    defaults for local servers."""
    # botocore directly: importing boto3 on top of it only adds start-up time.
    _import_urllib3()
    from botocore.config import Config

    from awsflock.stores.dynamodb import botodata, botosession

    # Over the trimmed copy of botocore's data; its credential chain's clients too.
    session = botosession.Session(profile=profile)
    region = region or session.get_config_variable("region")
    kwargs: dict[str, Any] = {}
    if is_loopback(endpoint_url):
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
        connect_timeout=min(3.0, request_timeout),
        read_timeout=request_timeout,
    )
    client: DynamoDBClient = session.create_client(
        # Naming the API version spares botocore a look for the latest at start-up.
        "dynamodb",
        region_name=region,
        endpoint_url=endpoint_url,
        config=config,
        api_version=botodata.API_VERSION,
        **kwargs,
    )
    return client


def caller_identity(
    *, profile: str | None, region: str | None, endpoint_url: str | None
) -> str | None:
    """The AWS caller's ARN, or None where it cannot be learned (local endpoints, errors)."""
    if is_loopback(endpoint_url):
        return None
    try:
        import botocore.session
        from botocore.config import Config

        session = botocore.session.Session(profile=profile)
        sts = session.create_client(
            "sts",
            region_name=region or session.get_config_variable("region") or "us-east-1",
            config=Config(connect_timeout=3, read_timeout=5, retries={"max_attempts": 2}),
        )
        return str(sts.get_caller_identity()["Arn"])  # type: ignore[attr-defined]
    except Exception:  # any failure only means "unknown": the caller falls back to user@host
        return None
