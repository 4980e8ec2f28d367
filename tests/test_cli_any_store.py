"""Every command runs on any LockStore: the CLI goes through the library, never past it into a
store. Here each command runs in-process (click's runner) on a LockTable over the in-memory
store, with no AWS client at all."""

from __future__ import annotations

import json
import sys

import pytest
from click.testing import CliRunner

from awsflock.cli import cli
from awsflock.cli.options import Common
from awsflock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.memory import MemoryStore


@pytest.fixture
def run(monkeypatch):
    store = MemoryStore()

    def table(self: Common, owner: str | None = None) -> LockTable:
        return LockTable(store=store, identity=Identity(owner=owner or "me", host="h", pid=1))

    monkeypatch.setattr(Common, "table", table)
    # Building a DynamoDB client here would be a command reaching past the library.
    monkeypatch.setattr(
        "awsflock.stores.dynamodb.store.make_client",
        lambda **_: pytest.fail("a DynamoDB client was built"),
    )
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


def test_the_lock_commands_run_on_the_memory_store(run):
    lease_id = run("acquire", "deploy", "--owner", "ci").stdout.strip()
    busy = run("acquire", "deploy", "--no-wait")
    assert busy.exit_code == 3 and "ci" in busy.stderr
    assert run("renew", "deploy", lease_id, "--lease-duration", "10m").exit_code == 0
    status = run("status", "deploy", "--json")
    assert status.exit_code == 0 and json.loads(status.stdout)["owner"] == "ci"
    listed = run("list", "--json").stdout.splitlines()
    assert [json.loads(line)["lock_id"] for line in listed] == ["deploy"]
    assert run("release", "deploy", lease_id).exit_code == 0
    assert run("status", "deploy").exit_code == 3


def test_operator_commands_run_on_the_memory_store(run):
    lease_id = run("acquire", "stuck").stdout.strip()
    forced = run("force-release", "stuck", "--lease-id", lease_id, "--reason", "gone", "--json")
    assert forced.exit_code == 0, forced.stderr
    audit = [json.loads(line) for line in run("audit", "--json").stdout.splitlines()]
    assert [(e["lock_id"], e["reason"]) for e in audit] == [("stuck", "gone")]
    assert run("renew", "stuck", lease_id).exit_code == 3
    assert run("acquire", "gpu", "--slots", "2").exit_code == 0
    assert run("pool-resize", "gpu", "--slots", "3").exit_code == 0
    pool = json.loads(run("status", "gpu", "--json").stdout)
    assert (pool["slots"], pool["held_slots"]) == (3, 1)
    created = run("table-create")
    assert created.exit_code == 0 and "ready" in created.stderr


def test_run_holds_the_lock_on_the_memory_store(run):
    code = "import json,os; print(os.environ['AWSFLOCK_LOCK_ID'])"
    result = run("run", "job", "--", sys.executable, "-c", code)
    assert result.exit_code == 0, result.stderr
    assert run("status", "job").exit_code == 3  # released when the command ended


def test_options_a_store_does_not_have_are_refused_by_name(run):
    result = run("table-create", "--billing-mode", "provisioned")
    assert result.exit_code == 2
    assert "has no billing_mode, capacity to set" in result.stderr
