"""A table whose key is not awsflock's: every command says so, naming the key, exit 1 (125 for
`run`), against the real servers. The normal path costs nothing extra: the table's key is only
described after DynamoDB refused a request's key, or once at the start of a scan."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.faultproxy import FaultProxy
from tests.integration.conftest import Cli
from tests.servers import local_client

LEASE = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
COMMANDS = {
    "acquire": ["acquire", "l", "--no-wait"],
    "acquire-wait": ["acquire", "l", "--wait-time", "3"],
    "acquire-pool": ["acquire", "l", "--slots", "2", "--no-wait"],
    "renew": ["renew", "l", LEASE],
    "release": ["release", "l", LEASE],
    "status": ["status", "l"],
    "list": ["list"],
    "list-prefix": ["list", "--prefix", "l", "--json"],
    "audit": ["audit"],
    "force-release": ["force-release", "l", "--reason", "x", "--yes"],
    "force-release-lease": ["force-release", "l", "--reason", "x", "--lease-id", LEASE],
    "pool-resize": ["pool-resize", "l", "--slots", "3"],
    "table-create": ["table-create", "-q"],  # its progress lines are not errors
    "run": ["run", "l", "--no-wait", "--", "true"],
}


def _foreign_table(raw_client, with_item: bool) -> str:
    name = "foreign-" + uuid.uuid4().hex[:8]
    raw_client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    while raw_client.describe_table(TableName=name)["Table"]["TableStatus"] != "ACTIVE":
        time.sleep(0.1)  # dynalite creates tables asynchronously
    if with_item:
        raw_client.put_item(TableName=name, Item={"pk": {"S": "l"}, "data": {"S": "theirs"}})
    return name


@pytest.fixture(scope="module")
def foreign(server) -> dict[bool, str]:
    client = local_client(server.url)
    return {with_item: _foreign_table(client, with_item) for with_item in (False, True)}


@pytest.mark.parametrize("with_item", [False, True], ids=["empty", "with-an-item"])
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_names_a_foreign_tables_key(server, foreign, command, with_item):
    table = foreign[with_item]
    result = Cli(server.url, table)(*COMMANDS[command])
    assert result.returncode == (125 if command == "run" else 1), result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"awsflock: error: table {table!r} is not an awsflock table: its key is 'pk', a string "
        "(want lock_id, a string): name the lock table with --tablename (or AWSFLOCK_TABLE), or "
        "create one with `awsflock table-create --tablename NEW`"
    ]
    assert result.stdout == ""


@pytest.mark.parametrize("command", ["acquire", "status", "list"])
def test_without_describe_table_a_foreign_table_is_still_named_as_such(server, foreign, command):
    # IAM may deny DescribeTable: the refusal (or the items) still tell the table is foreign.
    with FaultProxy(("127.0.0.1", server.port)) as proxy:
        proxy.plan = lambda target, n: "denied" if target == "DescribeTable" else "pass"
        result = Cli(proxy.url, foreign[True])(*COMMANDS[command])
    assert result.returncode == 1, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not an awsflock table" in lines[0], result.stderr
    assert proxy.counts["DescribeTable"] >= 1


def test_the_normal_path_describes_nothing(server, awsflock: Cli, lock_name):
    with FaultProxy(("127.0.0.1", server.port)) as proxy:
        via = Cli(proxy.url, awsflock.table)
        lease = via("acquire", lock_name).stdout.strip()
        assert via("status", lock_name).returncode == 0
        assert via("renew", lock_name, lease).returncode == 0
        assert via("release", lock_name, lease).returncode == 0
        assert via("run", lock_name, "--", "true").returncode == 0
    assert proxy.counts["DescribeTable"] == 0, proxy.counts
