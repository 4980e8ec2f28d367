"""The DynamoDB store after fork, used by the parent (with threads) and the child at once: a
child forked while a thread of the parent was starting or ending a try still makes its own
tries within their budget, and both sides keep their own answers."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock.lock.lease import LockTable
from awsflock.records import Identity
from awsflock.stores.dynamodb import DynamoDBStore
from tests.servers import Server, local_client

pytestmark = pytest.mark.needs("dynamodb_api", "the DynamoDB store's own connections")

#: How long a child is given for its read (its request timeout is 2 s).
CHILD_LIMIT = 15.0


@pytest.fixture
def store(server: Server, shared_table: str) -> Iterator[DynamoDBStore]:
    made = DynamoDBStore(shared_table, local_client(server.url), request_timeout=2.0)
    yield made
    made._workers.close()


def _child_code(pid: int) -> int | None:
    """The child's exit code, waited for up to CHILD_LIMIT (None: still running, killed)."""
    end = time.monotonic() + CHILD_LIMIT
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def _fork_reading(store: DynamoDBStore, name: str) -> int:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            store.read(name)
            code = 0
        finally:
            os._exit(code)
    return pid


def _pool_manager_lock(store: DynamoDBStore) -> Any:
    """The lock botocore's pool manager takes on every request (urllib3's)."""
    return store.client._endpoint.http_session._manager.pools.lock


@pytest.mark.parametrize(
    "lock_of",
    [
        pytest.param(lambda store: store._workers._lock, id="handing-a-try-to-a-thread"),
        pytest.param(_pool_manager_lock, id="picking-a-connection-pool"),
    ],
)
def test_a_child_forked_while_a_parent_thread_was_mid_request_reads_in_time(store, lock_of):
    """A thread of the parent holds a lock of the store's request path as the process forks
    (for a few microseconds on every request; a fork can come at any of them): the child's
    read still ends, within its budget."""
    store.read("warm")  # a request thread and a connection made, kept idle
    holding, let_go = threading.Event(), threading.Event()

    def parent_thread_between_tries() -> None:
        with lock_of(store):
            holding.set()
            let_go.wait(CHILD_LIMIT)

    thread = threading.Thread(target=parent_thread_between_tries)
    thread.start()
    assert holding.wait(5)
    try:
        pid = _fork_reading(store, "forked")
    finally:
        let_go.set()
        thread.join()
    assert _child_code(pid) == 0, "the child's read never ended (or failed)"


def test_parent_threads_and_children_using_one_store_keep_their_own_answers(
    server: Server, shared_table: str, store
):
    """Parent threads hold and renew their own locks while children fork and take theirs: no
    side reads an answer meant for the other (a wrong answer shows as a lease lost or a lock
    named busy by its own holder)."""
    table = LockTable(store=store, identity=Identity(owner="parent", host="p", pid=1))
    failures: list[str] = []
    stop = threading.Event()

    def parent(n: int) -> None:
        lease = table.acquire(f"fork-parent-{n}-{uuid.uuid4().hex[:6]}", lease=60, wait=0)
        while not stop.is_set():
            try:
                lease.renew()
            except Exception as exc:
                failures.append(f"parent {n}: {exc!r}")
                return
        lease.release()

    threads = [threading.Thread(target=parent, args=(n,)) for n in range(3)]
    for thread in threads:
        thread.start()
    codes = []
    try:
        for n in range(12):
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    held = table.acquire(f"fork-child-{n}-{uuid.uuid4().hex[:6]}", lease=60, wait=0)
                    held.renew()
                    held.release()
                    code = 0
                finally:
                    os._exit(code)
            codes.append(_child_code(pid))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert failures == []
    assert codes == [0] * 12
