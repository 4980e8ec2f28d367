"""Lock-delay on the PostgreSQL and Redis stores, beyond ``DelayConformance``
(tests/conformance/delay.py): every take that may replace a lease waits for its holder's delay
(a pool slot's, a slot's take that makes a plain lock a pool, a resize that does, a set's
member, a share starting a group), in the caller's time; and on the server's clock, where the
steps judge the end plus the delay with no skew window, and Redis keeps a lock's hash through
it. On DynamoDB's servers: a force-release that lands after the lease ran out."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from awsflock import sets, shares
from awsflock.protocol import Attempt, LockStore, Outcome
from awsflock.records import Identity
from awsflock.stores import kinds
from awsflock.stores.postgresql import PostgresStore
from awsflock.stores.redis import RedisStore, layout
from tests.conformance.awaited import Awaited
from tests.conformance.delay import DELAY, DelayConformance, DelayLab
from tests.conformance.suite import SKEW, new_id
from tests.faultproxy import FaultProxy
from tests.integration.conftest import Cli
from tests.servers import PostgresServer, RedisServer

pytestmark = pytest.mark.integration

MINUTE = 60_000


class StepLab(DelayLab):
    """A ``DelayLab`` that also takes pool slots, sets and shares with a delay."""

    def attempt(
        self, lease_id: str, *, at: int = 0, lease: int = MINUTE, delay: int = DELAY, **more: Any
    ) -> Attempt:
        who = Identity(owner="a", host="a-host", pid=42, user="u", command="cmd")
        attempt = Attempt(lease_id, who, self.now + at, lease, SKEW, **more)
        return dataclasses.replace(attempt, delay_ms=delay)

    def take_slot(
        self, name: str, slot: int, slots: int, *, at: int = 0, delay: int = DELAY
    ) -> tuple[str, Outcome]:
        lease_id = f"{new_id()}.{slot}"
        attempt = self.attempt(lease_id, at=at, delay=delay, slot=slot, slots=slots)
        return lease_id, self.store.take(name, attempt)

    def take_all(self, names: list[str], *, at: int = 0) -> tuple[Outcome, ...]:
        set_id = sets.new_set_id()
        steps: Any = self.store
        return tuple(
            steps.take_all(
                [(name, self.attempt(sets.member_id(set_id, name), at=at)) for name in names]
            )
        )

    def share(self, name: str, *, at: int = 0) -> Outcome:
        return self.take(name, shares.new_share_id(), at=at)[1]


class DelayStepCases:
    """Every test here must pass on the PostgreSQL and the Redis store."""

    @pytest.fixture
    def lab(self, store: LockStore) -> StepLab:
        return StepLab(store)

    def test_a_forced_pool_slot_is_kept_for_its_delay_and_the_other_slots_are_free(self, lab):
        name = lab.name()
        first, taken = lab.take_slot(name, 0, 2)
        assert taken.applied and lab.held(taken).lock_delay == DELAY / 1000
        assert lab.force(name, first, "f1", at=100, slot=0).applied
        assert not lab.take_slot(name, 0, 2, at=101)[1].applied
        assert lab.take_slot(name, 1, 2, at=102)[1].applied
        assert not lab.take_slot(name, 0, 2, at=100 + DELAY + SKEW - 1)[1].applied
        assert lab.take_slot(name, 0, 2, at=100 + DELAY + SKEW + 1)[1].applied

    def test_a_released_pool_slot_has_no_delay(self, lab):
        name = lab.name()
        first, _ = lab.take_slot(name, 0, 2)
        assert lab.release(name, first, at=100, slot=0).applied
        assert lab.take_slot(name, 0, 2, at=101)[1].applied

    def test_a_slot_s_take_that_makes_a_pool_waits_for_the_plain_lease_s_delay(self, lab):
        name = lab.name()
        first, _ = lab.take_with_delay(name, lease=MINUTE)
        assert lab.force(name, first, "f1", at=100).applied
        assert not lab.take_slot(name, 0, 2, at=101)[1].applied
        assert not lab.take_slot(name, 0, 2, at=100 + DELAY + SKEW - 1)[1].applied
        assert lab.take_slot(name, 0, 2, at=100 + DELAY + SKEW + 1)[1].applied

    def test_a_resize_that_makes_a_pool_waits_for_the_plain_lease_s_delay(self, lab):
        name = lab.name()
        lab.take_with_delay(name)  # runs out at 1000
        before = lab.now + 1000 + SKEW + 1  # ran out, inside its delay
        assert not lab.store.resize_pool(name, None, 2, now_ms=before, skew_ms=SKEW)
        after = lab.now + 1000 + DELAY + SKEW + 1
        assert lab.store.resize_pool(name, None, 2, now_ms=after, skew_ms=SKEW)

    def test_a_resize_never_cuts_off_a_slot_inside_its_delay(self, lab):
        name = lab.name()
        first, _ = lab.take_slot(name, 1, 2)
        assert lab.force(name, first, "f1", at=100, slot=1).applied
        assert not lab.store.resize_pool(name, 2, 1, now_ms=lab.now + 101, skew_ms=SKEW)
        after = lab.now + 100 + DELAY + SKEW + 1
        assert lab.store.resize_pool(name, 2, 1, now_ms=after, skew_ms=SKEW)

    def test_a_set_waits_for_a_member_s_delay_and_takes_nothing_before(self, lab):
        held, free = lab.name("held"), lab.name("free")
        first, _ = lab.take_with_delay(held, lease=MINUTE)
        assert lab.force(held, first, "f1", at=100).applied
        refused = lab.take_all([held, free], at=101)
        assert not any(outcome.applied for outcome in refused)
        untouched = lab.store.read(free).lock
        assert untouched is None or not untouched.lease_id
        granted = lab.take_all([held, free], at=100 + DELAY + SKEW + 1)
        assert all(outcome.applied for outcome in granted)
        assert [lab.held(outcome).lock_delay for outcome in granted] == [DELAY / 1000] * 2

    def test_a_share_starting_a_group_waits_for_an_exclusive_lease_s_delay(self, lab):
        name = lab.name()
        lab.take_with_delay(name)  # runs out at 1000
        assert not lab.share(name, at=1000 + SKEW + 1).applied
        assert not lab.share(name, at=1000 + DELAY + SKEW - 1).applied
        group = lab.share(name, at=1000 + DELAY + SKEW + 1)
        assert group.applied and lab.held(group).lock_delay == 0  # a group has none
        assert lab.force(name, lab.held(group).lease_id, "f1", at=1000 + DELAY + SKEW + 2).applied
        assert lab.take(name, at=1000 + DELAY + SKEW + 3)[1].applied

    def test_a_renewal_keeps_the_delay_and_a_read_shows_it(self, lab):
        name = lab.name()
        first, _ = lab.take_with_delay(name)
        renewed = lab.renew(name, first, at=500, lease=2000)
        assert renewed.applied and lab.held(renewed).lock_delay == DELAY / 1000
        assert lab.held(lab.store.read(name)).lock_delay == DELAY / 1000
        listed = [r for r in lab.store.locks(name) if r.lock_id == name]
        assert [r.lock_delay for r in listed] == [DELAY / 1000]


def _redis(srv: RedisServer, **options: object) -> RedisStore:
    store = kinds.get("redis").open(
        kinds.parse(srv.url), kinds.Settings("ld-" + uuid.uuid4().hex[:8], 5.0, extra=options)
    )
    assert isinstance(store, RedisStore)
    store.create()
    return store


class TestPostgresStoreDelaySteps(DelayStepCases):
    """On a real PostgreSQL server, in the caller's time."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[PostgresStore]:
        store = PostgresStore(postgres.url, pg_table, server_time=False)
        yield store
        store.close()


class TestRedisStoreDelaySteps(DelayStepCases):
    """On a real redis-server, in the caller's time."""

    @pytest.fixture
    def store(self, redis_server: RedisServer) -> Iterator[RedisStore]:
        store = _redis(redis_server, server_time=False)
        yield store
        store.close()


class TestPostgresStoreAwaitedDelay(DelayConformance):
    """As ``awsflock.aio`` awaits it (its take sends the holder's delay too)."""

    @pytest.fixture
    def store(self, postgres: PostgresServer, pg_table: str) -> Iterator[Any]:
        adapter = Awaited(kinds.awaited(PostgresStore(postgres.url, pg_table, server_time=False)))
        yield adapter
        adapter.close()


class TestRedisStoreAwaitedDelay(DelayConformance):
    """As ``awsflock.aio`` awaits it (its take sends the holder's delay too)."""

    @pytest.fixture
    def store(self, redis_server: RedisServer) -> Iterator[Any]:
        adapter = Awaited(kinds.awaited(_redis(redis_server, server_time=False)))
        yield adapter
        adapter.close()


# -- on the server's clock -------------------------------------------------------------------


def _by_the_server_s_clock(store: LockStore) -> None:
    """A lease that ran out, and one forced, are kept for their delay by the server's clock
    (no skew window: the attempts' skew is 0), and a release is not."""
    who = Identity(owner="a", host="a-host", pid=42, user="u", command="cmd")
    name = "ld-" + uuid.uuid4().hex[:8]

    def take(lease: int = MINUTE, delay: int = 0) -> Outcome:
        now = int(time.time() * 1000)
        attempt = Attempt(new_id(), who, now, lease, 0)
        return store.take(name, dataclasses.replace(attempt, delay_ms=delay))

    ran_out = take(lease=200, delay=600)
    assert ran_out.applied
    time.sleep(0.4)  # it ran out 200 ms ago, and is kept 400 ms more
    refused = take()
    assert not refused.applied
    record = refused.lock
    assert record is not None and record.lock_delay == 0.6
    assert record.free_after() == pytest.approx(record.expires_at + 0.6)
    time.sleep(0.5)
    forced = take(delay=600)
    assert forced.applied
    lease_id = forced.lock.lease_id if forced.lock else ""
    now = int(time.time() * 1000)
    assert store.force_release(
        name, lease_id, force_id="f1", now_ms=now, skew_ms=0, actor="ops", reason="stuck"
    ).applied
    assert not take().applied
    time.sleep(0.7)
    released = take(delay=600)
    assert released.applied
    now = int(time.time() * 1000)
    lease_id = released.lock.lease_id if released.lock else ""
    assert store.release(name, lease_id, now_ms=now, skew_ms=0).applied
    assert take().applied


def test_postgresql_keeps_a_lease_for_its_delay_by_the_server_s_clock(
    postgres: PostgresServer, pg_table: str
):
    store = PostgresStore(postgres.url, pg_table)
    try:
        _by_the_server_s_clock(store)
    finally:
        store.close()


def test_redis_keeps_a_lease_for_its_delay_by_the_server_s_clock(redis_server: RedisServer):
    store = _redis(redis_server)
    try:
        _by_the_server_s_clock(store)
    finally:
        store.close()


def test_redis_keeps_a_lock_s_hash_through_its_holder_s_delay(redis_server: RedisServer):
    # A plain lock's hash goes RETAIN_MS after its lease's end: with a delay, after its end
    # plus the delay, or the take inside the delay would find nothing to wait for.
    store = _redis(redis_server)
    client = redis_server.client()
    name = "ld-" + uuid.uuid4().hex[:8]
    delay = 2 * layout.RETAIN_MS
    try:
        now = int(time.time() * 1000)
        attempt = Attempt(new_id(), Identity(owner="a"), now, MINUTE, 0)
        taken = store.take(name, dataclasses.replace(attempt, delay_ms=delay))
        assert taken.applied and taken.lock is not None
        lease_id = taken.lock.lease_id or ""
        assert store.force_release(
            name, lease_id, force_id="f1", now_ms=now, skew_ms=0, actor="ops", reason="stuck"
        ).applied
        kept = client.pttl(layout.lock_key(store.prefix, name))
        assert kept > delay + layout.RETAIN_MS - MINUTE
    finally:
        store.close()


def test_a_force_that_lands_after_the_lease_ran_out_keeps_the_delay_from_that_end(
    awsflock: Cli, proxy: FaultProxy, lock_name: str
):
    """Review 8, on every DynamoDB server: a force-release reads its clock at F and lands late,
    after the lease ran out at E. The lease ended at E, so nobody is granted the lock before E
    plus the delay; counted from F (as the force did), the delay ended E - F early. Here every
    write of the force lands 3 s late; a taker tries every 0.2 s meanwhile. (Counted from F,
    the taker was granted 2.4 s inside the delay on every server.)"""
    skew = ("--skew", "1s")
    started = time.time()  # the lease runs out no earlier than 5 s from here
    held = awsflock("acquire", lock_name, "--lease-duration", "5s", "--lock-delay", "10s", *skew)
    assert held.returncode == 0, held.stderr
    proxy.plan = lambda target, n: (
        "late:3" if target in ("TransactWriteItems", "UpdateItem") else "pass"
    )
    via = Cli(proxy.url, awsflock.table)
    force = via.popen(
        "force-release", lock_name, "--lease-id", held.stdout.strip(), "--reason", "late",
        "--request-timeout", "30s", *skew,
    )  # fmt: skip
    granted = None
    while time.time() < started + 40:
        tried = time.time()
        taken = awsflock("acquire", lock_name, "--no-wait", "--lease-duration", "5s", *skew)
        if taken.returncode == 0:
            granted = tried
            break
        assert taken.returncode == 3, taken.stderr
        time.sleep(0.2)
    assert force.wait(timeout=60) == 0, force.stderr.read() if force.stderr else ""
    assert granted is not None, "never granted"
    assert granted >= started + 5 + 10, f"granted {started + 15 - granted:.1f}s inside the delay"
