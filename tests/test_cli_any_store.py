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
from awsflock.lock.lease import LockTable
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
        "awsflock.stores.dynamodb.base.make_client",
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


def _line(store: MemoryStore, lock: str, *owners: str) -> None:
    """Waiters in line for ``lock``, as their joins would leave them (polled just now)."""
    import time

    from awsflock.records import Waiter

    now = round(time.time() * 1000)
    for number, owner in enumerate(owners):
        who = Identity(owner=owner, host=f"{owner}-host", pid=10 + number, ci_url="https://ci/7")
        assert store.join(lock, Waiter(f"{number:016x}", number, who, now - 5000, now)).applied


@pytest.fixture
def store_and_run(monkeypatch):
    store = MemoryStore()
    asked: list[dict[str, object]] = []
    real_acquire = LockTable.acquire

    def table(self: Common, owner: str | None = None) -> LockTable:
        return LockTable(store=store, identity=Identity(owner=owner or "me", host="h", pid=1))

    def acquire(self: LockTable, lock_id: str, **kwargs: object):  # type: ignore[no-untyped-def]
        asked.append(kwargs)
        return real_acquire(self, lock_id, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Common, "table", table)
    monkeypatch.setattr(LockTable, "acquire", acquire)
    runner = CliRunner()

    def invoke(*args: str, env: dict[str, str] | None = None):
        return runner.invoke(cli, list(args), catch_exceptions=False, env=env)

    return store, invoke, asked


def test_fair_acquire_of_a_free_lock_prints_only_the_lease_id(store_and_run):
    _, run, asked = store_and_run
    result = run("acquire", "deploy", "--fair")
    assert result.exit_code == 0 and result.stderr == ""
    assert len(result.stdout.splitlines()) == 1
    assert asked[-1]["fair"] is True
    run("acquire", "other", env={"AWSFLOCK_FAIR": "1"})
    assert asked[-1]["fair"] is True
    run("acquire", "third")
    assert asked[-1]["fair"] is False


def test_no_wait_on_a_free_lock_with_a_line_exits_3_saying_how_many_wait(store_and_run):
    store, run, _ = store_and_run
    lease_id = run("acquire", "deploy").stdout.strip()
    _line(store, "deploy", "ana", "ci-runner-2")
    assert run("release", "deploy", lease_id).exit_code == 0
    busy = run("acquire", "deploy", "--no-wait")
    assert busy.exit_code == 3 and busy.stdout == ""
    assert "lock 'deploy' is free, but 2 waiters are in line for it (--fair)" in busy.stderr
    assert len(busy.stderr.splitlines()) == 1
    ran = run("run", "deploy", "--no-wait", "--", sys.executable, "-c", "pass")
    assert ran.exit_code == 75 and "2 waiters are in line" in ran.stderr


def test_status_and_list_show_the_line_in_order(store_and_run):
    store, run, _ = store_and_run
    run("acquire", "deploy", "--owner", "ci-runner-7")
    _line(store, "deploy", "laptop-ana", "ci-runner-2")
    text = run("status", "deploy")
    assert text.exit_code == 0
    lines = text.stdout.splitlines()
    assert "in line:  2 waiting (--fair), served in this order" in lines
    first = lines.index("in line:  2 waiting (--fair), served in this order") + 1
    assert lines[first].startswith("  1. laptop-ana (laptop-ana-host, pid 10, https://ci/7)")
    assert "waiting since" in lines[first] and lines[first + 1].startswith("  2. ci-runner-2")
    data = json.loads(run("status", "deploy", "--json").stdout)
    assert [(p["place"], p["owner"], p["lapsed"]) for p in data["line"]] == [
        (1, "laptop-ana", False),
        (2, "ci-runner-2", False),
    ]
    assert data["line"][0]["ci_url"] == "https://ci/7" and data["line"][0]["waiting_for_s"] >= 5
    listed = run("list").stdout.splitlines()
    assert listed[0].split() == ["STATE", "EXPIRES", "HELD", "FOR", "OWNER", "WAITING", "LOCK_ID"]
    assert listed[1].split()[-2:] == ["2", "deploy"]
    assert [
        json.loads(x)["line"][1]["owner"] for x in run("list", "--json").stdout.splitlines()
    ] == ["ci-runner-2"]


def test_status_of_a_free_pool_shows_its_line(store_and_run):
    store, run, _ = store_and_run
    lease_id = run("acquire", "gpus", "--slots", "2").stdout.strip()
    _line(store, "gpus", "ana")
    run("release", "gpus", lease_id)
    result = run("status", "gpus", "--slots", "2")
    assert result.exit_code == 3
    assert "1 waiting (--fair)" in result.stdout and "1. ana" in result.stdout


@pytest.mark.parametrize(
    ("env_url", "args", "refused"),
    [
        ("dynamodb://t1?region=eu-west-1", ["--region", "us-east-1"], "--region us-east-1"),
        ("dynamodb://t1?endpoint_url=http://a:1", ["--endpoint-url", "http://b:2"], "--endpoint"),
        ("dynamodb://t1?profile=p1", ["--profile", "p2"], "--profile p2"),
        ("dynamodb://t1", ["--tablename", "t2"], "--tablename t2"),
        ("postgresql://h/db?table=x", ["--tablename", "y"], "--tablename y"),
        ("postgresql://h/db", ["--endpoint-url", "http://b:2"], "--endpoint-url"),
    ],
)
def test_a_store_url_from_the_environment_never_overrides_the_command_line(
    monkeypatch, env_url, args, refused
):
    """Third review: AWSFLOCK_STORE's region and endpoint silently won over --region and
    --endpoint-url given on the command line. A contradiction is refused with one line that
    names both places (exit 2, nothing done)."""
    monkeypatch.setattr(Common, "table", lambda *_a, **_k: pytest.fail("a table was made"))
    result = CliRunner(env={"AWSFLOCK_STORE": env_url}).invoke(
        cli, ["status", "x", *args], catch_exceptions=False
    )
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert refused in line and "AWSFLOCK_STORE" in line, line


def test_the_command_line_fills_in_what_the_store_url_leaves_out(monkeypatch):
    seen: list[Common] = []

    def table(self: Common, owner: str | None = None) -> LockTable:
        seen.append(self)
        return LockTable(store=MemoryStore())

    monkeypatch.setattr(Common, "table", table)
    env = {"AWSFLOCK_STORE": "dynamodb://t1", "AWS_REGION": "ap-south-1"}
    result = CliRunner(env=env).invoke(
        cli, ["status", "x", "--region", "us-east-1", "--endpoint-url", "http://b:2"]
    )
    assert result.exit_code == 3, result.output  # x: free
    assert (seen[0].tablename, seen[0].region, seen[0].endpoint_url) == (
        "t1",
        "us-east-1",
        "http://b:2",
    )
