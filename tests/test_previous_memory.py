"""``previous`` where a lock's record was deleted, on the in-memory store, which deletes as the
DynamoDB store's table does (TTL after a lease ran out or was released; awsflock 0.2.0's
release): the lease before is then the lock's last awsflock lease, as its fence record keeps it
(``docs/contributing/design-remembering.md``)."""

from __future__ import annotations

from awsflock.records import EXPIRED, FIRST, FORCED, RELEASED, Previous
from awsflock.stores.memory import MemoryStore
from tests.conformance.suite import SKEW, Lab


def _deleted(store: MemoryStore, lab: Lab, name: str) -> None:
    """TTL deletes the record (everything expired by a day from now)."""
    assert store.expire_records(lab.now / 1000 + 86_400) == [name]
    assert store.read(name).lock is None


def _next(lab: Lab, name: str) -> Previous:
    _, outcome = lab.take(name, at=10 * SKEW, owner="b")
    assert outcome.applied
    said = lab.held(outcome).previous
    assert said is not None
    return said


def test_a_released_lease_whose_record_was_deleted_is_still_released():
    store = MemoryStore()
    lab, name = Lab(store), "deleted-after-release"
    first, _ = lab.take(name, owner="a")
    assert lab.release(name, first, at=10).applied
    _deleted(store, lab, name)
    assert _next(lab, name) == Previous(RELEASED)


def test_a_lease_that_ran_out_and_was_deleted_is_expired_with_its_end_unknown():
    store = MemoryStore()
    lab, name = Lab(store), "deleted-after-expiry"
    first, _ = lab.take(name, lease=1000, owner="a")
    _deleted(store, lab, name)
    said = _next(lab, name)
    assert (said.how, said.lease_id, said.owner, said.ended_at) == (EXPIRED, first, "a", None)


def test_a_forced_lease_whose_record_was_deleted_is_still_forced():
    store = MemoryStore()
    lab, name = Lab(store), "deleted-after-force"
    first, _ = lab.take(name, owner="a")
    assert lab.force(name, first, "f1", at=10).applied
    _deleted(store, lab, name)
    said = _next(lab, name)
    assert (said.how, said.lease_id, said.forced_by) == (FORCED, first, "ops")


def test_a_lease_of_awsflock_020_is_reported_while_its_record_exists():
    store = MemoryStore()
    lab, name = Lab(store), "legacy"
    assert store.legacy_put(name, "v-020", "old-host", int(lab.now / 1000) + 1, expect=None)
    said = _next(lab, name)
    assert (said.how, said.lease_id, said.owner) == (EXPIRED, "v-020", "old-host")


def test_after_an_awsflock_020_release_the_last_awsflock_lease_is_reported():
    # 0.2.0 deletes its record on release and leaves no trace: the fence record's last lease
    # (here released) is what the next grant says (documented).
    store = MemoryStore()
    lab, name = Lab(store), "legacy-after"
    first, _ = lab.take(name, owner="a")
    assert lab.release(name, first, at=10).applied
    version = lab.held(store.read(name)).version
    assert store.legacy_put(name, "v-020", "old-host", int(lab.now / 1000) + 1, expect=version)
    assert store.legacy_delete(name, "v-020")
    assert _next(lab, name) == Previous(RELEASED)


def test_without_transactions_the_record_is_kept_and_nothing_else_is_needed():
    store = MemoryStore(transactions=False)
    lab, name = Lab(store), "kept"
    first, _ = lab.take(name, lease=1000, owner="a")
    assert store.expire_records(lab.now / 1000 + 86_400) == []  # kept for good
    said = _next(lab, name)
    assert (said.how, said.lease_id) == (EXPIRED, first)
    assert Previous(FIRST).unreleased is False


def test_the_library_lease_says_how_the_lease_before_ended_and_json_shows_it():
    from awsflock.clock import FakeClock
    from awsflock.lock.lease import LockTable
    from awsflock.records import Identity

    clock = FakeClock()
    store = MemoryStore(clock=clock)
    a = LockTable(store=store, identity=Identity(owner="a", host="a-host"))
    b = LockTable(store=store, identity=Identity(owner="b", host="b-host"))
    first = a.acquire("job", lease=10, wait=0)
    assert first.previous == Previous(FIRST) and first.as_dict()["previous"] == {"how": "first"}
    clock.advance(60)  # the lease runs out, and the skew window with it
    second = b.acquire("job", lease=10, wait=0)
    said = second.previous
    assert said is not None and said.unreleased
    assert (said.how, said.lease_id, said.owner, said.ended_at) == (
        EXPIRED,
        first.lease_id,
        "a",
        first.expires_at,
    )
    assert second.as_dict()["previous"]["how"] == "expired"
    second.release()
    third = a.acquire("job", lease=10, wait=0)
    assert third.previous is not None and third.previous.how == RELEASED
    assert "previous" not in repr(third)  # the LEASE_ID it names stays out of logs


def test_a_grant_after_an_unreleased_lease_says_so_in_one_line_naming_its_holder(caplog):
    import logging

    from awsflock.clock import FakeClock
    from awsflock.lock.lease import LockTable
    from awsflock.records import Identity
    from awsflock.text import iso_utc

    clock = FakeClock()
    store = MemoryStore(clock=clock)
    ci = "https://github.com/acme/infra/actions/runs/9"
    a = LockTable(store=store, identity=Identity(owner="deployer", host="ci-7", ci_url=ci))
    b = LockTable(store=store, identity=Identity(owner="next", host="ci-8"))
    first = a.acquire("deploy", lease=10, wait=0)
    clock.advance(60)
    with caplog.at_level(logging.INFO + 5, logger="awsflock.lease"):
        b.acquire("deploy", lease=10, wait=0).release()
        a.acquire("deploy", lease=10, wait=0)  # after a release: nothing to say
    lines = [r.getMessage() for r in caplog.records if "did not release" in r.getMessage()]
    assert lines == [
        "the previous holder of 'deploy', deployer (host ci-7, "
        f"{ci}), did not release it: its lease ran out at "
        f"{iso_utc(first.expires_at)}"
    ]
    forced = Previous(FORCED, "L", "ops-bot", forced_by="alice", forced_reason="stuck", ended_at=0)
    assert forced.describe("x") == (
        "the previous holder of 'x', ops-bot, did not release it: it was force-released by "
        "alice at 1970-01-01T00:00:00Z: stuck"
    )
    gone = Previous(EXPIRED, "L", "w")
    assert gone.describe("x").endswith("its lease ran out (its record has since gone)")
