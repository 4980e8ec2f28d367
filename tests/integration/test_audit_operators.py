"""Two operators force-releasing the same lease, on every real server (the scenarios of
tests/test_audit_operators.py): the audit log names the operator whose force-release ended the
lease, and keeps its record."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any, Callable

import pytest

from awsflock import errors
from awsflock.lock.admin import force_release
from awsflock.lock.audit_log import audit_records
from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores import kinds
from awsflock.stores.dynamodb import DynamoDBStore
from tests.servers import Server, local_client
from tests.test_audit_operators import XIA, run_yan, shown
from tests.test_audit_without_transactions import killed_after_its_force


@pytest.fixture
def make(server: Server, shared_table: str) -> Iterator[Callable[..., LockTable]]:
    """LockTables on the current server's session table, one store each (one per operator,
    holder, process), closed at the end."""
    made: list[Any] = []

    def new(owner: str) -> LockTable:
        url = getattr(server, "store_url", None)
        if url is None:
            store: Any = DynamoDBStore(shared_table, local_client(server.url))
        else:
            named = kinds.parse(url)
            store = kinds.get(named.kind).open(named, kinds.Settings(shared_table, 5.0))
        made.append(store)
        return LockTable(store=store, identity=Identity(owner=owner, host=owner, pid=1))

    yield new
    for store in made:
        if hasattr(store, "close"):
            store.close()


def _name() -> str:
    return "audit-" + uuid.uuid4().hex[:8]


def test_the_audit_names_the_operator_whose_force_ended_a_lease_since_taken_again(make):
    lock = _name()
    lease_id, _told = run_yan(make, lock, hand_offs=1)
    assert shown(make, lock) == [(lease_id, *XIA)]


def test_a_force_release_keeps_its_record_when_another_operators_is_refused_much_later(make):
    lock = _name()
    lease_id, _told = run_yan(make, lock, hand_offs=6)
    assert shown(make, lock) == [(lease_id, *XIA)]


def test_the_audit_names_the_operator_whose_force_ended_a_lease_still_on_record(make):
    lock = _name()
    lease_id, _told = run_yan(make, lock, hand_offs=0)
    assert shown(make, lock) == [(lease_id, *XIA)]


def test_operators_racing_to_force_one_lease_leave_one_true_record(make):
    """Five operators force-release the same lease at once while a waiter takes the lock as
    soon as it is free, ten times: each lease has one audit record, naming the operator whose
    force-release succeeded, never another: the force's own step writes it. Every answer is
    true: a force told it succeeded is the one on record; one told it may have been applied
    (transaction conflicts or a slow server exhausted its retries) may be; one refused or
    failed plainly is not."""
    lock = _name()
    operators = [make(f"op{n}") for n in range(5)]
    won: dict[str, str] = {}
    doubted: dict[str, set[str]] = {}
    failed: list[str] = []
    lease = make("w").acquire(lock, lease=600, wait=0)
    for _ in range(10):
        start = threading.Barrier(len(operators) + 1)
        taken: list[Any] = []

        def force(n: int, lease_id: str = lease.lease_id, start: Any = start) -> None:
            start.wait(10)
            try:
                force_release(operators[n], lock, reason=f"r{n}", lease_id=lease_id, actor=f"o{n}")
            except errors.NotHeld:
                return
            except errors.StoreError as exc:
                failed.append(f"o{n} on {lease_id}: {exc.one_line()}")
                if exc.maybe_applied:
                    doubted.setdefault(lease_id, set()).add(f"o{n}")
                return
            won[lease_id] = f"o{n}"

        def wait(start: Any = start, taken: list[Any] = taken) -> None:
            start.wait(10)
            taken.append(make("w").acquire(lock, lease=600, wait=20))

        threads = [threading.Thread(target=force, args=(n,)) for n in range(len(operators))]
        threads.append(threading.Thread(target=wait))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert taken, failed
        lease = taken[0]
    records = {r["lease_id"]: r["actor"] for r in audit_records(make("op"), lock)}
    assert len(records) == 10, failed
    for lease_id, actor in records.items():
        told = {won[lease_id]} if lease_id in won else doubted.get(lease_id, set())
        assert actor in told, failed
    assert set(won) <= set(records)


def test_a_run_killed_right_after_its_force_leaves_its_record(make):
    """On dynalite (no transactions) the record was a second write after the force: a run
    killed between the two left none. The force's own write keeps it now, on every server."""
    lock = _name()
    lease = make("a").acquire(lock, lease=600, wait=0)
    ana = make("ana")
    killed_after_its_force(ana)
    with pytest.raises(SystemExit):
        force_release(ana, lock, reason="ana's", lease_id=lease.lease_id, actor="ana")
    for n in range(5):  # more hand-offs than a lock's item remembers
        make(f"w{n}").acquire(lock, lease=600, wait=0).release()
    assert shown(make, lock) == [(lease.lease_id, "ana", "ana's")]
