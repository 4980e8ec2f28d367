"""``awsflock.connect()``: the store a URL names, found as the CLI finds it (one copy of the
rules, ``awsflock.stores.resolve``), and ``memory://`` for the library's tests only."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

import awsflock
from awsflock import FakeClock, LockBusy, UsageError, connect
from awsflock.cli import cli
from tests.docs import recipe

#: What connect() reads from the environment (tests/conftest.py clears the AWS ones).
ENV = ("AWSFLOCK_STORE", "AWSFLOCK_TABLE", "AWSFLOCK_REQUEST_TIMEOUT")


@pytest.fixture(autouse=True)
def _no_store_env(monkeypatch):
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


def test_connect_is_a_public_name_that_imports_no_driver():
    code = (
        "import sys, awsflock\n"
        "drivers = lambda: [m for m in ('redis', 'psycopg', 'botocore') if m in sys.modules]\n"
        "awsflock.connect('redis://127.0.0.1:9/0?prefix=locks')\n"
        "awsflock.connect('memory://')\n"
        "print(drivers())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")
    assert "connect" in awsflock.__all__


def test_a_dynamodb_url_names_the_table_region_endpoint_and_profile():
    url = "dynamodb://locks?region=eu-west-1&endpoint_url=http://127.0.0.1:8000&profile=ops"
    table = connect(url, request_timeout="2s", skew="3s", owner="svc")
    store = table.store
    assert type(store).__name__ == "DynamoDBStore"
    assert (store.table_name, store.region, store.endpoint_url, store.profile) == (
        "locks",
        "eu-west-1",
        "http://127.0.0.1:8000",
        "ops",
    )
    assert (store.request_timeout, table.skew, table.identity.owner) == (2.0, 3.0, "svc")


def test_postgresql_and_redis_urls_name_their_table_and_need_no_skew_window():
    pg = connect("postgresql://app@db.internal:5432/ops?table=mine")
    assert (type(pg.store).__name__, pg.store.table_name, pg.skew) == ("PostgresStore", "mine", 0)
    redis = connect("redis://cache.internal:6379/0?prefix=locks", table="locks")
    assert (type(redis.store).__name__, redis.store.table_name) == ("RedisStore", "locks")
    assert redis.store.url.startswith("redis://cache.internal:6379/0") and redis.skew == 0
    # The table the URL does not name is the caller's, else AWSFLOCK_TABLE's, else "awsflock".
    assert connect("redis://h:6379/0", table="jobs").store.table_name == "jobs"
    assert connect("redis://h:6379/0").store.table_name == "awsflock"


def test_without_a_url_the_store_is_awsflock_store_else_dynamodb(monkeypatch):
    table = connect()
    assert type(table.store).__name__ == "DynamoDBStore"
    assert (table.store.table_name, table.store.region, table.skew) == ("awsflock", None, 5.0)
    monkeypatch.setenv("AWSFLOCK_STORE", "redis://h:6379/0?prefix=env")
    assert connect().store.table_name == "env"
    # A URL given wins over the variable; an empty one is the default store, as --store "".
    assert connect("postgresql://h/db").store.kind == "postgresql"
    assert connect("").store.kind == "dynamodb"


def test_the_environment_fills_in_what_neither_the_url_nor_the_caller_says(monkeypatch):
    monkeypatch.setenv("AWSFLOCK_TABLE", "from-env")
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("AWSFLOCK_ENDPOINT_URL", "http://127.0.0.1:2")  # first in the order
    monkeypatch.setenv("AWSFLOCK_REQUEST_TIMEOUT", "3s")
    store = connect().store
    assert (store.table_name, store.region, store.endpoint_url) == (
        "from-env",
        "ap-south-1",
        "http://127.0.0.1:2",
    )
    assert store.request_timeout == 3.0
    # The caller's arguments win over the environment...
    store = connect(
        table="mine", region="eu-west-1", endpoint_url="http://x:3", request_timeout=4
    ).store
    assert (store.table_name, store.region, store.endpoint_url) == (
        "mine",
        "eu-west-1",
        "http://x:3",
    )
    assert store.request_timeout == 4.0
    # ... and the URL over the environment, silently.
    store = connect("dynamodb://url-table?region=us-west-2&endpoint_url=http://u:4").store
    assert (store.table_name, store.region, store.endpoint_url) == (
        "url-table",
        "us-west-2",
        "http://u:4",
    )


@pytest.mark.parametrize(
    ("url", "arguments", "says"),
    [
        (
            "dynamodb://a?region=eu-west-1",
            {"table": "b"},
            "table='b' and the table of the URL (a) disagree: name the table in one place",
        ),
        (
            "dynamodb://a?region=eu-west-1",
            {"region": "us-east-1"},
            "region='us-east-1' and the region of the URL (eu-west-1) disagree: "
            "drop region=, or the region from the URL",
        ),
        (
            "redis://h:6379/0",
            {"region": "eu-west-1", "profile": "p"},
            "region=, profile= apply to DynamoDB, and the URL names a Redis server: "
            "drop region=, profile=",
        ),
        (
            "postgresql://h/db",
            {"skew": "2s"},
            "skew= does not apply to the PostgreSQL store: its leases are timed by the "
            "database server's clock alone, so no clock-skew window is needed: drop skew=",
        ),
        (
            "memory://",
            {"endpoint_url": "http://x"},
            "endpoint_url= applies to DynamoDB, and the URL names an in-memory store: "
            "drop endpoint_url=",
        ),
        (None, {"endpoint_url": "127.0.0.1:8000"}, "endpoint_url= needs a scheme: http://"),
        ("memory://t?colour=red", {}, "bad store URL 'memory://t?colour=red': unknown parameter"),
        ("memory://", {"request_timeout": "0s"}, "request timeout '0s' is out of range"),
        ("memory://", {"request_timeout": True}, "connect: request_timeout must be seconds"),
        (b"memory://", {}, "connect: url must be a string, not bytes"),
        ("memory://", {"table": 7}, "connect: table must be a string, not int"),
    ],
)
def test_arguments_that_contradict_the_url_or_do_not_apply_are_refused_in_one_line(
    url, arguments, says
):
    with pytest.raises(UsageError) as raised:
        connect(url, **arguments)
    assert raised.value.one_line().startswith(says)
    assert "\n" not in raised.value.one_line()


def test_refusals_name_the_variable_that_said_it(monkeypatch):
    monkeypatch.setenv("AWSFLOCK_STORE", "redis://h:6379/0")
    with pytest.raises(UsageError) as raised:
        connect(region="eu-west-1")
    assert raised.value.one_line() == (
        "region= applies to DynamoDB, and AWSFLOCK_STORE names a Redis server: "
        "drop region= or AWSFLOCK_STORE"
    )
    monkeypatch.delenv("AWSFLOCK_STORE")
    monkeypatch.setenv("DYNAMO_ENDPOINT_URL", "localhost:8000")
    with pytest.raises(UsageError, match=r"^DYNAMO_ENDPOINT_URL needs a scheme: http://localh"):
        connect()
    monkeypatch.setenv("AWSFLOCK_REQUEST_TIMEOUT", "forever")
    with pytest.raises(UsageError, match=r"^AWSFLOCK_REQUEST_TIMEOUT: 'forever' is not a dur"):
        connect("memory://")


def test_memory_store_takes_and_releases_locks_on_a_fake_clock():
    clock = FakeClock()
    table = connect("memory://", clock=clock, owner="test")
    assert type(table.store).__name__ == "MemoryStore" and table.clock is clock
    lease = table.acquire("reindex", lease="60s", wait=0)
    with pytest.raises(LockBusy):
        table.acquire("reindex", wait=0)
    table.release(lease)
    assert table.acquire("reindex", lease=60, wait=0).fencing_token > lease.fencing_token
    clock.advance(60 + table.skew + 1)  # the lease ended, and its skew window
    table.acquire("reindex", wait=0)


def test_a_named_memory_store_is_shared_within_the_process_and_a_bare_one_is_not():
    clock = FakeClock()
    app, test = connect("memory://shared", clock=clock), connect("memory://shared")
    assert app.store is test.store and test.clock is clock
    app.acquire("job", wait=0)
    with pytest.raises(LockBusy):
        test.acquire("job", wait=0)
    assert connect("memory://").store is not connect("memory://").store
    assert connect("memory://shared?table=other").store is not app.store
    with pytest.raises(UsageError, match="memory://shared is in use with another clock"):
        connect("memory://shared", clock=FakeClock())


@pytest.mark.parametrize("where", [["--store", "memory://"], ["--store", "memory://x?table=t"]])
def test_the_cli_refuses_the_memory_store_in_one_line(where):
    result = CliRunner().invoke(cli, ["status", "deploy", *where])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "memory:// is the in-memory store, for the library's tests only" in result.stderr
    assert "each awsflock command would get an empty one of its own" in result.stderr


def test_the_cli_refuses_the_memory_store_named_by_its_variable(monkeypatch):
    monkeypatch.setenv("AWSFLOCK_STORE", "memory://")
    result = CliRunner().invoke(cli, ["acquire", "deploy"])
    assert result.exit_code == 2 and result.stdout == ""
    assert "for the library's tests only" in result.stderr and result.stderr.count("\n") == 1


def test_a_dynamodb_url_takes_and_releases_locks(moto):
    table = connect("dynamodb://awsflock?region=us-east-1", owner="svc")
    with table.hold("deploy", lease=30) as held:
        assert table.state("deploy").lease_id == held.lease_id
    assert table.state("deploy").owner == "svc"


def test_the_services_guide_s_memory_example_runs(monkeypatch):
    monkeypatch.setenv("AWSFLOCK_STORE", "")  # the example sets it: put back after the test
    example = recipe("guides/python-services.md", "connect-memory")
    exec(compile(example, "python-services.md", "exec"), {})


def test_a_table_closes_its_connections_and_opens_new_ones_when_used_again(monkeypatch):
    # The asynchronous table had aclose() and async with; the synchronous one had no way to
    # close its connections short of the process's end.
    import psycopg

    from tests.test_postgres_store import FakeConnection

    executed: list[str] = []
    made: list[FakeConnection] = []

    def connect(*_a: object, **_k: object) -> FakeConnection:
        made.append(FakeConnection(executed))
        return made[-1]

    monkeypatch.setattr(psycopg, "connect", connect)
    with awsflock.connect("postgresql://u@h/db") as table:
        table.store.read("x")
        assert len(made) == 1 and not made[0].closed
    assert made[0].closed  # closed at the block's end
    table.store.read("x")  # used again: a new connection
    assert len(made) == 2 and not made[1].closed
    table.close()
    assert made[1].closed
