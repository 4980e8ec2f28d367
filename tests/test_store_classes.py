"""The store classes as a library user calls them: ``RedisStore`` and ``PostgresStore`` take the
URLs ``--store`` takes, every parameter honoured, and say what is wrong with a URL or an
argument as awsflock's one-line UsageError (never a TypeError at the first request). No server
is needed: a store connects on its first request (tests/integration has the real servers)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from click.testing import CliRunner

import awsflock
from awsflock import PostgresStore, RedisStore, UsageError
from awsflock.stores.redis import deployment


def test_the_store_classes_are_exported_without_importing_a_driver():
    code = (
        "import sys, awsflock\n"
        "drivers = lambda: [m for m in ('redis', 'psycopg', 'botocore') if m in sys.modules]\n"
        "assert awsflock.RedisStore.__name__ == 'RedisStore'\n"
        "assert awsflock.PostgresStore.__name__ == 'PostgresStore'\n"
        "print(drivers())\n"
        "awsflock.RedisStore('redis://127.0.0.1:9/0?prefix=locks')\n"
        "print(drivers())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    # Nor does making a store: it connects, and imports redis-py, on its first request.
    assert done.stdout.split("\n") == ["[]", "[]", ""]
    assert {"PostgresStore", "RedisStore"} <= set(awsflock.__all__)


def test_the_version_is_the_installed_packages_and_what_the_cli_says():
    assert awsflock.__version__ == importlib.metadata.version("awsflock")
    from awsflock.cli.app import cli

    said = CliRunner().invoke(cli, ["--version"])
    assert said.exit_code == 0
    assert said.output.splitlines()[0] == f"awsflock, version {awsflock.__version__}"


def test_importing_awsflock_reads_no_package_metadata():
    code = "import sys, awsflock\nprint('importlib.metadata' in sys.modules)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


def test_a_redis_store_takes_the_clis_url_with_every_parameter():
    store = RedisStore(
        "rediss://h:6380/2?prefix=locks&replicas=1&durability=fsync-always&max_lease=1h"
        "&ssl_cert_reqs=none"
    )
    assert (store.prefix, store.table_name) == ("locks", "locks")
    assert (store.replicas, store.declared, store.max_lease_s) == (1, "fsync-always", 3600.0)
    # redis-py is given the URL without awsflock's own parameters (else: a TypeError).
    assert store.url == "rediss://h:6380/2?ssl_cert_reqs=none"


def test_a_redis_store_takes_its_settings_as_keywords_too():
    store = RedisStore("redis://h/0", "locks", replicas=2, declared="fsync-always", max_lease_s=60)
    assert (store.prefix, store.replicas, store.declared, store.max_lease_s) == (
        "locks",
        2,
        "fsync-always",
        60.0,
    )
    plain = RedisStore("redis://h/0")
    assert (plain.prefix, plain.replicas, plain.declared) == ("awsflock", 0, "")
    assert plain.max_lease_s == deployment.DEFAULT_MAX_LEASE_S
    # The same setting in both places is fine.
    assert RedisStore("redis://h/0?prefix=locks", "locks").prefix == "locks"


def test_a_redis_stores_password_comes_from_the_url_the_keyword_or_the_environment(
    monkeypatch,
):
    monkeypatch.delenv("AWSFLOCK_REDIS_PASSWORD", raising=False)
    assert RedisStore("redis://:s%40cret@h/0").password == "s@cret"
    assert RedisStore("redis://h/0", password="given").password == "given"
    monkeypatch.setenv("AWSFLOCK_REDIS_PASSWORD", "from-env")
    assert RedisStore("redis://h/0").password == "from-env"
    with pytest.raises(UsageError, match="different passwords"):
        RedisStore("redis://:one@h/0", password="two")


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (
            lambda: RedisStore("postgresql://h/db"),
            "RedisStore takes a Redis server's URL, not "
            "postgresql://, which names a PostgreSQL database",
        ),
        (lambda: RedisStore("h:6379"), "RedisStore takes a Redis server's URL, not h://"),
        (lambda: RedisStore("locks"), "not a URL without a scheme"),
        (lambda: RedisStore(None), "RedisStore takes a store URL string, not NoneType"),
        (lambda: RedisStore(b"redis://h"), "takes a store URL string, not bytes"),
        (lambda: RedisStore("redis://h/0?colour=red"), "unknown parameter 'colour'"),
        (lambda: RedisStore("redis://h/0?replicas=many"), "replicas=many in the Redis URL"),
        (lambda: RedisStore("redis://h/0?durability=yes"), "unknown durability=yes"),
        (lambda: RedisStore("redis://h/0?max_lease=soon"), "max_lease=soon in the Redis URL"),
        (lambda: RedisStore("redis://h/0?prefix=a", "b"), "prefix=a in the URL and 'b' beside"),
        (lambda: RedisStore("redis://h/0?replicas=1", replicas=2), "replicas=1 in the URL"),
        (lambda: RedisStore("redis://h/0", prefix="a b"), "cannot be a Redis key prefix"),
        (lambda: RedisStore("redis://h/0", replicas="1"), "replicas must be a whole number"),
        (lambda: RedisStore("redis://h/0", replicas=True), "not bool"),
        (lambda: RedisStore("redis://h/0", replicas=-1), "replicas=-1 is below 0"),
        (lambda: RedisStore("redis://h/0", declared="yes"), "unknown declared='yes'"),
        (lambda: RedisStore("redis://h/0", max_lease_s="1h"), "max_lease_s must be a number"),
        (lambda: RedisStore("redis://h/0", request_timeout="5s"), "request_timeout must be a"),
        (lambda: RedisStore("redis://h/0", request_timeout=0), "more than 0 seconds"),
        (lambda: PostgresStore("redis://h/0"), "not redis://, which names a Redis server"),
        (lambda: PostgresStore(5432), "PostgresStore takes a store URL string, not int"),
        (lambda: PostgresStore("postgresql://h/db?table=a", "b"), "table=a in the URL and"),
        (lambda: PostgresStore("postgresql://h/db", 7), "table_name must be a string"),
        (lambda: PostgresStore("postgresql://h/db", request_timeout=None), "request_timeout"),
    ],
)
def test_a_wrong_url_or_argument_is_a_one_line_usage_error(make, says):
    with pytest.raises(UsageError) as refused:
        make()
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_postgres_store_takes_the_clis_url_and_its_table():
    store = PostgresStore("postgresql://u@h:5432/db?table=locks&connect_timeout=3")
    assert store.table_name == "locks"
    assert store.conninfo == "postgresql://u@h:5432/db?connect_timeout=3"
    assert PostgresStore("postgresql://u@h/db?table=locks", "locks").table_name == "locks"
    assert PostgresStore("postgres://u@h/db", "mine").table_name == "mine"
