"""Operators' commands against real servers: status, list, force-release, audit, iam-policy."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from awsflock.records import Identity
from tests.helpers import peak_rss_kb
from tests.integration.checks import wait_for
from tests.integration.conftest import BIN, Cli

#: These tests run on PostgreSQL too (see conftest.py).

STATUS_FIELDS = {
    "lock_id",
    "state",
    "fencing_token",
    "owner",
    "host",
    "pid",
    "user",
    "ci_url",
    "command",
    "acquired_at",
    "expires_at",
    "expires_in_s",
    "held_for_s",
    "lease_duration_s",
    "legacy_client",
    "kept_alive_by",
    "long_held",
    "previous",
}


@pytest.mark.one_server_per_kind("what status prints and its exit code")
def test_status_of_a_free_lock_exits_3(awsflock: Cli, lock_name):
    result = awsflock("status", lock_name)
    assert result.returncode == 3
    assert result.stdout.strip() == f"{lock_name}: free"
    assert json.loads(awsflock("status", lock_name, "--json").stdout) == {
        "lock_id": lock_name,
        "state": "free",
    }


def test_status_of_a_held_lock_names_everything(awsflock: Cli, lock_name):
    awsflock(
        "acquire",
        lock_name,
        "--owner",
        "deployer",
        "--lease-duration",
        "10m",
        GITHUB_ACTIONS="true",
        GITHUB_RUN_ID="77",
        GITHUB_REPOSITORY="acme/infra",
    )
    result = awsflock("status", lock_name)
    assert result.returncode == 0
    text = result.stdout
    for expected in (
        "state:         held",
        "owner:         deployer",
        "pid:",
        "https://github.com/acme/infra/actions/runs/77",
        "expires:",
        "(in ",
        "fencing token:",
        "lease:         10m",
    ):
        assert expected in text, (expected, text)
    data = json.loads(awsflock("status", lock_name, "--json").stdout)
    assert set(data) == STATUS_FIELDS
    assert data["state"] == "held" and data["owner"] == "deployer"
    assert data["previous"] == {"how": "first"}
    assert "lease_id" not in data


@pytest.mark.needs("skew_window", "on PostgreSQL see test_postgres.py")
def test_status_of_an_expired_unreclaimed_lock(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name, "--lease-duration", "1s")
    time.sleep(1.3)
    result = awsflock("status", lock_name, "--skew", "30s")
    assert result.returncode == 3
    assert "EXPIRED, not yet reclaimed (reclaimable in 2" in result.stdout
    data = json.loads(awsflock("status", lock_name, "--json").stdout)
    assert data["state"] == "expired" and data["reclaimable_in_s"] >= 0


@pytest.mark.one_server_per_kind("the command line that run records")
def test_status_shows_the_command_of_run(awsflock: Cli, lock_name, tmp_path):
    started, done = tmp_path / "up", tmp_path / "done"
    # The command runs until the test has looked (a bounded wait, not a fixed 5 s sleep).
    until_done = f"i=0; while [ $i -lt 300 ] && [ ! -e {done} ]; do sleep 0.1; i=$((i+1)); done"
    proc = awsflock.popen("run", lock_name, "-c", f"touch {started}; {until_done}")
    wait_for(started, empty_ok=True)
    data = json.loads(awsflock("status", lock_name, "--json").stdout)
    done.touch()
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert data["command"].startswith("/bin/sh -c 'touch")


@pytest.fixture
def big_table(server, raw_client):
    """A fresh table with 1,200 locks: more than two Scan pages of awsflock's 500."""
    cli = Cli(server.url, "big-" + uuid.uuid4().hex[:6])
    assert cli("table-create", "-q").returncode == 0
    if server.name == "dynamodb_local":
        # It would delete the expired locks within seconds (TTL; see the pinned test), and these
        # tests are about listing them, not about TTL.
        raw_client.update_time_to_live(
            TableName=cli.table,
            TimeToLiveSpecification={"Enabled": False, "AttributeName": "expiration_time"},
        )
    now = int(time.time())
    for start in range(0, 1200, 25):
        raw_client.batch_write_item(
            RequestItems={
                cli.table: [
                    {
                        "PutRequest": {
                            "Item": {
                                "lock_id": {"S": f"job-{i:05d}"},
                                "lease_id": {"S": str(uuid.uuid4())},
                                "owner": {"S": f"host-{i % 7}"},
                                "lease_duration": {"N": "3600"},
                                "expiration_time": {"N": str(now + 3600 if i % 3 else now - 3600)},
                            }
                        }
                    }
                    for i in range(start, start + 25)
                ]
            }
        )
    return cli


def test_list_streams_every_lock_over_several_pages(big_table):
    result = big_table("list", "--json")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert result.returncode == 0 and len(rows) == 1200
    assert {r["lock_id"] for r in rows} == {f"job-{i:05d}" for i in range(1200)}
    assert sum(r["state"] == "expired" for r in rows) == 400
    held = big_table("list", "--held").stdout.splitlines()
    assert held[0].split() == ["STATE", "EXPIRES", "HELD", "FOR", "OWNER", "WAITING", "LOCK_ID"]
    assert len(held) == 1 + 800
    expired = big_table("list", "--expired", "--json").stdout.splitlines()
    assert len(expired) == 400
    prefixed = big_table("list", "--prefix", "job-011", "--json").stdout.splitlines()
    assert len(prefixed) == 100


def test_list_memory_does_not_grow_with_the_table(big_table):
    def peak_kb(*args: str) -> int:
        return peak_rss_kb([str(BIN), *args], big_table.env())

    one_item = peak_kb("status", "job-00001")
    all_items = peak_kb("list")
    # Streaming page by page: listing 1,200 locks costs about what reading one does.
    assert all_items - one_item < 15 * 1024, (one_item, all_items)


def test_list_hides_awsflocks_own_items(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    lease = json.loads(awsflock("status", lock_name, "--json", "--show-lease-id").stdout)
    awsflock("force-release", lock_name, "--reason", "test", "--lease-id", lease["lease_id"])
    listed = awsflock("list", "--json").stdout
    assert "#awsflock#" not in listed and lock_name in listed


@pytest.mark.one_server_per_kind("a usage error, refused before any write")
def test_force_release_is_refused_without_a_reason(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    result = awsflock("force-release", lock_name, "--yes")
    assert result.returncode == 2 and "--reason" in result.stderr
    assert awsflock("status", lock_name).returncode == 0, "still held"


@pytest.mark.one_server_per_kind("a usage error, refused before any write")
def test_force_release_without_naming_the_lease_is_refused(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    result = awsflock("force-release", lock_name, "--reason", "stuck")  # no tty, no --yes
    assert result.returncode == 2 and "--lease-id" in result.stderr
    assert awsflock("status", lock_name).returncode == 0


def test_force_release_of_a_lease_no_longer_holding_is_refused(awsflock: Cli, lock_name):
    first = awsflock("acquire", lock_name).stdout.strip()
    awsflock("release", lock_name, first)
    awsflock("acquire", lock_name, "--owner", "newcomer")
    result = awsflock("force-release", lock_name, "--reason", "stale", "--lease-id", first)
    assert result.returncode == 3 and "no longer holds" in result.stderr
    assert json.loads(awsflock("status", lock_name, "--json").stdout)["owner"] == "newcomer"


def test_force_release_ends_the_lease_audits_it_and_tokens_keep_rising(awsflock: Cli, lock_name):
    held = json.loads(awsflock("acquire", lock_name, "--json", "--owner", "stuck-job").stdout)
    result = awsflock(
        "force-release",
        lock_name,
        "--reason",
        "runner died",
        "--lease-id",
        held["lease_id"],
        "--actor",
        "oncall@example.com",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    entry = json.loads(result.stdout)
    assert entry["holder"] == "stuck-job" and entry["actor"] == "oncall@example.com"
    # The holder's lease is over: renew refused, and the lock is free for the next one.
    assert awsflock("renew", lock_name, held["lease_id"]).returncode == 3
    after = json.loads(awsflock("acquire", lock_name, "--json", "--no-wait").stdout)
    assert after["fencing_token"] > held["fencing_token"]
    audit = awsflock("audit", lock_name, "--json")
    records = [json.loads(line) for line in audit.stdout.splitlines()]
    assert len(records) == 1
    assert set(records[0]) == {
        "at",
        "action",
        "lock_id",
        "lease_id",
        "holder",
        "holder_host",
        "fencing_token",
        "actor",
        "reason",
        "slot",
    }
    assert records[0]["reason"] == "runner died" and records[0]["lock_id"] == lock_name
    text = awsflock("audit").stdout
    assert f"force-release  {lock_name}  by oncall@example.com" in text


def test_force_release_with_yes_and_default_actor(awsflock: Cli, lock_name):
    awsflock("acquire", lock_name)
    result = awsflock("force-release", lock_name, "--reason", "cleanup", "--yes")
    assert result.returncode == 0
    assert "force-released" in result.stderr
    record = json.loads(awsflock("audit", lock_name, "--json").stdout.splitlines()[0])
    # The person, on every store: user@host (a local DynamoDB endpoint has no IAM identity).
    me = Identity.of_this_process()
    assert record["actor"] == f"{me.user}@{me.host}"


def test_force_release_of_a_free_lock_exits_3(awsflock: Cli, lock_name):
    result = awsflock("force-release", lock_name, "--reason", "x", "--yes")
    assert result.returncode == 3 and "not held" in result.stderr


@pytest.mark.one_server_per_kind("run stopping its command on a loss")
def test_force_release_stops_a_running_command_with_124(awsflock: Cli, lock_name, tmp_path):
    started = tmp_path / "up"
    proc = awsflock.popen(
        "run",
        lock_name,
        "--lease-duration",
        "3s",
        "--kill-after",
        "0s",
        "-c",
        f"touch {started}; sleep 30",
    )
    wait_for(started, empty_ok=True)
    assert awsflock("force-release", lock_name, "--reason", "stop it", "--yes").returncode == 0
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 124, err
    assert "lost" in err


def test_iam_policy_is_valid_json_naming_the_table():
    result = subprocess.run(
        [
            str(BIN),
            "iam-policy",
            "--tablename",
            "locks",
            "--region",
            "eu-west-1",
            "--account",
            "123456789012",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    policy = json.loads(result.stdout)
    actions = {a for s in policy["Statement"] for a in s["Action"]}
    assert {
        "dynamodb:UpdateItem",
        "dynamodb:GetItem",
        "dynamodb:Scan",
        "dynamodb:PutItem",
        "dynamodb:CreateTable",
        "dynamodb:UpdateTimeToLive",
        "dynamodb:BatchGetItem",  # the state kept with a lock
    } <= actions
    assert "dynamodb:DeleteItem" not in actions
    assert all(
        s["Resource"] == "arn:aws:dynamodb:eu-west-1:123456789012:table/locks"
        for s in policy["Statement"]
    )
    read_only = json.loads(
        subprocess.run(
            [str(BIN), "iam-policy", "--read-only"], capture_output=True, text=True
        ).stdout
    )
    assert read_only["Statement"][0]["Action"] == [
        "dynamodb:BatchGetItem",  # status --state
        "dynamodb:DescribeTable",
        "dynamodb:GetItem",
        "dynamodb:Scan",
    ]


def test_a_reason_too_long_for_the_lock_is_refused_before_any_request(server, awsflock: Cli):
    """A pool's slots share one item of at most 400 KB, and each forced lease it remembers
    keeps its reason: three 120,000-character reasons filled one (the fourth force was
    refused by DynamoDB). A reason is now at most 1,000 characters: a longer one is a usage
    error (exit 2) before any request, the lease still held, nothing audited."""
    lock = "big-reasons-" + uuid.uuid4().hex[:6]
    lease = json.loads(awsflock("acquire", lock, "--slots", "4", "--json").stdout)["lease_id"]
    refused = awsflock("force-release", lock, "--lease-id", lease, "--reason", "r" * 120_000)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "awsflock: usage error: --reason is 120000 characters; at most 1000: say it shorter"
        " (it is kept with the lock and in the audit record)"
    ]
    assert awsflock("audit", lock, "--json").stdout == ""
    done = awsflock("force-release", lock, "--lease-id", lease, "--reason", "r" * 1000)
    assert done.returncode == 0, done.stderr
