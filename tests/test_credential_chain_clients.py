"""Every client botocore's credential chain makes (STS for assume-role and web identity, SSO,
its token service, sign-in) can be made from the session awsflock's DynamoDB client is built
from, and sends where botocore's own client sends; a service the trimmed copy of botocore's
data lacks is served from all of it. No servers: requests are caught before they leave."""

from __future__ import annotations

import ast
import itertools
from pathlib import Path
from typing import Any

import botocore
import botocore.session
import pytest

from awsflock.stores.dynamodb import botodata
from awsflock.stores.dynamodb.client import make_client


@pytest.fixture(scope="module")
def _cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of botocore's data for the module's tests: making it is the slow part."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, _cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWSFLOCK_CACHE_DIR", str(_cache))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    for name in ("AWS_PROFILE", "AWS_DATA_PATH", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))


def chain_services() -> set[str]:
    """The services the installed botocore's credential chain makes clients of: each
    ``client_creator('sts', ...)``, ``create_client(...)``, ``create_nested_client(session,
    'sso-oidc', ...)`` with a service named in botocore/credentials.py and tokens.py."""
    found: set[str] = set()
    makers = {"client_creator", "_client_creator", "create_client", "create_nested_client"}
    for module in ("credentials.py", "tokens.py"):
        tree = ast.parse((Path(botocore.__file__).parent / module).read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in makers:
                found |= {
                    a.value
                    for a in node.args[:2]
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                }
    return found


def session_of_client(monkeypatch: pytest.MonkeyPatch, region: str = "us-east-1") -> Any:
    """The botocore session awsflock builds its DynamoDB client from."""
    sessions: list[Any] = []
    own = botocore.session.Session.create_client

    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        sessions.append(self)
        return own(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(botocore.session.Session, "create_client", record)
        make_client(profile=None, region=region, endpoint_url=None, request_timeout=5)
    (session,) = set(sessions)
    return session


def test_the_credential_chain_is_found_in_the_installed_botocore():
    assert {"sts", "sso", "sso-oidc"} <= chain_services()


def test_every_client_the_credential_chain_makes_can_be_made(monkeypatch):
    session = session_of_client(monkeypatch)
    for service in sorted(chain_services()):
        client = session.create_client(service, region_name="eu-west-1")
        assert client.meta.service_model.service_name == service


def test_the_copy_holds_the_credential_chains_services(monkeypatch):
    # So credentials from STS or SSO cost no more start-up than keys.
    session = session_of_client(monkeypatch)
    assert chain_services() <= set(session.copy.services)


class _Sent(Exception):
    pass


def _sent(client: Any, call: str, **params: Any) -> tuple[str, str]:
    """The URL and the signing scope (date dropped; empty when unsigned) of one call."""
    seen: list[tuple[str, str]] = []

    def catch(request: Any, **_: Any) -> None:
        auth = request.headers.get("Authorization", b"")
        auth = auth.decode() if isinstance(auth, bytes) else auth
        scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/", 2)[2] if auth else ""
        seen.append((request.url, scope))
        raise _Sent

    client.meta.events.register("before-send", catch)
    with pytest.raises(_Sent):
        getattr(client, call)(**params)
    return seen[0]


CALLS = {
    "sts": ("get_caller_identity", {}),
    "sso": ("get_role_credentials", {"roleName": "r", "accountId": "1", "accessToken": "t"}),
    "sso-oidc": ("create_token", {"clientId": "c", "clientSecret": "s", "grantType": "g"}),
    "signin": ("list_sessions", {}),
    "sqs": ("list_queues", {}),  # not in the copy: served from all of botocore's data
}
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-5", "cn-north-1", "us-gov-west-1"]
VARIANTS = ["", "fips", "dualstack", "fips+dualstack"]


@pytest.mark.parametrize("service", sorted(CALLS))
def test_credential_clients_send_where_botocores_own_send(service, monkeypatch):
    if service not in chain_services() | {"sqs"}:
        pytest.skip(f"the installed botocore's credential chain does not use {service}")
    call, params = CALLS[service]
    ours, normal = session_of_client(monkeypatch), botocore.session.Session()
    assert ours.copy and (service in ours.copy.services) == (service != "sqs")

    def outcome(session: Any, region: str) -> tuple[str, str] | str:
        try:
            return _sent(session.create_client(service, region_name=region), call, **params)
        except Exception as exc:  # a variant a region lacks: the same refusal both ways
            return type(exc).__name__

    for region, variant, sts in itertools.product(REGIONS, VARIANTS, ["regional", "legacy"]):
        monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", str("fips" in variant).lower())
        monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", str("dualstack" in variant).lower())
        monkeypatch.setenv("AWS_STS_REGIONAL_ENDPOINTS", sts)
        assert outcome(ours, region) == outcome(normal, region), (region, variant, sts)


def test_without_the_copy_the_session_is_botocores_own(monkeypatch):
    monkeypatch.setattr(botodata, "use_trimmed", lambda session: None)
    session = session_of_client(monkeypatch)
    assert type(session.get_component("data_loader")).__name__ == "Loader"
    assert session.create_client("sts", region_name="eu-west-1").meta.region_name == "eu-west-1"
