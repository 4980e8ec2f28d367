"""PostgreSQL store URLs: a typo is a usage error when the URL is read, before any connection,
and the message never repeats a password."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from awsflock import errors
from awsflock.cli import cli
from awsflock.stores import kinds
from awsflock.stores.postgresql.urls import split_url

FORM = "use postgresql://USER@HOST:5432/DB?table=NAME"


@pytest.mark.parametrize(
    ("url", "says"),
    [
        (
            "postgres:/ops:s3cret@db.example/locks",
            "it must start with postgresql:// or postgres:// (it starts with 'postgres:/')",
        ),
        ("postgresql://ops:s3cret@db.example:notaport/locks", "port 'notaport' is not a number"),
        ("postgresql://ops:s3cret@a:5432,b:99x/locks", "port '99x' is not a number"),
        ("postgresql://ops:s3cret@db.example:99999/locks", "port '99999' is not a number"),
        ("postgresql://ops:s3cret@db.example/locks?port=abc", "port 'abc' is not a number"),
        ("postgresql://ops:s3cret@[::1]x/locks", "unexpected 'x' after the IPv6 address"),
        ("postgresql://ops:s3cret@db.example/locks?sslmod=require", 'parameter: "sslmod"'),
    ],
)
def test_a_malformed_url_is_a_usage_error_before_connecting(monkeypatch, url, says):
    import psycopg

    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: pytest.fail("it connected"))
    with pytest.raises(errors.UsageError) as caught:
        kinds.parse(url)
    assert says in caught.value.message and caught.value.hint == FORM
    result = CliRunner().invoke(cli, ["acquire", "x", "--store", url])
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.startswith("awsflock: usage error: bad PostgreSQL URL: ")
    assert result.stderr.count("\n") == 1 and "s3cret" not in result.stderr


def test_run_says_a_malformed_url_as_its_own_failure():
    result = CliRunner().invoke(cli, ["run", "x", "--store", "postgres:/h/db", "--", "true"])
    assert result.exit_code == 125 and "bad PostgreSQL URL" in result.stderr


@pytest.mark.parametrize(
    ("url", "libpq", "table"),
    [
        ("postgresql://u:p@h:5432/db?table=mine&sslmode=require", None, "mine"),
        ("postgres://h/db", "postgres://h/db", None),
        # A Unix socket: the empty host stays (postgresql:/db would not be a URL to libpq).
        (
            "postgresql:///db?host=/run/postgresql&table=t",
            "postgresql:///db?host=%2Frun%2Fpostgresql",
            "t",
        ),
        ("postgresql://[::1]:5433,other:5434/db", "postgresql://[::1]:5433,other:5434/db", None),
    ],
)
def test_well_formed_urls_are_split_into_libpq_s_url_and_the_table(url, libpq, table):
    expected = libpq or "postgresql://u:p@h:5432/db?sslmode=require"
    assert split_url(url) == (expected, table)
