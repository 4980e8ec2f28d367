"""Fixtures that run the real ``awsflock`` executable against real servers over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faultproxy import FaultProxy
from tests.servers import NO_AWS_FILES, SERVERS, PostgresServer, Server, local_client

BIN = Path(sys.executable).parent / "awsflock"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session", params=sorted(SERVERS))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Each integration test runs once on each server: moto, dynalite, DynamoDB Local."""
    srv = SERVERS[request.param]().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Server]:
    srv = SERVERS["moto"]().start()
    try:
        yield srv
    finally:
        srv.stop()


def cli_env(endpoint: str, table: str, **extra: str) -> dict[str, str]:
    # No credentials at all, so awsflock signs with its loopback key, as local_client does.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "AWSFLOCK", "DYNAMO"))}
    env.update({**NO_AWS_FILES, "AWSFLOCK_ENDPOINT_URL": endpoint, "AWSFLOCK_TABLE": table})
    env.update(extra)
    return env


class Cli:
    """Runs ``awsflock`` as a subprocess against one endpoint and table."""

    def __init__(self, endpoint: str, table: str) -> None:
        self.endpoint = endpoint
        self.table = table

    def env(self, **extra: str) -> dict[str, str]:
        return cli_env(self.endpoint, self.table, **extra)

    def __call__(
        self, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
        )

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(BIN), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
        )


def _create(endpoint: str, table: str) -> None:
    result = Cli(endpoint, table)("table-create", "-q")
    assert result.returncode == 0, result.stderr


@pytest.fixture(scope="session")
def shared_table(server: Server) -> str:
    name = "it-" + uuid.uuid4().hex[:8]
    _create(server.url, name)
    return name


@pytest.fixture
def awsflock(server: Server, shared_table: str) -> Cli:
    """The CLI pointed at the current server and a table made for this session."""
    return Cli(server.url, shared_table)


@pytest.fixture
def lock_name() -> str:
    return "lock-" + uuid.uuid4().hex[:10]


@pytest.fixture
def proxy(server: Server) -> Iterator[FaultProxy]:
    with FaultProxy(("127.0.0.1", server.port)) as p:
        yield p


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server of this session (run as an unprivileged user when we are root)."""
    srv = PostgresServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def pg_table(postgres: PostgresServer) -> str:
    """A lock table on the PostgreSQL server, made by ``table-create`` for this session."""
    name = "it_" + uuid.uuid4().hex[:8]
    result = PgCli(postgres, name)("table-create", "-q")
    assert result.returncode == 0, result.stderr
    return name


class PgCli(Cli):
    """Runs ``awsflock`` against a table on the PostgreSQL server (``AWSFLOCK_STORE``)."""

    def __init__(self, server: PostgresServer, table: str, url: str | None = None) -> None:
        super().__init__("", table)
        self.server = server
        self.url = url or server.url

    def env(self, **extra: str) -> dict[str, str]:
        env = cli_env("", self.table, AWSFLOCK_STORE=self.url)
        del env["AWSFLOCK_ENDPOINT_URL"]
        env.update(extra)
        return env


@pytest.fixture
def pg(postgres: PostgresServer, pg_table: str) -> PgCli:
    """The CLI pointed at the PostgreSQL server and this session's table."""
    return PgCli(postgres, pg_table)


@pytest.fixture
def raw_client(server: Server):
    return local_client(server.url)
