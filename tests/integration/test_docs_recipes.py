"""The SQL fencing recipe of docs/how-it-works/fencing.md, run as the page shows it against
PostgreSQL 15, with tokens from real grants of the PostgreSQL store."""

from __future__ import annotations

import json

import pytest

from tests.docs import recipe

pytestmark = pytest.mark.integration


def test_the_sql_fencing_recipe_accepts_the_holder_and_refuses_a_stale_one(postgres, pg):
    import psycopg

    first = json.loads(pg("acquire", "recipe", "--json", "--lease-duration", "1s").stdout)
    sql = recipe("how-it-works/fencing.md", "fenced-sql")
    with psycopg.connect(postgres.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE deployments (name text PRIMARY KEY, state text, fence bigint)")
        try:
            conn.execute("INSERT INTO deployments VALUES ('deploy-prod', 'new', 0)")

            def write(state, token):
                params = {"state": state, "token": token, "name": "deploy-prod"}
                return conn.execute(sql, params).rowcount

            assert write("applied", first["fencing_token"]) == 1
            # The lock passes to a new holder (the first lease ran out), which writes.
            second = json.loads(pg("acquire", "recipe", "--json", "--wait-time", "10").stdout)
            assert second["fencing_token"] > first["fencing_token"]
            assert write("migrated", second["fencing_token"]) == 1
            # The first holder wakes up and tries its write: refused, nothing changed.
            assert write("rolled-back", first["fencing_token"]) == 0
            row = conn.execute("SELECT state, fence FROM deployments").fetchone()
            assert row == ("migrated", second["fencing_token"])
            # The holder writing again with its own token is accepted.
            assert write("verified", second["fencing_token"]) == 1
        finally:
            conn.execute("DROP TABLE deployments")
