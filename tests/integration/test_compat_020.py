"""awsflock 0.2.0's README usage, word for word, and a mixed fleet of 0.2.0 and new clients."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.integration.checks import assert_never_two_holders
from tests.integration.conftest import BIN, Cli
from tests.servers import LOCAL_CREDENTIALS, NO_AWS_FILES

ROOT = Path(__file__).resolve().parents[2]
OLD_BIN = Path(os.environ.get("AWSFLOCK_OLD_BIN", ROOT / ".venv-020" / "bin" / "awsflock"))
WORKER = Path(__file__).with_name("worker.py")

# The usage shown in awsflock 0.2.0's README, unchanged, plus its exit codes for --no-wait.
README_020 = r"""
set -u
awsflock table-create
LEASE_ID="$(awsflock acquire LockFoo --lease-duration '15 minutes')"
echo "acquire=$? lease=$LEASE_ID"
LEASE_ID="$(awsflock renew LockFoo "$LEASE_ID" --lease-duration '300s')"
echo "renew=$? lease=$LEASE_ID"
awsflock release LockFoo "$LEASE_ID"
echo "release=$?"
awsflock acquire LockBar --no-wait > /dev/null
echo "first-no-wait=$?"
awsflock acquire LockBar --no-wait > /dev/null
echo "second-no-wait=$?"
"""


def _old_env(endpoint: str, table: str) -> dict[str, str]:
    """What 0.2.0 needs: its endpoint variable, and a region and credentials for boto3."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "DYNAMO"))}
    env.update(
        {
            "DYNAMO_ENDPOINT_URL": endpoint,
            "AWSFLOCK_TABLE": table,
            # The new CLI's loopback key: DynamoDB Local keeps tables per access key.
            **LOCAL_CREDENTIALS,
            **NO_AWS_FILES,
        }
    )
    return env


def test_020_readme_runs_word_for_word(server):
    table = "compat-" + uuid.uuid4().hex[:6]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS", "AWSFLOCK", "DYNAMO"))}
    # 0.2.0's users set DYNAMO_ENDPOINT_URL and AWSFLOCK_TABLE; the new CLI honours both.
    env.update(
        {
            **NO_AWS_FILES,
            "DYNAMO_ENDPOINT_URL": server.url,
            "AWSFLOCK_TABLE": table,
            "PATH": f"{BIN.parent}:{env.get('PATH', '')}",
        }
    )
    result = subprocess.run(
        ["bash", "-c", README_020], capture_output=True, text=True, env=env, timeout=120
    )
    lines = dict(line.split("=", 1) for line in result.stdout.split() if "=" in line)
    assert result.returncode == 0, result.stderr
    assert lines["acquire"] == "0" and len(lines["lease"]) == 36
    assert lines["renew"] == "0"
    assert lines["release"] == "0"
    assert lines["first-no-wait"] == "0"
    assert lines["second-no-wait"] == "3"


@pytest.fixture(scope="module")
def old_bin() -> Path:
    assert OLD_BIN.exists(), f"awsflock 0.2.0 is not installed at {OLD_BIN}: run scripts/test"
    return OLD_BIN


def test_a_table_made_by_the_new_tool_works_with_020(server, old_bin, awsflock: Cli, lock_name):
    env = _old_env(server.url, awsflock.table)
    old = subprocess.run(
        [str(old_bin), "acquire", lock_name, "--no-wait"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert old.returncode == 0, old.stderr
    lease = old.stdout.strip()
    # The new tool sees 0.2.0's lease, names its holder, and can renew and release it.
    busy = awsflock("acquire", lock_name, "--no-wait")
    assert busy.returncode == 3 and "awsflock 0.2.0 client" in busy.stderr
    assert awsflock("renew", lock_name, lease, "--lease-duration", "60s").returncode == 0
    assert awsflock("release", lock_name, lease).returncode == 0
    # And 0.2.0 respects a lease taken by the new tool.
    new_lease = awsflock("acquire", lock_name).stdout.strip()
    refused = subprocess.run(
        [str(old_bin), "acquire", lock_name, "--no-wait"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 3
    # The 0.2.0 tool cannot release (delete) a lease of the new tool: its item would be gone
    # before the lease's end plus the skew window, and a fencing token could then go down.
    # Each tool releases its own leases.
    released = subprocess.run(
        [str(old_bin), "release", lock_name, new_lease],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert released.returncode == 3, released.stderr
    assert awsflock("release", lock_name, new_lease).returncode == 0
    # A released lease looks expired to 0.2.0 five seconds after its end (its reclaim rule).
    waits = ["--no-wait"] if server.name == "dynalite" else ["--wait-time", "30"]
    after = subprocess.run(
        [str(old_bin), "acquire", lock_name, *waits],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    if server.name == "dynalite":
        # No transactions, so no fence record: awsflock keeps the lock's item for good (its
        # expiration_time far ahead), and 0.2.0, which would overwrite and delete it and its
        # fencing counter, sees it held for good.
        assert after.returncode == 3, after.stderr
    else:
        assert after.returncode == 0, after.stderr


def test_a_table_made_by_020_works_with_the_new_tool(server, old_bin, lock_name):
    table = "old-" + uuid.uuid4().hex[:6]
    made = subprocess.run(
        [str(old_bin), "create-table"],
        capture_output=True,
        text=True,
        env=_old_env(server.url, table),
        timeout=120,
    )
    if server.name == "dynalite":
        # 0.2.0's create-table makes the table, then calls UpdateTimeToLive, which dynalite does
        # not know: 0.2.0 prints a traceback. The table it made is there all the same.
        assert made.returncode != 0 and "UnknownOperationException" in made.stderr
    else:
        assert made.returncode == 0, made.stderr
    cli = Cli(server.url, table)
    assert cli("table-create").returncode == 0
    lease = cli("acquire", lock_name).stdout.strip()
    assert cli("release", lock_name, lease).returncode == 0


def test_mixed_fleet_never_grants_a_lock_twice(server, old_bin, awsflock: Cli, lock_name, tmp_path):
    if server.name == "dynalite":
        pytest.skip("no transactions: 0.2.0 never takes a lock awsflock has held (see above)")
    counter, log = tmp_path / "counter", tmp_path / "holds.jsonl"
    counter.write_text("0")
    procs = []
    for binary, options, env in (
        # 0.2.0 counts its lease from before waiting: give it a lease far longer than its wait.
        (
            old_bin,
            ["--wait-time", "100", "--lease-duration", "300"],
            _old_env(server.url, awsflock.table),
        ),
        (
            old_bin,
            ["--wait-time", "100", "--lease-duration", "300"],
            _old_env(server.url, awsflock.table),
        ),
        (BIN, ["--wait-time", "100", "--lease-duration", "60"], awsflock.env()),
        (BIN, ["--wait-time", "100", "--lease-duration", "60"], awsflock.env()),
    ):
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER),
                    str(binary),
                    lock_name,
                    str(counter),
                    str(log),
                    "2",
                    *options,
                ],
                env=env,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for proc in procs:
        _, err = proc.communicate(timeout=250)
        assert proc.returncode == 0, err
    holds = assert_never_two_holders(log, counter, expected=8)
    assert {h["bin"] for h in holds} == {str(old_bin), str(BIN)}


def test_020_never_takes_a_lock_held_shared(server, old_bin, awsflock: Cli, lock_name):
    # A lock held shared is held by its group's lease, which 0.2.0 sees as any lease of ours.
    held = awsflock("acquire", "--shared", lock_name, "--lease-duration", "1m")
    assert held.returncode == 0, held.stderr
    env = _old_env(server.url, awsflock.table)
    old = subprocess.run(
        [str(old_bin), "acquire", lock_name, "--no-wait"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert old.returncode == 3, old.stderr
    assert awsflock("release", lock_name, held.stdout.strip()).returncode == 0
