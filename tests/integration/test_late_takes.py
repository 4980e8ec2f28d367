"""A take held back on the wire that lands after its acquire gave up, on the stores timed by
their server's clock (which judges a take when it lands, not when it was sent): it must take
nothing, whether the acquire's own clean-up or the release command it printed got there
first. Found by the adversarial review of the Redis store, on PostgreSQL too: the take landed
after the holder's lease ended and was granted to nobody for a whole lease."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any, Callable

import pytest

from tests.faultproxy import FaultProxy, Plan
from tests.integration.conftest import UrlCli
from tests.servers import Server


@pytest.fixture(params=["redis", "postgresql"])
def target(request: pytest.FixtureRequest) -> Iterator[tuple[Server, str, type[FaultProxy]]]:
    """A server timed by its own clock, a table on it, and its protocol's fault proxy."""
    if request.param == "redis":
        from tests.redisproxy import RedisFaultProxy

        yield request.getfixturevalue("redis_server"), "awsflock", RedisFaultProxy
    else:
        from tests.pgproxy import PgFaultProxy

        table = request.getfixturevalue("pg_table")
        yield request.getfixturevalue("postgres"), table, PgFaultProxy


@pytest.fixture
def faulty(target) -> Iterator[Callable[[Plan], tuple[UrlCli, FaultProxy, list[str]]]]:
    """``faulty(plan)``: the CLI through a proxy that runs ``plan``, the proxy, and the faults
    it has carried out (after the request's answer came back: a late one has landed)."""
    server, table, kind = target
    proxies: list[FaultProxy] = []

    def make(plan: Plan) -> tuple[UrlCli, FaultProxy, list[str]]:
        proxy = kind(("127.0.0.1", server.port), plan)
        proxies.append(proxy)
        done: list[str] = []
        proxy.on_fault = lambda target, action: done.append(action)
        return UrlCli(server, table, proxy.url_for(server.store_url)), proxy, done  # type: ignore[attr-defined]

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.fixture
def direct(target) -> UrlCli:
    server, table, _ = target
    return UrlCli(server, table)


def _open(target) -> Any:
    """The library's store on the target's server and table (for what the CLI cannot do)."""
    from awsflock.stores import kinds

    server, table, _ = target
    url = server.store_url
    assert url is not None
    return kinds.get(kinds.parse(url).kind).open(kinds.parse(url), kinds.Settings(table, 5.0))


def _held(direct: UrlCli, lock_name: str, *args: str) -> str:
    """The LEASE_ID of an ``acquire`` of ``lock_name`` (with ``args``), taken directly."""
    held = direct("acquire", lock_name, *args)
    assert held.returncode == 0, held.stderr
    return held.stdout.strip()


def _until(condition: Callable[[], bool], limit: float = 30.0) -> None:
    end = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.05)


def test_the_acquires_clean_up_bars_its_take_still_on_its_way(faulty, direct, lock_name: str):
    holder = direct("acquire", lock_name, "--lease-duration", "4s")
    assert holder.returncode == 0, holder.stderr
    cli, _proxy, done = faulty(
        lambda target, n: "late:7" if target == "take" and n == 1 else "pass"
    )
    waiter = cli("acquire", lock_name, "--wait-time", "2", "--request-timeout", "1s")
    assert waiter.returncode == 3, waiter.stderr
    # Its unanswered take is settled (barred), not named as "may have been granted".
    assert "may have been granted" not in waiter.stderr, waiter.stderr
    _until(lambda: done == ["late:7"])  # landed, after the holder's lease ran out
    status = json.loads(direct("status", lock_name, "--json").stdout)
    assert status["state"] != "held", status
    assert direct("acquire", lock_name, "--no-wait").returncode == 0


def test_the_printed_release_bars_a_take_still_on_its_way(faulty, direct, lock_name: str):
    # The acquire cannot reach the server to release its unanswered take (every step after the
    # first goes unanswered), so it names the release command; run before the take lands, that
    # command keeps it from taking the lock.
    def plan(target: str, n: int) -> str:
        if target == "take" and n == 1:
            return "late:6"
        return "blackhole" if target in ("take", "end", "read") else "pass"

    cli, _proxy, done = faulty(plan)
    waiter = cli("acquire", lock_name, "--wait-time", "2", "--request-timeout", "1s")
    assert waiter.returncode != 0
    assert "may have been granted" in waiter.stderr, waiter.stderr
    command = waiter.stderr.split("`awsflock ", 1)[1].split("`", 1)[0].split()
    assert command[:2] == ["release", lock_name]
    assert "late:6" not in done
    freed = direct(*command)
    assert freed.returncode == 3, freed.stderr  # it held nothing yet ...
    assert "lands later is refused" in freed.stderr  # ... and never will
    _until(lambda: "late:6" in done)
    assert direct("acquire", lock_name, "--no-wait").returncode == 0


def test_a_renew_that_lands_late_never_shortens_what_a_later_renew_granted(
    faulty, direct, lock_name: str
):
    # Found by the adversarial review of the Redis store (PostgreSQL had the same rule): a
    # 10 s renew held back on the wire landed after a 120 s renew had been answered, and cut
    # the lease to 10 s from its landing while its holder counted on two minutes.
    lease_id = _held(direct, lock_name, "--lease-duration", "30s")
    cli, _proxy, done = faulty(lambda target, n: "late:4" if target == "renew" else "pass")
    gave_up = cli(
        "renew",
        lock_name,
        lease_id,
        "--lease-duration",
        "10s",
        "--request-timeout",
        "1s",
    )
    assert gave_up.returncode == 1, gave_up.stderr
    longer = direct("renew", lock_name, lease_id, "--lease-duration", "120s")
    assert longer.returncode == 0, longer.stderr
    _until(lambda: "late:4" in done)
    time.sleep(0.5)  # the late renew's answer has come back to nobody: it has landed
    status = json.loads(direct("status", lock_name, "--json").stdout)
    assert status["state"] == "held" and status["expires_in_s"] > 100, status
    assert direct("release", lock_name, lease_id).returncode == 0


def test_a_renew_sent_after_the_last_one_may_shorten_the_lease(target, direct, lock_name: str):
    # As on DynamoDB (and as 0.2.0's scripts do): `renew --lease-duration` counts from now,
    # also when that is sooner than the lease's end, if its caller's clock read a whole skew
    # window after the grant or renew that set that end; a late renew cannot shorten it.
    from awsflock.protocol import Attempt
    from awsflock.records import Identity

    store = _open(target)
    lease_id = str(uuid.uuid4())
    granted = int(time.time() * 1000) - 10_000  # read 10 s ago, as by a script's acquire
    try:
        attempt = Attempt(lease_id, Identity(owner="a"), granted, 2 * 3600_000, 0)
        assert store.take(lock_name, attempt).applied
    finally:
        store.close()
    assert direct("renew", lock_name, lease_id, "--lease-duration", "5m").returncode == 0
    status = json.loads(direct("status", lock_name, "--json").stdout)
    assert 290 < status["expires_in_s"] <= 300, status
    assert direct("release", lock_name, lease_id).returncode == 0


def test_a_release_repeated_after_many_hand_offs_is_still_released(target, direct, lock_name):
    # Found by the adversarial reviews: a release whose first try went through unanswered was
    # told "not held" when its retry came after more hand-offs than a lock's record keeps
    # (3 on PostgreSQL, 32 on Redis), and its own LEASE_ID was barred. Every lease handed on
    # is now kept an hour; a take landing late under one is refused.
    from awsflock import LockTable
    from awsflock.protocol import Attempt
    from awsflock.records import Identity

    first = _held(direct, lock_name)
    assert direct("release", lock_name, first).returncode == 0
    store = _open(target)
    try:
        locks = LockTable(store=store)
        for _ in range(40):
            locks.acquire(lock_name, lease=60, wait=0).release()
        again = direct("release", lock_name, first)
        assert again.returncode == 0, again.stderr
        late = Attempt(first, Identity(owner="late"), int(time.time() * 1000), 60_000, 0)
        assert not store.take(lock_name, late).applied
    finally:
        store.close()
    status = json.loads(direct("status", lock_name, "--json").stdout)
    assert status["state"] != "held", status


def test_a_force_release_repeated_after_many_hand_offs_still_finds_its_own(target, lock_name):
    # Found by the second adversarial round: a force-release whose first try went through
    # unanswered, retried after hand-offs, was told another run had forced the lease (and on
    # PostgreSQL its audit record was voided): what a lease handed on ended by must name the
    # force-release that ended it.
    from awsflock.lock.verdict import ended_how
    from awsflock.protocol import Attempt
    from awsflock.records import Identity

    store = _open(target)
    now = lambda: int(time.time() * 1000)  # noqa: E731
    try:
        forced = str(uuid.uuid4())
        assert store.take(lock_name, Attempt(forced, Identity(owner="a"), now(), 60_000, 0)).applied
        end = dict(force_id="action-1", skew_ms=0, actor="op", reason="stuck")
        assert store.force_release(lock_name, forced, now_ms=now(), **end).applied
        for _ in range(40):
            lease_id = str(uuid.uuid4())
            attempt = Attempt(lease_id, Identity(owner="b"), now(), 60_000, 0)
            assert store.take(lock_name, attempt).applied
            assert store.release(lock_name, lease_id, now_ms=now(), skew_ms=0).applied
        again = store.force_release(lock_name, forced, now_ms=now(), **end)
        assert not again.applied and again.record is not None
        assert ended_how(again.record, forced) == "forced:action-1"
    finally:
        store.close()


@pytest.mark.parametrize("hand_offs", [0, 40])
def test_a_force_release_that_never_landed_leaves_no_audit_record_after_hand_offs(
    target, faulty, direct, lock_name: str, hand_offs: int
):
    # Found by the third adversarial review: a force-release whose request never landed
    # ("it may have been applied: run it again"), then the holder's own release and more
    # hand-offs than the record's history keeps; the re-run said "not held" but its audit
    # record of a force that never happened stayed listed. The re-run now asks the store how
    # the named lease ended.
    from awsflock import LockTable

    lease_id = _held(direct, lock_name, "--lease-duration", "10m")
    cli, _proxy, _done = faulty(lambda target, n: "blackhole" if target == "end" else "pass")
    lost = cli(
        "force-release",
        lock_name,
        "--lease-id",
        lease_id,
        "--reason",
        "stuck",
        "--request-timeout",
        "1s",
    )
    assert lost.returncode == 1 and "run `awsflock force-release" in lost.stderr, lost.stderr
    assert direct("release", lock_name, lease_id).returncode == 0
    store = _open(target)
    try:
        locks = LockTable(store=store)
        for _ in range(hand_offs):  # none: the named lease is still the record's own
            locks.acquire(lock_name, lease=60, wait=0).release()
    finally:
        store.close()
    again = direct("force-release", lock_name, "--lease-id", lease_id, "--reason", "stuck")
    assert again.returncode == 3, again.stderr
    audit = direct("audit", lock_name, "--json")
    assert audit.returncode == 0, audit.stderr
    assert lease_id not in audit.stdout, audit.stdout


def test_a_writers_claim_that_lands_late_ends_with_its_wait(faulty, direct, lock_name: str):
    # Found by review 6: a waiting writer's claim (awsflock.shares) was sent as a length, which
    # the server added to its own clock when the claim landed; held back on the wire, it kept
    # readers out for 3 s after the writer had given up ("an exclusive acquire waits").
    reader = _held(direct, lock_name, "--shared", "--lease-duration", "60s")
    cli, _proxy, done = faulty(lambda target, n: "late:5" if target == "claim" else "pass")
    writer = cli("acquire", lock_name, "--wait-time", "2s", "--request-timeout", "1s")
    assert writer.returncode == 3, writer.stderr
    _until(lambda: "late:5" in done)  # the claim has landed
    joined = direct("acquire", lock_name, "--shared", "--no-wait")
    assert joined.returncode == 0, joined.stderr
    for lease_id in (reader, joined.stdout.strip()):
        assert direct("release", lock_name, lease_id).returncode == 0
