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


#: The PostgreSQL store's server, as a value of the ``server`` fixture.
PG = "postgresql"
#: Fixtures that only make sense on DynamoDB (its endpoint, raw client, HTTP fault proxy, ...):
#: a test that asks for one itself runs on the DynamoDB servers only.
DYNAMODB_ONLY = {"server", "raw_client", "proxy", "moto_server", "big_table", "old_bin", "foreign"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Integration tests run on every DynamoDB server; those of a module that says
    ``ON_POSTGRESQL = True`` also on PostgreSQL, unless they need a DynamoDB-only fixture or
    are marked ``dynamodb_only`` (with the reason)."""
    keep, off = [], []
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
        spec = getattr(item, "callspec", None)
        if spec is not None and spec.params.get("server") == PG and not _on_postgresql(item):
            off.append(item)
        else:
            keep.append(item)
    if off:
        config.hook.pytest_deselected(items=off)
        items[:] = keep


def _on_postgresql(item: pytest.Item) -> bool:
    module = getattr(item, "module", None)
    return (
        bool(getattr(module, "ON_POSTGRESQL", False))
        and item.get_closest_marker("dynamodb_only") is None
        and not DYNAMODB_ONLY & set(item._fixtureinfo.argnames)  # type: ignore[attr-defined]
    )


@pytest.fixture(scope="session", params=[*sorted(SERVERS), PG])
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Each integration test runs once on each server: moto, dynalite, DynamoDB Local; and
    on PostgreSQL where its module says so (see ``pytest_collection_modifyitems``)."""
    if request.param == PG:
        yield request.getfixturevalue("postgres")
        return
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

    def for_table(self, table: str) -> Cli:
        """The same store, another table."""
        return Cli(self.endpoint, table)

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
    if isinstance(server, PostgresServer):
        result = PgCli(server, name)("table-create", "-q")
        assert result.returncode == 0, result.stderr
        return name
    _create(server.url, name)
    return name


@pytest.fixture
def awsflock(server: Server, shared_table: str) -> Cli:
    """The CLI pointed at the current server and a table made for this session."""
    if isinstance(server, PostgresServer):
        return PgCli(server, shared_table)
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

    def for_table(self, table: str) -> PgCli:
        return PgCli(self.server, table, self.url)

    def __call__(
        self, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return super().__call__(*_no_skew(args), timeout=timeout, **env)

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return super().popen(*_no_skew(args), **env)


def _no_skew(args: tuple[str, ...]) -> list[str]:
    """``args`` without ``--skew VALUE``: tests written for DynamoDB pass a short skew window
    to make reclaims quick, and the PostgreSQL store has none (it refuses the option: see
    test_postgres.py). A test whose point is the window is marked ``dynamodb_only``."""
    out: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            out += [word, *words]
            break
        if word == "--skew":
            next(words, None)
        elif not word.startswith("--skew="):
            out.append(word)
    return out


@pytest.fixture
def pg(postgres: PostgresServer, pg_table: str) -> PgCli:
    """The CLI pointed at the PostgreSQL server and this session's table."""
    return PgCli(postgres, pg_table)


@pytest.fixture
def raw_client(server: Server):
    return local_client(server.url)
