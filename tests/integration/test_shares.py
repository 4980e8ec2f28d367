"""Shared holders (``awsflock.shares``) through the real ``awsflock`` on every server whose kind
holds them: shares held together, an exclusive acquire that waits for all of them and keeps new
ones out meanwhile, tokens that only go up across both, ``status`` showing every holder,
``force-release`` of one share or of all, and awsflock 0.2.0 kept out."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from awsflock import shares
from awsflock.protocol import KEPT_UNTIL
from tests.integration.conftest import Cli

pytestmark = pytest.mark.needs("shares", "a kind that holds shared holders")


def _name(part: str) -> str:
    return f"shared-{uuid.uuid4().hex[:8]}-{part}"


def _lease(awsflock: Cli, *args: str) -> dict:
    got = awsflock("acquire", *args, "--json")
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


#: Where the endpoint has no transactions (dynalite) no lease's end is kept apart from the
#: lock's item, whose history names groups, not shares: a share's end is then told this way.
NOT_KEPT = "it was released, or expired and taken over"


def _kept(awsflock: Cli) -> bool:
    return awsflock.server_name != "dynalite"


def test_shares_hold_together_and_an_exclusive_acquire_waits_for_all(awsflock: Cli):
    name = _name("state")
    one = _lease(awsflock, "--shared", name, "--lease-duration", "5m")
    two = _lease(awsflock, "--shared", name, "--lease-duration", "2m", "--no-wait")
    assert shares.is_share_id(one["lease_id"]) and two["fencing_token"] > one["fencing_token"]
    busy = awsflock("acquire", name, "--no-wait")
    assert busy.returncode == 3 and "2 shared holders" in busy.stderr, busy.stderr
    shown = json.loads(awsflock("status", name, "--json").stdout)
    assert shown["shared"] and [s["fencing_token"] for s in shown["shares"]] == [
        one["fencing_token"],
        two["fencing_token"],
    ]
    assert "shared by 2" in awsflock("list").stdout
    writer = awsflock.popen("acquire", name, "--wait-time", "60", "--json")
    try:
        deadline = time.monotonic() + 30
        while not json.loads(awsflock("status", name, "--json").stdout)["exclusive_waiting"]:
            assert time.monotonic() < deadline, "the waiting writer never claimed the lock"
            time.sleep(0.2)
        kept_out = awsflock("acquire", "--shared", name, "--no-wait")
        assert kept_out.returncode == 3 and "an exclusive acquire waits" in kept_out.stderr
        assert awsflock("release", name, one["lease_id"]).returncode == 0
        assert awsflock("release", name, two["lease_id"]).returncode == 0
        out, err = writer.communicate(timeout=60)
    finally:
        writer.kill()
    assert writer.returncode == 0, err
    assert json.loads(out)["fencing_token"] > two["fencing_token"]
    again = awsflock("release", name, two["lease_id"])  # a retried release: it went through
    if _kept(awsflock):
        assert again.returncode == 0, again.stderr
    else:
        assert again.returncode == 3 and NOT_KEPT in again.stderr, again.stderr


def test_run_shared_tells_cmd_and_runs_beside_another_share(awsflock: Cli):
    name = _name("run")
    held = _lease(awsflock, "--shared", name)
    got = awsflock(
        "run", "--shared", name, "--no-wait", "--", "sh", "-c",
        'echo "$AWSFLOCK_SHARED $AWSFLOCK_FENCING_TOKEN"',
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    flag, token = got.stdout.split()
    assert flag == "1" and int(token) > held["fencing_token"]
    alone = awsflock("run", name, "--no-wait", "--", "true")
    assert alone.returncode == 75, alone.stderr  # a share is still held
    assert awsflock("release", name, held["lease_id"]).returncode == 0
    assert awsflock("run", name, "--no-wait", "--", "true").returncode == 0


def test_force_release_ends_one_share_or_all_and_is_audited(awsflock: Cli):
    name = _name("ops")
    one = _lease(awsflock, "--shared", name)
    two = _lease(awsflock, "--shared", name)
    three = _lease(awsflock, "--shared", name)
    forced = awsflock("force-release", name, "--lease-id", one["lease_id"], "--reason", "stuck")
    assert forced.returncode == 0, forced.stderr
    renewed = awsflock("renew", name, one["lease_id"])
    said = "force-released" if _kept(awsflock) else NOT_KEPT
    assert renewed.returncode == 3 and said in renewed.stderr, renewed.stderr
    assert awsflock("renew", name, two["lease_id"]).returncode == 0
    group = json.loads(awsflock("status", name, "--json", "--show-lease-id").stdout)["lease_id"]
    assert shares.is_group_id(group)
    everyone = awsflock("force-release", name, "--lease-id", group, "--reason", "all of them")
    assert everyone.returncode == 0, everyone.stderr
    for lease in (two, three):
        refused = awsflock("renew", name, lease["lease_id"])
        assert refused.returncode == 3 and "force-released" in refused.stderr, refused.stderr
    audit = awsflock("audit", name, "--json")
    leases = {json.loads(line)["lease_id"] for line in audit.stdout.splitlines()}
    assert {one["lease_id"], group} <= leases, audit.stdout
    assert awsflock("acquire", name, "--no-wait").returncode == 0


def test_a_group_lease_id_is_neither_renewed_nor_released(awsflock: Cli):
    name = _name("group")
    _lease(awsflock, "--shared", name)
    group = json.loads(awsflock("status", name, "--json", "--show-lease-id").stdout)["lease_id"]
    for step in ("renew", "release"):
        got = awsflock(step, name, group)
        assert got.returncode == 2 and "nobody holds" in got.stderr, got.stderr


def test_without_transactions_a_lock_held_shared_is_kept_for_good(server, raw_client, awsflock):
    # No fence record there: the item keeps the lock's counter, so neither TTL nor a 0.2.0
    # client may ever delete it (as a plain take there keeps it).
    name = _name("kept")
    held = _lease(awsflock, "--shared", name)
    item = raw_client.get_item(TableName=awsflock.table, Key={"lock_id": {"S": name}})["Item"]
    kept = int(item["expiration_time"]["N"]) == KEPT_UNTIL
    assert kept == (not _kept(awsflock)), item["expiration_time"]
    assert awsflock("release", name, held["lease_id"]).returncode == 0
