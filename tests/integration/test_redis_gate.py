"""The gate on the Redis wire: a step whose script the server lost (SCRIPT FLUSH, a restart)
is sent again whole (EVAL) only while its caller's budget lasts. Through the RESP proxy
(tests/redisproxy.py), which holds the NOSCRIPT answer back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from awsflock import errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores import kinds
from awsflock.stores.redis import RedisStore
from tests.redisproxy import RedisFaultProxy
from tests.servers import RedisServer

#: The caller's budget for the take, and how long its NOSCRIPT answer is held back: past the
#: budget, but short of the watchdog's deadline (budget plus 0.5 s of grace).
BUDGET = 2.0
HELD = 2.25


@pytest.fixture
def prefix(redis_server: RedisServer) -> Iterator[str]:
    name = "gate-" + uuid.uuid4().hex[:8]
    store = _store(redis_server.url, name)
    store.create()
    store.close()
    yield name


def _store(url: str, prefix: str) -> RedisStore:
    store = kinds.get("redis").open(kinds.parse(url), kinds.Settings(prefix, 10.0))
    assert isinstance(store, RedisStore)
    return store


def _take(store: RedisStore, name: str) -> bool:
    now = int(time.time() * 1000)
    attempt = Attempt(str(uuid.uuid4()), Identity(owner="t"), now, 60_000, 0)
    return store.take(name, attempt).applied


def test_a_step_whose_script_was_flushed_is_not_sent_again_after_its_budget(
    redis_server: RedisServer, prefix: str
):
    arrived: list[float] = []

    def plan(target: str, n: int) -> str:
        if target != "take":
            return "pass"
        if n == 2:  # the EVALSHA after the flush: the server answers NOSCRIPT, held back
            return f"delay:{HELD}"
        if n == 3:  # the step sent again whole (EVAL)
            arrived.append(time.monotonic())
        return "pass"

    with RedisFaultProxy(("127.0.0.1", redis_server.port), plan) as proxy:
        store = _store(proxy.url_for(redis_server.url), prefix)
        try:
            assert _take(store, "warm-" + uuid.uuid4().hex[:6])  # connected
            redis_server.client().script_flush()
            name = "flushed-" + uuid.uuid4().hex[:6]
            end = time.monotonic() + BUDGET
            with store.budget(end):
                try:
                    granted = _take(store, name)
                except errors.AwsflockError:
                    granted = False
        finally:
            store.close()
    late = [round(t - end, 2) for t in arrived if t >= end]
    # (Sent again late, it was granted: the lock taken by a request its caller's budget no
    # longer covered.)
    assert (late, granted) == ([], False), "the step was sent again after its budget ended"
