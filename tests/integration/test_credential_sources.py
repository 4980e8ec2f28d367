"""The real ``awsflock`` signs its DynamoDB requests with the credentials of every source
botocore supports: static keys, assume-role (from a source profile, chained, from the
environment), web identity, ``credential_process``, SSO (``sso_session``, its token cached and
refreshed), container credentials (ECS, EKS Pod Identity) and instance metadata (IMDSv2).

moto's server answers STS and DynamoDB behind a loopback proxy that records the access key of
every request and the keys STS hands out; loopback stand-ins answer SSO, the container
endpoint and IMDS. Every test has its own HOME, AWS config and credentials files."""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import sys
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import pytest

from tests.integration.conftest import Cli
from tests.servers import Server

ACCOUNT = "123456789012"  # moto's default account: its tables are those of every key here
#: What a stand-in answers: (status, body, content type) for a method and path.
Answer = tuple[int, bytes, str]


class _Handler(BaseHTTPRequestHandler):
    """Answers each request with ``serve(method, path, headers, body)`` and records it."""

    serve: Callable[[str, str, Any, bytes], Answer]
    seen: list[tuple[str, str, Any]]

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        self.seen.append((self.command, self.path, self.headers))
        status, answer, kind = self.serve(self.command, self.path, self.headers, body)
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    do_GET = do_PUT = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


class Stand:
    """A loopback HTTP server answering with ``serve``; ``seen``: (method, path, headers)."""

    def __init__(self, serve: Callable[[str, str, Any, bytes], Answer]) -> None:
        self.seen: list[tuple[str, str, Any]] = []
        handler = type("Handler", (_Handler,), {"serve": staticmethod(serve), "seen": self.seen})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Stand:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class Recorder:
    """A forwarding proxy in front of moto: the access key and service of each request
    (``signed``: (service, key); key "" when unsigned), and the keys STS answered with."""

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream)
        self.signed: list[tuple[str, str]] = []
        self.issued: list[str] = []
        self.stand = Stand(self._forward)

    def _forward(self, method: str, path: str, headers: Any, body: bytes) -> Answer:
        auth = headers.get("Authorization", "")
        found = re.search(r"Credential=([^/]+)/[^/]+/[^/]+/([^/]+)/", auth)
        service = found.group(2) if found else "sts"  # unsigned: AssumeRoleWithWebIdentity
        self.signed.append((service, found.group(1) if found else ""))
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            conn.request(method, path, body, {k: v for k, v in headers.items()})
            reply = conn.getresponse()
            answer = reply.read()
            status, kind = reply.status, reply.getheader("Content-Type", "text/xml")
        finally:
            conn.close()
        if service == "sts":
            self.issued += re.findall(r"<AccessKeyId>([^<]+)</AccessKeyId>", answer.decode())
        return status, answer, kind

    def keys(self, service: str) -> list[str]:
        return [key for s, key in self.signed if s == service]


@pytest.fixture(scope="module")
def table(moto_server: Server) -> str:
    name = "creds-" + uuid.uuid4().hex[:8]
    made = Cli(moto_server.url, name)("table-create", "-q")
    assert made.returncode == 0, made.stderr
    return name


@pytest.fixture
def recorder(moto_server: Server) -> Iterator[Recorder]:
    proxy = Recorder(moto_server.url)
    with proxy.stand:
        yield proxy


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".aws").mkdir()
    return tmp_path


@pytest.fixture
def run(recorder: Recorder, table: str, home: Path) -> Callable[..., None]:
    """Acquire and release a lock with ``args`` (e.g. ``--profile``) and ``env`` on top of an
    isolated HOME and AWS files, all AWS endpoints through the recorder; both must work."""

    def cycle(*args: str, **env: str) -> None:
        cli = Cli(recorder.stand.url, table)
        isolated = {
            "HOME": str(home),
            "AWS_CONFIG_FILE": str(home / ".aws" / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(home / ".aws" / "credentials"),
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_STS": recorder.stand.url,
            **env,
        }
        name = "lock-" + uuid.uuid4().hex[:8]
        got = cli("acquire", name, *args, **isolated)
        assert (got.returncode, got.stderr) == (0, "")
        assert got.stdout.strip()
        done = cli("release", name, got.stdout.strip(), *args, **isolated)
        assert (done.returncode, done.stdout, done.stderr) == (0, "", "")

    return cycle


def _write(path: Path, text: str) -> None:
    path.write_text(text.strip() + "\n")


def _role(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


def _later(**delta: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(**delta)


def _iso(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


SOURCE_KEYS = "[src]\naws_access_key_id = AKIDSOURCE\naws_secret_access_key = source-secret"


def test_static_keys_of_a_profile_sign_the_requests(run, recorder, home):
    _write(home / ".aws" / "credentials", SOURCE_KEYS)
    run("--profile", "src")
    assert set(recorder.keys("dynamodb")) == {"AKIDSOURCE"}


def test_a_role_assumed_from_a_source_profile_signs_the_requests(run, recorder, home):
    _write(home / ".aws" / "credentials", SOURCE_KEYS)
    _write(
        home / ".aws" / "config", f"[profile app]\nrole_arn = {_role('app')}\nsource_profile = src"
    )
    run("--profile", "app")  # two commands: each assumes the role
    assert recorder.keys("sts") == ["AKIDSOURCE"] * 2
    assert set(recorder.keys("dynamodb")) == set(recorder.issued) and len(recorder.issued) == 2


def test_a_chain_of_assumed_roles_signs_with_the_last(run, recorder, home):
    _write(home / ".aws" / "credentials", SOURCE_KEYS)
    config = f"""
[profile first]
role_arn = {_role("first")}
source_profile = src
[profile second]
role_arn = {_role("second")}
source_profile = first
"""
    _write(home / ".aws" / "config", config)
    run("--profile", "second")  # two commands: each assumes both roles
    first, second, first_again, second_again = recorder.issued
    assert recorder.keys("sts") == ["AKIDSOURCE", first, "AKIDSOURCE", first_again]
    assert set(recorder.keys("dynamodb")) == {second, second_again}


def test_a_role_assumed_with_the_environments_keys_signs_the_requests(run, recorder, home):
    _write(
        home / ".aws" / "config",
        f"[profile app]\nrole_arn = {_role('app')}\ncredential_source = Environment",
    )
    run("--profile", "app", AWS_ACCESS_KEY_ID="AKIDENVIRONMENT", AWS_SECRET_ACCESS_KEY="s")
    assert recorder.keys("sts") == ["AKIDENVIRONMENT"] * 2
    assert set(recorder.keys("dynamodb")) == set(recorder.issued) and len(recorder.issued) == 2


def test_a_web_identity_token_signs_the_requests(run, recorder, home):
    # EKS IRSA, GitHub Actions' OIDC: a token file and a role, no keys anywhere.
    token = home / "token"
    token.write_text("eyJ.web-identity.token")
    run(AWS_WEB_IDENTITY_TOKEN_FILE=str(token), AWS_ROLE_ARN=_role("ci"))
    assert recorder.keys("sts") == ["", ""]  # AssumeRoleWithWebIdentity is not signed
    assert set(recorder.keys("dynamodb")) == set(recorder.issued) and len(recorder.issued) == 2


def test_a_credential_process_signs_the_requests(run, recorder, home):
    answer = {
        "Version": 1,
        "AccessKeyId": "AKIDPROCESS",
        "SecretAccessKey": "process-secret",
        "SessionToken": "process-token",
        "Expiration": _iso(_later(hours=1)),
    }
    script = home / "creds.py"
    script.write_text(f"import json\nprint(json.dumps({answer!r}))\n")
    _write(home / ".aws" / "config", f"[profile p]\ncredential_process = {sys.executable} {script}")
    run("--profile", "p")
    assert set(recorder.keys("dynamodb")) == {"AKIDPROCESS"}


def _sso(refreshed: list[str]) -> Callable[[str, str, Any, bytes], Answer]:
    """IAM Identity Center's portal (GetRoleCredentials) and OIDC (CreateToken) stand-ins."""

    def serve(method: str, path: str, headers: Any, body: bytes) -> Answer:
        if path == "/token":  # CreateToken: a refreshed access token
            refreshed.append(json.loads(body)["refreshToken"])
            fresh = {"accessToken": "fresh-token", "expiresIn": 3600, "tokenType": "Bearer"}
            return 200, json.dumps({**fresh, "refreshToken": "r2"}).encode(), "application/json"
        if path.startswith("/federation/credentials?"):
            token = headers.get("x-amz-sso_bearer_token")
            if token not in ("cached-token", "fresh-token"):
                return 401, b'{"message":"Session token not found or invalid"}', "application/json"
            key = {"cached-token": "AKIDSSO", "fresh-token": "AKIDSSOREFRESHED"}[token]
            expires = int(_later(hours=1).timestamp() * 1000)
            creds = {"accessKeyId": key, "secretAccessKey": "s", "sessionToken": "t"}
            answer = {"roleCredentials": {**creds, "expiration": expires}}
            return 200, json.dumps(answer).encode(), "application/json"
        return 404, b"{}", "application/json"

    return serve


@pytest.mark.parametrize("expires_in", [timedelta(hours=8), timedelta(minutes=5)])
def test_an_sso_session_signs_the_requests(run, recorder, home, expires_in):
    # Logged in with `aws sso login`: a cached token, refreshed when about to expire.
    config = f"""
[profile sso]
sso_session = corp
sso_account_id = {ACCOUNT}
sso_role_name = Admin
[sso-session corp]
sso_start_url = https://corp.awsapps.com/start
sso_region = us-east-1
sso_registration_scopes = sso:account:access
"""
    _write(home / ".aws" / "config", config)
    cache = home / ".aws" / "sso" / "cache"
    cache.mkdir(parents=True)
    token = {
        "startUrl": "https://corp.awsapps.com/start",
        "region": "us-east-1",
        "accessToken": "cached-token",
        "expiresAt": _iso(datetime.now(timezone.utc) + expires_in),
        "clientId": "client",
        "clientSecret": "secret",
        "registrationExpiresAt": _iso(_later(days=30)),
        "refreshToken": "r1",
    }
    (cache / (hashlib.sha1(b"corp").hexdigest() + ".json")).write_text(json.dumps(token))
    refreshed: list[str] = []
    with Stand(_sso(refreshed)) as sso:
        run("--profile", "sso", AWS_ENDPOINT_URL_SSO=sso.url, AWS_ENDPOINT_URL_SSO_OIDC=sso.url)
    expected = "AKIDSSO" if expires_in > timedelta(minutes=15) else "AKIDSSOREFRESHED"
    assert set(recorder.keys("dynamodb")) == {expected}
    assert refreshed == ([] if expected == "AKIDSSO" else ["r1"])


def _credentials_json(key: str, token_name: str = "Token") -> bytes:
    creds = {"AccessKeyId": key, "SecretAccessKey": "s", token_name: "t"}
    return json.dumps({**creds, "Expiration": _iso(_later(hours=1))}).encode()


@pytest.mark.parametrize("kind", ["ecs", "eks-pod-identity"])
def test_container_credentials_sign_the_requests(run, recorder, home, kind):
    auth = home / "eks-token"
    auth.write_text("pod-identity-token")

    def serve(method: str, path: str, headers: Any, body: bytes) -> Answer:
        if path != "/creds" or (kind != "ecs" and headers.get("Authorization") != auth.read_text()):
            return 401, b"{}", "application/json"
        return 200, _credentials_json("AKIDCONTAINER"), "application/json"

    with Stand(serve) as container:
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": container.url + "/creds"}
        if kind != "ecs":
            env["AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"] = str(auth)
        run(**env)
    assert set(recorder.keys("dynamodb")) == {"AKIDCONTAINER"}


def test_instance_metadata_signs_the_requests_when_its_endpoint_is_named(run, recorder, home):
    # The loopback default leaves the instance metadata service out (two timeouts off EC2);
    # naming its endpoint asks for it.
    base = "/latest/meta-data/iam/security-credentials/"

    def serve(method: str, path: str, headers: Any, body: bytes) -> Answer:
        if method == "PUT" and path == "/latest/api/token":
            return 200, b"imds-token", "text/plain"
        if headers.get("X-aws-ec2-metadata-token") != "imds-token":
            return 401, b"", "text/plain"
        if path == base:
            return 200, b"instance-role", "text/plain"
        if path == base + "instance-role":
            return 200, _credentials_json("AKIDIMDS"), "application/json"
        return 404, b"", "text/plain"

    with Stand(serve) as imds:
        run(AWS_EC2_METADATA_SERVICE_ENDPOINT=imds.url + "/")
    assert [p for m, p, _ in imds.seen][:1] == ["/latest/api/token"]
    assert set(recorder.keys("dynamodb")) == {"AKIDIMDS"}
