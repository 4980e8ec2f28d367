"""The public API is deliberate: sorted __all__, one error root, an exit code per error."""

from __future__ import annotations

import pytest

import awsflock
from awsflock import errors
from tests.docs import recipe


def test_all_is_sorted_and_every_name_exists():
    assert awsflock.__all__ == sorted(awsflock.__all__)
    for name in awsflock.__all__:
        assert hasattr(awsflock, name), name


def test_every_error_descends_from_one_root_and_has_an_exit_code():
    classes = [
        getattr(errors, n)
        for n in dir(errors)
        if isinstance(getattr(errors, n), type) and issubclass(getattr(errors, n), Exception)
    ]
    assert len(classes) > 10
    for cls in classes:
        assert issubclass(cls, errors.AwsflockError), cls
        assert cls.exit_code in (1, 2, 3, 130), cls
    assert errors.LockBusy.exit_code == 3 and errors.NotHeld.exit_code == 3
    assert errors.UsageError.exit_code == 2 and errors.TableMissing.exit_code == 1


def test_the_docs_example_of_the_memory_store_runs():
    example = recipe("guides/library.md", "memory-store")
    exec(compile(example, "library.md", "exec"), {})


def test_a_lock_table_runs_on_the_memory_store():

    from awsflock import FakeClock, LockTable, MemoryStore

    table = LockTable(store=MemoryStore(clock=FakeClock()))
    with table.hold("x", lease=30) as held:
        assert held.fencing_token is not None
        assert table.state("x").lease_id == held.lease_id
    assert [r.lock_id for r in table.locks()] == ["x"]
    assert table.create() is True


def test_a_lock_table_given_a_store_refuses_dynamodb_settings():
    import pytest

    from awsflock import LockTable, MemoryStore, UsageError

    with pytest.raises(UsageError, match="endpoint_url, request_timeout describe a DynamoDB store"):
        LockTable(store=MemoryStore(), request_timeout=3, endpoint_url="http://x")
    assert LockTable(store=MemoryStore()).store.request_timeout == 5.0


def test_a_force_released_lease_since_taken_over_names_both_ways_it_can_have_ended():
    # Once another holder took the lock, the record no longer says who forced the old lease:
    # an operator (audited) or the keep-alive renewer (not audited, so not only "see audit").
    from awsflock import FakeClock, LockTable, MemoryStore, NotHeld
    from awsflock.lock import admin

    store = MemoryStore(clock=FakeClock())
    table = LockTable(store=store, owner="a")
    first = table.acquire("deploy", lease=60, wait=0)
    admin.force_release(table, "deploy", reason="stuck", lease_id=first.lease_id)
    table.acquire("deploy", lease=60, wait=0)
    try:
        table.release_lease("deploy", first.lease_id)
    except NotHeld as exc:
        assert "see `awsflock audit`" in str(exc) and "keep-alive renewer" in str(exc)
    else:
        raise AssertionError("a force-released lease was released")


def test_a_lease_repr_names_the_lock_but_never_the_lease_id():
    # Issue 38 (14): a repr (in a log line, a traceback, a debugger) showed the lease id, the
    # secret that renews and releases the lock.
    from awsflock import FakeClock, LockTable, MemoryStore
    from awsflock.lock.admin import force_release

    table = LockTable(store=MemoryStore(clock=FakeClock()))
    lease = table.acquire("deploy", lease=30)
    shown = repr(lease)
    assert lease.lease_id not in shown and lease.lease_id not in str(lease)
    assert "lock_id='deploy'" in shown and f"fencing_token={lease.fencing_token}" in shown
    assert "expires_at=" in shown and "lease_id=<redacted>" in shown
    # Nor does the error a refused renewal raises (run's lease-loss line is made of it).
    force_release(table, "deploy", reason="test", lease_id=lease.lease_id)
    with pytest.raises(errors.NotHeld, match="force-released") as refused:
        lease.renew()
    assert lease.lease_id not in refused.value.one_line(), refused.value.one_line()
