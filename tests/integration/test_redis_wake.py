"""Hand-off on a real redis-server: a waiter is woken by the step script's message on the lock's
channel, so it takes the lock within moments of a release or force-release, plain or fair,
where polling alone would take up to a second. The scheduled poll is stretched to 30 s here,
so a grant within the bound can only come from a wake; a killed subscription falls back to the
usual poll. And which steps publish: those that may let a waiter in, only."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import errors
from awsflock.lock import telling
from awsflock.lock.held import Lease
from awsflock.lock.lease import LockTable
from awsflock.protocol import Attempt
from awsflock.records import Identity, Waiter
from awsflock.stores import kinds
from awsflock.stores.redis import RedisStore, layout
from tests.servers import RedisServer

pytestmark = pytest.mark.integration

#: Release (its command returned) to the waiter's grant: well under the ~0.5-1 s of polling.
WITHIN = 0.3


@pytest.fixture
def tables(redis_server: RedisServer) -> Iterator[Any]:
    stores: list[RedisStore] = []

    def table(owner: str) -> LockTable:
        settings = kinds.Settings("awsflock", 5.0)
        store = kinds.get("redis").open(kinds.parse(redis_server.url), settings)
        assert isinstance(store, RedisStore)
        stores.append(store)
        return LockTable(store=store, identity=Identity(owner=owner))

    yield table
    for store in stores:
        store.close()


class Waiting:
    """An acquire waiting in a thread; ``granted``: when it returned (monotonic)."""

    def __init__(self, table: LockTable, name: str, **options: Any) -> None:
        self.lease: Lease | None = None
        self.error: BaseException | None = None
        self.granted = 0.0
        self.thread = threading.Thread(target=self._run, args=(table, name, options))
        self.thread.start()

    def _run(self, table: LockTable, name: str, options: dict[str, Any]) -> None:
        try:
            self.lease = table.acquire(name, lease=60, wait=30, **options)
            self.granted = time.monotonic()
        except BaseException as exc:
            self.error = exc

    def join(self) -> Lease:
        self.thread.join(40)
        assert self.error is None, self.error
        assert self.lease is not None
        return self.lease


def _listening(srv: RedisServer, name: str, count: int = 1) -> None:
    """Until ``count`` waiters listen on the lock's channel."""
    channel = layout.wake_channel("awsflock", name).encode()
    client = srv.client()
    deadline = time.monotonic() + 20
    while dict(client.pubsub_numsub(channel)).get(channel, 0) < count:
        assert time.monotonic() < deadline, "no waiter subscribed"
        time.sleep(0.01)
    client.close()


@pytest.fixture
def slow_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Polls 30 s apart: a grant within ``WITHIN`` of a release came from a wake."""
    monkeypatch.setattr(telling, "POLL_INTERVAL", 30.0)


@pytest.mark.parametrize("fair", [False, True])
def test_a_waiter_takes_the_lock_within_moments_of_the_release(
    tables, redis_server, slow_polls, fair
):
    holder, other = tables("holder"), tables("waiter")
    for _ in range(3):
        name = "wake-" + uuid.uuid4().hex[:8]
        held = holder.acquire(name, lease=60, wait=0)
        waiter = Waiting(other, name, fair=fair)
        _listening(redis_server, name)
        held.release()
        released = time.monotonic()
        lease = waiter.join()
        assert waiter.granted - released < WITHIN
        assert lease.fencing_token > held.fencing_token
        lease.release()


def test_a_force_release_wakes_the_waiter(tables, redis_server, slow_polls):
    holder, other = tables("holder"), tables("waiter")
    name = "wake-" + uuid.uuid4().hex[:8]
    held = holder.acquire(name, lease=60, wait=0)
    waiter = Waiting(other, name)
    _listening(redis_server, name)
    forced = holder.store.force_release(
        name, held.lease_id, force_id="f1", now_ms=0, skew_ms=0, actor="ops", reason="stuck"
    )
    released = time.monotonic()
    assert forced.applied
    lease = waiter.join()
    assert waiter.granted - released < WITHIN
    lease.release()


def test_a_fair_waiter_behind_one_that_gives_up_is_woken_by_its_leaving(
    tables, redis_server, slow_polls
):
    # The lock is held; the head of the line gives up (cancelled): its place leaves the line,
    # and the next waiter, now the head, hears it. Released then, it takes the lock at once.
    holder, first, second = tables("holder"), tables("first"), tables("second")
    name = "wake-" + uuid.uuid4().hex[:8]
    held = holder.acquire(name, lease=60, wait=0)
    cancel = threading.Event()
    head = Waiting(first, name, fair=True, cancel=cancel)
    _listening(redis_server, name, 1)
    behind = Waiting(second, name, fair=True)
    _listening(redis_server, name, 2)
    cancel.set()
    head.thread.join(10)
    assert isinstance(head.error, errors.Cancelled)
    held.release()
    released = time.monotonic()
    lease = behind.join()
    assert behind.granted - released < WITHIN
    lease.release()


def test_a_killed_subscription_still_lets_the_waiter_take_the_lock_by_polling(tables, redis_server):
    holder, other = tables("holder"), tables("waiter")
    name = "wake-" + uuid.uuid4().hex[:8]
    held = holder.acquire(name, lease=60, wait=0)
    waiter = Waiting(other, name)
    _listening(redis_server, name)
    client = redis_server.client()
    assert client.client_kill_filter(_type="pubsub") >= 1
    # redis-py's pub/sub connects again by itself and subscribes again: a killer keeps the
    # subscription down (killing it as it comes back) until the waiter is granted.
    granted = threading.Event()
    killer = threading.Thread(target=_keep_killing_subscriptions, args=(redis_server, granted))
    killer.start()
    try:
        # Read once per turn: the subscription comes back between kills, so a second read
        # after the loop could find it up again.
        assert _until_unsubscribed(client, layout.wake_channel("awsflock", name).encode())
        held.release()
        released = time.monotonic()
        lease = waiter.join()
    finally:
        # Whatever failed above, the killer stops here: left running, it would kill the
        # subscriptions of every test after this one on the same server.
        granted.set()
        killer.join(10)
    # Whether the message got through a kill or not, the usual poll (about a second) finds
    # the lock free in time.
    assert waiter.granted - released < 1.25 + 0.5
    assert lease.fencing_token > held.fencing_token
    lease.release()
    client.close()


def _until_unsubscribed(client: Any, channel: bytes) -> bool:
    """Whether the channel had no subscriber at some moment within 10 s (bounded)."""
    deadline = time.monotonic() + 10
    while dict(client.pubsub_numsub(channel)).get(channel, 0):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _keep_killing_subscriptions(redis_server: RedisServer, stop: threading.Event) -> None:
    """Kills every pub/sub connection every 2 ms until ``stop``, or for 60 s at most."""
    client = redis_server.client()
    deadline = time.monotonic() + 60
    try:
        while not stop.wait(0.002) and time.monotonic() < deadline:
            client.client_kill_filter(_type="pubsub")
    finally:
        client.close()


def test_the_script_publishes_only_when_a_step_may_let_a_waiter_in(tables, redis_server):
    store = tables("steps").store
    name = "steps-" + uuid.uuid4().hex[:8]
    client = redis_server.client()
    heard = client.pubsub()
    heard.subscribe(layout.wake_channel("awsflock", name))
    assert heard.get_message(timeout=5)["type"] == "subscribe"

    def said() -> list[str]:
        messages = []
        while (message := heard.get_message(timeout=0.2)) is not None:
            messages.append(message["data"].decode())
        return messages

    who = Identity(owner="t")

    def take(**options: Any) -> Any:
        attempt = Attempt(uuid.uuid4().hex, who, 0, 60_000, 0, **options)
        return attempt.lease_id, store.take(name, attempt)

    def join(ticket: str) -> Any:
        return store.join(name, Waiter(ticket, 0, who, since_ms=0, seen_ms=0))

    lease_id, outcome = take()
    assert outcome.applied and said() == []
    assert store.renew(name, lease_id, now_ms=0, lease_ms=60_000, skew_ms=0).applied
    assert not store.release(name, "not-ours", now_ms=0, skew_ms=0).applied
    assert join("t1").applied and join("t2").applied and join("t3").applied
    assert said() == []  # a grant, a renewal, a refusal, joins: nobody can go in now
    assert store.release(name, lease_id, now_ms=0, skew_ms=0).applied
    assert said() == ["end"]
    assert store.leave(name, "t2").applied and said() == []  # not the head: t1 still first
    assert store.leave(name, "t1").applied and said() == ["leave"]  # t3 is the head now
    line = join("t4").line
    time.sleep(0.005)  # a beat counts only in a later millisecond of the server's than the join
    assert store.beat(name, "t4", now_ms=0).applied and said() == []
    seen = line.find("t3")
    assert seen is not None
    assert store.beat(name, "t4", now_ms=0, drop=(("t3", seen.seen_ms),)).applied
    assert said() == ["beat"]  # a lapsed place ahead removed: t4 may be the head
    lease_id, outcome = take(ticket="t4")
    assert outcome.applied and said() == []  # a plain lock: held again
    assert store.force_release(
        name, lease_id, force_id="f", now_ms=0, skew_ms=0, actor="ops", reason="test"
    ).applied
    assert said() == ["end"]
    pool = "steps-pool-" + uuid.uuid4().hex[:8]
    name = pool
    heard.subscribe(layout.wake_channel("awsflock", pool))
    assert heard.get_message(timeout=5)["type"] == "subscribe"
    _, outcome = take(slot=0, slots=2)
    assert outcome.applied and said() == []
    assert join("p1").applied and join("p2").applied
    _, outcome = take(slot=1, slots=2, ticket="p1")
    assert outcome.applied and said() == ["take"]  # p2 is the head, and may find a free slot
    assert store.resize_pool(name, 2, 3, now_ms=0, skew_ms=0) and said() == ["resize"]
    heard.close()
    client.close()
