"""State with the lease through the library (``state=True``, ``held.state``,
``held.save_state``): read at the grant, written with a renewal, refused once the lease is not
held, and a migration that resumes from the last batch a crashed holder checkpointed. On the
in-memory store in fake time; the command line's ``--state-file`` is in tests/integration."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from awsflock import FakeClock, LockTable, MemoryStore, aio, errors
from awsflock.state import StateWrite


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore(clock=clock)


@pytest.fixture
def table(store: MemoryStore, clock: FakeClock) -> LockTable:
    return LockTable(store=store, clock=clock, owner="ops")


def test_each_holder_reads_what_the_last_one_wrote(table):
    first = table.acquire("migrate", lease=60, state=True)
    assert first.state is None
    first.save_state(b"batch=1")
    first.save_state(b"batch=2")
    assert first.state == b"batch=2"
    first.release()
    second = table.acquire("migrate", lease=60, state=True)
    assert second.state == b"batch=2"
    second.release()


def test_the_state_is_read_only_when_asked_for(table, store):
    held = table.acquire("migrate", lease=60)
    with pytest.raises(errors.UsageError, match="was not read") as raised:
        _ = held.state
    assert "acquire with state=True" in raised.value.one_line()
    held.save_state(b"x")  # a write needs no read
    assert held.state == b"x" and store.read_state("migrate").data == b"x"


def test_a_write_is_one_renewal(table, clock):
    held = table.acquire("migrate", lease=60)
    clock.advance(30)
    held.save_state(b"x")
    assert held.expires_at == pytest.approx(clock.time() + 60)


def test_a_holder_that_lost_its_lease_cannot_write(table, store, clock):
    held = table.acquire("migrate", lease=10, state=True)
    held.save_state(b"mine")
    clock.advance(20)  # ran out
    other = table.acquire("migrate", lease=60, state=True)
    assert other.state == b"mine"
    with pytest.raises(errors.NotHeld):
        held.save_state(b"stale")
    assert store.read_state("migrate").data == b"mine"
    other.save_state(b"theirs")
    assert store.read_state("migrate").data == b"theirs"


def test_a_released_holder_cannot_write(table, store):
    held = table.acquire("migrate", lease=60)
    held.save_state(b"one")
    held.release()
    with pytest.raises(errors.NotHeld, match="released"):
        held.save_state(b"two")
    assert store.read_state("migrate").data == b"one"


def test_a_later_write_of_the_same_lease_refuses_an_earlier_one_and_keeps_the_lease(
    table, store, clock
):
    held = table.acquire("migrate", lease=60)
    # Another process writes under the same LEASE_ID with a clock far ahead.
    ahead = StateWrite(b"from-elsewhere", table.now_ms() + 600_000)
    assert store.renew(
        "migrate", held.lease_id, now_ms=table.now_ms(), lease_ms=60_000, skew_ms=5000,
        state=ahead,
    ).applied  # fmt: skip
    with pytest.raises(errors.StateRefused, match="a later write of this lease"):
        held.save_state(b"mine")
    assert store.read_state("migrate").data == b"from-elsewhere"
    held.renew()  # still held
    held.release()


def test_state_is_bytes_of_at_most_4_kib(table):
    held = table.acquire("migrate", lease=60)
    with pytest.raises(errors.UsageError, match="bytes, not str"):
        held.save_state("text")  # type: ignore[arg-type]
    with pytest.raises(errors.UsageError, match="at most 4096 bytes"):
        held.save_state(b"x" * 4097)
    held.save_state(bytearray(b"y" * 4096))
    held.release()


@pytest.mark.parametrize(
    "options, what",
    [
        ({"slots": 3}, "a pool"),
        ({"shared": True}, "a shared holder"),
    ],
)
def test_only_a_plain_lock_keeps_state(table, options: dict[str, Any], what: str):
    with pytest.raises(errors.UsageError, match=f"not with {what}"):
        table.acquire("migrate", lease=60, state=True, **options)
    with pytest.raises(errors.UsageError, match="not with a set of locks"):
        table.acquire(["a", "b"], lease=60, state=True)


def test_a_read_that_fails_leaves_nothing_held(table, store, monkeypatch):
    def fails(lock_id: str) -> Any:
        raise errors.EndpointUnreachable("the store went away")

    monkeypatch.setattr(store, "read_state", fails)
    with pytest.raises(errors.EndpointUnreachable):
        table.acquire("migrate", lease=60, state=True)
    record = store.read("migrate").lock
    assert record is not None and record.released


def test_a_hold_reads_and_writes_the_state(table, store):
    with table.lock("migrate", lease=60, state=True) as held:
        assert held.state is None
        held.save_state(b"batch=9")
        assert held.state == b"batch=9"
    assert store.read_state("migrate").data == b"batch=9"


def test_asyncio_reads_and_writes_the_state(clock):
    async def main() -> None:
        table = aio.connect("memory://state-aio", clock=clock, owner="svc")
        async with table.lock("tenant-1", lease=30, wait=0, state=True) as held:
            assert held.state is None
            await held.save_state(json.dumps({"period": "2026-11"}).encode())
        async with table.lock("tenant-1", lease=30, wait=0, state=True) as held:
            assert json.loads(held.state or b"") == {"period": "2026-11"}

    asyncio.run(main())


def run_migration(table: LockTable, batches: int, crash_after: int | None = None) -> list[int]:
    """A resumable migration: resumes after the last checkpointed batch, checkpoints each one.
    ``crash_after``: the holder dies after that many batches of this run (no release)."""
    done: list[int] = []
    held = table.acquire("migrate", lease=30, state=True)
    start = int(held.state or b"0")
    for batch in range(start + 1, batches + 1):
        done.append(batch)  # the batch's work
        held.save_state(str(batch).encode())
        if crash_after is not None and len(done) == crash_after:
            return done  # killed: the lease is left to run out
    held.release()
    return done


def test_a_migration_resumes_where_a_crashed_holder_stopped(table, clock):
    first = run_migration(table, batches=10, crash_after=4)
    assert first == [1, 2, 3, 4]
    clock.advance(60)  # the crashed holder's lease runs out
    second = run_migration(table, batches=10)
    assert second == [5, 6, 7, 8, 9, 10]
    assert run_migration(table, batches=10) == []


# -- run --state-file, in process (real commands, the in-memory store, real time) -------------


def _run(table: LockTable, script: str, path: str) -> int:
    from awsflock.supervise.runner import RunOptions, run

    return run(table, "migrate", ["/bin/sh", "-c", script], RunOptions(lease=60, state_file=path))


def test_run_gives_the_command_the_state_and_keeps_what_it_leaves(tmp_path):
    table = LockTable(store=MemoryStore(), owner="ops")
    path = str(tmp_path / "state")
    assert (
        _run(table, 'test ! -s "$AWSFLOCK_STATE_FILE" && echo 1 > "$AWSFLOCK_STATE_FILE"', path)
        == 0
    )
    assert table.store.read_state("migrate").data == b"1\n"
    script = 'n=$(cat "$AWSFLOCK_STATE_FILE"); echo $((n + 1)) > "$AWSFLOCK_STATE_FILE"'
    assert _run(table, script, path) == 0
    assert table.store.read_state("migrate").data == b"2\n"
    assert _run(table, "true", path) == 0  # unchanged: nothing written
    assert table.store.read_state("migrate").stamp_ms > 0


def test_run_exits_125_when_the_last_state_cannot_be_written(tmp_path, caplog):
    table = LockTable(store=MemoryStore(), owner="ops")
    path = str(tmp_path / "state")
    too_big = 'head -c 5000 /dev/zero > "$AWSFLOCK_STATE_FILE"'
    assert _run(table, too_big, path) == 125
    assert "the last state in" in caplog.text and "more than 4096 bytes" in caplog.text
    assert table.store.read_state("migrate").data is None
    record = table.store.read("migrate").lock
    assert record is not None and record.released  # released all the same
    assert _run(table, f"{too_big}; exit 3", path) == 3  # CMD's own failure comes first


def test_run_gives_the_lock_back_when_it_cannot_write_the_state_file(tmp_path, caplog):
    table = LockTable(store=MemoryStore(), owner="ops")
    ran = tmp_path / "ran"
    assert _run(table, f"touch {ran}", str(tmp_path / "no" / "state")) == 125
    assert not ran.exists() and "cannot write the state file" in caplog.text
    record = table.store.read("migrate").lock
    assert record is not None and record.released


def test_a_state_file_write_that_went_unanswered_is_written_again_whatever_the_file_holds(
    tmp_path,
):
    # Review 10: a renewal that carried "cursor=5" was applied, its answer lost; the script
    # then set the file back to what it held before (""), and run never wrote it again, so the
    # next holder read "cursor=5".
    from awsflock.supervise.state_file import StateFile

    files = StateFile(str(tmp_path / "state"))
    files.seed(None)
    assert files.changed() is None
    (tmp_path / "state").write_bytes(b"cursor=5")
    assert files.changed() == b"cursor=5"  # sent; no answer: not saved
    (tmp_path / "state").write_bytes(b"")
    assert files.changed() == b""  # not known to be stored: sent again
    files.saved(b"")
    assert files.changed() is None


def test_a_state_file_is_a_regular_file_its_link_and_mode_kept(tmp_path):
    # Review 10: as root, `--state-file /dev/null` replaced /dev/null with a regular file.
    import os
    import stat

    from awsflock.supervise.state_file import StateFile

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(errors.UsageError, match="is not a regular file"):
        StateFile(str(fifo))
    with pytest.raises(errors.UsageError, match="is not a regular file"):
        StateFile(str(tmp_path))
    target = tmp_path / "target"
    target.write_bytes(b"old")
    target.chmod(0o644)
    link = tmp_path / "link"
    link.symlink_to(target)
    StateFile(str(link)).seed(b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    fresh = tmp_path / "fresh"
    StateFile(str(fresh)).seed(None)
    assert fresh.read_bytes() == b"" and stat.S_IMODE(fresh.stat().st_mode) == 0o600


def test_run_refuses_a_state_file_that_is_not_a_regular_file_before_taking_the_lock(tmp_path):
    import os

    from awsflock.supervise.runner import RunOptions, run

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    table = LockTable(store=MemoryStore(), owner="ops")
    with pytest.raises(errors.UsageError, match="is not a regular file"):
        run(table, "migrate", ["true"], RunOptions(lease=60, state_file=str(fifo)))
    assert table.store.read("migrate").lock is None  # never taken


def test_a_hold_whose_state_write_is_refused_by_the_store_set_up_renews_without_it(table):
    # Review 10: an older PostgreSQL step function (table-create run by an older awsflock
    # under a running run --state-file) refused every renewal that carried state, and the
    # lease was counted lost though it was fine.
    class Changed:
        def changed(self) -> bytes:
            return b"new"

        def saved(self, data: bytes) -> None:
            raise AssertionError("not written")

    def refused(held: Any, data: bytes) -> Any:
        raise errors.ConfigurationError("the step function is older than this awsflock")

    hold = table.lock("migrate", lease=60)
    hold.acquire()
    hold.state_source = Changed()
    table.save_state = refused
    before = hold.lease.expires_at
    table.clock.advance(30)
    hold._renew_once(table.clock.monotonic())
    assert not hold.lost.is_set() and hold.renewals == 1
    assert hold.lease.expires_at > before  # renewed without the state


def test_run_gives_the_command_the_state_files_own_path(tmp_path):
    # Review 10: given a symlink, run read its target but gave the command the link, so a new
    # file renamed over it replaced the link and was never written.
    table = LockTable(store=MemoryStore(), owner="ops")
    target = tmp_path / "target"
    link = tmp_path / "link"
    link.symlink_to(target)
    new = '"$AWSFLOCK_STATE_FILE.new"'
    script = f'echo 7 > {new} && mv {new} "$AWSFLOCK_STATE_FILE"'
    assert _run(table, script, str(link)) == 0
    assert table.store.read_state("migrate").data == b"7\n"
    assert link.is_symlink() and target.read_bytes() == b"7\n"
