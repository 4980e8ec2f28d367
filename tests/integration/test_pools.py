"""Pools (--slots N) against real servers: admission, reclaim, disagreement, fencing, run."""

from __future__ import annotations

import json
import time

from tests.integration.checks import assert_pool_never_over_admitted, run_workers
from tests.integration.conftest import BIN, Cli

#: These tests run on PostgreSQL too (see conftest.py).


def acquire(cli: Cli, lock: str, *args: str) -> dict:
    result = cli("acquire", lock, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_n_plus_two_processes_never_exceed_n_holders(awsflock: Cli, lock_name, tmp_path):
    counter, log = tmp_path / "counter", tmp_path / "holds.jsonl"
    run_workers(
        BIN,
        awsflock.env(),
        lock_name,
        counter,
        log,
        4,
        3,
        "--slots",
        "2",
        "--json",
        "--wait-time",
        "60",
        "--lease-duration",
        "30s",
    )
    assert_pool_never_over_admitted(log, counter, slots=2, expected=12)


def test_each_holder_learns_its_slot_and_a_full_pool_is_busy(awsflock: Cli, lock_name):
    first = acquire(awsflock, lock_name, "--slots", "2")
    second = acquire(awsflock, lock_name, "--slots", "2")
    assert {first["slot"], second["slot"]} == {0, 1}
    assert first["lease_id"].endswith(f".{first['slot']}")
    plain = awsflock("acquire", lock_name, "--slots", "2", "--no-wait")
    assert plain.returncode == 3 and "all 2 slots" in plain.stderr
    # Without --json, acquire still prints only the LEASE_ID; renew and release need nothing else.
    assert awsflock("release", lock_name, first["lease_id"]).returncode == 0
    lease = awsflock("acquire", lock_name, "--slots", "2").stdout.strip()
    assert lease.endswith(f".{first['slot']}") and "\n" not in lease
    renewed = awsflock("renew", lock_name, lease)
    assert (renewed.returncode, renewed.stdout.strip()) == (0, lease)
    assert awsflock("release", lock_name, lease).returncode == 0


def test_a_dead_holders_slot_is_reclaimed_after_its_lease(awsflock: Cli, lock_name):
    acquire(awsflock, lock_name, "--slots", "2", "--lease-duration", "1h")
    start = time.monotonic()  # before the lease is granted: it ends 2 s after the grant
    dead = acquire(awsflock, lock_name, "--slots", "2", "--lease-duration", "2s")
    again = acquire(awsflock, lock_name, "--slots", "2", "--skew", "1s", "--wait-time", "20")
    assert again["slot"] == dead["slot"]
    assert time.monotonic() - start >= 2
    assert again["fencing_token"] > dead["fencing_token"]


def test_disagreement_on_n_is_refused_naming_both(awsflock: Cli, lock_name):
    acquire(awsflock, lock_name, "--slots", "2")
    result = awsflock("acquire", lock_name, "--slots", "3", "--no-wait")
    assert result.returncode == 1
    assert "has 2 slots" in result.stderr and "asked for 3" in result.stderr
    run = awsflock("run", lock_name, "--slots", "5", "--", "true")
    assert run.returncode == 125


def test_fencing_tokens_rise_per_slot(awsflock: Cli, lock_name):
    seen: dict[int, list[int]] = {0: [], 1: []}
    for _ in range(6):
        lease = acquire(awsflock, lock_name, "--slots", "2")
        seen[lease["slot"]].append(lease["fencing_token"])
        awsflock("release", lock_name, lease["lease_id"])
    for tokens in seen.values():
        assert tokens == sorted(set(tokens))


def test_run_with_slots_passes_the_slot(awsflock: Cli, lock_name):
    result = awsflock("run", lock_name, "--slots", "3", "--", "sh", "-c", "echo $AWSFLOCK_SLOT")
    assert result.returncode == 0 and result.stdout.strip() in {"0", "1", "2"}


def test_status_and_list_show_a_pool_as_one_entry(awsflock: Cli, lock_name):
    acquire(awsflock, lock_name, "--slots", "3", "--owner", "gpu-job")
    status = awsflock("status", lock_name, "--json")
    data = json.loads(status.stdout)
    assert status.returncode == 0
    assert data["slots"] == 3 and data["held_slots"] == 1
    assert [s["slot"] for s in data["slot_states"]] == [0, 1, 2]
    assert "pool of 3 slots, 1 held" in awsflock("status", lock_name).stdout
    listed = [
        json.loads(line)
        for line in awsflock("list", "--prefix", lock_name, "--json").stdout.splitlines()
    ]
    assert [entry["lock_id"] for entry in listed] == [lock_name]
    assert "#awsflock#" not in awsflock("list").stdout


def test_holders_that_disagree_on_slots_are_refused_never_over_admitted(awsflock: Cli, lock_name):
    # A plain lock and a pool of the same name are one item, so --slots 1 (or none) against
    # --slots 2 meets in one conditional write and is refused with a clear error.
    plain = acquire(awsflock, lock_name)
    refused = awsflock("acquire", lock_name, "--slots", "2", "--no-wait")
    assert refused.returncode == 1 and "is a plain lock" in refused.stderr, refused.stderr
    assert awsflock("release", lock_name, plain["lease_id"]).returncode == 0
    pool = [acquire(awsflock, lock_name, "--slots", "2") for _ in range(2)]
    assert sorted(p["slot"] for p in pool) == [0, 1]
    for args in ([], ["--slots", "1"]):
        third = awsflock("acquire", lock_name, "--no-wait", *args)
        assert third.returncode == 1, third.stderr
        assert "is a pool of 2 slots" in third.stderr and "--slots 2" in third.stderr
        assert third.stdout == ""


def test_resizing_a_pool(awsflock: Cli, lock_name):
    held = acquire(awsflock, lock_name, "--slots", "2")
    grown = awsflock("pool-resize", lock_name, "--slots", "3")
    assert grown.returncode == 0 and "now has 3 slots (was 2)" in grown.stderr
    assert awsflock("acquire", lock_name, "--slots", "2", "--no-wait").returncode == 1
    third = [acquire(awsflock, lock_name, "--slots", "3") for _ in range(2)]
    busy_slot = max(held["slot"], *(t["slot"] for t in third))
    assert busy_slot == 2
    refused = awsflock("pool-resize", lock_name, "--slots", "2")
    assert refused.returncode == 3 and "cannot shrink" in refused.stderr
    for lease in third:
        awsflock("release", lock_name, lease["lease_id"])
    if held["slot"] == 2:
        awsflock("release", lock_name, held["lease_id"])
    assert awsflock("pool-resize", lock_name, "--slots", "2").returncode == 0
