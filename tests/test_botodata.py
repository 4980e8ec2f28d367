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
        m.setattr(botodata, "use_trimmed", lambda session: None)
        normal = _client(region)
    assert type(normal._loader).__name__ == "Loader"
    assert outcome(trimmed) == outcome(normal)
    assert trimmed.meta.endpoint_url == normal.meta.endpoint_url


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8000", "https://ddb.example.internal"])
def test_a_custom_endpoint_is_used_as_given(endpoint, monkeypatch):
    trimmed = _request(_client("eu-west-1", endpoint))
    with monkeypatch.context() as m:
        m.setattr(botodata, "use_trimmed", lambda session: None)
        normal = _request(_client("eu-west-1", endpoint))
    assert trimmed == normal and trimmed[0].startswith(endpoint)


def test_the_copy_is_made_once_and_holds_only_dynamodb_and_the_credential_chain(tmp_path):
    _client("us-east-1")
    (folder,) = (tmp_path / "cache").iterdir()
    stamps = {p: p.stat().st_mtime_ns for p in folder.rglob("*")}
    assert botodata.intact(folder, folder.name.removeprefix("botocore-"))
    _client("us-west-2")
    assert list((tmp_path / "cache").iterdir()) == [folder]
    assert {p: p.stat().st_mtime_ns for p in folder.rglob("*")} == stamps
    endpoints = json.loads((folder / "endpoints.json").read_text())
    listed = {s for p in endpoints["partitions"] for s in p["services"]}
    assert listed <= {"dynamodb", *botodata.CREDENTIAL_SERVICES} and "dynamodb" in listed
    models = {p.name for p in folder.iterdir() if p.is_dir()}
    assert models <= {"dynamodb", *botodata.CREDENTIAL_SERVICES} and "sts" in models
    for model in folder.glob("*/*/service-2.json"):
        assert '"documentation"' not in model.read_text()
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


def _copy_folder() -> Path:
    (folder,) = (p for p in Path(os.environ["AWSFLOCK_CACHE_DIR"]).iterdir() if p.is_dir())
    return folder


MODEL = f"{SERVICE_DIR}/service-2.json"


def _truncate(folder: Path) -> None:
    path = folder / MODEL
    path.write_bytes(path.read_bytes()[:1000])


def _zeroes(folder: Path) -> None:
    # What a crash before the data reached the disk leaves: the right size, all zero bytes.
    path = folder / MODEL
    path.write_bytes(bytes(path.stat().st_size))


def _invalid_json(folder: Path) -> None:
    (folder / "endpoints.json").write_text('{"partitions": [')


def _missing_file(folder: Path) -> None:
    (folder / MODEL).unlink()


def _missing_rule_set(folder: Path) -> None:
    (folder / SERVICE_DIR / "endpoint-rule-set-1.json").unlink()


def _missing_model_folder(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder / SERVICE_DIR.parent)


def _no_manifest(folder: Path) -> None:
    # A copy made by an awsflock before the manifest (or one cut short before it).
    (folder / botodata.MANIFEST).unlink()


def _damaged_manifest(folder: Path) -> None:
    (folder / botodata.MANIFEST).write_bytes(b"\0" * 40)


def _from_another_botocore(folder: Path) -> None:
    """The copy in place, whole, but made from another botocore: its model lacks GetItem."""
    import zlib

    path = folder / MODEL
    model = json.loads(path.read_text())
    del model["operations"]["GetItem"]
    blob = json.dumps(model).encode()
    path.write_bytes(blob)
    listed = folder / "manifest.json"
    if listed.exists():  # (an awsflock before the manifest has none)
        manifest = json.loads(listed.read_text())
        manifest["source"] = "1.0.0-000000000000"
        manifest["files"][MODEL] = [len(blob), zlib.crc32(blob)]
        listed.write_text(json.dumps(manifest))


DAMAGES = [
    _truncate,
    _zeroes,
    _invalid_json,
    _missing_file,
    _missing_rule_set,
    _missing_model_folder,
    _no_manifest,
    _damaged_manifest,
    _from_another_botocore,
]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_copy_is_rebuilt_and_the_command_works(damage):
    _client("eu-west-1")
    folder = _copy_folder()
    damage(folder)
    assert _request(_client("eu-west-1")) == (
        "https://dynamodb.eu-west-1.amazonaws.com/",
        "eu-west-1/dynamodb/aws4_request",
    )
    assert _copy_folder() == folder  # rebuilt in place; nothing left beside it
    assert botodata.intact(folder, folder.name.removeprefix("botocore-"))


def test_a_copy_damaged_under_a_running_command_is_rebuilt_when_read(monkeypatch):
    # The manifest was read, then a file changed (another process's repair, a disk fault).
    from awsflock.stores.dynamodb import botosession

    _client("eu-west-1")
    session = botosession.Session()
    _zeroes(_copy_folder())
    client = session.create_client("dynamodb", region_name="eu-west-1")
    assert _request(client)[0] == "https://dynamodb.eu-west-1.amazonaws.com/"
    folder = _copy_folder()
    assert botodata.intact(folder, folder.name.removeprefix("botocore-"))


def test_a_damaged_copy_that_cannot_be_rebuilt_falls_back_to_botocores_loader(monkeypatch):
    _client("eu-west-1")
    _damaged_manifest(_copy_folder())

    def refuse(*_: Any) -> Any:
        raise OSError("No space left on device")

    monkeypatch.setattr(botodata, "build", refuse)
    client = _client("eu-west-1")
    assert type(client._loader).__name__ == "Loader"
    assert _request(client)[0] == "https://dynamodb.eu-west-1.amazonaws.com/"


def test_a_file_damaged_after_the_check_that_cannot_be_rebuilt_is_read_from_botocore(
    monkeypatch,
):
    from awsflock.stores.dynamodb import botosession

    _client("eu-west-1")
    session = botosession.Session()
    _zeroes(_copy_folder())
    monkeypatch.setattr(botodata, "build", lambda *_: (_ for _ in ()).throw(OSError("full")))
    client = session.create_client("dynamodb", region_name="eu-west-1")
    assert type(client._loader).__name__ == "TrimmedLoader"
    assert _request(client)[0] == "https://dynamodb.eu-west-1.amazonaws.com/"


def test_processes_repairing_a_damaged_copy_at_once_all_get_a_whole_one(tmp_path):
    import threading

    from botocore.loaders import Loader

    _client("eu-west-1")
    folder = _copy_folder()
    _no_manifest(folder)  # found when the copy is opened: every one of them rebuilds it
    source, root = Path(Loader.BUILTIN_DATA_PATH), folder.parent
    failures: list[BaseException] = []

    def repair() -> None:
        try:
            botodata.Copy(source, root)
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=repair) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    assert _copy_folder() == folder
    assert botodata.intact(folder, folder.name.removeprefix("botocore-"))


def test_the_leftovers_of_a_build_killed_long_ago_are_removed(tmp_path):
    _client("eu-west-1")
    folder = _copy_folder()
    recent, old = (folder.parent / f"{folder.name}.new-{n}" for n in ("recent", "old"))
    for leftover in (recent, old):
        leftover.mkdir()
        (leftover / "endpoints.json").write_text("{")
    os.utime(old, (0, 0))
    _missing_file(folder)
    _client("eu-west-1")
    assert sorted(p.name for p in folder.parent.iterdir()) == sorted([folder.name, recent.name])
