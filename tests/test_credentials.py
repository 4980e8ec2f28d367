"""Which credentials awsflock signs with on a loopback endpoint (seen by a local HTTP server)."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from awsflock.stores.dynamodb import DynamoDBStore as Store
from awsflock.stores.dynamodb.client import LOCAL_ACCESS_KEY


class _Recorder(BaseHTTPRequestHandler):
    """Answers ListTables with an empty table list, as DynamoDB Local does for a key and region
    that made no table, and any other request with "no such table"; records the access keys."""

    keys: list[str]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        found = re.search(r"Credential=([^/]+)/", self.headers.get("Authorization", ""))
        self.keys.append(found.group(1) if found else "")
        if self.headers.get("X-Amz-Target", "").endswith(".ListTables"):
            status, answer = 200, {"TableNames": []}
        else:
            missing = "com.amazonaws.dynamodb.v20120810#ResourceNotFoundException"
            status, answer = 400, {"__type": missing, "message": "Cannot do operations on a "}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("x-amzn-RequestId", "R1")
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def local_endpoint() -> Iterator[tuple[str, list[str]]]:
    """A loopback endpoint and the access keys of the requests it received."""
    keys: list[str] = []
    handler = type("Handler", (_Recorder,), {"keys": keys})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", keys
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    """No credentials anywhere: no AWS_* keys, no profile, empty config and credentials files."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    return tmp_path


def _key_used(endpoint: tuple[str, list[str]], **store: str) -> str:
    url, keys = endpoint
    before = len(keys)
    Store("t", endpoint_url=url, **store).client.list_tables()
    assert len(keys) == before + 1
    return keys[-1]


def test_loopback_signs_with_the_credentials_file_not_the_fallback(
    no_credentials, monkeypatch, local_endpoint
):
    # DynamoDB Local keeps tables per access key: the user's own key must be the one used.
    creds = no_credentials / "credentials"
    creds.write_text(
        "[default]\naws_access_key_id = AKIDFROMFILE\naws_secret_access_key = s\n"
        "[ci]\naws_access_key_id = AKIDFROMPROFILE\naws_secret_access_key = s\n"
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    assert _key_used(local_endpoint) == "AKIDFROMFILE"
    monkeypatch.setenv("AWS_PROFILE", "ci")
    assert _key_used(local_endpoint) == "AKIDFROMPROFILE"


def test_loopback_signs_with_env_credentials(no_credentials, monkeypatch, local_endpoint):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    assert _key_used(local_endpoint) == "AKIDFROMENV"


def test_loopback_without_credentials_uses_a_key_dynamodb_local_accepts(
    no_credentials, local_endpoint
):
    key = _key_used(local_endpoint)
    assert key == LOCAL_ACCESS_KEY
    assert key.isalnum() and key.isascii()  # DynamoDB Local refuses anything else


def test_loopback_never_asks_the_instance_metadata_service(
    no_credentials, monkeypatch, local_endpoint
):
    # A metadata service that accepts connections and never answers, as where 169.254.169.254
    # is routed but silent: asking it would cost botocore two one-second timeouts. It stands
    # in for botocore's default address (naming an endpoint asks for the service: see
    # tests/integration/test_credential_sources.py).
    from botocore.utils import IMDSFetcher

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent.settimeout(0)
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED", raising=False)
    monkeypatch.delenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", raising=False)
    address = f"http://127.0.0.1:{silent.getsockname()[1]}/"
    monkeypatch.setattr(IMDSFetcher, "_select_base_url", lambda *_: address)
    try:
        assert _key_used(local_endpoint) == LOCAL_ACCESS_KEY
        with pytest.raises(BlockingIOError):
            silent.accept()  # nobody connected (the kernel would have queued one who did)
    finally:
        silent.close()


ENV_KEY = {"AWS_ACCESS_KEY_ID": "AKIDFROMENV", "AWS_SECRET_ACCESS_KEY": "s"}


@pytest.mark.parametrize(
    ("env", "signed"),
    [
        ({}, f"access key id {LOCAL_ACCESS_KEY}, region us-east-1"),
        (ENV_KEY | {"AWS_REGION": "eu-west-1"}, "access key id AKIDFROMENV, region eu-west-1"),
    ],
)
def test_a_missing_table_at_an_endpoint_names_the_key_and_region_it_was_looked_for_with(
    no_credentials, monkeypatch, local_endpoint, env, signed
):
    from click.testing import CliRunner

    from awsflock.cli import cli

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    url, _keys = local_endpoint
    result = CliRunner().invoke(cli, ["status", "deploy", "--endpoint-url", url])
    assert (result.exit_code, result.stdout) == (1, "")
    assert result.stderr == (
        f"awsflock: error: table 'awsflock' does not exist at {url} for {signed}: DynamoDB "
        "Local keeps tables per access key id and region: use the AWS_ACCESS_KEY_ID and region "
        "the table was created with, or run `awsflock table-create --tablename awsflock`\n"
    )
