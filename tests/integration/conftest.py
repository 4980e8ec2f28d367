"""Fixtures that run the real ``awsflock`` executable against real servers over HTTP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Callable

import pytest

from awsflock.stores import kinds
from tests.faultproxy import FaultProxy
from tests.servers import (
    KIND_SERVERS,
    NO_AWS_FILES,
    SERVERS,
    PostgresServer,
    RedisServer,
    Server,
    local_client,
)

BIN = Path(sys.executable).parent / "awsflock"


#: A capability a test may need beyond the lock steps every store has, and whether a store
#: kind has it. A test says what it needs with ``@pytest.mark.needs(NAME, reason)`` (on the
#: test, or as a module's ``pytestmark``), or by asking for a fixture of ``FIXTURE_NEEDS``; it
#: then runs on the servers of the kinds that have it, and on every server otherwise.
CAPABILITIES: dict[str, Callable[[kinds.Kind], bool]] = {
    # Leases timed by the callers' clocks, reclaimed a skew window after their end.
    "skew_window": lambda kind: not kind.skew_free,
    # An endpoint URL (--endpoint-url) that names where the store is.
    "endpoint": lambda kind: "endpoint_url" in kind.location,
    # The server speaks DynamoDB's API: its HTTP fault proxy, a raw client, awsflock 0.2.0.
    "dynamodb_api": lambda kind: kind.api == "dynamodb",
    # Shared holders (awsflock.shares).
    "shares": lambda kind: kind.shares,
}
#: Fixtures that need a capability: a test that asks for one runs where it is.
FIXTURE_NEEDS = {
    name: "dynamodb_api"
    for name in ("server", "raw_client", "proxy", "moto_server", "big_table", "old_bin", "foreign")
}
#: The server a test marked ``one_server_per_kind`` runs on, for each store kind: the first of
#: the kind's servers (moto's server for DynamoDB). Such a test checks what the command does
#: around the store (its processes, output, deadlines), not how a server of the kind behaves:
#: the conformance, compatibility, chaos and simulation tests run those on every server.
FIRST_OF_KIND = {kind: next(iter(servers)) for kind, servers in KIND_SERVERS.items()}
#: The one server a test marked ``one_server`` runs on: the first server of the first kind
#: (moto's). Such a test checks what happens outside the store altogether (a shell, a wrapper,
#: a signal while a process starts), which no store kind changes.
FIRST_SERVER = next(iter(FIRST_OF_KIND.values()))
#: Servers of the ``server`` fixture that a session fixture runs for other tests too.
SESSION_SERVERS = {"postgresql": "postgres", "redis": "redis_server"}
#: Each server of the ``server`` fixture: its store kind.
KIND_OF = {name: kind for kind, servers in KIND_SERVERS.items() for name in servers}


def needs(item: pytest.Item) -> set[str]:
    """The capabilities ``item`` needs."""
    found = {str(mark.args[0]) for mark in item.iter_markers("needs")}
    fixtures = set(item._fixtureinfo.argnames)  # type: ignore[attr-defined]
    found |= {FIXTURE_NEEDS[name] for name in fixtures & set(FIXTURE_NEEDS)}
    unknown = found - set(CAPABILITIES)
    assert not unknown, f"{item.nodeid}: unknown capability {unknown}"
    return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Integration tests run on every server of every store kind, except where they need a
    capability its kind does not have (``needs``), those marked ``one_server_per_kind`` on the
    first server of each kind (``FIRST_OF_KIND``), and those marked ``one_server`` on the first
    of all (``FIRST_SERVER``)."""
    keep, off = [], []
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
        spec = getattr(item, "callspec", None)
        name = spec.params.get("server") if spec is not None else None
        kind = kinds.get(KIND_OF[name]) if name in KIND_OF else None
        if (
            (kind is not None and not all(CAPABILITIES[c](kind) for c in needs(item)))
            or (
                kind is not None
                and item.get_closest_marker("one_server_per_kind") is not None
                and FIRST_OF_KIND[kind.name] != name
            )
            or (name is not None and item.get_closest_marker("one_server") and name != FIRST_SERVER)
        ):
            off.append(item)
        else:
            keep.append(item)
    if off:
        config.hook.pytest_deselected(items=off)
        items[:] = keep


@pytest.fixture(scope="session", params=list(KIND_OF))
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """Each integration test runs once on each server of each store kind (``KIND_SERVERS``):
    moto, dynalite and DynamoDB Local; PostgreSQL. A server that a session fixture of its own
    runs already (``SESSION_SERVERS``) is that one, not a second."""
    if request.param in SESSION_SERVERS:
        yield request.getfixturevalue(SESSION_SERVERS[request.param])
        return
    srv = KIND_SERVERS[KIND_OF[request.param]][request.param]().start()
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


def gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` ends within ``timeout``: no such process, or a zombie (dead,
    waiting for whoever adopted it to reap it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z"):
                return True
        except (FileNotFoundError, IndexError):
            return True  # reaped meanwhile
        time.sleep(0.05)
    return False


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
        #: The server's name (``Server.name``) where ``cli_for`` made it, else "".
        self.server_name = ""

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
        proc = subprocess.Popen(
            [str(BIN), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env(**env),
            stdin=subprocess.DEVNULL,
        )
        _STARTED.append(proc)
        return proc


#: Every awsflock a test started in the background: ``_no_process_left`` ends them.
_STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _no_process_left() -> Iterator[None]:
    """A test that failed half-way leaves no awsflock running into the next tests (where its
    unclosed pipes would fail an unrelated test)."""
    yield
    while _STARTED:
        proc = _STARTED.pop()
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process it left holds its pipes
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()


def cli_for(server: Server, table: str) -> Cli:
    """The CLI pointed at ``server``'s store and ``table``: by its store URL, or, for a
    DynamoDB-compatible endpoint, by ``--endpoint-url``."""
    if server.store_url is not None:
        return UrlCli(server, table)
    cli = Cli(server.url, table)
    cli.server_name = server.name
    return cli


@pytest.fixture(scope="session")
def shared_table(server: Server) -> str:
    name = "it-" + uuid.uuid4().hex[:8]
    result = cli_for(server, name)("table-create", "-q")
    assert result.returncode == 0, result.stderr
    return name


@pytest.fixture
def awsflock(server: Server, shared_table: str) -> Cli:
    """The CLI pointed at the current server and a table made for this session."""
    return cli_for(server, shared_table)


@pytest.fixture
def lock_name() -> str:
    return "lock-" + uuid.uuid4().hex[:10]


@pytest.fixture
def used_lock_name(awsflock: Cli, lock_name: str) -> str:
    """A lock granted and released once (straight to the server), so that a take of it is one
    request: a name's first grant ever is two on DynamoDB (its first try's refusal shows that
    nothing came before: ``awsflock/stores/dynamodb/fates.py``). For tests whose faults are
    planned by the request's number."""
    lease = awsflock("acquire", lock_name, "--lease-duration", "1m")
    assert lease.returncode == 0, lease.stderr
    assert awsflock("release", lock_name, lease.stdout.strip()).returncode == 0
    return lock_name


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
def redis_server() -> Iterator[RedisServer]:
    """A redis-server of this session (fsync on every write), its layout made under the
    prefix ``awsflock``: for the Redis store's own tests."""
    srv = RedisServer().start()
    try:
        assert UrlCli(srv, "awsflock")("table-create", "-q").returncode == 0
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


class UrlCli(Cli):
    """Runs ``awsflock`` against a table of a store named by URL (``AWSFLOCK_STORE``), of any
    kind; ``--skew`` is dropped where the kind has no skew window."""

    def __init__(self, server: Server, table: str, url: str | None = None) -> None:
        super().__init__("", table)
        self.server = server
        self.server_name = server.name
        self.url = url or server.store_url or server.url
        self.skew_free = kinds.get(kinds.parse(self.url).kind).skew_free

    def env(self, **extra: str) -> dict[str, str]:
        env = cli_env("", self.table, AWSFLOCK_STORE=self.url)
        del env["AWSFLOCK_ENDPOINT_URL"]
        env.update(extra)
        return env

    def for_table(self, table: str) -> UrlCli:
        return type(self)(self.server, table, self.url)

    def __call__(
        self, *args: str, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        return super().__call__(*self._args(args), timeout=timeout, **env)

    def popen(self, *args: str, **env: str) -> subprocess.Popen[str]:
        return super().popen(*self._args(args), **env)

    def _args(self, args: tuple[str, ...]) -> list[str]:
        return _no_skew(args) if self.skew_free else list(args)


#: The PostgreSQL tests' name for it.
PgCli = UrlCli


def _no_skew(args: tuple[str, ...]) -> list[str]:
    """``args`` without ``--skew VALUE``: tests written for DynamoDB pass a short skew window
    to make reclaims quick, and a store timed by its own clock has none (PostgreSQL refuses the
    option: see test_postgres.py). A test whose point is the window needs ``skew_window``."""
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
