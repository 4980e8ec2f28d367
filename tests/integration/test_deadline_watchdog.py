"""The deadline watchdog (awsflock/stores/remote/deadline.py), which sleeps until the earliest
deadline it watches, against a Redis server, or PostgreSQL backends, that stop answering
(SIGSTOP): every try still ends within its budget plus the grace, with many threads, tries with
later deadlines that came and went, in a forked child, and after a try with a deadline far
away."""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores import kinds
from awsflock.stores.redis import RedisStore
from awsflock.stores.remote import deadline
from awsflock.stores.remote.connected import TRY_GRACE
from tests.servers import RedisServer

#: Slack beyond budget plus grace for a loaded machine (two cores, several agents).
SLACK = 0.6
#: The request timeout of these stores: long, so that neither the backstop socket timeout
#: (request timeout + 1) nor a retry ends a try before the watchdog must.
LONG = 30.0


@pytest.fixture
def stopped_redis() -> Iterator[RedisServer]:
    """A redis-server of its own, which the test may stop (SIGSTOP); continued at the end."""
    srv = RedisServer().start()
    try:
        yield srv
    finally:
        assert srv.proc is not None
        os.kill(srv.proc.pid, signal.SIGCONT)
        srv.stop()


def _store(srv: RedisServer, request_timeout: float = LONG) -> RedisStore:
    named = kinds.parse(srv.url)
    store = kinds.get("redis").open(named, kinds.Settings("wd", request_timeout))
    assert isinstance(store, RedisStore)
    return store


def _take(store: Any, name: str) -> Any:
    now = int(time.time() * 1000)
    return store.take(name, Attempt(str(uuid.uuid4()), Identity(owner="t"), now, 60_000, 0))


def _overshoot(store: Any, name: str, budget: float) -> float:
    """How long past ``budget`` a take on a stopped server took to give up."""
    start = time.monotonic()
    with pytest.raises(errors.AwsflockError), store.budget(start + budget):
        _take(store, name)
    return time.monotonic() - start - budget


def test_every_thread_on_a_stopped_server_gives_up_within_its_budget(stopped_redis):
    stores = [_store(stopped_redis) for _ in range(12)]
    stores[0].create()
    for store in stores:
        _take(store, "warm-" + uuid.uuid4().hex[:6])  # connected, checked
    # A try with a later deadline comes and goes before the stop.
    with stores[0].budget(time.monotonic() + 20):
        _take(stores[0], "later-" + uuid.uuid4().hex[:6])
    assert stopped_redis.proc is not None
    os.kill(stopped_redis.proc.pid, signal.SIGSTOP)
    overs: dict[int, float] = {}

    def one(n: int) -> None:
        overs[n] = _overshoot(stores[n], f"stopped-{n}", 0.4 + 0.15 * n)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=LONG)
    assert len(overs) == len(stores)
    print(f"past budget, s: max {max(overs.values()):.3f}, each {sorted(overs.values())}")
    assert max(overs.values()) < TRY_GRACE + SLACK, overs


def test_a_forked_child_on_a_stopped_server_gives_up_within_its_budget(stopped_redis):
    store = _store(stopped_redis)
    store.create()
    _take(store, "warm")  # the parent's watchdog runs; the child has its own
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own connection, its own watchdog
        code = 1
        try:
            _take(store, "child-warm")
            os.write(write, b"ready\n")
            time.sleep(1.0)  # stopped meanwhile
            over = _overshoot(store, "child", 0.5)
            os.write(write, f"{over}\n".encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as lines:
        assert lines.readline().strip() == "ready"
        assert stopped_redis.proc is not None
        os.kill(stopped_redis.proc.pid, signal.SIGSTOP)
        over = float(lines.readline() or "inf")
    os.waitpid(pid, 0)
    print(f"the child's take past its budget: {over:.3f} s")
    assert over < TRY_GRACE + SLACK


def test_a_try_after_one_with_a_deadline_far_away_is_still_interrupted():
    """A library caller's ``request_timeout`` of 1e10 s ("never") puts a deadline beyond what
    a thread may wait for (``threading.TIMEOUT_MAX``): the watchdog must not die of it."""
    with deadline.watched(time.monotonic() + 1e10, lambda: None):
        near = threading.Event()
        with deadline.watched(time.monotonic() + 0.2, near.set):
            assert near.wait(5.0)
        time.sleep(0.2)  # the watchdog then sleeps until the far deadline
    fired = threading.Event()
    with deadline.watched(time.monotonic() + 0.3, fired.set):
        assert fired.wait(5.0), "the watchdog never interrupted the try"


def test_every_thread_whose_postgresql_backend_stopped_gives_up_within_its_budget(postgres):
    """The same on PostgreSQL: each store's own backend process stopped (SIGSTOP)."""
    from awsflock.stores.postgresql import PostgresStore

    table = "wd_" + uuid.uuid4().hex[:8]
    stores = [PostgresStore(postgres.url, table, request_timeout=LONG) for _ in range(8)]
    stores[0].create()
    for store in stores:
        _take(store, "warm-" + uuid.uuid4().hex[:6])
    backends = [store._connection_now().info.backend_pid for store in stores]
    overs: dict[int, float] = {}

    def one(n: int) -> None:
        overs[n] = _overshoot(stores[n], f"stopped-{n}", 0.4 + 0.2 * n)

    for pid in backends:
        os.kill(pid, signal.SIGSTOP)
    try:
        threads = [threading.Thread(target=one, args=(n,)) for n in range(len(stores))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=LONG)
    finally:
        for pid in backends:
            os.kill(pid, signal.SIGCONT)
    for store in stores:
        store.close()
    assert len(overs) == len(stores)
    print(f"past budget, s: max {max(overs.values()):.3f}, each {sorted(overs.values())}")
    assert max(overs.values()) < TRY_GRACE + SLACK
