"""The Redis store on a server with ``WAITAOF`` (Valkey 8.1, which reports itself as Redis
7.2.4): every write step is followed by ``WAITAOF 1 N`` in the same round trip, and its answer
is checked — a second check beside ``appendfsync always``, which such a server still needs.
Debian's redis-server (7.0) has no WAITAOF, so these are the only tests of that path on a real
server."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest

from awsflock import LockTable, errors
from awsflock.protocol import Attempt
from awsflock.records import Identity
from awsflock.stores import kinds
from awsflock.stores.redis import RedisStore
from tests.conformance.delay import DelayConformance
from tests.conformance.max_hold import MaxHoldConformance
from tests.conformance.previous import PreviousConformance
from tests.conformance.sets import SetConformance
from tests.conformance.shares import ShareConformance
from tests.conformance.state import StateConformance
from tests.conformance.suite import StoreConformance
from tests.integration.conftest import UrlCli
from tests.servers import ValkeyServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def valkey() -> Iterator[ValkeyServer]:
    srv = ValkeyServer().start()
    try:
        yield srv
    finally:
        srv.stop()


def _store(srv: ValkeyServer, url: str | None = None, **options: object) -> RedisStore:
    store = kinds.get("redis").open(
        kinds.parse(url or srv.url),
        kinds.Settings("vk-" + uuid.uuid4().hex[:8], 5.0, extra=options),
    )
    assert isinstance(store, RedisStore)
    store.create()
    return store


def _take(store: RedisStore, name: str) -> tuple[str, bool]:
    lease_id = str(uuid.uuid4())
    now = int(time.time() * 1000)
    outcome = store.take(name, Attempt(lease_id, Identity(owner="t"), now, 60_000, 0))
    return lease_id, outcome.applied


def _waitaofs(srv: ValkeyServer) -> int:
    stats = srv.client().info("commandstats")
    return int(stats.get("cmdstat_waitaof", {}).get("calls", 0))


class TestValkeyStore(StoreConformance):
    """The whole conformance suite through the WAITAOF path (in the caller's time)."""

    bars = True

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStoreSets(SetConformance):
    """Sets through the WAITAOF path (in the caller's time)."""

    bars = True

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStorePrevious(PreviousConformance):
    """How the lease before each grant ended (in the caller's time)."""

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStoreDelay(DelayConformance):
    """Lock-delay through the WAITAOF path (in the caller's time)."""

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStoreMaxHold(MaxHoldConformance):
    """Max-hold through the WAITAOF path (in the caller's time)."""

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStoreState(StateConformance):
    """State with the lease through the WAITAOF path (in the caller's time)."""

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


class TestValkeyStoreShares(ShareConformance):
    """Shared holders through the WAITAOF path (in the caller's time)."""

    @pytest.fixture
    def store(self, valkey: ValkeyServer) -> Iterator[RedisStore]:
        store = _store(valkey, server_time=False)
        yield store
        store.close()


def test_every_write_step_is_followed_by_a_waitaof_and_a_read_by_none(valkey: ValkeyServer):
    store = _store(valkey)
    try:
        name = "w-" + uuid.uuid4().hex[:6]
        lease_id, ok = _take(store, name)
        assert ok
        found = store._connection_now().deployment if store._connection_now() else None
        assert found is not None
        assert (found.kind, found.waitaof, found.why) == (
            "crash-safe without replicas",
            True,
            "appendonly yes, appendfsync always",
        )
        before = _waitaofs(valkey)
        # Each step that may write waits for its fsync: a refused take too (it touches the
        # record, so the wait covers what it read from other connections).
        assert not _take(store, name)[1]
        now = int(time.time() * 1000)
        assert store.renew(name, lease_id, now_ms=now, lease_ms=60_000, skew_ms=0).applied
        assert store.release(name, lease_id, now_ms=now, skew_ms=0).applied
        assert _waitaofs(valkey) - before == 3
        # A read waits for nothing.
        store.read(name)
        assert _waitaofs(valkey) - before == 3
    finally:
        store.close()


def test_run_and_a_crash_on_a_waitaof_server_keep_every_grant():
    srv = ValkeyServer().start()
    try:
        cli = UrlCli(srv, "awsflock")
        assert cli("table-create", "-q").returncode == 0
        ran = cli("run", "job", "--", "sh", "-c", 'test "$AWSFLOCK_HELD" = 1 && echo ran')
        assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
        first = json.loads(cli("acquire", "deploy", "--json", "--lease-duration", "1m").stdout)
        assert srv.proc is not None
        os.killpg(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=10)
        srv.start()  # the same directory: the AOF is read back
        busy = cli("acquire", "deploy", "-n")
        assert busy.returncode == 3, busy.stderr
        assert cli("release", "deploy", first["lease_id"]).returncode == 0
        second = json.loads(cli("acquire", "deploy", "--json", "-n").stdout)
        assert second["fencing_token"] > first["fencing_token"]
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "settings, says",
    [
        (("--appendonly", "no"), "appendonly no"),
        # WAITAOF is no stand-in for fsync always: with everysec, Valkey 8.1 was seen answering
        # it "fsynced" for writes that no fsync had followed (strace, 17 of 20 steps).
        (("--appendonly", "yes", "--appendfsync", "everysec"), "appendfsync everysec"),
    ],
)
def test_a_waitaof_server_that_does_not_fsync_every_write_is_refused(settings, says):
    srv = ValkeyServer(settings).start()
    try:
        refused = UrlCli(srv, "awsflock")("acquire", "x", "--no-wait")
        assert refused.returncode == 1 and refused.stdout == ""
        assert "best effort" in refused.stderr and says in refused.stderr
        assert "appendfsync always" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "change, says",
    [
        # WAITAOF refuses to wait where the AOF is off; the retry's new connection says why.
        ((("appendonly", "no"),), "appendonly no"),
        # WAITAOF says nothing of eviction: the settings are read again after each step.
        ((("maxmemory", "100mb"), ("maxmemory-policy", "allkeys-lru")), "allkeys-lru"),
    ],
)
def test_settings_changed_under_a_holder_on_a_waitaof_server_fail_its_next_step(change, says):
    srv = ValkeyServer().start()
    try:
        store = _store(srv)
        lease = LockTable(store=store).acquire("held", lease=60, wait=0)
        for setting in change:
            srv.client().config_set(*setting)
        with pytest.raises(errors.AwsflockError, match=says) as lost:
            lease.renew()
        # The renewal ran and may last or not: never reported as renewed.
        assert lost.value.maybe_applied or isinstance(lost.value, errors.LeaseLost)
        store.close()
    finally:
        srv.stop()


def test_where_config_is_denied_the_mode_is_declared_and_waitaof_still_checks_each_step(
    valkey: ValkeyServer,
):
    # A managed service's user often may not CONFIG GET. WAITAOF cannot stand in for it (it
    # says nothing of eviction, and with everysec it was seen confirming unsynced writes), so
    # the mode is declared as on 7.0; nothing is read again after the steps.
    user, password = "noconf-" + uuid.uuid4().hex[:6], "pw-" + uuid.uuid4().hex[:6]
    prefix = "nc" + uuid.uuid4().hex[:6]
    rules = kinds.get("redis").command("grants")(prefix, user, read_only=False).splitlines()
    for line in rules:  # the 6.2+ rules, and the WAITAOF line apart
        if line.startswith("ACL SETUSER"):
            valkey.client().execute_command(*line.split(), f">{password}", "-config|get")
    url = f"redis://{user}:{password}@{valkey.address}?prefix={prefix}"
    undeclared = UrlCli(valkey, prefix, url)("table-create", "-q")
    assert undeclared.returncode == 1 and "durability=fsync-always" in undeclared.stderr
    cli = UrlCli(valkey, prefix, url + "&durability=fsync-always")
    before = _waitaofs(valkey)
    assert cli("table-create", "-q").returncode == 0
    taken = cli("acquire", "x", "--no-wait")
    assert taken.returncode == 0, taken.stderr
    assert cli("renew", "x", taken.stdout.strip()).returncode == 0
    assert cli("release", "x", taken.stdout.strip()).returncode == 0
    assert _waitaofs(valkey) - before == 3
