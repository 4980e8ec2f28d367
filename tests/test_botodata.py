"""The DynamoDB client built from the trimmed copy of botocore's data sends exactly what the
normal client sends — same URL, same signing region and service — in standard, FIPS,
dual-stack, China and GovCloud regions and to custom endpoints; the copy is made once per
botocore install, and the normal loader is used wherever the copy cannot be or should not be."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest

from awsflock.stores.dynamodb import botodata
from awsflock.stores.dynamodb.client import make_client


class _Sent(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("sent")
        self.url = request.url
        self.auth = request.headers.get("Authorization", b"")


def _request(client: Any) -> tuple[str, str]:
    """The URL and the credential scope (date dropped) of a GetItem, caught before it leaves."""

    def catch(request: Any, **_: Any) -> None:
        raise _Sent(request)

    client.meta.events.register("before-send", catch)
    with pytest.raises(_Sent) as sent:
        client.get_item(TableName="t", Key={"lock_id": {"S": "x"}})
    auth = sent.value.auth.decode() if isinstance(sent.value.auth, bytes) else sent.value.auth
    scope = auth.split("Credential=", 1)[1].split(",", 1)[0].split("/", 2)[2]
    return sent.value.url, scope


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWSFLOCK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.aws of the user's
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    for name in ("AWS_PROFILE", "AWS_DATA_PATH", "AWS_CONFIG_FILE", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "home" / "config"))


def _client(region: str, endpoint_url: str | None = None) -> Any:
    return make_client(profile=None, region=region, endpoint_url=endpoint_url, request_timeout=5)


SERVICE_DIR = Path(botodata.SERVICE) / botodata.API_VERSION
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-5", "cn-north-1", "us-gov-west-1", "local"]


@pytest.mark.parametrize("variant", ["", "fips", "dualstack", "fips+dualstack"])
@pytest.mark.parametrize("region", REGIONS)
def test_requests_go_where_the_normal_clients_go(region, variant, monkeypatch):
    monkeypatch.setenv("AWS_USE_FIPS_ENDPOINT", str("fips" in variant).lower())
    monkeypatch.setenv("AWS_USE_DUALSTACK_ENDPOINT", str("dualstack" in variant).lower())

    def outcome(client: Any) -> tuple[str, str] | str:
        try:
            return _request(client)
        except _Sent:
            raise
        except Exception as exc:  # a variant a region lacks: the same refusal both ways
            return type(exc).__name__

    trimmed = _client(region)
    assert type(trimmed._loader).__name__ == "TrimmedLoader"
    with monkeypatch.context() as m:
        m.setattr(botodata, "use_trimmed", lambda session: False)
        normal = _client(region)
    assert type(normal._loader).__name__ == "Loader"
    assert outcome(trimmed) == outcome(normal)
    assert trimmed.meta.endpoint_url == normal.meta.endpoint_url


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8000", "https://ddb.example.internal"])
def test_a_custom_endpoint_is_used_as_given(endpoint, monkeypatch):
    trimmed = _request(_client("eu-west-1", endpoint))
    with monkeypatch.context() as m:
        m.setattr(botodata, "use_trimmed", lambda session: False)
        normal = _request(_client("eu-west-1", endpoint))
    assert trimmed == normal and trimmed[0].startswith(endpoint)


def test_the_copy_is_made_once_and_holds_only_dynamodb(tmp_path):
    _client("us-east-1")
    (folder,) = (tmp_path / "cache").iterdir()
    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    _client("us-west-2")
    assert list((tmp_path / "cache").iterdir()) == [folder]
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == stamps
    endpoints = json.loads((folder / "endpoints.json").read_text())
    assert {tuple(p["services"]) for p in endpoints["partitions"]} == {("dynamodb",)}
    model = (folder / SERVICE_DIR / "service-2.json").read_text()
    assert '"documentation"' not in model
    assert not list(folder.rglob("examples*"))


def test_the_trimmed_model_has_every_operation_and_shape_of_botocores():
    from botocore.loaders import Loader

    source = Path(Loader.BUILTIN_DATA_PATH) / "dynamodb" / botodata.API_VERSION
    full = json.loads(gzip.decompress((source / "service-2.json.gz").read_bytes()))
    _client("us-east-1")
    (folder,) = Path(os.environ["AWSFLOCK_CACHE_DIR"]).iterdir()
    trimmed = json.loads(
        (folder / "dynamodb" / botodata.API_VERSION / "service-2.json").read_text()
    )
    assert trimmed["operations"].keys() == full["operations"].keys()
    assert trimmed["shapes"].keys() == full["shapes"].keys()
    assert trimmed["metadata"] == {
        k: v for k, v in full["metadata"].items() if k != "documentation"
    }


def test_a_new_botocore_install_gets_a_copy_of_its_own(tmp_path, monkeypatch):
    import botocore

    installed = botocore.__version__
    _client("us-east-1")
    monkeypatch.setattr(botocore, "__version__", "0.0.0-other")
    _client("us-east-1")
    names = sorted(p.name.split("-")[1] for p in (tmp_path / "cache").iterdir())
    assert names == sorted([installed, "0.0.0"])


def test_an_unwritable_cache_falls_back_to_botocores_own_data(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("AWSFLOCK_CACHE_DIR", str(blocker / "cache"))
    client = _client("us-east-1")
    assert type(client._loader).__name__ == "Loader"
    assert _request(client)[0] == "https://dynamodb.us-east-1.amazonaws.com/"


@pytest.mark.parametrize("where", ["AWS_DATA_PATH", "~/.aws/models"])
def test_data_of_the_users_own_keeps_botocores_loader(where, tmp_path, monkeypatch):
    from botocore.loaders import Loader

    models = tmp_path / "models"
    if where == "AWS_DATA_PATH":
        monkeypatch.setenv("AWS_DATA_PATH", str(models))
    else:  # botocore expands ~ once, when it is imported
        models.mkdir()
        monkeypatch.setattr(Loader, "CUSTOMER_DATA_PATH", str(models))
    client = _client("us-east-1")
    assert type(client._loader).__name__ == "Loader"
    assert not (tmp_path / "cache").exists()


def test_building_a_client_imports_no_package_metadata_and_urllib3_still_can(tmp_path):
    # urllib3 2 imports importlib.metadata (about 13 ms with what it pulls in) only for a check
    # of the h2 package made when HTTP/2 is turned on: a client is built without it, and the
    # check still works when made (the real module, imported then).
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from awsflock.stores.dynamodb.client import make_client\n"
        "make_client(profile=None, region='us-east-1', endpoint_url='http://127.0.0.1:9',"
        " request_timeout=1)\n"
        "assert 'importlib.metadata' not in sys.modules, 'imported'\n"
        "import urllib3.http2\n"
        "print(urllib3.http2.version('urllib3'))\n"
        "import importlib.metadata\n"
        "assert importlib.metadata.version('urllib3') == urllib3.__version__\n"
    )
    env = {**os.environ, "AWSFLOCK_CACHE_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __import__("urllib3").__version__
