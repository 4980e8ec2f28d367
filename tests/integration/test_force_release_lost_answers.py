"""A force-release whose write landed but whose answer was lost, by the CLI through the fault
proxy, on every DynamoDB-compatible server: its answer is true, and the audit log keeps its
record, also on dynalite (no transactions), where the lock's item keeps it until it is moved
to its own item."""

from __future__ import annotations

import json
from typing import Any

from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.dynamodb import DynamoDBStore
from tests.faultproxy import FaultProxy
from tests.integration.conftest import Cli
from tests.servers import Server, local_client


def _holder(server: Server, table: str) -> LockTable:
    store = DynamoDBStore(table, local_client(server.url))
    return LockTable(store=store, identity=Identity(owner="h", host="h", pid=1))


def _force(proxy: FaultProxy, table: str, lock: str, lease_id: str) -> Any:
    """The CLI's force-release through the proxy, whose first write's answer is lost."""
    proxy.plan = lambda target, n: "drop" if target == "UpdateItem" and n == 1 else "pass"
    return Cli(proxy.url, table)(
        "force-release",
        lock,
        "--lease-id",
        lease_id,
        "--reason",
        "stuck",
        "--actor",
        "xia",
        "--json",
    )


def _audited(awsflock: Cli, lock: str) -> list[tuple[str, str, str]]:
    shown = awsflock("audit", lock, "--json")
    assert shown.returncode == 0, shown.stderr
    records = [json.loads(line) for line in shown.stdout.splitlines()]
    return [(r["lease_id"], r["actor"], r["reason"]) for r in records]


def test_a_force_release_whose_answer_was_lost_succeeds_and_is_audited(
    server, shared_table, awsflock: Cli, proxy, lock_name
):
    lease = _holder(server, shared_table).acquire(lock_name, lease=600, wait=0)
    forced = _force(proxy, shared_table, lock_name, lease.lease_id)
    assert proxy.faults["drop"] == 1
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["actor"] == "xia"
    assert _audited(awsflock, lock_name) == [(lease.lease_id, "xia", "stuck")]


def test_a_force_release_retried_after_hand_offs_succeeds_and_is_audited(
    server, shared_table, awsflock: Cli, proxy, lock_name
):
    """Five hand-offs of the lock between the force's lost answer and its retry: the store
    still knows the force applied (done items, in transactions; on dynalite, the lock's item,
    which keeps the force's audit record until it is moved to its own item, whatever its short
    history of three leases forgot). Before, dynalite's run could not tell, and exited 3."""
    holder = _holder(server, shared_table)
    lease = holder.acquire(lock_name, lease=600, wait=0)

    def hand_offs(_target: str, _action: str) -> None:
        for _ in range(5):
            holder.release(holder.acquire(lock_name, lease=600, wait=20))

    proxy.on_fault = hand_offs
    forced = _force(proxy, shared_table, lock_name, lease.lease_id)
    assert proxy.faults["drop"] == 1
    assert forced.returncode == 0, forced.stderr
    assert json.loads(forced.stdout)["actor"] == "xia"
    assert _audited(awsflock, lock_name) == [(lease.lease_id, "xia", "stuck")]
